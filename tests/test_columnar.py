"""The ``arrow`` encoding (contract/columnar.py): schema from the descriptor, lossless round trip,
the same conversion as the other encodings, typed errors for corrupt / truncated / foreign files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")  # the optional `columnar` extra (scripts/bootstrap.sh installs it)

from tracebuild import TraceParts, agentic_trace, grpo_trace, messages, write_trace  # noqa: E402

from unirl_replay import SCHEMA_VERSION  # noqa: E402
from unirl_replay.contract import columnar, trace_io  # noqa: E402
from unirl_replay.contract import workload_columns as wc  # noqa: E402
from unirl_replay.contract.errors import MissingEnvironmentError, TraceFormatError, UnirlReplayError  # noqa: E402
from unirl_replay.contract.outcomes_io import iter_outcomes  # noqa: E402
from unirl_replay.contract.trace_io import (TraceWriter, open_trace, read_message_json, sha256_file,  # noqa: E402
                                            write_message_json)
from unirl_replay.replay import runner  # noqa: E402
from unirl_replay.v1 import manifest_pb2, outcomes_pb2, workload_pb2  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUNDLED = ("agentic-a", "agentic-ray-a", "grpo-a")
CASES = sorted(p.parent for p in (REPO / "conformance" / "cases").glob("*/trace/manifest.json"))


def copy_trace(src: Path, dst: Path, enc: str) -> Path:
    """The same records and manifest in another encoding (through TraceWriter)."""
    t = open_trace(src)
    with TraceWriter(dst, enc) as wr:
        for _, rec in t.iter_workload():
            wr.write_workload(rec)
        for _, rec in iter_outcomes(t):
            wr.write_outcome(rec)
        wr.finalize(t.manifest)
    return dst


def reseal(d: Path, name: str, data: bytes, count: int | None = None) -> None:
    """Replace one artifact's bytes and re-seal the manifest (digest, size; count when given), so
    only the reader's own checks can find the damage."""
    p = d / name
    p.write_bytes(data)
    mp = d / trace_io.MANIFEST_FILE
    mf = read_message_json(mp, manifest_pb2.TraceManifest)
    for a in mf.artifacts:
        if a.path == name:
            a.sha256, a.size_bytes = sha256_file(p)
            if count is not None:
                a.record_count = count
    mp.unlink()
    write_message_json(mp, mf)


def outcome(fn):
    try:
        return ("ok", fn())
    except UnirlReplayError as e:
        return (type(e).__name__, getattr(e, "rule", None), str(e))


# -- the schema ----------------------------------------------------------------------------------

def test_schema_follows_the_descriptor():
    s = columnar.arrow_schema(workload_pb2.WorkloadRecord.DESCRIPTOR)
    assert s.names == [f.name for f in workload_pb2.WorkloadRecord.DESCRIPTOR.fields]  # the record oneof
    assert all(f.nullable and pa.types.is_struct(f.type) for f in s)
    req = s.field("request").type
    f = {req.field(i).name: req.field(i) for i in range(req.num_fields)}
    assert f["request_id"].type == pa.string() and not f["request_id"].nullable
    assert f["turn_index"].type == pa.uint32() and f["turn_index"].nullable  # proto3 optional
    assert f["policy_version"].type == pa.int64() and f["policy_version"].nullable
    assert f["output_tokens"].type == pa.list_(pa.field("item", pa.uint32(), nullable=False))
    assert not f["output_tokens"].nullable
    assert f["finish_reasons"].type == pa.list_(pa.field("item", pa.int32(), nullable=False))  # enum numbers
    prefix = f["prefix"].type
    assert f["prefix"].nullable and prefix.field("block_hashes").type == pa.list_(pa.field("item", pa.uint64(),
                                                                                             nullable=False))
    arrival = f["arrival"].type
    assert arrival.field("observed_offset_ns").nullable and arrival.field("after_dependencies").type == pa.struct([])
    assert f["dependencies"].type.value_type.field("external_delay_ns").nullable
    assert f["request_id"].metadata == {b"proto.number": b"1"}
    assert s.metadata[b"unirl_replay.message"] == b"unirl_replay.v1.WorkloadRecord"
    o = columnar.arrow_schema(outcomes_pb2.OutcomeRecord.DESCRIPTOR)
    assert o.names == ["request", "trajectory", "group", "rollout_batch"]
    assert o.field("request").type.field("samples").type.value_type.field("completion_ns").nullable


