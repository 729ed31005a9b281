"""Exact analytic timelines from the REAL upstream replay (ai-dynamo 1.6.1), fixed timing model.

Fixed model: every forward pass that prefills costs P = 100 ms (+ D if it also decodes), every
decode-only pass D = 10 ms; the prefill pass emits the first token. So a request alone on the
engine, arriving at a with o output tokens, has first token a + 100 and completion
a + 100 + (o - 1) * 10.
"""

from __future__ import annotations

import pytest
from replay_build import (
    FIXED, batch, c, client, dep, engine, group, index, manifest, ms, pool, req, traj, w, warmup, chained,
)

from unirl_replay.contract import json_profile
from unirl_replay.contract.errors import UnsupportedWorkloadError
from unirl_replay.replay.runner import replay_workload

pytest.importorskip("dynamo.replay")


def rows(res):
    return {r.request_id: r for r in res.requests}


def timeline(res, rid):
    r = rows(res)[rid]
    return ms(r.arrival_ns), ms(r.first_token_ns), ms(r.completion_ns)


def test_later_turn_waits_simulated_completion_plus_measured_delay():
    # pitfall 1: the wait starts at the predecessor's SIMULATED end, not the observed arrival
    ix = index(req("r0", out=(3,), traj="t", turn=0),
               req("r1", out=(2,), traj="t", turn=1, deps=[dep("r0", 181.43)]),
               traj("t", ["r0", "r1"]))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "r0") == (0.0, 100.0, 120.0)
    assert timeline(res, "r1") == pytest.approx((301.43, 401.43, 411.43))
    assert ms(res.makespan_ns) == pytest.approx(411.43)
    assert [(t.trajectory_id, ms(t.start_ns), ms(t.end_ns)) for t in res.trajectories] == \
        [("t", 0.0, pytest.approx(411.43))]


def test_zero_delay_and_none_by_construction_replay_as_no_wait():
    ix = index(req("a0", out=(3,), traj="a", turn=0), req("a1", traj="a", turn=1, deps=[dep("a0", 0)]),
               req("b0", out=(3,), traj="b", turn=0, at_ms=1000, prefix_key="b0"),
               req("b1", traj="b", turn=1,
                   deps=[dep("b0", absence=c.DELAY_ABSENCE_NONE_BY_CONSTRUCTION)]),
               traj("a", ["a0", "a1"]), traj("b", ["b0", "b1"]))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "a1") == (120.0, 220.0, 230.0)
    assert timeline(res, "b1") == (1120.0, 1220.0, 1230.0)
    assert any("NONE_BY_CONSTRUCTION" in n for n in res.notes)


def test_missing_measured_delay_is_rejected_not_zero():
    ix = index(req("a0", traj="a", turn=0),
               req("a1", traj="a", turn=1, deps=[dep("a0", absence=c.DELAY_ABSENCE_NOT_MEASURED)]),
               traj("a", ["a0", "a1"]))
    with pytest.raises(UnsupportedWorkloadError) as e:
        replay_workload(ix, manifest(), FIXED)
    assert str(e.value) == ("unsupported [dependency.delay_not_measured]: the external wait before 'a1' "
                            "(after 'a0') happened but was not measured; a missing wait is never replayed "
                            "as 0 ms (records: a1)")


def test_dispatch_trigger_overlapping_subwork():
    # pitfall 2: a sub-request started 2 s after its parent was SENT
    ix = index(req("p", out=(3,), traj="t", turn=0),
               req("child", traj="t", turn=1,
                   deps=[dep("p", 2000, trigger=c.DEPENDENCY_TRIGGER_DISPATCH, relation=c.DEPENDENCY_RELATION_SPAWN)]),
               traj("t", ["p", "child"]))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "p") == (0.0, 100.0, 120.0)
    assert timeline(res, "child") == (2000.0, 2100.0, 2110.0)
    assert ms(res.trajectories[0].end_ns) == 2110.0  # the background child holds its trajectory


