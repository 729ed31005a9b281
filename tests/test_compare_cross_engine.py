"""Groups and batches that span engines, replayed by the REAL upstream (ai-dynamo 1.6.1), fixed timing model.

Each engine is replayed alone; the runner places its simulated 0 at its first observed arrival's
offset, so every engine's predictions sit on the trace's one clock. These tests show where that is
exact (open-loop roots at their observed arrivals; an engine's first plays in lanes mode), so a
spanning group's predicted completion is the max over its members on every engine and is compared,
and where a dependency crosses engines that the separate replays do not carry (a later batch in
lanes mode starts when each engine's own lanes free, not at the shared batch boundary), so it stays
not compared with that reason.

Fixed model (see test_replay_timelines): a request alone with 2 output tokens arriving at ``a`` has
first token ``a + 100`` and completion ``a + 110`` (ms).
"""

from __future__ import annotations

import pytest
from replay_build import FIXED, MS, batch, engine, group, index, manifest, ms, pool, record, req, traj, w

from unirl_replay.report import compare as C
from unirl_replay.v1 import outcomes_pb2 as opb

pytest.importorskip("dynamo.replay")

from unirl_replay.replay.runner import replay_workload  # noqa: E402


def _outcomes(times: dict[str, tuple[float, float]], groups: dict[str, float], batches: dict[str, float],
              slots: dict[str, tuple[float, float]] = {}) -> list[opb.OutcomeRecord]:  # noqa: B006
    out = []
    for rid, (submit, done) in times.items():
        out.append(opb.OutcomeRecord(request=opb.RequestOutcome(
            request_id=rid, submit_ns=int(submit * MS), queued_ns=int(submit * MS), scheduled_ns=int(submit * MS),
            first_token_ns=int((submit + 1) * MS), completion_ns=int(done * MS))))
    for tid, (a, b) in slots.items():
        out.append(opb.OutcomeRecord(trajectory=opb.TrajectoryOutcome(trajectory_id=tid, slot_acquired_ns=int(a * MS),
                                                                      slot_released_ns=int(b * MS))))
    out += [opb.OutcomeRecord(group=opb.GroupOutcome(group_id=g, completed_ns=int(t * MS))) for g, t in groups.items()]
    out += [opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id=b, ready_ns=int(t * MS)))
            for b, t in batches.items()]
    return out


def _value(report, level, metric, rid):
    """(measured ms, predicted ms) of one paired record, or its NotCompared reason."""
    nc = [n.reason for n in report.not_compared if n.level == level and n.metric == metric and n.record_id == rid]
    return nc[0] if nc else "paired"


def _compare(msgs, outcomes, res):
    records = [record(x) for x in msgs]
    return C.compare(manifest(engine("e0"), engine("e1")), records, outcomes, res), C.match(records, outcomes, res)


def _pair(matching, key, rid):
    p = matching.pairs[key]
    i = p.ids.index(rid)
    return ms(int(p.measured_ns[i])), ms(int(p.predicted_ns[i]))


def test_open_loop_engines_share_the_trace_clock_so_spanning_groups_and_batches_are_compared():
    # GRPO-like: every request a root at its observed arrival. Group G1 = x (e0, arrives 0) + y (e1, arrives 30);
    # batch B2 arrives at 500 on both engines. Each engine alone: x 0 -> 110, y 30 -> 140, u 500 -> 610, v 500 -> 610.
    msgs = [req("x", eng="e0", at_ms=0, group="G1", batch="B1"), req("y", eng="e1", at_ms=30, group="G1", batch="B1"),
            req("u", eng="e0", at_ms=500, group="G2", batch="B2"), req("v", eng="e1", at_ms=500, group="G2", batch="B2"),
            group("G1", ["x", "y"], 2, batch="B1"), group("G2", ["u", "v"], 2, batch="B2"),
            batch("B1", ["G1"]), batch("B2", ["G2"])]
    res = replay_workload(index(*msgs), manifest(engine("e0"), engine("e1")), FIXED)
    arrival = {r.request_id: ms(r.arrival_ns) for r in res.requests}
    assert arrival == {"x": 0.0, "y": 30.0, "u": 500.0, "v": 500.0}  # the observed offsets: one clock
    assert {g.group_id: ms(g.completed_ns) for g in res.groups} == {"G1": 140.0, "G2": 610.0}  # max over engines
    outs = _outcomes({"x": (0, 120), "y": (30, 160), "u": (500, 640), "v": (505, 700)},
                     groups={"G1": 160, "G2": 700}, batches={"B1": 170, "B2": 720})
    rep, m = _compare(msgs, outs, res)
    # from the batch's first submit over its engines: G1 measured 160 - 0, predicted 140 - 0; B2 720 - 500, 610 - 500
    assert _pair(m, (C.L_GROUP, "group_completion"), "G1") == (160.0, 140.0)
    assert _pair(m, (C.L_GROUP, "group_completion"), "G2") == (200.0, 110.0)
    assert _pair(m, (C.L_BATCH, "batch_readiness"), "B1") == (170.0, 140.0)
    assert _pair(m, (C.L_BATCH, "batch_readiness"), "B2") == (220.0, 110.0)
    assert any("span engines" in n and "shared clock" in n for n in rep.notes), list(rep.notes)


