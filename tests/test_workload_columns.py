"""The column reader (contract.workload_columns) against the message reader, and the replay
adapter's column path against its message path.

* read_columns on random workloads equals the columns read from the messages;
* hostile binpb frames (unpacked hashes, a packed run given twice, a truncated or overlong varint,
  a field given twice, duplicate ids, an empty record, bad UTF-8, unknown fields, truncation,
  a wrong record count): the reader declines or agrees, and convert gives the same file or the
  same typed error either way;
* convert_trace and replay_trace give byte-identical files / equal results on both paths, with
  the rule-breaking workloads raising the same typed errors.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_build import FIXED, c, dep, engine, manifest, pool, record, req, traj
from test_convert_fast_write import random_workload

from unirl_replay.contract import trace_io
from unirl_replay.contract import workload_columns as wc
from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.contract.trace_io import TraceWriter, encode_varint, open_trace, read_message_json, sha256_file
from unirl_replay.contract.trace_io import write_message_json
from unirl_replay.replay import runner
from unirl_replay.v1 import manifest_pb2, workload_pb2

U64 = st.integers(0, 2**64 - 1)


# -- traces ------------------------------------------------------------------------------------

def write(tmp: Path, msgs, mf, enc: str) -> Path:
    d = tmp / f"trace-{enc}"
    with TraceWriter(d, enc) as w:
        for m in msgs:
            w.write_workload(m if isinstance(m, workload_pb2.WorkloadRecord) else record(m))
        w.finalize(mf)
    return d


def rewrite_workload(d: Path, frames: list[bytes]) -> None:
    """Replace a binpb trace's workload with raw frames and re-seal the manifest."""
    p = d / "workload.binpb"
    p.write_bytes(b"".join(encode_varint(len(f)) + f for f in frames))
    mp = d / trace_io.MANIFEST_FILE
    mf = read_message_json(mp, manifest_pb2.TraceManifest)
    for a in mf.artifacts:
        if a.kind == manifest_pb2.ARTIFACT_KIND_WORKLOAD:
            a.sha256, a.size_bytes = sha256_file(p)
            a.record_count = len(frames)
    mp.unlink()
    write_message_json(mp, mf)


def columns_from_messages(trace) -> dict:
    """What the columns must hold, read independently from the parsed messages."""
    out = {k: [] for k in ("request_ids", "num_samples", "trajectory_ids", "turn_indices", "engine_ids",
                           "policy_versions", "input_tokens", "output_tokens", "arrival_kinds", "observed_ns",
                           "dependencies", "block_sizes")}
    hashes, counts, other = [], [], []
    for _, rec in trace.iter_workload():
        if rec.WhichOneof("record") != "request":
            other.append(rec.SerializeToString(deterministic=True))
            continue
        r = rec.request
        out["request_ids"].append(r.request_id)
        out["num_samples"].append(r.num_samples)
        out["trajectory_ids"].append(r.trajectory_id)
        out["turn_indices"].append(r.turn_index if r.HasField("turn_index") else None)
        out["engine_ids"].append(r.engine_id)
        out["policy_versions"].append(r.policy_version if r.HasField("policy_version") else None)
        out["input_tokens"].append(r.input_tokens)
        out["output_tokens"].append(tuple(r.output_tokens))
        kind = r.arrival.WhichOneof("kind")
        out["arrival_kinds"].append({None: 0, "observed_offset_ns": 1, "after_dependencies": 2}[kind])
        out["observed_ns"].append(r.arrival.observed_offset_ns if kind == "observed_offset_ns" else None)
        out["dependencies"].append(tuple(
            (d.predecessor_request_id, d.trigger, d.relation,
             d.external_delay_ns if d.HasField("external_delay_ns") else None, d.delay_absence)
            for d in r.dependencies))
        out["block_sizes"].append(r.prefix.block_size_tokens)
        hashes.extend(r.prefix.block_hashes)
        counts.append(len(r.prefix.block_hashes))
    out["keys"] = hashes
    out["offsets"] = [0, *np.cumsum(counts).tolist()]
    out["other"] = sorted(other)
    return out


