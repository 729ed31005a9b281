"""Additive decomposition of predicted - measured: exact by hand, exact on the bundled real traces.

By hand (the steps of tests/test_report_steps.py, fixed model P = 4 ms per pass, D = 1 ms per step):
measured readiness 45 ms (first submit 0, ready 45). The engine ran [10, 40]; it was idle [0, 10]
while B was between submit (0) and queued (21), and [40, 45] after the last token: client path
15 ms. Real passes 10 / 10 / 10 ms against the model's 4 / 5 (P + D, mixed) / 1 ms. The simulator
predicts 12 ms. So: client -15, first pass 4 - 10 = -6, prefill 5 - 10 = -5, decode 1 - 10 = -9,
scheduling = -33 - (-35) = +2 (the model's 10 ms on the real schedule vs the simulator's 12 ms).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_build import engine, record
from test_report_steps import MS, PROFILE, hand_outcomes, hand_workload
from unirl_replay.report import compare as C
from unirl_replay.report.decompose import TERMS
from unirl_replay.report.text import format_report
from unirl_replay.report.timing_eval import StepModel
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb

REPO = Path(__file__).resolve().parents[1]


def hand_manifest():
    m = mpb.TraceManifest(schema_version="unirl_replay.v1", trace_id="hand", workload_name="hand",
                          role=cpb.WORKLOAD_ROLE_HOLDOUT)
    m.window.clock_domain = cpb.CLOCK_DOMAIN_CAPTURE_MONOTONIC
    m.engines.append(engine(mnbt=2048, seqs=8))
    return m


def hand_replay():
    r = rpb.ReplayResult(schema_version="unirl_replay.v1", trace_id="hand", granularity=rpb.RESULT_GRANULARITY_PER_REQUEST)
    r.simulator.name, r.simulator.version = "ai-dynamo", "1.6.1"
    r.timing_model.kind, r.timing_model.calibration = rpb.TIMING_MODEL_KIND_FIXED, rpb.CALIBRATION_STATUS_FIXED
    r.timing_model.prefill_ms, r.timing_model.decode_ms = 4.0, 1.0
    r.requests.add(request_id="A", engine_id="e0", arrival_ns=0, scheduled_ns=0, first_token_ns=4 * MS,
                   completion_ns=12 * MS)
    r.requests.add(request_id="B", engine_id="e0", arrival_ns=0, scheduled_ns=0, first_token_ns=4 * MS,
                   completion_ns=10 * MS)
    r.groups.add(group_id="G1", completed_ns=12 * MS)
    r.rollout_batches.add(rollout_batch_id="B1", ready_ns=12 * MS)
    return r


def _terms(d):
    return {t.name: t.delta_ns for t in d.terms}


def test_decomposition_by_hand_sums_exactly():
    wl = [record(x) for x in hand_workload()]
    rep = C.compare(hand_manifest(), wl, hand_outcomes(), hand_replay())
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert d.unavailable_reason == ""
    assert (d.measured_ns, d.predicted_ns, d.total_ns) == (45 * MS, 12 * MS, -33 * MS)
    assert _terms(d) == {"client_path": -15 * MS, "first_pass": -6 * MS, "prefill_level": -5 * MS,
                         "decode_level": -9 * MS, "simulator_scheduling": 2 * MS}
    assert sum(t.delta_ns for t in d.terms) == d.total_ns
    assert [t.name for t in d.terms] == list(TERMS)
    # the profile check on the same steps, and the text report shows both
    ph = {p.phase: p for p in rep.profile_check.phases}
    assert ph["first_pass"].median_ratio == pytest.approx(2.5)
    assert rep.workload_requests == 2 and rep.workload_samples == 3
    txt = format_report(rep)
    assert "decomposition of predicted - measured" in txt and "profile check" in txt
    assert "2 engine requests, 3 samples" in txt


def test_decomposition_refuses_shared_steps_and_missing_models():
    wl = [record(x) for x in hand_workload()]
    wl[1].request.rollout_batch_id = "B2"  # B's sequences now share A's steps but belong to another batch
    wl.append(record(__import__("replay_build").batch("B2", [])))
    rep = C.compare(hand_manifest(), wl, hand_outcomes(), hand_replay())
    d = [d for d in rep.decompositions if d.record_id == "B1"]
    assert not d or "also hold other requests" in d[0].unavailable_reason
    r = hand_replay()
    r.timing_model.kind, r.timing_model.calibration = rpb.TIMING_MODEL_KIND_PROFILE, rpb.CALIBRATION_STATUS_UNCALIBRATED
    r.timing_model.profile_path = "absent.npz"
    rep = C.compare(hand_manifest(), [record(x) for x in hand_workload()], hand_outcomes(), r)
    assert "profile file was not given" in rep.profile_check.unavailable_reason
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert "not evaluated" in d.unavailable_reason and not d.terms
    rep = C.compare(hand_manifest(), [record(x) for x in hand_workload()], hand_outcomes(), r,
                    timing=(StepModel("fixed", 0, fixed=(4.0, 1.0)), {}, ""))
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert sum(t.delta_ns for t in d.terms) == d.total_ns


@pytest.fixture(scope="module")
def bundled_reports(tmp_path_factory):
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_trace, write_result
    from unirl_replay.report.outputs import compare_to_dir

    out = {}
    for name, unmodelled in (("grpo-a", ()), ("agentic-a", ("engine_client.inflight_limit",))):
        d = tmp_path_factory.mktemp(name)
        res = replay_trace(REPO / "traces" / name, f"profile:{PROFILE}", work_dir=d / "up", unmodelled=unmodelled)
        write_result(d, res)
        out[name] = compare_to_dir(REPO / "traces" / name, d / "replay_result.json", d / "report", plots_too=False)
    return out


@pytest.mark.parametrize("name", ["grpo-a", "agentic-a"])
def test_bundled_traces_decompose_exactly(bundled_reports, name):
    rep = bundled_reports[name]
    assert all(not es.unavailable_reason for es in rep.engine_steps)
    decs = [d for d in rep.decompositions if d.terms]
    assert any(d.level == vpb.COMPARISON_LEVEL_ROLLOUT_BATCH for d in decs)
    for d in decs:
        assert sum(t.delta_ns for t in d.terms) == d.total_ns == d.predicted_ns - d.measured_ns, d.record_id
    pairs = {m.metric: m for m in rep.metrics}
    assert pairs["batch_readiness"].pairs == sum(d.metric == "batch_readiness" and d.record_id != "all rollout batches"
                                                 for d in decs)


def test_grpo_a_reproduces_the_hand_analysis(bundled_reports):
    """fidelity-findings.md: decode and prefill level dominate; client and scheduling are small;
    the profile's form holds (a uniform ratio: level, not form); the conversion kept the settings."""
    rep = bundled_reports["grpo-a"]
    (tot,) = [d for d in rep.decompositions if d.record_id == "all rollout batches"]
    t = _terms(tot)
    level = abs(t["decode_level"]), abs(t["prefill_level"] + t["first_pass"])
    rest = abs(t["client_path"]), abs(t["simulator_scheduling"])
    assert min(level) > max(rest)
    assert t["decode_level"] < 0 and t["prefill_level"] < 0
    assert "uniform" in rep.profile_check.reading and "LEVEL" in rep.profile_check.reading
    assert any("ran with the trace's engine settings" in n for n in rep.notes)