# -- round trip ----------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(wl=st.lists(messages(workload_pb2.WorkloadRecord), max_size=8),
       oc=st.lists(messages(outcomes_pb2.OutcomeRecord), max_size=8), man=messages(manifest_pb2.TraceManifest))
def test_random_records_round_trip(tmp_path_factory, wl, oc, man):
    man.schema_version = SCHEMA_VERSION
    d = write_trace(tmp_path_factory.mktemp("rt") / "t", TraceParts(man, wl, oc), "arrow")
    t = open_trace(d)
    assert t.encoding == "arrow"
    assert [r for _, r in t.iter_workload()] == wl
    assert [r for _, r in iter_outcomes(t)] == oc
    for kind, n in ((manifest_pb2.ARTIFACT_KIND_WORKLOAD, len(wl)), (manifest_pb2.ARTIFACT_KIND_OUTCOMES, len(oc))):
        a = t.artifact(kind)
        assert a.encoding == manifest_pb2.ENCODING_ARROW and a.record_count == n
        assert (a.sha256, a.size_bytes) == sha256_file(d / a.path)  # the same digest scheme


def test_batches_line_numbers_and_determinism(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "BATCH_ROWS", 3)  # several record batches
    parts = agentic_trace(trajectories=3, turns=3)
    a = parts.write(tmp_path / "a", "arrow")
    b = parts.write(tmp_path / "b", "arrow")
    assert (a / "workload.arrow").read_bytes() == (b / "workload.arrow").read_bytes()
    t = open_trace(a)
    assert [n for n, _ in t.iter_workload()] == list(range(1, len(parts.workload) + 1))
    assert [r for _, r in t.iter_workload()] == parts.workload


def test_no_outcomes_written(tmp_path):
    parts = grpo_trace(prompts=2, samples=2)
    parts.outcomes.clear()
    t = open_trace(parts.write(tmp_path / "t", "arrow"))
    assert list(iter_outcomes(t)) == [] and t.artifact(manifest_pb2.ARTIFACT_KIND_OUTCOMES).record_count == 0


# -- the same conversion in every encoding -------------------------------------------------------

def convert_all(tmp: Path, src: Path, fmt: str, allow: tuple) -> dict:
    """Per encoding: the converted files (header's source digest aside: it names the workload
    file's own sha256) or the typed error."""
    out = {}
    for enc in ("binpb", "jsonl", "arrow"):
        d = copy_trace(src, tmp / enc / "trace", enc)
        sha = open_trace(d).artifact(manifest_pb2.ARTIFACT_KIND_WORKLOAD).sha256

        def run(d=d, enc=enc, sha=sha):
            files = runner.convert_trace(d, tmp / enc / "up.jsonl", trace_format=fmt, unmodelled=allow)
            return [p.read_bytes().replace(sha.encode(), b"<digest>") for p in files]

        out[enc] = outcome(run)
    return out


@pytest.mark.parametrize("fmt", ["agentic_mooncake", "mooncake"])
@pytest.mark.parametrize("src", [REPO / "traces" / n for n in BUNDLED] + CASES, ids=lambda p: p.parent.name
                         if p.name == "trace" else p.name)
def test_every_encoding_converts_identically(tmp_path, src, fmt):
    allows = ((), ("engine_client.inflight_limit",)) if fmt == "agentic_mooncake" else ((),)
    for allow in allows:
        got = convert_all(tmp_path / "-".join(allow or ("none",)), src, fmt, allow)
        assert got["arrow"] == got["binpb"] == got["jsonl"], (src, fmt, allow)


