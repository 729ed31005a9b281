"""Pure conversion to upstream rows (no upstream call): ids, units, hashes, fan-out, order."""

from __future__ import annotations

import json

from replay_build import MS, c, dep, engine, index, manifest, pool, req, traj, warmup

from unirl_replay.replay.convert import agentic_mooncake, common, mooncake
from unirl_replay.replay.convert.common import HashRemap, engine_args
from unirl_replay.replay.support import check_supported

def plan_of(ix, mf=None, fmt="agentic_mooncake"):
    mf = mf or manifest()
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines}, cache_state=mf.cache_state or 1,
                               trace_format=fmt)
    return plans


def test_rows_echo_ids_delays_in_ms_and_fanout_rows():
    ix = index(req("r0", inp=10, out=(3,), traj="t", turn=0, at_ms=5),
               req("r1", inp=9, out=(2, 4), traj="t", turn=1, deps=[dep("r0", 181.43)]),
               req("r2", traj="t", turn=2, deps=[dep("r1", 0, relation=c.DEPENDENCY_RELATION_JOIN)]),
               traj("t", ["r0", "r1", "r2"]))
    conv = agentic_mooncake.convert_engine(plan_of(ix)["e0"], ix, digest="abc")
    assert conv.header == {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4,
                           "hash_id_scope": "local", "source": {"format": "unirl_replay.v1", "digest": "abc"}}
    by = {r["request_id"]: r for r in conv.rows}
    # upstream ids: "<ordinal in file order, 6 digits>|<request_id>[#s<sample>]"
    assert list(by) == ["000000|r0", "000001|r1#s0", "000001|r1#s1", "000002|r2"]
    r0, r1s0, r1s1, r2 = (by[k] for k in by)
    assert r0["not_before_ms"] == 0.0 and "dependencies" not in r0  # rebased to the first arrival
    assert r1s0["dependencies"] == [{"request_id": "000000|r0", "trigger": "completion", "delay_ms": 181.43,
                                     "relation": "sequence"}]
    assert r1s0["hash_ids"] == r1s1["hash_ids"] and r1s1["output_length"] == 4
    # a successor of a fan-out request waits for every sample (join on all n)
    assert [d["request_id"] for d in r2["dependencies"]] == ["000001|r1#s0", "000001|r1#s1"]
    assert all(d["delay_ms"] == 0.0 and d["relation"] == "join" for d in r2["dependencies"])
    assert conv.sequences == {"000000|r0": ("r0", 0), "000001|r1#s0": ("r1", 0), "000001|r1#s1": ("r1", 1),
                              "000002|r2": ("r2", 0)}
    # only the ids generated map back: a wrong ordinal, a missing prefix or a bare id do not
    for ghost in ("r0", "000001|r0", "00000|r0", "000000r0", "000001|r1", "000001|r1#s2", "000002|r2#s0"):
        assert ghost not in conv.sequences
    assert {r["play_id"] for r in conv.rows} == {"t"}


def test_upstream_ids_sort_in_trace_order():
    # upstream serves requests arriving at the same instant in request-id string order: the ordinal
    # prefix makes that the trace's order, whatever the ids are (here deliberately unsorted)
    tie = ["zz", "b", "m", "a", "q", "b#s1"]
    ix = index(*[req(r, at_ms=0) for r in tie])
    conv = agentic_mooncake.convert_engine(plan_of(ix)["e0"], ix)
    ids = [r["request_id"] for r in conv.rows]
    assert ids == sorted(ids) and [conv.sequences[i][0] for i in ids] == tie
    assert [r["play_id"] for r in conv.rows] == tie  # play / session ids do not decide; unprefixed


def test_ordinal_width_is_fixed_per_engine():
    assert common.ordinal_width(0) == common.ordinal_width(10**6) == 6 and common.ordinal_width(10**6 + 1) == 7
    assert common.sequence_id("x", 0, 1, 3, 6) == "000003|x" and common.sequence_id("x", 2, 4, 3, 7) == "0000003|x#s2"


def test_hash_remap_dense_shared_prefixes_and_counts():
    a = [2**64 - 1, 77, 2**63]
    ix = index(req("x", inp=12, hashes=a), req("y", inp=9, hashes=a[:2] + [5], at_ms=1))
    conv = agentic_mooncake.convert_engine(plan_of(ix)["e0"], ix)
    assert [r["hash_ids"] for r in conv.rows] == [[0, 1, 2], [0, 1, 3]]
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 4) for r in conv.rows)
    rm = HashRemap()
    assert rm.ids([9, 9, 8]) == [0, 0, 1] and rm.fresh(2) == [2, 3] and rm.ids([8]) == [1]


def test_lanes_and_start_order():
    ix = index(req("b0", traj="B", turn=0), req("a0", traj="A", turn=0),
               traj("B", ["b0"], pool="p", order=1), traj("A", ["a0"], pool="p", order=0), pool("p", 3))
    conv = agentic_mooncake.convert_engine(plan_of(ix)["e0"], ix)
    # lanes mode: the start ordinal first (upstream grants lanes in play-id string order, not file order)
    assert conv.lanes == 3 and [r["play_id"] for r in conv.rows] == ["000000|A", "000001|B"]


def test_warmups_first_and_lead():
    ix = index(req("r", at_ms=3), warmup("w", 8, [11, 12]))
    mf = manifest(cache=c.CACHE_STATE_KIND_WARM_DECLARED)
    plan = plan_of(ix, mf)["e0"]
    conv = agentic_mooncake.convert_engine(plan, ix, lead_ms=100.0)
    assert conv.rows[0] == {"request_id": "warmup:w", "play_id": "warmup:w", "session_id": "warmup:w",
                            "model": agentic_mooncake.MODEL, "input_length": 8, "output_length": 0,
                            "hash_ids": [0, 1], "not_before_ms": 0.0}
    assert conv.rows[1]["not_before_ms"] == 100.0 and conv.warmup_keys == ["warmup:w"]
    only = agentic_mooncake.convert_engine(plan, ix, include_real=False)
    assert [r["request_id"] for r in only.rows] == ["warmup:w"]


def test_mooncake_rows(tmp_path):
    ix = index(req("a", out=(3,), at_ms=1000), req("b", out=(2, 4), at_ms=1500.5))
    conv = mooncake.convert_engine(plan_of(ix, fmt="mooncake")["e0"], ix)
    assert conv.rows[0]["timestamp"] == 0.0 and conv.rows[1]["timestamp"] == 500.5
    assert [r["output_length"] for r in conv.rows] == [3, 2, 4]
    assert conv.sequences == [("a", 0), ("b", 0), ("b", 1)]
    p = conv.write(tmp_path / "m.jsonl")
    assert [json.loads(x) for x in p.read_text().splitlines()] == conv.rows


def test_engine_args_from_trace_settings():
    args, notes = engine_args(engine(bs=16, blocks=0), {"type": "polynomial"})
    assert args == {"engine": {"block_size": 16, "enable_prefix_caching": True, "enable_chunked_prefill": True,
                               "timing_model": {"type": "polynomial"}, "max_num_seqs": 16,
                               "max_num_batched_tokens": 1024, "max_model_len": 4096}}
    assert notes and "num_gpu_blocks" in notes[0]


# The predictor-isolation and only-the-adapter-imports-dynamo rules live in tests/test_import_rules.py.


def test_units_ns_to_ms():
    ix = index(req("a", at_ms=0), req("b", at_ms=0.000001))  # 1 ns later
    conv = agentic_mooncake.convert_engine(plan_of(ix)["e0"], ix)
    assert conv.rows[1]["not_before_ms"] == 1 / MS