def test_a_batch_over_two_engines_is_decomposed_along_its_last_engine():
    # B1 scattered over two data-parallel engines: A on e0 (done at 40 ms), B on e1 (done at 50 ms): the batch
    # is ready when e1 is done, so its error is decomposed along e1, and the terms still sum exactly
    wl = [record(x) for x in hand_workload()]
    wl[1].request.engine_id = "e1"
    m = hand_manifest()
    e1 = m.engines.add()
    e1.CopyFrom(m.engines[0])
    e1.engine_id = "e1"
    o = hand_outcomes()
    o[1].request.completion_ns = 50 * MS
    o[3].rollout_batch.ready_ns = 55 * MS
    r = hand_replay()
    r.requests[1].engine_id = "e1"
    rep = C.compare(m, wl, o, r)
    assert [es.engine_id for es in rep.engine_steps if not es.unavailable_reason] == ["e0", "e1"]
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert d.unavailable_reason == "" and d.total_ns == d.predicted_ns - d.measured_ns
    assert sum(t.delta_ns for t in d.terms) == d.total_ns
    assert any("decomposed along e1" in n for n in d.notes)
    # e1 ran only B: its first pass (21 -> 30 ms) and one decode step (30 -> 50 ms) are the real steps
    assert _terms(d)["first_pass"] == round(4.0 * MS) - 9 * MS and _terms(d)["decode_level"] == 1 * MS - 20 * MS


