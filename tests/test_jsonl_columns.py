"""The JSONL column reader (contract/jsonl_columns.py) against the message path.

The message path is the ordinary reader (``trace_io.iter_records``: typed tier, generic tier,
reference parser) and the facts are read from its messages (``columns_from_messages``, written
independently of both column readers). On every input the column reader either declines (None:
the caller reads the messages) or returns exactly those facts, hashes and other records; it never
returns columns where the message path raises. Inputs: generated workloads (taken, and equal to the
binpb trace's columns), hypothesis-random records of every kind, value mutations (any JSON value
anywhere, 64-bit edge strings, lone surrogates) and byte mutations of the writers' lines, edge
lines, framing problems (empty line, no final newline, wrong record count) and duplicate ids.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_mutations import BYTE_EDITS, replace_one_value
from test_fast_typed import EDGE
from test_workload_columns import as_dict, columns_from_messages, workload_msgs, write
from tracebuild import messages

from unirl_replay.contract import fast_typed, json_profile, json_write, trace_io
from unirl_replay.contract import jsonl_columns as jc
from unirl_replay.contract import workload_columns as wc
from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.v1 import manifest_pb2
from unirl_replay.v1 import workload_pb2 as w

FAST = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                deadline=None)


class _Trace:
    """What columns_from_messages needs: the real JSONL reader over one file."""

    def __init__(self, path: Path):
        self.path = path

    def iter_workload(self):
        return trace_io.iter_records(self.path, w.WorkloadRecord, "jsonl")


def compare(tmp: Path, lines: list[bytes]) -> wc.WorkloadColumns | None:
    """Column reader vs message path on one file of ``lines``; returns the columns (or None)."""
    data = b"".join(lines)
    got = jc._read(io.BytesIO(data), fast_typed.plan_for(w.WorkloadRecord))
    p = tmp / "workload.jsonl"
    p.write_bytes(data)
    try:
        want = columns_from_messages(_Trace(p))
    except UnirlReplayError as e:
        assert got is None, f"columns from a workload the message path refuses: {e}"
        return None
    if got is None:
        return None
    cols, n = got
    assert n == len(data.splitlines(keepends=True))
    assert as_dict(cols) == want
    assert cols.row == {rid: i for i, rid in enumerate(cols.request_ids)}
    return cols


def line(msg) -> bytes:
    return json_write.to_json_line(msg if isinstance(msg, w.WorkloadRecord) else w.WorkloadRecord(request=msg))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
@pytest.mark.parametrize("seed", range(10))
def test_generated_workloads_are_taken_and_equal_binpb_columns(tmp_path, monkeypatch, seed, chunk):
    monkeypatch.setattr(wc, "_KEY_CHUNK", chunk)  # every buffer boundary of the hash copy (KeyBuffer) crossed
    msgs, mf = workload_msgs(seed)
    tj = open_trace(write(tmp_path, msgs, mf, "jsonl"))
    tb = open_trace(write(tmp_path, msgs, mf, "binpb"))
    cols = wc.read_columns(tj)
    assert cols is not None  # the column path is taken on the writers' lines
    assert as_dict(cols) == columns_from_messages(tj) == as_dict(wc.read_columns(tb))
    # validate opens traces to inspect them: a JSONL trace of canonical lines is still read as columns
    assert wc.read_columns(open_trace(tj.dir, inspect=True)) is not None


@FAST
@given(recs=st.lists(messages(w.WorkloadRecord), min_size=1, max_size=6))
def test_random_records(tmp_path_factory, recs):
    for i, r in enumerate(recs):  # unique ids, so that the path is taken
        kind = r.WhichOneof("record")
        if kind == "request":
            r.request.request_id = f"r{i}"
    lines = [line(r) for r in recs]
    cols = compare(tmp_path_factory.mktemp("r"), lines)
    kinds = [r.WhichOneof("record") for r in recs]
    others = [getattr(r, k) for r, k in zip(recs, kinds) if k not in ("request", "cache_warmup")]
    if cols is None:  # only where two other records of a kind share an id
        ids = [(type(m).__name__, getattr(m, m.DESCRIPTOR.fields[0].name)) for m in others]
        assert len(set(ids)) < len(ids), lines


def _requests(data) -> list[bytes]:
    reqs = data.draw(st.lists(messages(w.Request), min_size=1, max_size=3))
    for i, r in enumerate(reqs):
        r.request_id = f"r{i}"
    return [line(r) for r in reqs]


@FAST
@given(data=st.data())
def test_value_mutations(tmp_path_factory, data):
    """One value anywhere in one request line replaced by an arbitrary JSON value (or a key added)."""
    lines = _requests(data)
    k = data.draw(st.integers(0, len(lines) - 1))
    d = json.loads(lines[k])
    replace_one_value(data, d)
    lines[k] = json.dumps(d, separators=(",", ":"), ensure_ascii=data.draw(st.booleans())).encode(
        "utf-8", "surrogatepass") + b"\n"
    compare(tmp_path_factory.mktemp("v"), lines)


@FAST
@given(data=st.data())
def test_byte_mutations(tmp_path_factory, data):
    """Bytes inserted, deleted or replaced anywhere in one request line (newlines included)."""
    lines = _requests(data)
    k = data.draw(st.integers(0, len(lines) - 1))
    b = bytearray(lines[k])
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        at = data.draw(st.integers(0, len(b)))
        piece = data.draw(st.sampled_from(BYTE_EDITS))
        if kind == "insert":
            b[at:at] = piece
        elif kind == "delete":
            del b[at:at + data.draw(st.integers(1, 4))]
        else:
            b[at:at + 1] = piece
    lines[k] = bytes(b)
    compare(tmp_path_factory.mktemp("b"), lines)


@pytest.mark.parametrize("raw", EDGE)
def test_edge_lines(tmp_path, raw):
    good = line(w.Request(request_id="ok", input_tokens=3))
    compare(tmp_path, [good, raw if raw.endswith(b"\n") else raw + b"\n"])


def _req(**kw) -> bytes:
    base = dict(request_id="a", num_samples=1, input_tokens=32, output_tokens=[4],
                prefix=dict(block_size_tokens=16, block_hashes=[1, 2**64 - 1]))
    base.update(kw)
    return line(w.Request(**base))


def _replace(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert old in raw
    return raw.replace(old, new)


CASES = {
    # taken
    "plain": ([_req()], True),
    "observed arrival": ([_req(arrival=dict(observed_offset_ns=-5), policy_version=0, turn_index=0)], True),
    "after dependencies": ([_req(arrival=dict(after_dependencies={}), dependencies=[
        dict(predecessor_request_id="x", trigger=1, relation=2, external_delay_ns=9, delay_absence=1),
        dict(predecessor_request_id="y")])], True),
    "empty prefix and arrival": ([line(w.WorkloadRecord(request=w.Request(request_id="a", prefix={}, arrival={})))],
                                 True),
    "int64 at its bounds": ([_req(arrival=dict(observed_offset_ns=2**63 - 1), policy_version=-2**63)], True),
    # declined, the message path reads it (and raises, or not)
    "hash above 2**64-1": ([_replace(_req(), b'"18446744073709551615"', b'"18446744073709551616"')], False),
    "int64 above range": ([_replace(_req(arrival=dict(observed_offset_ns=1)), b'"1"', b'"9223372036854775808"')],
                          False),
    "int64 below range": ([_replace(_req(policy_version=-1), b'"-1"', b'"-9223372036854775809"')], False),
    "escaped id": ([_replace(_req(), b'"a"', b'"\\u0061"')], False),  # not the writer's spelling of "a"
    "quote and backslash in ids": ([_req(request_id='q"\\', trajectory_id="é\u2028")], True),
    "lone surrogate": ([_replace(_req(), b'"a"', b'"\\ud800"')], False),
    "empty line": ([_req(), b"\n"], False),
    "blank line": ([_req(), b"  \n"], False),
    "no final newline": ([_req()[:-1]], False),
    "empty record": ([b"{}\n"], False),
    "duplicate request id": ([_req(), _req()], False),
    "duplicate trajectory id": ([line(w.WorkloadRecord(trajectory=w.Trajectory(trajectory_id="t")))] * 2, False),
    "spaced line": ([json_profile.to_json_line(w.WorkloadRecord(request=w.Request(request_id="a"))).replace(
        b":", b": ")], False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cases(tmp_path, name):
    lines, taken = CASES[name]
    cols = compare(tmp_path, lines)
    assert (cols is not None) == taken


def test_record_count_and_newer_revision_decline(tmp_path):
    msgs, mf = workload_msgs(3)
    d = write(tmp_path, msgs, mf, "jsonl")
    t = open_trace(d)
    assert wc.read_columns(t) is not None
    t.artifact(manifest_pb2.ARTIFACT_KIND_WORKLOAD).record_count += 1
    assert wc.read_columns(t) is None  # a count other than the manifest's: the message path raises it
    t2 = open_trace(d)
    t2.compat.writer_revision = t2.compat.reader_revision + 1
    assert wc.read_columns(t2) is None  # unknown keys of a newer revision: skipped and noted by the message path