def test_slot_held_through_tool_wait_and_granted_in_start_order():
    # one slot; trajectory A (start_order 0) holds it through its 50 ms tool wait, so B (written
    # FIRST in the workload, but start_order 1) starts only when A has finished.
    ix = index(req("b0", traj="B", turn=0, prefix_key="b0"),
               req("a0", traj="A", turn=0), req("a1", traj="A", turn=1, deps=[dep("a0", 50)]),
               traj("B", ["b0"], pool="pool", order=1), traj("A", ["a0", "a1"], pool="pool", order=0),
               pool("pool", 1))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "a0") == (0.0, 100.0, 110.0)
    assert timeline(res, "a1") == (160.0, 260.0, 270.0)
    assert timeline(res, "b0") == (270.0, 370.0, 380.0)
    assert any("agentic_lanes=1" in n for n in res.notes)


def test_slots_granted_in_start_order_whatever_the_trajectory_ids_string_order():
    # upstream 1.6.1 grants lanes in play-id STRING order, not file order: trajectory "Z" (start_order 0) must
    # still get the one slot before "A" (start_order 1); the writers prefix play ids with the start ordinal
    ix = index(req("a0", traj="A", turn=0), req("z0", traj="Z", turn=0),
               traj("A", ["a0"], pool="pool", order=1), traj("Z", ["z0"], pool="pool", order=0), pool("pool", 1))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "z0") == (0.0, 100.0, 110.0)
    assert timeline(res, "a0") == (110.0, 210.0, 220.0)
    assert {t.trajectory_id: ms(t.end_ns) for t in res.trajectories} == {"Z": 110.0, "A": 220.0}


def test_two_slots_run_trajectories_concurrently():
    ix = index(req("a0", traj="A", turn=0), req("b0", traj="B", turn=0),
               traj("A", ["a0"], pool="pool", order=0), traj("B", ["b0"], pool="pool", order=1),
               pool("pool", 2))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "a0") == timeline(res, "b0") == (0.0, 100.0, 110.0)


def test_grpo_fanout_n_sequences_share_the_prompt():
    # one request with n = 3 (outputs 2, 3, 1): three sequences prefilled in one pass (same hash
    # ids: siblings reuse the full blocks), first token min, completion max.
    ix = index(req("g", inp=10, out=(2, 3, 1), group="G"), group("G", ["g"], 3))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "g") == (0.0, 100.0, 120.0)
    assert rows(res)["g"].cached_tokens == 0  # min over samples: the first sequence computed it
    assert ms(res.groups[0].completed_ns) == 120.0
    assert [r.request_id for r in res.requests] == ["g"]


def test_batch_readiness_differs_from_group_completion():
    # three groups (batch GRPO, n = 2 each) with staggered observed arrivals; the batch taken by
    # collect(2) is ready at the 2nd group completion, the synchronous one at the last.
    ix = index(req("q1", out=(2, 2), at_ms=0, group="g1"), req("q2", out=(3, 2), at_ms=1000, group="g2"),
               req("q3", out=(5, 1), at_ms=2000, group="g3"),
               group("g1", ["q1"], 2), group("g2", ["q2"], 2), group("g3", ["q3"], 2),
               batch("first2", ["g1", "g2", "g3"], w.BATCH_READINESS_RULE_FIRST_N_GROUPS, 2),
               batch("all", ["g1", "g2", "g3"], w.BATCH_READINESS_RULE_ALL_GROUPS))
    res = replay_workload(ix, manifest(), FIXED)
    assert {g.group_id: ms(g.completed_ns) for g in res.groups} == {"g1": 110.0, "g2": 1120.0, "g3": 2140.0}
    assert {b.rollout_batch_id: ms(b.ready_ns) for b in res.rollout_batches} == {"first2": 1120.0, "all": 2140.0}


def test_every_request_id_exactly_once_in_workload_order():
    msgs = []
    for t in range(5):
        msgs += [req(f"t{t}r0", traj=f"t{t}", turn=0, at_ms=7 * t, out=(1 + t,)),
                 req(f"t{t}r1", traj=f"t{t}", turn=1, deps=[dep(f"t{t}r0", t)]),
                 traj(f"t{t}", [f"t{t}r0", f"t{t}r1"])]
    msgs += [req(f"open{i}", out=(2, 1), at_ms=3 * i) for i in range(4)]
    ix = index(*msgs)
    res = replay_workload(ix, manifest(), FIXED)
    assert [r.request_id for r in res.requests] == [r.request_id for r in ix.requests]
    assert all(r.HasField("completion_ns") for r in res.requests)