def as_dict(cols: wc.WorkloadColumns) -> dict:
    d = {k: getattr(cols, k) for k in ("request_ids", "num_samples", "trajectory_ids", "turn_indices", "engine_ids",
                                       "policy_versions", "input_tokens", "output_tokens", "arrival_kinds",
                                       "observed_ns", "dependencies", "block_sizes")}
    d["keys"] = cols.keys.tolist()
    d["offsets"] = cols.offsets.tolist()
    recs = []
    for kind, attr in (("trajectory", "trajectories"), ("group", "groups"), ("rollout_batch", "batches"),
                       ("slot_pool", "slot_pools"), ("engine_client", "engine_clients")):
        for m in getattr(cols, attr).values():
            recs.append(record(m).SerializeToString(deterministic=True))
    recs += [record(w).SerializeToString(deterministic=True) for w in cols.warmups]
    d["other"] = sorted(recs)
    return d


def workload_msgs(seed: int):
    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2,
                             warm=seed % 4 == 0 and seed % 3 != 2)
    rnd = random.Random(seed)
    msgs = [*ix.requests, *ix.trajectories.values(), *ix.slot_pools.values(), *ix.warmups]
    for r in ix.requests:  # edge values: policy versions, no prefix at all
        if rnd.random() < 0.2:
            r.policy_version = 7
        if rnd.random() < 0.1:
            r.ClearField("prefix")
    rnd.shuffle(msgs)
    return msgs, mf


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
@pytest.mark.parametrize("seed", range(10))
def test_columns_equal_messages(tmp_path, monkeypatch, seed, chunk):
    monkeypatch.setattr(wc, "_KEY_CHUNK", chunk)  # every buffer boundary of the hash copy crossed
    msgs, mf = workload_msgs(seed)
    t = open_trace(write(tmp_path, msgs, mf, "binpb"))
    cols = wc.read_columns(t)
    assert cols is not None
    assert as_dict(cols) == columns_from_messages(t)
    assert cols.row == {rid: i for i, rid in enumerate(cols.request_ids)}


def outcome(fn):
    try:
        return ("ok", fn())
    except UnirlReplayError as e:
        return (type(e).__name__, getattr(e, "rule", None), str(e))


def convert_both(tmp: Path, trace: Path, monkeypatch, fmt="agentic_mooncake", **kw):
    """(column path, message path): output files' bytes, or the typed error."""
    res = []
    for mode in ("columns", "messages"):
        out = tmp / mode
        out.mkdir(exist_ok=True)
        with monkeypatch.context() as m:
            if mode == "messages":
                m.setattr(runner, "read_columns", lambda t: None)
            got = outcome(lambda: [p.read_bytes() for p in runner.convert_trace(trace, out / "up.jsonl",
                                                                               trace_format=fmt, **kw)])
        res.append(got)
    return res


@pytest.mark.parametrize("enc", ["binpb", "jsonl"])
@pytest.mark.parametrize("seed", range(10))
def test_convert_identical_on_both_paths(tmp_path, monkeypatch, seed, enc):
    msgs, mf = workload_msgs(seed)
    for r in msgs:
        if isinstance(r, workload_pb2.Request) and not r.HasField("prefix"):
            mf.engines[0].enable_prefix_caching = False  # prompts without hashes: fresh ids
            if len(mf.engines) > 1:
                mf.engines[1].enable_prefix_caching = False
    trace = write(tmp_path, msgs, mf, enc)
    fast, slow = convert_both(tmp_path, trace, monkeypatch)
    assert fast == slow
    calls = []
    real = wc.read_columns
    monkeypatch.setattr(runner, "read_columns", lambda t: calls.append(real(t)) or calls[-1])
    convert_both(tmp_path, trace, monkeypatch)
    assert calls and calls[0] is not None  # both encodings take the column path (jsonl: contract/jsonl_columns.py)


def test_identity_order_uses_the_keys_in_place(tmp_path, monkeypatch):
    msgs = [req("a", inp=8, at_ms=0, hashes=[5, 6]), req("b", inp=8, at_ms=1, hashes=[5, 7]),
            req("c", inp=4, at_ms=2, hashes=[2**64 - 1])]
    trace = write(tmp_path, msgs, manifest(), "binpb")
    fast, slow = convert_both(tmp_path, trace, monkeypatch)
    assert fast == slow and fast[0] == "ok"
    assert [line.split(b'"hash_ids":[')[1].split(b"]")[0] for line in fast[1][0].splitlines()[1:]] == \
        [b"0,1", b"0,2", b"3"]