@pytest.mark.parametrize("name", BUNDLED)
def test_arrow_takes_the_column_path(tmp_path, name):
    d = copy_trace(REPO / "traces" / name, tmp_path / "t", "arrow")
    cols = wc.read_columns(open_trace(d))
    assert cols is not None and len(cols) > 0
    b = copy_trace(REPO / "traces" / name, tmp_path / "b", "binpb")
    ref = wc.read_columns(open_trace(b))
    assert cols.requests == ref.requests and cols.keys.tolist() == ref.keys.tolist()
    assert cols.offsets.tolist() == ref.offsets.tolist() and cols.row == ref.row
    assert cols.keys.flags.writeable  # the remap writes its ids over the keys


# -- hostile files: typed errors, never a traceback ---------------------------------------------

def _table(rows: list[dict], cls=workload_pb2.WorkloadRecord):
    return pa.Table.from_pylist(rows, schema=columnar.arrow_schema(cls.DESCRIPTOR))


def _ipc(table, compression=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def read_all(d: Path):
    def go():
        t = open_trace(d)
        return [r for _, r in t.iter_workload()], [r for _, r in iter_outcomes(t)]
    return outcome(go)


@pytest.fixture
def arrow_trace(tmp_path):
    return agentic_trace(trajectories=2, turns=2).write(tmp_path / "t", "arrow")


def _req(rid="r", **kw):
    return {"request": {"request_id": rid, "num_samples": 1, "input_tokens": 8, "output_tokens": [2], **kw}}


HOSTILE = {
    "garbage": lambda d: b"not an arrow file at all\n" * 10,
    "truncated": lambda d: (d / "workload.arrow").read_bytes()[:-100],
    "cut in half": lambda d: (d / "workload.arrow").read_bytes()[: (d / "workload.arrow").stat().st_size // 2],
    "empty": lambda d: b"",
    "arrow stream (not file) format": lambda d: _stream_bytes(),
    "parquet": lambda d: _parquet_bytes(),
    "outcomes as workload": lambda d: (d / "outcomes.arrow").read_bytes(),
    "foreign schema": lambda d: _ipc(pa.table({"request": [1, 2]})),
    "two kinds in a row": lambda d: _ipc(_table([{**_req(), "trajectory": {"trajectory_id": "t"}}])),
    "two arrival kinds": lambda d: _ipc(_table([_req(arrival={"observed_offset_ns": 1, "after_dependencies": {}})])),
    "null in a list": lambda d: _ipc(_null_item_table()),
    "bad utf-8": lambda d: _ipc(_bad_utf8_table()),
    # s6-f: a compressed body was decompressed into memory whatever it claimed (a 48 KB workload.arrow of one
    # request with 10^8 zero block hashes took validate to 2.4 GB RSS; a few hundred KB reach tens of GB)
    "zstd bomb": lambda d: _ipc(_table([_req(prefix={"block_size_tokens": 4, "block_hashes": [0] * 200_000})]),
                                compression="zstd"),
    "lz4 compressed": lambda d: _ipc(_table([_req()]), compression="lz4"),
    # s10-attack: a flipped byte in a schema name (not UTF-8) was a UnicodeDecodeError traceback from validate,
    # convert and every reader (pyarrow decodes Field.name only when it is read); 1 in 10 single-byte flips
    "field name not utf-8": lambda d: (d / "workload.arrow").read_bytes().replace(b"request_id", b"\xffequest_id"),
    "nested field name not utf-8": lambda d: (d / "workload.arrow").read_bytes().replace(b"block_hashes",
                                                                                         b"block_hash\xe2s"),
}


def _stream_bytes() -> bytes:
    t = _table([_req()])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _parquet_bytes() -> bytes:
    pq = pytest.importorskip("pyarrow.parquet")
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1, 2, 3]}), sink)
    return sink.getvalue().to_pybytes()