def test_same_trace_twice_gives_identical_results():
    msgs = [req("s", inp=33, out=(4, 7), at_ms=0), req("x", inp=17, out=(9,), at_ms=3, prefix_key="s"),
            req("y0", traj="y", turn=0, at_ms=1), req("y1", traj="y", turn=1, deps=[dep("y0", 5)]),
            traj("y", ["y0", "y1"])]
    a, b = (replay_workload(index(*msgs), manifest(), FIXED) for _ in range(2))
    a.ClearField("simulator_wall_ns")
    b.ClearField("simulator_wall_ns")
    assert json_profile.to_json(a) == json_profile.to_json(b)


def test_warm_cache_is_realised_and_removed_from_results():
    pre = chained(8, 4, "sys")  # 2 full blocks resident at the window start
    hashes = pre + chained(12, 4, "user")[2:]
    msgs = [req("r", inp=12, out=(2,), hashes=hashes)]
    cold = replay_workload(index(*msgs), manifest(), FIXED)
    warm = replay_workload(index(*msgs, warmup("w", 8, pre)), manifest(cache=c.CACHE_STATE_KIND_WARM_DECLARED), FIXED)
    assert rows(cold)["r"].cached_tokens == 0
    assert rows(warm)["r"].cached_tokens == 8
    assert timeline(warm, "r") == timeline(cold, "r") == (0.0, 100.0, 110.0)
    assert ms(warm.makespan_ns) == 110.0  # warm-up time is not in the makespan
    assert [r.request_id for r in warm.requests] == ["r"]
    assert any("WARM_DECLARED" in n for n in warm.notes)


def test_engines_replayed_independently_without_barrier():
    # e1's request would queue behind e0's if they shared an engine; here each engine is alone.
    ix = index(req("x", out=(3,), eng="e0"), req("y", out=(2,), eng="e1", at_ms=50),
               group("G", ["x", "y"], 2), batch("B", ["G"]))
    res = replay_workload(ix, manifest(engine("e0"), engine("e1")), FIXED)
    assert timeline(res, "x") == (0.0, 100.0, 120.0)
    assert timeline(res, "y") == (50.0, 150.0, 160.0)
    assert ms(res.groups[0].completed_ns) == 160.0
    assert [e.engine_id for e in res.engines] == ["e0", "e1"]


def test_inflight_limit_that_never_binds_is_accepted():
    ix = index(req("a0", traj="A", turn=0), req("a1", traj="A", turn=1, deps=[dep("a0", 5)]),
               req("b0", traj="B", turn=0), traj("A", ["a0", "a1"], pool="p", order=0),
               traj("B", ["b0"], pool="p", order=1), pool("p", 1), client("e0", 1))
    res = replay_workload(ix, manifest(), FIXED)
    assert timeline(res, "b0") == (225.0, 325.0, 335.0)  # a: 0-110, wait 5, 115-225
    assert any("never binds" in n for n in res.notes)


def test_mooncake_open_loop_per_request_and_aggregate_only():
    ix = index(req("a", out=(3,), at_ms=1000), req("b", out=(2, 4), at_ms=1500, prefix_key="b"))
    res = replay_workload(ix, manifest(), FIXED, trace_format="mooncake")
    assert res.granularity == 1  # PER_REQUEST
    assert timeline(res, "a") == (0.0, 100.0, 120.0)
    assert timeline(res, "b") == (500.0, 600.0, 630.0)
    # two different requests with the same arrival and lengths: rows cannot be told apart
    amb = index(req("a", at_ms=0), req("b", at_ms=0, prefix_key="b"))
    res2 = replay_workload(amb, manifest(), FIXED, trace_format="mooncake")
    assert res2.granularity == 2  # AGGREGATE_ONLY
    assert not res2.requests and not res2.groups and res2.aggregate["completed_requests"] == 2.0