# -- hostile frames ------------------------------------------------------------------------------

def _tag(field: int, wire: int) -> bytes:
    return encode_varint(field << 3 | wire)


def _len(field: int, payload: bytes) -> bytes:
    return _tag(field, 2) + encode_varint(len(payload)) + payload


def request_frame(rid: bytes = b"r", prefix: bytes | None = None, extra: bytes = b"", inp: int = 8) -> bytes:
    base = req(rid.decode("utf-8", "replace") if rid.isascii() else "x", inp=inp, at_ms=0, hashes=[11, 12])
    base.request_id = ""
    base.ClearField("prefix")
    body = _len(1, rid) + base.SerializeToString() + extra
    if prefix is not None:
        body += _len(13, prefix)
    return _len(1, body)


def packed(*vals: int) -> bytes:
    return b"".join(encode_varint(v) for v in vals)


BS = _tag(1, 0) + encode_varint(4)
HOSTILE = {
    "valid": [request_frame(b"a", BS + _len(2, packed(11, 12)))],
    "unpacked hashes": [request_frame(b"a", BS + _tag(2, 0) + encode_varint(11) + _tag(2, 0) + encode_varint(12))],
    "packed run twice": [request_frame(b"a", BS + _len(2, packed(11, 12)) + _len(2, packed(13, 14)))],
    "packed run split": [request_frame(b"a", BS + _len(2, packed(11)) + _len(2, packed(12)))],
    "truncated varint in run": [request_frame(b"a", BS + _len(2, packed(11) + b"\x80"))],
    "overlong varint": [request_frame(b"a", BS + _len(2, packed(11) + b"\xff" * 10 + b"\x01"))],
    "10-byte varint beyond 64 bits": [request_frame(b"a", BS + _len(2, packed(11) + b"\xff" * 9 + b"\x03"))],
    "non-minimal varint": [request_frame(b"a", BS + _len(2, packed(11) + b"\x8c\x00"))],
    "request id twice": [request_frame(b"a", BS + _len(2, packed(11, 12)), extra=_len(1, b"b"))],
    "unknown field in prefix": [request_frame(b"a", BS + _len(2, packed(11, 12)) + _tag(9, 0) + b"\x01")],
    "unknown field in request": [request_frame(b"a", BS + _len(2, packed(11, 12)), extra=_tag(99, 0) + b"\x01")],
    "bad utf-8 id": [request_frame(b"\xff\xfe", BS + _len(2, packed(11, 12)))],
    "duplicate request id": [request_frame(b"a", BS + _len(2, packed(11, 12))),
                             request_frame(b"a", BS + _len(2, packed(11, 12)))],
    "empty record": [b"", request_frame(b"a", BS + _len(2, packed(11, 12)))],
    "garbage frame": [b"\x0a\xff\xff", request_frame(b"a", BS + _len(2, packed(11, 12)))],
    "wrong hash count": [request_frame(b"a", BS + _len(2, packed(11, 12, 13)))],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_frames_same_outcome(tmp_path, monkeypatch, name):
    trace = write(tmp_path, [req("seed", at_ms=0)], manifest(), "binpb")
    rewrite_workload(trace, HOSTILE[name])
    t = open_trace(trace)
    cols = wc.read_columns(t)
    if cols is not None:  # taken: it must hold exactly what the messages say
        assert as_dict(cols) == columns_from_messages(t)
    if name in ("truncated varint in run", "overlong varint", "duplicate request id", "empty record",
                "garbage frame", "bad utf-8 id"):
        assert cols is None  # the message path raises (or, for duplicates, words) the error
    fast, slow = convert_both(tmp_path, trace, monkeypatch)
    assert fast == slow


def test_truncated_and_miscounted_workloads_decline(tmp_path, monkeypatch):
    trace = write(tmp_path, [req("a", at_ms=0), req("b", at_ms=1)], manifest(), "binpb")
    p = trace / "workload.binpb"
    data = p.read_bytes()
    frames = list(trace_io.iter_frames(open(p, "rb")))
    rewrite_workload(trace, [f for _, f in frames])
    mp = trace / trace_io.MANIFEST_FILE
    mf = read_message_json(mp, manifest_pb2.TraceManifest)
    mf.artifacts[0].record_count = 3 if mf.artifacts[0].kind == manifest_pb2.ARTIFACT_KIND_WORKLOAD else 0
    for a in mf.artifacts:
        if a.kind == manifest_pb2.ARTIFACT_KIND_WORKLOAD:
            a.record_count = 3
    mp.unlink()
    write_message_json(mp, mf)
    assert wc.read_columns(open_trace(trace)) is None
    fast, slow = convert_both(tmp_path, trace, monkeypatch)
    assert fast == slow and fast[1] == "artifact.record_count"
    p.write_bytes(data[:-3])
    rewrite_workload(trace, [])
    p.write_bytes(data[:-3])
    mf = read_message_json(mp, manifest_pb2.TraceManifest)
    for a in mf.artifacts:
        if a.kind == manifest_pb2.ARTIFACT_KIND_WORKLOAD:
            a.sha256, a.size_bytes = sha256_file(p)
            a.record_count = 2
    mp.unlink()
    write_message_json(mp, mf)
    assert wc.read_columns(open_trace(trace)) is None
    fast, slow = convert_both(tmp_path, trace, monkeypatch)
    assert fast == slow and fast[1] == "binpb.truncated"


RULE_BREAKERS = {
    "unknown engine": [req("a", at_ms=0, eng="nope")],
    "hash count": [req("a", inp=8, at_ms=0, hashes=[1])],
    "block size": [req("a", inp=8, at_ms=0, bs=8, hashes=[1])],
    "no arrival": [workload_pb2.Request(request_id="a", num_samples=1, input_tokens=4, output_tokens=[1],
                                        engine_id="e0")],
    "unknown predecessor": [req("a", traj="t", turn=0, deps=[dep("zz", 1.0)])],
    "cross trajectory": [req("a", at_ms=0, traj="t", turn=0), req("b", traj="u", turn=0, deps=[dep("a", 1.0)])],
    "delay not measured": [req("a", at_ms=0, traj="t", turn=0),
                           req("b", traj="t", turn=1, deps=[dep("a", absence=c.DELAY_ABSENCE_NOT_MEASURED)])],
    "mixed policy": [req("a", at_ms=0, policy=1), req("b", at_ms=1, policy=2)],
    "partial resume": [req("a", at_ms=0, traj="t", turn=1)],
    "slot pool partial": [req("a", at_ms=0, traj="t", turn=0), req("b", at_ms=0, traj="u", turn=0),
                          traj("t", ["a"], pool="p", order=0), traj("u", ["b"]), pool("p", 2)],
    "trajectory outside window": [req("a", at_ms=0, traj="t", turn=0), traj("t", ["a", "zz"])],
    "duplicate trajectory": [req("a", at_ms=0, traj="t", turn=0), traj("t", ["a"]), traj("t", ["a"])],
    "inflight limit": [req("a", at_ms=0), req("b", at_ms=0),
                       workload_pb2.EngineClient(engine_id="e0", inflight_request_limit=1)],
}


@pytest.mark.parametrize("name", sorted(RULE_BREAKERS))
@pytest.mark.parametrize("fmt", ["agentic_mooncake", "mooncake"])
def test_rule_breakers_same_error_on_both_paths(tmp_path, monkeypatch, name, fmt):
    trace = write(tmp_path, RULE_BREAKERS[name], manifest(), "binpb")
    fast, slow = convert_both(tmp_path, trace, monkeypatch, fmt=fmt)
    assert fast == slow
    if name != "inflight limit" or fmt == "agentic_mooncake":
        assert fast[0] != "ok" or name == "inflight limit"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 40), st.lists(st.integers(1, 9), min_size=1, max_size=3),
                          st.lists(st.sampled_from([0, 1, 2**63, 2**64 - 1, 12345]), max_size=10),
                          st.booleans()), min_size=1, max_size=12),
       st.sampled_from(["binpb", "jsonl"]), st.booleans())
