"""Closed-loop rollout-batch boundaries (RolloutBatch.after_batch) replayed in the real upstream simulator.

Timing model fixed:100,10 (100 ms a pass that prefills, +10 if it also decodes; 10 ms a decode-only pass):
a lone request arriving at a with o output tokens has its first token at a + 100 and completes at
a + 100 + (o - 1) * 10. Every expected time below is that arithmetic, written next to it.
"""

from __future__ import annotations

import pytest
from replay_build import MS, batch, engine, group, index, manifest, pool, req, traj

from unirl_replay.contract.errors import TraceFormatError, UnsupportedWorkloadError
from unirl_replay.replay.convert import agentic_mooncake
from unirl_replay.replay.runner import replay_workload
from unirl_replay.replay.support import check_supported

FIXED = "fixed:100,10"


def two_batches(after="B0", gap_ms=7.0, eng1="e0", rule=None, outs0=(2, 5)):
    """B0: q0 (n=2, outputs ``outs0``) at 0 ms and q1 (o=2) at 0 ms; B1: r0 (o=2) observed at 300 ms, r1 (o=1) at
    500 ms, after B0 with a ``gap_ms`` driver gap."""
    kw = {} if rule is None else {"rule": rule, "n": 1}
    return [req("q0", out=outs0, at_ms=0, group="g0", batch="B0"), req("q1", out=(2,), at_ms=0, group="g1", batch="B0"),
            req("r0", out=(2,), at_ms=300, group="h0", batch="B1", eng=eng1),
            req("r1", out=(1,), at_ms=500, group="h1", batch="B1", eng=eng1),
            group("g0", ["q0"], 2, batch="B0"), group("g1", ["q1"], 1, batch="B0"),
            group("h0", ["r0"], 1, batch="B1"), group("h1", ["r1"], 1, batch="B1"),
            batch("B0", ["g0", "g1"], **kw), batch("B1", ["h0", "h1"], after=after, gap_ms=gap_ms)]


def lanes_batches():
    """Two one-trajectory batches on one slot (lanes mode), B1 after B0."""
    return [req("a/0", out=(2,), traj="a", turn=0, at_ms=0, group="g", batch="B0"),
            req("b/0", out=(2,), traj="b", turn=0, at_ms=50, group="h", batch="B1"),
            traj("a", ["a/0"], pool="p", order=0), traj("b", ["b/0"], pool="p", order=1), pool("p", 1),
            group("g", ["a"], 1, unit=2, batch="B0"), group("h", ["b"], 1, unit=2, batch="B1"),
            batch("B0", ["g"]), batch("B1", ["h"], after="B0", gap_ms=1)]


def times(res):
    return {r.request_id: (r.arrival_ns / MS, r.first_token_ns / MS, r.completion_ns / MS) for r in res.requests}


def test_closed_loop_boundary_arrives_after_the_simulated_ready_plus_the_gap():
    res = replay_workload(index(*two_batches()), manifest(), FIXED)
    t = times(res)
    # B0: q0's two samples and q1 prefill in one pass 0-100; q0 s1 (o=5) decodes 110..140: B0 ready 140
    assert t["q0"] == (0, 100, 140) and t["q1"] == (0, 100, 110)
    # r0: 140 + 7 ms gap = 147, 247, 257. r1: its observed spacing after r0 (500 - 300 = 200): 347, 447 (o=1)
    assert t["r0"] == (147, 247, 257) and t["r1"] == (347, 447, 447)
    assert {b.rollout_batch_id: b.ready_ns / MS for b in res.rollout_batches} == {"B0": 140, "B1": 447}
    assert not res.unmodelled_constraints
    assert any("CLOSED LOOP after 'B0'" in n for n in res.notes)


def test_every_sample_of_the_previous_batch_is_waited_for():
    # the longest sequence is q0's first sample here (o=5): the join covers all samples, not sample 0 only
    t = times(replay_workload(index(*two_batches(outs0=(5, 2))), manifest(), FIXED))
    assert t["q0"] == (0, 100, 140) and t["r0"][0] == 147
    t = times(replay_workload(index(*two_batches(outs0=(2, 2))), manifest(), FIXED))
    assert t["r0"][0] == 117  # B0 ready at 110 (every sequence o=2): 110 + 7


def test_without_the_boundary_the_batch_replays_open_loop():
    msgs = two_batches()
    msgs[-1] = batch("B1", ["h0", "h1"])
    t = times(replay_workload(index(*msgs), manifest(), FIXED))
    assert t["r0"] == (300, 400, 410) and t["r1"] == (500, 600, 600)


