"""derive.py: pure group completion and batch readiness from predicted request completions."""

from __future__ import annotations

from replay_build import MS, batch, group, req, traj, w

from unirl_replay.replay.derive import derive_batches, derive_groups, derive_trajectories
from unirl_replay.v1 import replay_pb2


def pr(rid, arr, done=None):
    p = replay_pb2.PredictedRequest(request_id=rid, arrival_ns=arr * MS)
    if done is not None:
        p.completion_ns = done * MS
    return p


def test_trajectory_span_and_trajectory_groups():
    pred = {"a0": pr("a0", 0, 10), "a1": pr("a1", 20, 40), "b0": pr("b0", 5, 50)}
    trajs = derive_trajectories(pred, [traj("A", ["a0", "a1"]), traj("B", ["b0"])], {"A": ["a0", "a1"]})
    assert [(t.start_ns, t.end_ns) for t in trajs] == [(0, 40 * MS), (5 * MS, 50 * MS)]
    g = derive_groups([group("G", ["A", "B"], 2, unit=w.GROUP_UNIT_TRAJECTORIES)], pred,
                      {t.trajectory_id: t for t in trajs}, {})
    assert g[0].completed_ns == 50 * MS


def test_group_counts_samples_and_missing_members():
    reqs = {"q": req("q", out=(1, 1, 1)), "r": req("r")}
    pred = {"q": pr("q", 0, 30), "r": pr("r", 0, 70)}
    g = derive_groups([group("full", ["q", "r"], 4), group("short", ["q"], 4), group("open", ["q", "x"], 2)],
                      pred, {}, reqs)
    assert g[0].completed_ns == 70 * MS
    assert not g[1].HasField("completed_ns")  # 3 of 4 expected samples in the window
    assert not g[2].HasField("completed_ns")  # a member without a prediction


def test_batch_rules_first_n_vs_all():
    groups = {gid: replay_pb2.PredictedGroup(group_id=gid, completed_ns=t * MS)
              for gid, t in (("g1", 30), ("g2", 10), ("g3", 20))}
    groups["g4"] = replay_pb2.PredictedGroup(group_id="g4")
    bs = derive_batches([batch("all", ["g1", "g2", "g3"]),
                         batch("first2", ["g1", "g2", "g3"], w.BATCH_READINESS_RULE_FIRST_N_GROUPS, 2),
                         batch("all4", ["g1", "g2", "g3", "g4"]),
                         batch("first3of4", ["g1", "g2", "g3", "g4"], w.BATCH_READINESS_RULE_FIRST_N_GROUPS, 3),
                         batch("first4of4", ["g1", "g2", "g3", "g4"], w.BATCH_READINESS_RULE_FIRST_N_GROUPS, 4)],
                        groups)
    got = {b.rollout_batch_id: (b.ready_ns if b.HasField("ready_ns") else None) for b in bs}
    assert got == {"all": 30 * MS, "first2": 20 * MS, "all4": None, "first3of4": 30 * MS, "first4of4": None}