def test_random_requests_convert_identically(tmp_path_factory, monkeypatch, spec, enc, caching):
    tmp = tmp_path_factory.mktemp("rnd")
    msgs = []
    for i, (inp, outs, pool_hashes, keep) in enumerate(spec):
        n = -(-inp // 4)
        hs = [pool_hashes[k % len(pool_hashes)] if pool_hashes else k + 100 * i for k in range(n)]
        r = req(f"r{i}", inp=inp, out=tuple(outs), at_ms=float(i % 3), hashes=hs)
        if not keep:
            r.ClearField("prefix")
        msgs.append(r)
    trace = write(tmp, msgs, manifest(engine(pc=caching)), enc)
    fast, slow = convert_both(tmp, trace, monkeypatch)
    assert fast == slow


def test_replay_equal_on_both_paths(tmp_path, monkeypatch):
    """The whole replay (real upstream) gives the same result from columns as from messages."""
    msgs, mf = workload_msgs(5)  # two engines, fan-out, dependencies, non-identity order
    trace = write(tmp_path, msgs, mf, "binpb")
    out = []
    for mode in ("columns", "messages"):
        with monkeypatch.context() as m:
            if mode == "messages":
                m.setattr(runner, "read_columns", lambda t: None)
            out.append(runner.replay_trace(trace, FIXED))
    a, b = out
    assert a.simulator_wall_ns and b.simulator_wall_ns  # measured wall time: the only field that may differ
    a.ClearField("simulator_wall_ns")
    b.ClearField("simulator_wall_ns")
    assert a.requests and a.groups is not None and a == b


@pytest.mark.parametrize("seed", range(12))
def test_chain_width_from_facts_equals_messages(seed):
    from unirl_replay.replay.support import _chain_width, chain_width_facts, check_supported

    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=False)
    for r in ix.requests[::3]:  # strict chains and not: fan-out, several roots, dispatch triggers
        if r.dependencies and seed % 2:
            r.dependencies[0].trigger = c.DEPENDENCY_TRIGGER_DISPATCH
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines})
    widths = []
    for plan in plans.values():
        assert plan.facts is not None
        for ids in plan.plays.values():
            want = _chain_width([ix.by_id[q] for q in ids])
            assert chain_width_facts(ids, plan.facts) == want
            widths.append(want)
    assert widths
    # the width counts model requests (the unit of inflight_request_limit), not samples: a strict chain
    # is 1 whatever its turns' n, a fork its request count
    done = c.DEPENDENCY_TRIGGER_COMPLETION
    chain = {"a": (1, 4, (1,), 0, (), None), "b": (1, 4, (1,), None, (("a", 1, done, 0, 0),), None),
             "c": (2, 4, (1, 1), None, (("b", 1, done, 0, 0),), None)}
    assert chain_width_facts(["a", "b"], chain) == 1
    assert chain_width_facts(["a", "b", "c"], chain) == 1
    fork = {"a": (2, 4, (1, 1), 0, (), None), "b": (1, 4, (1,), None, (("a", 1, done, 0, 0),), None),
            "c": (1, 4, (1,), None, (("a", 1, done, 0, 0),), None)}
    assert chain_width_facts(["a", "b", "c"], fork) == 3
    assert chain_width_facts(["a"], fork) == 1