def test_lanes_mode_first_batch_is_compared_across_engines_a_later_batch_is_refused_with_the_reason():
    # Agentic-like: one trajectory slot per engine (lanes). e0 runs A (batch B1) then C (B2); e1 runs B (B1) then D (B2).
    # Observed arrivals: A 0, B 30, C and D 500 (after the run's shared batch boundary). In lanes mode upstream ignores
    # root arrivals: e0 starts C when its lane frees (110), e1 starts D at 140; nothing waits for the other engine.
    msgs = [req("a0", eng="e0", at_ms=0, traj="A", turn=0, group="G1", batch="B1"),
            req("b0", eng="e1", at_ms=30, traj="B", turn=0, group="G1", batch="B1"),
            req("c0", eng="e0", at_ms=500, traj="C", turn=0, group="G2", batch="B2"),
            req("d0", eng="e1", at_ms=500, traj="D", turn=0, group="G2", batch="B2"),
            traj("A", ["a0"], pool="p0", order=0, eng="e0", group="G1", batch="B1"),
            traj("B", ["b0"], pool="p1", order=1, eng="e1", group="G1", batch="B1"),
            traj("C", ["c0"], pool="p0", order=2, eng="e0", group="G2", batch="B2"),
            traj("D", ["d0"], pool="p1", order=3, eng="e1", group="G2", batch="B2"),
            pool("p0", 1, ("e0",)), pool("p1", 1, ("e1",)),
            group("G1", ["A", "B"], 2, unit=w.GROUP_UNIT_TRAJECTORIES, batch="B1"),
            group("G2", ["C", "D"], 2, unit=w.GROUP_UNIT_TRAJECTORIES, batch="B2"),
            batch("B1", ["G1"]), batch("B2", ["G2"])]
    res = replay_workload(index(*msgs), manifest(engine("e0"), engine("e1")), FIXED)
    arrival = {r.request_id: ms(r.arrival_ns) for r in res.requests}
    assert arrival == {"a0": 0.0, "b0": 30.0, "c0": 110.0, "d0": 140.0}  # B2 starts per engine, not at 500
    outs = _outcomes({"a0": (0, 120), "b0": (30, 150), "c0": (500, 620), "d0": (500, 640)},
                     groups={"G1": 150, "G2": 640}, batches={"B1": 160, "B2": 650},
                     slots={"A": (0, 121), "B": (30, 151), "C": (500, 621), "D": (500, 641)})
    rep, m = _compare(msgs, outs, res)
    # B1: each engine's first play starts at its observed arrival (anchored); G1 = max(110, 140) on the shared clock
    assert _pair(m, (C.L_GROUP, "group_completion"), "G1") == (150.0, 140.0)
    assert _pair(m, (C.L_BATCH, "batch_readiness"), "B1") == (160.0, 140.0)
    for level, metric, rid in ((C.L_GROUP, "group_completion", "G2"), (C.L_BATCH, "batch_readiness", "B2")):
        why = _value(rep, level, metric, rid)
        assert "spans engines e0, e1" in why and "ran after 'B1'" in why and "lanes" in why, why
        assert "dependency across engines" in why
    # per-record metrics are unaffected: every request and trajectory is still compared
    assert len(m.pairs[(C.L_REQ, "e2e")].ids) == 4 and len(m.pairs[(C.L_TRAJ, "slot_hold")].ids) == 4


def test_single_engine_groups_are_measured_as_before():
    # one engine: the origin is the batch's first submit on it, exactly as without cross-engine support
    msgs = [req("x", eng="e0", at_ms=10, group="G1", batch="B1"), req("y", eng="e0", at_ms=20, group="G1", batch="B1"),
            group("G1", ["x", "y"], 2, batch="B1"), batch("B1", ["G1"])]
    res = replay_workload(index(*msgs), manifest(engine("e0"), engine("e1")), FIXED)
    outs = _outcomes({"x": (10, 130), "y": (20, 150)}, groups={"G1": 150}, batches={"B1": 155})
    rep, m = _compare(msgs, outs, res)
    meas, pred = _pair(m, (C.L_GROUP, "group_completion"), "G1")
    assert meas == 140.0 and pred == ms(res.groups[0].completed_ns) - 0.0
    assert not any("span engines" in n for n in rep.notes)