def test_a_batch_in_a_left_out_span_is_not_decomposed_the_other_is():
    from replay_build import batch, req
    from test_report_steps import out

    wl = [record(x) for x in (req("A", inp=10, out=(10,), at_ms=0, batch="B1"),
                              req("B", inp=10, out=(2,), at_ms=0, batch="B1"),
                              req("C", inp=10, out=(3,), at_ms=150, batch="B2"), batch("B1", []), batch("B2", []))]
    o = [out("A", 0, 1, 1, first=20, compl=80), out("B", 0, 1, 25, first=30, compl=40),
         out("C", 150, 151, 190, first=200, compl=220),
         opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B1", ready_ns=85 * MS)),
         opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B2", ready_ns=225 * MS))]
    r = hand_replay()
    del r.requests[:]
    del r.groups[:]
    del r.rollout_batches[:]
    for rid, a, f, c in (("A", 0, 4, 13), ("B", 0, 4, 5), ("C", 150, 154, 156)):
        r.requests.add(request_id=rid, engine_id="e0", arrival_ns=a * MS, scheduled_ns=a * MS, first_token_ns=f * MS,
                       completion_ns=c * MS)
    r.rollout_batches.add(rollout_batch_id="B1", ready_ns=13 * MS)
    r.rollout_batches.add(rollout_batch_id="B2", ready_ns=156 * MS)
    rep = C.compare(hand_manifest(), wl, o, r)
    dec = {d.record_id: d for d in rep.decompositions}
    assert "whose steps were not rebuilt" in dec["B1"].unavailable_reason and not dec["B1"].terms
    assert dec["B2"].unavailable_reason == "" and sum(t.delta_ns for t in dec["B2"].terms) == dec["B2"].total_ns


def test_simulated_batches_that_overlap_where_the_run_kept_them_apart_are_said():
    # B1 ready at 45 ms, B2 submitted at 150 ms (the driver waits for B1): apart in the run. In the replay B2
    # arrives at its observed 150 ms (open loop) while the simulated B1 runs to 160 ms: the report says so,
    # on the report and on B1's decomposition; when the simulated B1 is done first (13 ms) nothing is said.
    from replay_build import batch, req
    from test_report_steps import out

    wl = [record(x) for x in (req("A", inp=10, out=(3,), at_ms=0, batch="B1"),
                              req("C", inp=10, out=(3,), at_ms=150, batch="B2"), batch("B1", []), batch("B2", []))]
    o = [out("A", 0, 1, 1, first=20, compl=40), out("C", 150, 151, 151, first=170, compl=190),
         opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B1", ready_ns=45 * MS)),
         opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B2", ready_ns=195 * MS))]

    def replay(b1_done_ms):
        r = hand_replay()
        del r.requests[:]
        del r.groups[:]
        del r.rollout_batches[:]
        for rid, a, f, c in (("A", 0, 4, b1_done_ms), ("C", 150, 154, max(156, b1_done_ms + 2))):
            r.requests.add(request_id=rid, engine_id="e0", arrival_ns=a * MS, scheduled_ns=a * MS,
                           first_token_ns=f * MS, completion_ns=c * MS)
        r.rollout_batches.add(rollout_batch_id="B1", ready_ns=b1_done_ms * MS)
        r.rollout_batches.add(rollout_batch_id="B2", ready_ns=max(156, b1_done_ms + 2) * MS)
        return r

    rep = C.compare(hand_manifest(), wl, o, replay(160))
    said = [n for n in rep.notes if "overlap" in n]
    assert len(said) == 1, list(rep.notes)
    assert said[0].startswith("simulated rollout batches overlap by 10.0 ms where the run kept them apart: B2 "
                              "arrives at 150.0 ms after B1's first arrival")
    assert "the simulated B1 is ready only at 160.0 ms" in said[0] and "105.0 ms before B2's first submit" in said[0]
    assert "overlap" in format_report(rep)
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert said[0] in d.notes
    rep = C.compare(hand_manifest(), wl, o, replay(13))
    assert not [n for n in rep.notes if "overlap" in n]
    assert not [n for d in rep.decompositions for n in d.notes if "overlap" in n]


def _first_n_case(ready_ms):
    """B1 = collect(1) over G1 = [A] and G2 = [B]: B (one token, prefilled in the 20 -> 30 ms pass) completes
    G2 at 30 ms; A's last token is at 40 ms. The replay: G2 at 4 ms, G1 at 12 ms, so B1 is ready at 4 ms."""
    from replay_build import batch, group, req
    from unirl_replay.v1 import workload_pb2 as wpb
    wl = [record(x) for x in (req("A", inp=100, out=(3, 1), at_ms=0, group="G1", batch="B1"),
                              req("B", inp=50, out=(1,), at_ms=0, group="G2", batch="B1"),
                              group("G1", ["A"], 2, batch="B1"), group("G2", ["B"], 1, batch="B1"),
                              batch("B1", ["G1", "G2"], rule=wpb.BATCH_READINESS_RULE_FIRST_N_GROUPS, n=1))]
    o = hand_outcomes()
    o[1].request.completion_ns = 30 * MS
    o[2].group.completed_ns = 40 * MS
    o.insert(3, opb.OutcomeRecord(group=opb.GroupOutcome(group_id="G2", completed_ns=30 * MS)))
    o[4].rollout_batch.ready_ns = ready_ms * MS
    r = hand_replay()
    r.requests[1].completion_ns = 4 * MS
    r.groups.add(group_id="G2", completed_ns=4 * MS)
    r.rollout_batches[0].ready_ns = 4 * MS
    return C.compare(hand_manifest(), wl, o, r)


def test_a_first_n_batch_ready_before_its_later_groups_says_so_not_a_clock_mismatch():
    # collect(1) returned at 32 ms, while A (the other group) ran on to 40 ms: the batch's steps run past its
    # readiness by its own rule, and the reason says that (it read "clock or boundary mismatch")
    rep = _first_n_case(32)
    (m,) = [m for m in rep.metrics if m.metric == "batch_readiness"]
    assert (m.measured_mean_ms, m.predicted_mean_ms) == (32.0, 4.0)
    (d,) = [d for d in rep.decompositions if d.record_id == "B1"]
    assert not d.terms and (d.measured_ns, d.predicted_ns, d.total_ns) == (32 * MS, 4 * MS, -28 * MS)
    assert d.unavailable_reason.startswith("a FIRST_N_GROUPS batch (1 of 2 groups) ready before all its requests "
                                           "completed (1 completed after its readiness, e.g. 'A')")
    assert "clock" not in d.unavailable_reason
    # a FIRST_N_GROUPS batch whose requests were all done by its readiness is decomposed as before
    (d,) = [d for d in _first_n_case(45).decompositions if d.record_id == "B1"]
    assert d.unavailable_reason == "" and sum(t.delta_ns for t in d.terms) == d.total_ns == -41 * MS
