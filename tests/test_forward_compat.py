"""Forward compatibility within v1: a trace written by a *future* revision (one added field per
message kind, built here from today's descriptors with descriptor_pb2) is read by today's code.

- JSONL: unknown keys are skipped with ONE ForwardCompatWarning naming every field and both
  revisions; strict mode refuses; the same keys in a trace that does not claim a newer revision
  stay an error (a typo is never skipped).
- binpb: unknown fields survive a copy through today's TraceWriter (read back with the future
  descriptor, the values are there) and `validate` reports them.
- arrow: a future writer's schema is a superset of today's (new top-level columns, new children in
  struct columns, list items included); today's reader reads the known fields (message path and
  the convert columns path) and refuses a known field whose type changed.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from unirl_replay.contract import trace_io
from unirl_replay.contract.compat import CONTRACT_REVISION, ForwardCompatWarning
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.validate import WARNING, check_trace
from unirl_replay.v1 import common_pb2, manifest_pb2, outcomes_pb2, workload_pb2
from unirl_replay.v1.report_pb2 import TraceCheck

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "traces" / "agentic-a"
FUTURE = CONTRACT_REVISION + 1
_F = descriptor_pb2.FieldDescriptorProto


FUTURE_NUMBERS: dict[str, int] = {}


def _future_pool(added: dict | None = None, numbers: dict | None = None) -> descriptor_pool.DescriptorPool:
    """Today's v1 descriptors plus the fields a future revision adds (additive, as v1 allows).
    ``added``: message name -> (field name, type[, oneof index]); ``numbers`` gets each new number."""
    pool = descriptor_pool.DescriptorPool()
    added = added or {
        "Request": ("reasoning_tokens", _F.TYPE_UINT32),    # a new scalar on a nested message
        "TraceManifest": ("writer_host", _F.TYPE_STRING),   # a new manifest field
    }
    numbers = FUTURE_NUMBERS if numbers is None else numbers
    for mod in (common_pb2, workload_pb2, manifest_pb2, outcomes_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fdp)
        for m in fdp.message_type:
            if m.name in added:
                name, typ, *oneof = added[m.name]
                number = max((f.number for f in m.field), default=0) + 1  # the next number, as the next revision would take
                numbers[m.name] = number
                f = m.field.add(name=name, number=number, type=typ, label=_F.LABEL_OPTIONAL,
                                json_name="".join(w.capitalize() if i else w for i, w in enumerate(name.split("_"))))
                if oneof:
                    f.oneof_index = oneof[0]
        pool.Add(fdp)
    return pool


POOL = _future_pool()
FutureWorkload = message_factory.GetMessageClass(POOL.FindMessageTypeByName("unirl_replay.v1.WorkloadRecord"))


def _write_future_trace(out: Path, encoding: str) -> int:
    """The bundled agentic trace, rewritten by a 'future' writer: every request gets reasoning_tokens."""
    src = trace_io.open_trace(BUNDLED)
    n_requests = 0
    with trace_io.TraceWriter(out, encoding=encoding) as w:
        for _, rec in src.iter_workload():
            fut = FutureWorkload.FromString(rec.SerializeToString())
            if fut.WhichOneof("record") == "request":
                fut.request.reasoning_tokens = 7 + n_requests
                n_requests += 1
            w.write_workload(fut)
        for _, o in iter_outcomes(src):
            w.write_outcome(o)
        m = manifest_pb2.TraceManifest()
        m.CopyFrom(src.manifest)
        m.contract_revision = FUTURE
        w.finalize(m)
    # the future manifest also carries its new field (manifest.json is not digested)
    data = json.loads((out / "manifest.json").read_text())
    data["writer_host"] = "node-17"
    (out / "manifest.json").write_text(json.dumps(data, indent=2) + "\n")
    return n_requests


@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
def test_future_trace_reads_with_one_warning(tmp_path: Path, encoding: str) -> None:
    d = tmp_path / "t"
    n_requests = _write_future_trace(d, encoding)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = trace_io.open_trace(d)
        recs = [r for _, r in t.iter_workload()]
        outs = [o for _, o in iter_outcomes(t)]
    compat = [w for w in caught if issubclass(w.category, ForwardCompatWarning)]
    assert len(compat) == 1, [str(w.message) for w in caught]
    msg = str(compat[0].message)
    assert f"revision {FUTURE}" in msg and f"revision {CONTRACT_REVISION}" in msg
    assert "writer_host" in msg
    assert ("request.reasoning_tokens" if encoding == "jsonl" else f"request.#{FUTURE_NUMBERS['Request']}") in msg
    assert t.compat.writer_revision == FUTURE and t.compat.newer
    # everything today's reader knows is intact
    assert sum(1 for r in recs if r.WhichOneof("record") == "request") == n_requests
    src = trace_io.open_trace(BUNDLED)
    assert [r.request.request_id for r in recs if r.HasField("request")] == \
        [r.request.request_id for _, r in src.iter_workload() if r.HasField("request")]
    assert len(outs) == src.artifact(manifest_pb2.ARTIFACT_KIND_OUTCOMES).record_count


@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
def test_future_trace_strict_mode_refuses(tmp_path: Path, encoding: str) -> None:
    d = tmp_path / "t"
    _write_future_trace(d, encoding)
    with pytest.raises(TraceFormatError) as e:
        trace_io.open_trace(d, strict=True)
    assert e.value.rule == "compat.newer_revision"
    assert f"revision {FUTURE}" in str(e.value)


def test_unknown_key_without_newer_revision_is_still_an_error(tmp_path: Path) -> None:
    d = tmp_path / "t"
    _write_future_trace(d, "jsonl")
    data = json.loads((d / "manifest.json").read_text())
    data["contract_revision"] = CONTRACT_REVISION  # the writer claims to be as old as this reader
    del data["writer_host"]
    (d / "manifest.json").write_text(json.dumps(data))
    t = trace_io.open_trace(d)
    with pytest.raises(TraceFormatError) as e:
        for _ in t.iter_workload():
            pass
    assert e.value.rule == "json.profile" and "reasoning_tokens" in str(e.value)


def test_binpb_unknown_fields_survive_a_copy(tmp_path: Path) -> None:
    d, copy = tmp_path / "t", tmp_path / "copy"
    n_requests = _write_future_trace(d, "binpb")
    with pytest.warns(ForwardCompatWarning):
        t = trace_io.open_trace(d)
    with trace_io.TraceWriter(copy, encoding="binpb") as w:  # today's writer copies today's messages
        for _, rec in t.iter_workload():
            w.write_workload(rec)
        for _, o in iter_outcomes(t):
            w.write_outcome(o)
        m = w.finalize(t.manifest)
    assert m.contract_revision == FUTURE  # a copier keeps the newer revision its records carry
    # read the copy with the future descriptor: the added field and its values are still there
    with open(copy / "workload.binpb", "rb") as f:
        got = [FutureWorkload.FromString(p) for _, p in trace_io.iter_frames(f)]
    assert [r.request.reasoning_tokens for r in got if r.WhichOneof("record") == "request"] == \
        [7 + i for i in range(n_requests)]
    # byte-identical workload: nothing was dropped or reordered
    assert (copy / "workload.binpb").read_bytes() == (d / "workload.binpb").read_bytes()


@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
def test_validate_reports_the_newer_fields(tmp_path: Path, encoding: str) -> None:
    d = tmp_path / "t"
    _write_future_trace(d, encoding)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # validate reports; it does not warn
        res = check_trace(d)
    assert res.status == TraceCheck.STATUS_VALID, [v.rule + ": " + v.message for v in res.violations]
    compat = [v for v in res.violations if v.rule == "compat.newer_revision"]
    assert compat and all(v.severity == WARNING for v in compat)
    text = " ".join(v.message for v in compat)
    assert "writer_host" in text and ("reasoning_tokens" if encoding == "jsonl" else f"#{FUTURE_NUMBERS['Request']}") in text
    strict = check_trace(d, strict=True)
    assert strict.status == TraceCheck.STATUS_INVALID
    assert any(v.rule == "compat.newer_revision" and v.severity != WARNING for v in strict.violations)


def test_validate_flags_binpb_unknown_fields_of_a_writer_that_is_not_newer(tmp_path: Path) -> None:
    d = tmp_path / "t"
    _write_future_trace(d, "binpb")
    data = json.loads((d / "manifest.json").read_text())
    data["contract_revision"] = CONTRACT_REVISION
    del data["writer_host"]
    (d / "manifest.json").write_text(json.dumps(data))
    res = check_trace(d)
    assert res.status == TraceCheck.STATUS_INVALID
    bad = [v for v in res.violations if v.rule == "binpb.unknown_fields"]
    assert bad and f"#{FUTURE_NUMBERS['Request']}" in bad[0].message and bad[0].line >= 1


def test_writer_records_its_revision(tmp_path: Path) -> None:
    src = trace_io.open_trace(BUNDLED)
    assert src.manifest.contract_revision == 0 and src.compat.writer_revision == 1  # written before the field
    d = tmp_path / "t"
    with trace_io.TraceWriter(d) as w:
        for _, r in src.iter_workload():
            w.write_workload(r)
        for _, o in iter_outcomes(src):
            w.write_outcome(o)
        m = w.finalize(src.manifest)
    assert m.contract_revision == CONTRACT_REVISION
    assert json.loads((d / "manifest.json").read_text())["contract_revision"] == CONTRACT_REVISION
    assert outcomes_pb2.OutcomeRecord  # the outcomes message is the same in both revisions


# -- arrow: a newer revision's schema is a superset of this reader's ------------------------------

ARROW_NUMBERS: dict[str, int] = {}
ARROW_POOL = _future_pool({
    "WorkloadRecord": ("note", _F.TYPE_STRING, 0),         # a new record kind: a new top-level column
    "Request": ("reasoning_tokens", _F.TYPE_UINT32),      # a new child of a struct column
    "Dependency": ("tool_name", _F.TYPE_STRING),          # a new child of a list<struct> item
    "AfterDependencies": ("grace_ms", _F.TYPE_UINT32),    # an empty message gets a field
    "TraceManifest": ("writer_host", _F.TYPE_STRING),
}, ARROW_NUMBERS)
ArrowFuture = message_factory.GetMessageClass(ARROW_POOL.FindMessageTypeByName("unirl_replay.v1.WorkloadRecord"))


def _write_future_arrow_trace(out: Path, *, revision: int = FUTURE, mutate=None) -> int:
    """The bundled agentic trace as arrow, its workload file rewritten by a 'future' writer (its
    schema derived from the future descriptor; every request and dependency carries the new
    values), the manifest resealed. ``mutate(schema) -> schema``: a hand-made schema instead."""
    pytest.importorskip("pyarrow")
    from unirl_replay.contract import columnar
    from unirl_replay.contract.trace_io import read_message_json, sha256_file, write_message_json

    src = trace_io.open_trace(BUNDLED)
    with trace_io.TraceWriter(out, encoding="arrow") as w:
        for _, rec in src.iter_workload():
            w.write_workload(rec)
        for _, o in iter_outcomes(src):
            w.write_outcome(o)
        m = manifest_pb2.TraceManifest()
        m.CopyFrom(src.manifest)
        m.contract_revision = revision
        w.finalize(m)
    n = 0
    futs = []
    for _, rec in src.iter_workload():
        fut = ArrowFuture.FromString(rec.SerializeToString())
        if fut.WhichOneof("record") == "request":
            fut.request.reasoning_tokens = 7 + n
            n += 1
            for d in fut.request.dependencies:
                d.tool_name = "grep"
            if fut.request.arrival.HasField("after_dependencies"):
                fut.request.arrival.after_dependencies.grace_ms = 3
        futs.append(fut)
    p = out / "workload.arrow"
    p.unlink()
    if mutate is None:
        wr = columnar.ArrowRecordWriter(str(p), ArrowFuture.DESCRIPTOR)
        for fut in futs:
            wr.write(fut)
        wr.close()
    else:
        import pyarrow as pa

        schema = mutate(columnar.arrow_schema(ArrowFuture.DESCRIPTOR))
        table = pa.Table.from_pylist([columnar.to_row(f) for f in futs], schema=schema)
        with pa.ipc.new_file(str(p), schema) as wf:
            wf.write_table(table)
    mp = out / trace_io.MANIFEST_FILE
    mf = read_message_json(mp, manifest_pb2.TraceManifest)
    for a in mf.artifacts:
        if a.path == "workload.arrow":
            a.sha256, a.size_bytes = sha256_file(p)
    mp.unlink()
    write_message_json(mp, mf)
    return n


def _known_paths() -> set[str]:
    return {"note", "request.reasoning_tokens", "request.dependencies[].tool_name",
            "request.arrival.after_dependencies.grace_ms"}


def test_arrow_future_schema_is_a_superset():
    pytest.importorskip("pyarrow")
    from unirl_replay.contract import columnar

    got = columnar.arrow_schema(ArrowFuture.DESCRIPTOR)
    today = columnar.arrow_schema(workload_pb2.WorkloadRecord.DESCRIPTOR)
    assert not got.equals(today) and "note" in got.names
    extra: list[str] = []
    columnar._superset(got, today, "unirl_replay.v1.WorkloadRecord", extra)
    assert set(extra) == _known_paths()


def test_arrow_future_trace_reads_the_known_fields(tmp_path: Path) -> None:
    d = tmp_path / "t"
    n_requests = _write_future_arrow_trace(d)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = trace_io.open_trace(d)
        recs = [r for _, r in t.iter_workload()]
    compat = [w for w in caught if issubclass(w.category, ForwardCompatWarning)]
    assert len(compat) == 1, [str(w.message) for w in caught]
    msg = str(compat[0].message)
    assert all(p in msg for p in _known_paths()), msg
    src = [r for _, r in trace_io.open_trace(BUNDLED).iter_workload()]
    assert recs == src  # every field this reader knows, nothing else
    assert sum(r.HasField("request") for r in recs) == n_requests
    assert any(r.request.dependencies for r in recs if r.HasField("request"))  # list<struct> children were there
    with pytest.raises(TraceFormatError) as e:
        for _ in trace_io.open_trace(d, strict=True).iter_workload():
            pass
    assert e.value.rule == "compat.newer_revision"
    res = check_trace(d)
    assert res.status == TraceCheck.STATUS_VALID, [v.rule + ": " + v.message for v in res.violations]
    assert any(v.rule == "compat.newer_revision" and "request.reasoning_tokens" in v.message for v in res.violations)


def test_arrow_future_trace_converts_like_today(tmp_path: Path) -> None:
    from unirl_replay.contract import workload_columns as wc
    from unirl_replay.replay import runner

    d = tmp_path / "t"
    _write_future_arrow_trace(d)
    b = tmp_path / "b"
    with trace_io.TraceWriter(b, encoding="binpb") as w:
        src = trace_io.open_trace(BUNDLED)
        for _, rec in src.iter_workload():
            w.write_workload(rec)
        for _, o in iter_outcomes(src):
            w.write_outcome(o)
        w.finalize(src.manifest)

    def rows(trace: Path, out: Path) -> list[bytes]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ForwardCompatWarning)
            sha = trace_io.open_trace(trace).artifact(manifest_pb2.ARTIFACT_KIND_WORKLOAD).sha256
            files = runner.convert_trace(trace, out, unmodelled=("engine_client.inflight_limit",))
        return [p.read_bytes().replace(sha.encode(), b"<digest>") for p in files]

    assert rows(d, tmp_path / "a.jsonl") == rows(b, tmp_path / "b.jsonl")
    # the columns path itself (convert takes it for a trace that does not claim a newer revision)
    e = tmp_path / "e"
    _write_future_arrow_trace(e, revision=CONTRACT_REVISION)
    t = trace_io.open_trace(e)
    assert not t.compat.newer
    cols, ref = wc.read_columns(t), wc.read_columns(trace_io.open_trace(b))
    assert cols is not None and ref is not None
    assert cols.requests == ref.requests and cols.keys.tolist() == ref.keys.tolist()
    assert cols.offsets.tolist() == ref.offsets.tolist() and cols.row == ref.row
    assert rows(e, tmp_path / "e.jsonl") == rows(b, tmp_path / "b2.jsonl")
    # validate flags unknown fields from a writer that does not claim the newer revision
    res = check_trace(e)
    assert res.status == TraceCheck.STATUS_INVALID
    assert any(v.rule == "binpb.unknown_fields" and "request.reasoning_tokens" in v.message for v in res.violations)


def _retype(schema, path: tuple[str, ...], new_type):
    """``schema`` with the field at ``path`` (struct children by name) of another type, its
    metadata (field number) kept."""
    import pyarrow as pa

    def sub(field, rest):
        if not rest:
            return field.with_type(new_type)
        t = field.type
        kids = [sub(t.field(i), rest[1:]) if t.field(i).name == rest[0] else t.field(i) for i in range(t.num_fields)]
        return field.with_type(pa.struct(kids))

    i = schema.get_field_index(path[0])
    return schema.set(i, sub(schema.field(i), path[1:]))


@pytest.mark.parametrize("case", ["nested_type", "top_type", "renamed", "no_number", "other_message"])
def test_arrow_changed_known_field_is_refused(tmp_path: Path, case: str) -> None:
    import pyarrow as pa

    def mutate(s):
        if case == "nested_type":  # a known field, number kept, another type
            return _retype(s, ("request", "input_tokens"), pa.uint64())
        if case == "top_type":
            return _retype(s, ("group",), pa.struct([]))
        if case == "renamed":  # the number of request_id under another name
            req = s.field("request")
            return s.set(s.get_field_index("request"), req.with_type(pa.struct(
                [f.with_name("rid") if f.name == "request_id" else f for f in req.type])))
        if case == "no_number":
            return s.set(s.get_field_index("note"), pa.field("note", pa.string()))
        return s.with_metadata({**s.metadata, b"unirl_replay.message": b"unirl_replay.v1.OutcomeRecord"})

    d = tmp_path / "t"
    try:
        _write_future_arrow_trace(d, mutate=mutate)
    except pa.ArrowException:
        pytest.fail("the mutated table could not be written")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForwardCompatWarning)
        with pytest.raises(TraceFormatError) as e:
            for _ in trace_io.open_trace(d).iter_workload():
                pass
        assert e.value.rule == "arrow.schema", str(e.value)
        from unirl_replay.replay import runner

        with pytest.raises(TraceFormatError) as e2:
            runner.convert_trace(d, tmp_path / "up.jsonl", unmodelled=("engine_client.inflight_limit",))
        assert e2.value.rule == "arrow.schema"


def _unpacked_request_with_an_unknown_field(d: Path) -> None:
    """Rewrite the first request frame of the binpb trace ``d``: its one-element ``output_tokens`` and
    ``finish_reasons`` encoded unpacked (a byte shorter each, still valid protobuf) and an unknown
    field #3 (2 bytes) in its PrefixBlocks, so the record re-encoded without it has the frame's size."""
    from google.protobuf.internal.decoder import _DecodeVarint
    from google.protobuf.internal.encoder import _VarintBytes


    p = d / "workload.binpb"
    b, pos, frames = p.read_bytes(), 0, []
    while pos < len(b):
        n, pos = _DecodeVarint(b, pos)
        frames.append(b[pos:pos + n])
        pos += n
    i = next(k for k, f in enumerate(frames) if workload_pb2.WorkloadRecord.FromString(f).HasField("request"))
    r = workload_pb2.WorkloadRecord.FromString(frames[i]).request
    assert len(r.output_tokens) == len(r.finish_reasons) == 1
    out, fin, pre = r.output_tokens[0], r.finish_reasons[0], r.prefix.SerializeToString()
    del r.output_tokens[:], r.finish_reasons[:]
    r.ClearField("prefix")
    body = (r.SerializeToString() + b"\x6a" + _VarintBytes(len(pre) + 2) + pre + b"\x18\x00"
            + b"\x60" + _VarintBytes(out) + b"\x80\x01" + _VarintBytes(fin))
    frames[i] = b"\x0a" + _VarintBytes(len(body)) + body
    bare = workload_pb2.WorkloadRecord.FromString(frames[i])
    bare.DiscardUnknownFields()
    assert bare.ByteSize() == len(frames[i])  # the attack: the size alone cannot tell
    p.write_bytes(b"".join(_VarintBytes(len(f)) + f for f in frames))
    m = trace_io.read_message_json(d / "manifest.json", manifest_pb2.TraceManifest)
    art = next(a for a in m.artifacts if a.path == "workload.binpb")
    art.sha256, art.size_bytes = trace_io.sha256_file(p)
    trace_io.write_message_json(d / "manifest.json", m)


def test_binpb_unknown_field_hidden_by_an_unpacked_list_is_flagged(tmp_path: Path) -> None:
    """An unknown field is found even when the record, re-encoded without it, has the frame's size
    (attack-s7: the size test of compat.unknown_binpb_fields and of the gate's column reader)."""
    from tracebuild import agentic_trace

    from unirl_replay.cli.main import main as cli_main
    from unirl_replay.contract import gate as gate_mod

    d = agentic_trace().write(tmp_path / "t", "binpb")
    _unpacked_request_with_an_unknown_field(d)
    res = check_trace(d, outcomes=False)
    assert res.status == TraceCheck.STATUS_INVALID
    assert [v.rule for v in res.violations if v.severity != WARNING] == ["binpb.unknown_fields"]
    assert "request.prefix.#3" in res.violations[0].message
    assert not gate_mod._fast(d)[0]  # the gate's fast pass is not sure either
    assert cli_main(["convert", str(d), "--out", str(tmp_path / "o" / "in.jsonl")]) == 2