@pytest.mark.parametrize("limit", [1, 3, 100])
@pytest.mark.parametrize("allow", [(), ("engine_client.inflight_limit",), ("engine_client.inflight_limit.as_lanes",)])
def test_inflight_limit_same_on_both_paths(tmp_path, monkeypatch, limit, allow):
    msgs, mf = workload_msgs(2)  # lanes
    msgs.append(workload_pb2.EngineClient(engine_id="e0", inflight_request_limit=limit))
    trace = write(tmp_path, msgs, mf, "binpb")
    fast, slow = convert_both(tmp_path, trace, monkeypatch, unmodelled=allow)
    assert fast == slow


@pytest.mark.parametrize("name", ["agentic-a", "agentic-ray-a", "grpo-a"])
def test_bundled_traces_same_on_both_paths(tmp_path, monkeypatch, name):
    bundled = open_trace(Path(__file__).resolve().parents[1] / "traces" / name)
    # the same records as binpb (the column path reads binpb only)
    trace = write(tmp_path, [rec for _, rec in bundled.iter_workload()], bundled.manifest, "binpb")
    assert wc.read_columns(open_trace(trace)) is not None
    for allow in ((), ("engine_client.inflight_limit",), ("engine_client.inflight_limit.as_lanes",)):
        fast, slow = convert_both(tmp_path, trace, monkeypatch, unmodelled=allow)
        assert fast == slow