def _null_item_table():
    t = _table([_req()])
    # an output_tokens list holding a null, although the schema says its items are never null
    req = t.column("request").chunk(0)
    fields = [req.field(i) for i in range(req.type.num_fields)]
    k = req.type.get_field_index("output_tokens")
    fields[k] = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array([None], pa.uint32()),
                                         type=req.type.field(k).type)
    arr = pa.StructArray.from_arrays(fields, fields=list(req.type))
    return t.set_column(0, t.schema.field(0), pa.chunked_array([arr]))


def _bad_utf8_table():
    t = _table([_req("ab")])
    req = t.column("request").chunk(0)
    fields = [req.field(i) for i in range(req.type.num_fields)]
    good = fields[0]
    fields[0] = pa.Array.from_buffers(pa.string(), 1, [None, good.buffers()[1], pa.py_buffer(b"\xff\xfe")])
    arr = pa.StructArray.from_arrays(fields, fields=list(req.type))
    return t.set_column(0, t.schema.field(0), pa.chunked_array([arr]))


EXPECTED_RULE = {"two kinds in a row": "arrow.oneof", "two arrival kinds": "arrow.oneof",
                 "null in a list": "arrow.decode", "outcomes as workload": "arrow.schema",
                 "foreign schema": "arrow.schema", "parquet": "arrow.corrupt"}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_workload_files_give_typed_errors(arrow_trace, name):
    reseal(arrow_trace, "workload.arrow", HOSTILE[name](arrow_trace), count=1)
    got = read_all(arrow_trace)
    assert got[0] == "TraceFormatError", got
    assert got[1] == EXPECTED_RULE.get(name, "arrow.corrupt"), got
    assert "workload.arrow" in got[2]
    # convert: the column reader declines and the message path words the same error
    conv = outcome(lambda: runner.convert_trace(arrow_trace, arrow_trace.parent / "up.jsonl"))
    assert conv == got
    # the CLI: a message and a status, no traceback (convert validates first; validate names the rule)
    for cmd in (["convert", str(arrow_trace), "--out", str(arrow_trace.parent / "cli.jsonl")],
                ["validate", str(arrow_trace)]):
        p = subprocess.run([sys.executable, "-m", "unirl_replay", *cmd], capture_output=True, text=True)
        assert p.returncode != 0 and "Traceback" not in p.stderr + p.stdout, (cmd, p.stderr)
        if cmd[0] == "validate":
            assert got[1] in p.stderr + p.stdout, (cmd, p.stdout, p.stderr)


def test_a_compressed_batch_is_refused_before_it_is_decoded(arrow_trace, monkeypatch):
    """The refusal names the batch and never decodes it (no batch of the file is read at all)."""
    reseal(arrow_trace, "workload.arrow", HOSTILE["zstd bomb"](arrow_trace), count=1)
    monkeypatch.setattr(pa.ipc.RecordBatchFileReader, "read_all", lambda self: pytest.fail("a batch was decoded"))
    got = read_all(arrow_trace)
    assert got[:2] == ("TraceFormatError", "arrow.corrupt") and "record batch 0 is compressed" in got[2], got


def test_truncated_file_without_reseal_is_incomplete(arrow_trace):
    p = arrow_trace / "workload.arrow"
    p.write_bytes(p.read_bytes()[:-10])
    assert read_all(arrow_trace)[:2] == ("IncompleteTraceError", "artifact.size")


def test_row_count_differs_from_manifest(arrow_trace):
    data = (arrow_trace / "workload.arrow").read_bytes()
    reseal(arrow_trace, "workload.arrow", data, count=99)
    assert read_all(arrow_trace)[:2] == ("IncompleteTraceError", "artifact.record_count")


def test_empty_row_is_an_empty_record(arrow_trace):
    reseal(arrow_trace, "workload.arrow", _ipc(_table([{}])), count=1)
    got = outcome(lambda: runner.convert_trace(arrow_trace, arrow_trace.parent / "up.jsonl"))
    assert got[:2] == ("TraceFormatError", "record.empty")  # as an empty binpb frame