def test_rows_and_plays_upstream_receives():
    ix = index(*two_batches())
    plans, notes = check_supported(ix, {"e0": engine()})
    rows = {r["request_id"]: r for r in agentic_mooncake.convert_engine(plans["e0"], ix).rows}
    assert {r["play_id"] for r in rows.values()} == {"q0"}  # one play: dependencies stay inside one
    r0, r1 = rows["000002|r0"], rows["000003|r1"]
    assert r0["dependencies"] == [{"request_id": q, "trigger": "completion", "delay_ms": 7.0, "relation": "join"}
                                  for q in ("000000|q0#s0", "000000|q0#s1", "000001|q1")]
    assert r1["dependencies"] == [{"request_id": "000002|r0", "trigger": "dispatch", "delay_ms": 200.0,
                                   "relation": "spawn"}]
    # the bounds never bind: B0's roots at 0, + 7 ms; + 200 ms
    assert (r0["not_before_ms"], r1["not_before_ms"]) == (7.0, 207.0)
    assert len(notes) == 1 and "'r0' arrives 7.000 ms" in notes[0]


def test_a_chain_of_three_batches():
    msgs = two_batches()
    msgs[2:2] = [req("s0", out=(3,), at_ms=900, group="k0", batch="B2")]
    msgs += [group("k0", ["s0"], 1, batch="B2"), batch("B2", ["k0"], after="B1", gap_ms=0.5)]
    t = times(replay_workload(index(*msgs), manifest(), FIXED))
    assert t["r1"] == (347, 447, 447)
    assert t["s0"] == (447.5, 547.5, 567.5)  # B1 ready at 447 (r1) + 0.5 ms; o=3


@pytest.mark.parametrize("case, why", [
    (dict(eng1="e1"), "run on engines e0, e1"),
    (dict(rule=2), "FIRST_N_GROUPS"),
])
def test_unexpressible_boundaries_are_rejected_by_name(case, why):
    mf = manifest(engine("e0"), engine("e1"))
    with pytest.raises(UnsupportedWorkloadError) as e:
        replay_workload(index(*two_batches(**case)), mf, FIXED)
    assert e.value.rule == "batch_boundary.unexpressible" and why in str(e.value)
    assert "--allow-unmodelled batch_boundary.open_loop" in str(e.value)


def test_the_open_loop_opt_in_replays_at_observed_submits_labelled():
    mf = manifest(engine("e0"), engine("e1"))
    res = replay_workload(index(*two_batches(eng1="e1")), mf, FIXED, unmodelled=("batch_boundary.open_loop",))
    t = times(res)
    assert t["r0"] == (300, 400, 410) and t["r1"] == (500, 600, 600)
    assert [(c.rule, list(c.record_ids)) for c in res.unmodelled_constraints] == [("batch_boundary.unexpressible",
                                                                                   ["B1"])]
    assert "OPEN LOOP" in res.unmodelled_constraints[0].reason


def test_a_previous_batch_whose_readiness_waits_for_no_request_is_unexpressible():
    # B0 holds requests, but none in a group (no group_ids): ALL_GROUPS has nothing to wait for, so B0 has no
    # simulated ready event (derive leaves its ready_ns absent) and no join can stand for it. Was an IndexError
    # traceback in convert and replay (the join's first predecessor taken from an empty list).
    msgs = [req("q0", out=(2,), at_ms=0, batch="B0"), req("r0", out=(2,), at_ms=300, group="h0", batch="B1"),
            group("h0", ["r0"], 1, batch="B1"), batch("B0", []), batch("B1", ["h0"], after="B0", gap_ms=7)]
    with pytest.raises(UnsupportedWorkloadError) as e:
        check_supported(index(*msgs), {"e0": engine()})
    assert e.value.rule == "batch_boundary.unexpressible" and "no group member" in str(e.value)
    res = replay_workload(index(*msgs), manifest(), FIXED, unmodelled=("batch_boundary.open_loop",))
    assert times(res)["r0"][0] == 300 and [c.rule for c in res.unmodelled_constraints] == [
        "batch_boundary.unexpressible"]


def test_lanes_and_mooncake_cannot_hold_it():
    msgs = lanes_batches()
    with pytest.raises(UnsupportedWorkloadError, match="trajectory lanes"):
        check_supported(index(*msgs), {"e0": engine()})
    with pytest.raises(UnsupportedWorkloadError, match="mooncake format replays observed arrivals"):
        check_supported(index(*two_batches()), {"e0": engine()}, trace_format="mooncake")


def test_malformed_boundaries_name_the_record_and_rule():
    for after, rule in (("B1", "batch.boundary_self"), ("nope", "batch.boundary_unknown")):
        with pytest.raises(TraceFormatError) as e:
            check_supported(index(*two_batches(after=after)), {"e0": engine()})
        assert e.value.rule == rule and e.value.record_id == "B1"


def test_the_opt_in_acts_only_where_upstream_cannot_hold_the_boundary():
    res = replay_workload(index(*two_batches()), manifest(), FIXED, unmodelled=("batch_boundary.open_loop",))
    assert times(res)["r0"] == (147, 247, 257) and not res.unmodelled_constraints


