"""The report label (and so the text table and every plot title) names dropped constraints."""

from __future__ import annotations

import compare_fixtures as fx
from unirl_replay.report import compare as C
from unirl_replay.report import plots as P
from unirl_replay.report.text import format_report

BASE = "holdout workload grpo-toy | ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED)"


def test_unmodelled_constraints_on_the_label_table_and_plots():
    wl, outs, rp = fx.workload(), fx.outcomes(), fx.replay()
    assert C.compare(fx.manifest(), wl, outs, rp).label == BASE  # exact replay: no suffix
    rp.unmodelled_constraints.add(rule="engine_client.inflight_limit", reason="client limit 1 dropped",
                                  record_ids=["e0"])
    rp.unmodelled_constraints.add(rule="engine_client.inflight_limit", reason="again", record_ids=["e1"])
    rep = C.compare(fx.manifest(), wl, outs, rp)
    assert rep.label == BASE + " | UNMODELLED: engine_client.inflight_limit"
    assert format_report(rep).splitlines()[0] == f"Validation report: {rep.label}"
    fig = P.scatter_figure(C.match(wl, outs, rp).pairs, C.L_REQ, rep.label)
    assert fig._suptitle.get_text().endswith("| UNMODELLED: engine_client.inflight_limit")


def _with_boundary():
    from unirl_replay.v1 import workload_pb2 as wpb
    wl = fx.workload()
    b2 = wpb.RolloutBatch(rollout_batch_id="B2", readiness_rule=wpb.BATCH_READINESS_RULE_ALL_GROUPS)
    b2.after_batch.previous_rollout_batch_id = "B1"
    b2.after_batch.driver_gap_ns = 4_543_928
    wl.append(wpb.WorkloadRecord(rollout_batch=b2))
    return wl


def test_a_recorded_batch_boundary_is_said_closed_loop_or_open_loop():
    rep = C.compare(fx.manifest(), _with_boundary(), fx.outcomes(), fx.replay())
    (note,) = [n for n in rep.notes if n.startswith("batch boundary")]
    assert note.startswith("batch boundary B1 -> B2 replayed closed loop") and "(4.544 ms" in note
    rp = fx.replay()
    rp.unmodelled_constraints.add(rule="batch_boundary.unexpressible", reason="across engines", record_ids=["B2"])
    rep = C.compare(fx.manifest(), _with_boundary(), fx.outcomes(), rp)
    (note,) = [n for n in rep.notes if n.startswith("batch boundary")]
    assert "replayed OPEN LOOP (UNMODELLED: batch_boundary.open_loop)" in note
    # an open-loop boundary is not one bound of a bracket: the report does not ask for the client-limit bounds
    assert not any("ONE BOUND" in n for n in rep.notes)
    assert any(n.startswith("UNMODELLED: the replay dropped batch_boundary.unexpressible") for n in rep.notes)
    assert rep.label.endswith("| UNMODELLED: batch_boundary.unexpressible (opt-in batch_boundary.open_loop)")


def test_the_two_bounds_read_apart_in_their_titles():
    """The client limit dropped (optimistic) and replayed as lanes (pessimistic) both recorded rule
    engine_client.inflight_limit: the two bounds' titles read alike; the lanes one now says which it is."""
    wl, outs, rp = fx.workload(), fx.outcomes(), fx.replay()
    rp.unmodelled_constraints.add(rule="engine_client.inflight_limit", record_ids=["e0"], reason=(
        "engine 'e0': the client allows 1 in-flight model requests but up to 4 can be in flight; replayed with lanes "
        "= the client limit (1) instead (explicit opt-in engine_client.inflight_limit.as_lanes)"))
    rep = C.compare(fx.manifest(), wl, outs, rp)
    assert rep.label == BASE + " | UNMODELLED: engine_client.inflight_limit.as_lanes (pessimistic bound)"