def test_without_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingEnvironmentError, match=r"unirl-replay\[columnar\]"):
        TraceWriter(tmp_path / "t", "arrow")
    assert not (tmp_path / "t").exists()
    with pytest.raises(MissingEnvironmentError):
        columnar.require_pyarrow()


def test_error_names_row(arrow_trace):
    rows = [_req("a"), {**_req("b"), "group": {"group_id": "g"}}]
    reseal(arrow_trace, "workload.arrow", _ipc(_table(rows)), count=2)
    with pytest.raises(TraceFormatError) as e:
        list(open_trace(arrow_trace).iter_workload())
    assert e.value.line == 2 and e.value.rule == "arrow.oneof"


@settings(max_examples=40, deadline=None)
@given(recs=st.lists(messages(workload_pb2.WorkloadRecord), min_size=1, max_size=8),
       spoil=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["kind", "arrival", "none"])), max_size=4))
def test_vectorised_oneof_check_equals_the_row_check(recs, spoil):
    """columnar.conflicts (one pass over the columns) names the rows two_set (per row) names."""
    rows = [columnar.to_row(r) for r in recs]
    for i, how in spoil:
        row = rows[i % len(rows)]
        if how == "kind":
            row["slot_pool"] = row.get("slot_pool") or {"pool_id": "p", "engine_ids": [], "worker_id": "",
                                                        "trajectory_slots": 1}
            if row.get("request") is None and row.get("group") is None:
                row["group"] = {"group_id": "g", "rollout_batch_id": "", "unit": 0, "expected_size": 0,
                                "member_ids": [], "resumed_from_rollout_batch_id": None}
        elif how == "arrival" and row.get("request") is not None:
            row["request"]["arrival"] = {"observed_offset_ns": 5, "after_dependencies": {}}
    import numpy as np

    arr = _table(rows).combine_chunks().to_batches()[0].to_struct_array()
    want = {i: p for i, r in enumerate(rows) if (p := columnar.two_set(workload_pb2.WorkloadRecord.DESCRIPTOR, r))}
    assert columnar.conflicts(arr, workload_pb2.WorkloadRecord.DESCRIPTOR, np.ones(len(rows), np.bool_)) == want


@pytest.mark.parametrize("batch", [2, 1 << 14])
@pytest.mark.parametrize("seed", range(10))
def test_arrow_columns_equal_messages(tmp_path, monkeypatch, seed, batch):
    """The arrow column reader holds what the messages say (random workloads: two engines, lanes,
    warm-ups, fan-out, absent prefixes and policy versions; several record batches)."""
    from test_workload_columns import as_dict, columns_from_messages, convert_both, workload_msgs, write

    monkeypatch.setattr(columnar, "BATCH_ROWS", batch)
    msgs, mf = workload_msgs(seed)
    t = open_trace(write(tmp_path, msgs, mf, "arrow"))
    cols = wc.read_columns(t)
    assert cols is not None
    assert as_dict(cols) == columns_from_messages(t)
    fast, slow = convert_both(tmp_path, t.dir, monkeypatch)
    assert fast == slow


def test_replay_equal_from_arrow_and_binpb(tmp_path):
    """The whole replay (real upstream) of the same records gives the same result from either encoding."""
    from replay_build import FIXED

    out = []
    for enc in ("binpb", "arrow"):
        d = copy_trace(REPO / "traces" / "agentic-a", tmp_path / enc, enc)
        r = runner.replay_trace(d, FIXED, unmodelled=("engine_client.inflight_limit",))
        assert r.simulator_wall_ns and r.workload_sha256 == open_trace(d).artifact(
            manifest_pb2.ARTIFACT_KIND_WORKLOAD).sha256
        r.ClearField("simulator_wall_ns")  # measured wall time
        r.ClearField("workload_sha256")    # each file's own digest
        out.append(r)
    assert out[0].requests and out[0] == out[1]