def test_lanes_open_loop_reason_says_lanes_decide():
    msgs = lanes_batches()
    plans, notes = check_supported(index(*msgs), {"e0": engine()}, unmodelled=("batch_boundary.open_loop",))
    (c,) = plans["e0"].unmodelled
    assert "lanes free" in c.reason and any(n.startswith("UNMODELLED batch_boundary") for n in notes)


def test_a_cycle_of_boundaries_is_named():
    msgs = two_batches()
    msgs[-2] = batch("B0", ["g0", "g1"], after="B1", gap_ms=1)
    with pytest.raises(TraceFormatError) as e:
        check_supported(index(*msgs), {"e0": engine()})
    assert e.value.rule == "batch.boundary_cycle"
    assert "B0 -> B1 -> B0" in str(e.value) or "B1 -> B0 -> B1" in str(e.value)


def test_the_column_reader_takes_the_same_path(tmp_path):
    # an arrow trace is read as columns (no Request message): the boundary is planned from the groups and the
    # facts, and upstream gets the same rows as from the messages
    from tracebuild import TraceParts, write_trace

    from unirl_replay.contract import workload_columns as wc
    from unirl_replay.contract.trace_io import open_trace
    from unirl_replay.replay.batch_boundary import batch_requests
    from unirl_replay.replay.workload import WorkloadIndex
    from replay_build import record

    msgs = two_batches()
    msgs.insert(2, req("q2", out=(1,), at_ms=1, deps=[], group="", batch="B0"))  # in the batch, in no group
    d = write_trace(tmp_path / "t", TraceParts(manifest(), [record(m) for m in msgs], []), "arrow")
    # with the gate's facts (the requests' batch ids: q2 is in no group, so only its batch id says which batch's
    # boundary it follows); without them the columns decline and the messages decide (next test)
    cols = wc.read_columns(open_trace(d), facts=True)
    assert cols is not None
    by_cols = WorkloadIndex.from_columns(cols)
    plans_c, _ = check_supported(by_cols, {"e0": engine()})
    assert plans_c["e0"].columns is not None and not by_cols.requests  # the column path, no messages
    ix = index(*msgs)
    plans_m, _ = check_supported(ix, {"e0": engine()})
    rows = lambda plans, i: agentic_mooncake.convert_engine(plans["e0"], i).rows  # noqa: E731
    assert rows(plans_c, by_cols) == rows(plans_m, ix)
    # readiness waits for the groups' members only (as derive computes it), not for q2; q2 is a request of B0
    assert batch_requests(ix, ["B0"], plans_m["e0"].facts)["B0"] == (["q0", "q1"], ["q0", "q1", "q2"])


def test_a_request_of_the_batch_in_no_group_arrives_after_the_boundary_too(tmp_path):
    # r2 is in B1 but in no group: readiness does not wait for it, but the driver submitted it after B0 was ready
    # (validate's outcome.batch_boundary holds every request of the batch to that), so it is one of B1's roots: at
    # its observed spacing after the first one (400 - 300 = 100 ms), not at its observed 400 ms inside B0
    from tracebuild import TraceParts, write_trace

    from replay_build import record
    from unirl_replay.replay.runner import replay_trace

    msgs = two_batches()
    msgs.insert(3, req("r2", out=(1,), at_ms=400, batch="B1"))
    t = times(replay_workload(index(*msgs), manifest(), FIXED))
    assert (t["r0"][0], t["r2"][0], t["r1"][0]) == (147, 247, 347)
    for enc in ("jsonl", "binpb", "arrow"):  # arrow: the column path, which holds no request's batch id
        d = write_trace(tmp_path / enc, TraceParts(manifest(), [record(m) for m in msgs], []), enc)
        assert times(replay_trace(d, FIXED)) == t, enc


def test_a_tie_is_served_in_workload_order_as_open_loop():
    # c0 (batch C, no boundary) lies between B0 and B1 in the workload; r0 (B1, gap 0) arrives at B0's ready
    # (110 ms), the same instant as c0's observed submit; one prefill per pass (mnbt 16): the tie decides
    e = engine(mnbt=16, chunked=False)
    msgs = [req("q0", out=(2,), at_ms=0, group="g0", batch="B0"),
            req("c0", inp=16, out=(3,), at_ms=110, group="k0", batch="C"),
            req("r0", inp=16, out=(3,), at_ms=300, group="h0", batch="B1"),
            group("g0", ["q0"], 1, batch="B0"), group("k0", ["c0"], 1, batch="C"), group("h0", ["r0"], 1, batch="B1"),
            batch("B0", ["g0"]), batch("C", ["k0"]), batch("B1", ["h0"], after="B0", gap_ms=0)]
    closed = times(replay_workload(index(*msgs), manifest(e), FIXED))
    msgs[2], msgs[-1] = req("r0", inp=16, out=(3,), at_ms=110, group="h0", batch="B1"), batch("B1", ["h0"])
    assert closed == times(replay_workload(index(*msgs), manifest(e), FIXED))
