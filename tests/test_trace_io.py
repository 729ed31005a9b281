"""Trace I/O: lossless round trip in both encodings, atomic finalize, incomplete traces, framing."""

import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebuild import TraceParts, agentic_trace, grpo_trace, make_manifest, messages, write_trace
from unirl_replay import SCHEMA_VERSION
from unirl_replay.contract.errors import IncompleteTraceError, SchemaVersionError, TraceFormatError
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.compat import CONTRACT_REVISION
from unirl_replay.contract.trace_io import (TraceWriter, decode_varint, encode_varint, iter_frames, open_trace,
                                   read_message_json, write_message_json)
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD, TraceManifest

ENCODINGS = ["jsonl", "binpb"]


def read_back(d):
    t = open_trace(d)
    return t, [r for _, r in t.iter_workload()], [r for _, r in iter_outcomes(t)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(wl=st.lists(messages(w.WorkloadRecord), max_size=6), oc=st.lists(messages(o.OutcomeRecord), max_size=6),
       man=messages(TraceManifest), enc=st.sampled_from(ENCODINGS))
def test_random_traces_round_trip_losslessly(tmp_path_factory, wl, oc, man, enc):
    man.schema_version = SCHEMA_VERSION
    d = tmp_path_factory.mktemp("rt")
    written = write_trace(d / "t", TraceParts(man, wl, oc), enc)
    t, wl2, oc2 = read_back(written)
    assert wl2 == wl and oc2 == oc
    expected = TraceManifest()
    expected.CopyFrom(man)
    del expected.artifacts[:]
    expected.contract_revision = max(man.contract_revision, CONTRACT_REVISION)  # the writer records its revision
    got = TraceManifest()
    got.CopyFrom(t.manifest)
    del got.artifacts[:]
    assert got == expected
    # and the other encoding of the same records holds the same messages
    other = write_trace(d / "u", TraceParts(man, wl2, oc2), "binpb" if enc == "jsonl" else "jsonl")
    assert read_back(other)[1:] == (wl, oc)


@pytest.mark.parametrize("enc", ENCODINGS)
def test_manifest_artifacts_and_line_numbers(tmp_path, enc):
    parts = agentic_trace()
    d = parts.write(tmp_path / "t", enc)
    t = open_trace(d)
    assert t.encoding == enc and t.manifest.schema_version == SCHEMA_VERSION
    a = t.artifact(ARTIFACT_KIND_WORKLOAD)
    assert a.record_count == len(parts.workload) and a.size_bytes == (d / a.path).stat().st_size and len(a.sha256) == 64
    assert [n for n, _ in t.iter_workload()] == list(range(1, len(parts.workload) + 1))
    assert sorted(p.name for p in d.iterdir()) == sorted(["manifest.json", a.path, a.path.replace("workload", "outcomes")])


def test_writer_exception_leaves_no_manifest(tmp_path):
    d = tmp_path / "t"
    with pytest.raises(RuntimeError):
        with TraceWriter(d, "binpb") as wr:
            for rec in grpo_trace().workload:
                wr.write_workload(rec)
            raise RuntimeError("capture died")
    assert not (d / "manifest.json").exists()
    assert (d / "workload.binpb.partial").exists()
    with pytest.raises(IncompleteTraceError) as ei:
        open_trace(d)
    assert ei.value.rule == "trace.no_manifest" and "workload.binpb.partial" in str(ei.value)


def test_leaving_without_finalize_is_an_error_and_incomplete(tmp_path):
    with pytest.raises(IncompleteTraceError):
        with TraceWriter(tmp_path / "t") as wr:
            wr.write_workload(grpo_trace().workload[0])
    with pytest.raises(IncompleteTraceError):
        open_trace(tmp_path / "t")


def test_leftover_partial_next_to_manifest_is_incomplete(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    (d / "outcomes.jsonl.partial").write_bytes(b"")
    with pytest.raises(IncompleteTraceError) as ei:
        open_trace(d)
    assert ei.value.rule == "trace.partial_files"


def test_writer_refuses_existing_trace(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    with pytest.raises(FileExistsError):
        TraceWriter(d)


@pytest.mark.parametrize("enc", ENCODINGS)
@pytest.mark.parametrize("cut", [1, 3, 17])
def test_truncated_capture_is_incomplete(tmp_path, enc, cut):
    d = agentic_trace().write(tmp_path / "t", enc)
    p = d / f"workload.{enc}"
    data = p.read_bytes()
    p.write_bytes(data[:-cut])
    with pytest.raises(IncompleteTraceError) as ei:
        open_trace(d)
    assert ei.value.rule == "artifact.size" and ei.value.file == p.name


@pytest.mark.parametrize("enc", ENCODINGS)
def test_truncated_stream_without_digest_check_still_incomplete(tmp_path, enc):
    d = agentic_trace().write(tmp_path / "t", enc)
    t = open_trace(d)
    p = d / f"workload.{enc}"
    p.write_bytes(p.read_bytes()[:-3])
    with pytest.raises(IncompleteTraceError) as ei:
        list(t.iter_workload())
    assert ei.value.rule in ("jsonl.truncated", "binpb.truncated") and ei.value.line > 0


def test_digest_mismatch_same_size_is_incomplete(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    p = d / "outcomes.jsonl"
    data = bytearray(p.read_bytes())
    i = data.index(b"req-0")
    data[i:i + 5] = b"req-9"
    p.write_bytes(bytes(data))
    t = open_trace(d)  # the workload side never reads the outcomes
    with pytest.raises(IncompleteTraceError) as ei:
        next(iter_outcomes(t))
    assert ei.value.rule == "artifact.digest" and ei.value.file == "outcomes.jsonl"
    w = d / "workload.jsonl"
    w.write_bytes(w.read_bytes().replace(b"req-0", b"req-9"))
    with pytest.raises(IncompleteTraceError) as ei:
        open_trace(d)
    assert ei.value.rule == "artifact.digest" and ei.value.file == "workload.jsonl"


def test_trace_without_outcomes_file_serves_the_workload(tmp_path):
    parts = agentic_trace()
    d = parts.write(tmp_path / "t", "binpb")
    (d / "outcomes.binpb").unlink()
    t = open_trace(d)
    assert [r for _, r in t.iter_workload()] == parts.workload
    with pytest.raises(IncompleteTraceError) as ei:
        list(iter_outcomes(t))
    assert ei.value.rule == "artifact.missing"


def test_record_count_mismatch_is_incomplete(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    m = read_message_json(d / "manifest.json", TraceManifest)
    m.artifacts[0].record_count += 1
    write_message_json(d / "manifest.json", m)
    t = open_trace(d)
    with pytest.raises(IncompleteTraceError) as ei:
        list(t.iter_workload())
    assert ei.value.rule == "artifact.record_count"


def test_other_schema_version_rejected_with_advice(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    m = read_message_json(d / "manifest.json", TraceManifest)
    m.schema_version = "unirl_replay.v2"
    write_message_json(d / "manifest.json", m)
    with pytest.raises(SchemaVersionError) as ei:
        open_trace(d)
    assert "unirl_replay.v2" in str(ei.value) and "re-capture" in str(ei.value)
    with pytest.raises(SchemaVersionError):
        TraceWriter(tmp_path / "u").finalize(m)


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    parts = grpo_trace()
    d = tmp_path / "t"
    with TraceWriter(d) as wr:
        for r in parts.workload:
            wr.write_workload(r)
        wr._streams[ARTIFACT_KIND_WORKLOAD].write(b'{"request": {"nope": 1}}\n')  # a foreign writer's bad line
        wr.finalize(parts.manifest)
    with pytest.raises(TraceFormatError) as ei:
        list(open_trace(d).iter_workload())
    assert (ei.value.file, ei.value.line, ei.value.rule) == ("workload.jsonl", len(parts.workload) + 1, "json.profile")


@given(st.integers(0, 2**64 - 1))
def test_varint_round_trip(n):
    b = encode_varint(n)
    assert decode_varint(b) == (n, len(b))
    assert decode_varint(b[:-1]) is None


def test_varint_matches_protobuf_delimited_encoding():
    from google.protobuf.internal import encoder
    for n in (0, 1, 127, 128, 300, 2**32, 2**63):
        parts = []
        encoder._VarintEncoder()(parts.append, n, True)
        assert b"".join(parts) == encode_varint(n)


def test_frames_larger_than_read_chunk(tmp_path):
    payloads = [b"x" * (3 << 20), b"", b"y" * 5]
    buf = io.BytesIO(b"".join(encode_varint(len(p)) + p for p in payloads))
    assert [p for _, p in iter_frames(buf)] == payloads


def test_write_message_json_is_atomic(tmp_path, monkeypatch):
    p = tmp_path / "m.json"
    write_message_json(p, make_manifest(trace_id="one"))

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_message_json(p, make_manifest(trace_id="two"))
    assert read_message_json(p, TraceManifest).trace_id == "one"
    assert [x.name for x in tmp_path.iterdir()] == ["m.json"]


def test_written_json_files_have_ordinary_permissions(tmp_path):
    # a manifest other users (CI, the simulator team) can read: 0666 minus the umask, not mkstemp's 0600
    p = tmp_path / "manifest.json"
    write_message_json(p, make_manifest(trace_id="perm"))
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask
