"""Matched comparison on the hand-built trace of compare_fixtures.py; every number by hand below."""

from __future__ import annotations

import pytest

import compare_fixtures as fx
from unirl_replay.report import compare as C
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb


def _report(**kw):
    return C.compare(fx.manifest(), fx.workload(), fx.outcomes(), kw.get("replay", fx.replay()))


def _metric(report, level, name):
    found = [m for m in report.metrics if m.level == level and m.metric == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def _nc(report, metric, record_id):
    return [n for n in report.not_compared if n.metric == metric and n.record_id == record_id]


def test_request_ttft_by_hand():
    # pairs (measured, predicted) ms: r1 (110-100=10, 12-0=12), r2 (20, 18), r3 (130-110=20, 35-10=25)
    # pe = +20, -10, +25; |pe| sorted = 10, 20, 25
    # MAPE = 55/3; median = 20; p90: rank 0.9*2 = 1.8 -> 20 + 0.8*(25-20) = 24; bias = 35/3
    # measured sorted 10,20,20: p50 20, p90 20, p99 20; predicted 12,18,25: p50 18,
    # p90 18 + 0.8*7 = 23.6, p99 rank 1.98 -> 18 + 0.98*7 = 24.86; means 50/3 and 55/3
    m = _metric(_report(), C.L_REQ, "ttft")
    assert m.pairs == 3 and m.zero_measured == 0
    assert m.mape_pct == pytest.approx(55 / 3)
    assert m.median_ape_pct == pytest.approx(20)
    assert m.p90_ape_pct == pytest.approx(24)
    assert m.signed_bias_pct == pytest.approx(35 / 3)
    assert (m.measured_p50_ms, m.measured_p90_ms, m.measured_p99_ms) == pytest.approx((20, 20, 20))
    assert (m.predicted_p50_ms, m.predicted_p90_ms, m.predicted_p99_ms) == pytest.approx((18, 23.6, 24.86))
    assert (m.measured_mean_ms, m.predicted_mean_ms) == pytest.approx((50 / 3, 55 / 3))


def test_request_e2e_by_hand():
    # r1 (150-100=50, 55), r2 (100, 90), r3 (160-110=50, 70-10=60), r4 (240-180=60, 150-90=60)
    # pe = +10, -10, +20, 0 -> |pe| sorted 0,10,10,20: MAPE 10, median 10, p90 rank 2.7 -> 10+0.7*10 = 17
    # bias = 20/4 = 5
    m = _metric(_report(), C.L_REQ, "e2e")
    assert m.pairs == 4
    assert (m.mape_pct, m.median_ape_pct, m.p90_ape_pct, m.signed_bias_pct) == pytest.approx((10, 10, 17, 5))


def test_request_queueing_delay_by_hand_with_zero_measured():
    # scheduled - submit: r1 (2, 0), r2 (5, 3), r3 (0, 2) measured 0 -> excluded from %, r4 (5, 0)
    # pe over r1, r2, r4 = -100, -40, -100: MAPE 80, median 100, p90 100, bias -80
    m = _metric(_report(), C.L_REQ, "queueing_delay")
    assert m.pairs == 4 and m.zero_measured == 1
    assert (m.mape_pct, m.median_ape_pct, m.p90_ape_pct, m.signed_bias_pct) == pytest.approx((80, 100, 100, -80))
    # measured 0,2,5,5: p50 = 3.5; predicted 0,0,2,3: p50 = 1
    assert (m.measured_p50_ms, m.predicted_p50_ms) == pytest.approx((3.5, 1))


def test_group_trajectory_batch_by_hand():
    rep = _report()
    # origin: batch B1's first submit on e0 = 100 ms measured, 0 ms predicted
    # G1 (200-100=100, 90) -10%; G2 (240-100=140, 150) +50/7 %; G3 (170-100=70, 80) +100/7 %
    g = _metric(rep, C.L_GROUP, "group_completion")
    assert g.pairs == 3
    assert g.mape_pct == pytest.approx((10 + 50 / 7 + 100 / 7) / 3)
    assert g.signed_bias_pct == pytest.approx((-10 + 50 / 7 + 100 / 7) / 3)
    # B1 (240-100=140, 150-0=150) -> +50/7 %, reported apart from groups
    b = _metric(rep, C.L_BATCH, "batch_readiness")
    assert b.pairs == 1 and b.signed_bias_pct == pytest.approx(50 / 7)
    assert (b.measured_p50_ms, b.predicted_p50_ms) == pytest.approx((140, 150))
    # T1 e2e: last completion - first submit = 240-110 = 130 vs 150-10 = 140 -> +100/13 %
    t = _metric(rep, C.L_TRAJ, "trajectory_e2e")
    assert t.signed_bias_pct == pytest.approx(100 / 13)
    # T1 slot hold: 245-108 = 137 vs 150-10 = 140 -> 300/137 %
    s = _metric(rep, C.L_TRAJ, "slot_hold")
    assert s.signed_bias_pct == pytest.approx(300 / 137)


def test_not_compared_listing_and_unavailable_count():
    rep = _report()
    assert rep.requests_unavailable == 2  # r5 (metrics disabled) and r4 (first token not reported)
    # r4 has no first_token: TTFT not compared, with the reason
    (n,) = _nc(rep, "ttft", "r4")
    assert n.level == C.L_REQ and "first_token_ns not reported" in n.reason
    # r5 is left out of every request metric (unavailable), never approximated
    for metric in ("ttft", "e2e", "queueing_delay"):
        (n,) = _nc(rep, metric, "r5")
        assert "unavailable: metrics disabled" in n.reason
    # only r1 reports the engine's queued_ts: the engine-side metrics of r2..r4 are not compared
    engine_side = {(m, r) for m in ("engine_ttft", "engine_e2e") for r in ("r2", "r3", "r4", "r5")}
    assert len(rep.not_compared) == 12
    assert {(n.metric, n.record_id) for n in rep.not_compared} == {
        ("ttft", "r4"), ("ttft", "r5"), ("e2e", "r5"), ("queueing_delay", "r5")} | engine_side
    (n,) = _nc(rep, "engine_e2e", "r2")
    assert "queued_ns" in n.reason


def test_engine_side_metrics_by_hand():
    # from the engine's queue entry (vLLM queued_ts), which only r1 reports (101 ms):
    # engine_ttft r1: measured 110-101 = 9, predicted 12-0 = 12 -> +100/3 %
    # engine_e2e  r1: measured 150-101 = 49, predicted 55-0 = 55 -> +600/49 %
    t = _metric(_report(), C.L_REQ, "engine_ttft")
    assert t.pairs == 1 and t.signed_bias_pct == pytest.approx(100 / 3)
    e = _metric(_report(), C.L_REQ, "engine_e2e")
    assert e.pairs == 1 and e.signed_bias_pct == pytest.approx(600 / 49)
    assert (e.measured_p50_ms, e.predicted_p50_ms) == pytest.approx((49, 55))


def test_labels_and_manifest_fields():
    rep = _report()
    assert rep.label == "holdout workload grpo-toy | ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED)"
    assert rep.role == cpb.WORKLOAD_ROLE_HOLDOUT and rep.workload_name == "grpo-toy"
    assert rep.capture_overhead.overhead_ratio == pytest.approx(0.031)
    assert rep.timing_model.calibration == rpb.CALIBRATION_STATUS_UNCALIBRATED
    fixed = fx.replay(kind=rpb.TIMING_MODEL_KIND_FIXED, calibration=rpb.CALIBRATION_STATUS_FIXED)
    assert C.honesty_label(fx.manifest(), fixed).endswith("fixed prefill 10 ms / decode 1 ms (FIXED)")
    prof = fx.replay(kind=rpb.TIMING_MODEL_KIND_PROFILE, calibration=rpb.CALIBRATION_STATUS_CALIBRATED)
    assert C.honesty_label(fx.manifest(), prof).endswith("profile cpu-qwen.npz (CALIBRATED)")


def test_dishonest_labels_are_refused():
    with pytest.raises(C.ComparisonError, match="only a measured profile"):
        C.compare(fx.manifest(), fx.workload(), fx.outcomes(),
                  fx.replay(calibration=rpb.CALIBRATION_STATUS_CALIBRATED))
    with pytest.raises(C.ComparisonError, match="no calibration status"):
        C.compare(fx.manifest(), fx.workload(), fx.outcomes(),
                  fx.replay(calibration=rpb.CALIBRATION_STATUS_UNSPECIFIED))
    prof = fx.replay(kind=rpb.TIMING_MODEL_KIND_PROFILE, calibration=rpb.CALIBRATION_STATUS_CALIBRATED)
    prof.timing_model.calibration_workloads.append("grpo-toy")
    with pytest.raises(C.ComparisonError, match="never mixed"):
        C.compare(fx.manifest(), fx.workload(), fx.outcomes(), prof)
    # the same profile on a calibration workload is allowed, and labelled in-sample
    rep = C.compare(fx.manifest(role=cpb.WORKLOAD_ROLE_CALIBRATION), fx.workload(), fx.outcomes(), prof)
    assert rep.label.startswith("calibration workload grpo-toy") and rep.label.endswith("IN-SAMPLE")
    assert any("in-sample" in n for n in rep.notes)


def test_other_trace_or_clock_is_refused():
    with pytest.raises(C.ComparisonError, match="not 'toy-1'"):
        C.compare(fx.manifest(), fx.workload(), fx.outcomes(), fx.replay(trace_id="other"))
    m = fx.manifest()
    m.window.clock_domain = cpb.CLOCK_DOMAIN_SIMULATED
    with pytest.raises(C.ComparisonError, match="cannot pair"):
        C.compare(m, fx.workload(), fx.outcomes(), fx.replay())


def test_missing_prediction_and_out_of_order_boundaries():
    rp = fx.replay()
    del rp.requests[1]  # r2 has no predicted row
    outs = fx.outcomes()
    outs[0].request.scheduled_ns = fx.ms(99)  # r1 scheduled before submit (queued_ts re-set pitfall)
    rep = C.compare(fx.manifest(), fx.workload(), outs, rp)
    (n,) = _nc(rep, "e2e", "r2")
    assert n.reason == "predicted: no PredictedRequest row for this request"
    (n,) = _nc(rep, "queueing_delay", "r1")
    assert "out of order" in n.reason
    # r2's arrival is missing, so the batch origin on the predicted side is unknown
    assert "origin unknown" in _nc(rep, "batch_readiness", "B1")[0].reason
    assert _metric(rep, C.L_REQ, "e2e").pairs == 3


def test_group_spanning_open_loop_engines_is_compared_on_the_shared_clock():
    wl = fx.workload()
    wl[1].request.engine_id = "e1"  # r2 (group G1) on another engine; open loop: roots at observed arrivals
    rep = C.compare(fx.manifest(), wl, fx.outcomes(), fx.replay())
    assert not _nc(rep, "group_completion", "G1") and not _nc(rep, "batch_readiness", "B1")
    assert _metric(rep, C.L_GROUP, "group_completion").pairs == 3
    # B1 from its first submit over both engines: measured 240 - 100 = 140, predicted 150 - 0 = 150
    b = _metric(rep, C.L_BATCH, "batch_readiness")
    assert b.pairs == 1 and b.measured_mean_ms == pytest.approx(140) and b.predicted_mean_ms == pytest.approx(150)
    assert any("1 groups and 1 batches span engines" in n for n in rep.notes)


def test_group_spanning_engines_in_lanes_mode_after_another_batch_is_not_compared():
    wl = fx.workload()
    wl[1].request.engine_id = "e1"  # r2 (group G1) on e1, where an earlier batch B0 ran first, in lanes mode
    wl.append(fx._req("r0", "G0", traj="T0", turn=0, engine="e1", batch="B0", arrival_ms=0))
    wl.append(wpb.WorkloadRecord(trajectory=wpb.Trajectory(trajectory_id="T0", group_id="G0", rollout_batch_id="B0",
                                                           engine_id="e1", request_ids=["r0"], slot_pool_id="p1",
                                                           start_order=0)))
    rep = C.compare(fx.manifest(), wl, fx.outcomes(), fx.replay())
    (n,) = _nc(rep, "group_completion", "G1")
    assert "spans engines e0, e1" in n.reason and "ran after 'B0'" in n.reason
    (n,) = _nc(rep, "batch_readiness", "B1")
    assert "dependency across engines" in n.reason


def test_fanout_boundaries_from_complete_sample_set_only():
    req = wpb.Request(request_id="x", num_samples=2)
    out = opb.RequestOutcome(request_id="x", submit_ns=0)
    out.samples.add(sample_id="a", first_token_ns=5, completion_ns=50)
    out.samples.add(sample_id="b", first_token_ns=7, completion_ns=40)
    # first token = earliest sample's (5), completion = last sample's (50)
    assert C.measured_request_boundaries(req, out) == {"submit": 0, "first_token": 5, "completion": 50}
    del out.samples[1]  # one of two samples: a partial set is never used
    assert C.measured_request_boundaries(req, out) == {"submit": 0}


def test_aggregate_only_path():
    rp = rpb.ReplayResult(trace_id="toy-1", granularity=rpb.RESULT_GRANULARITY_AGGREGATE_ONLY)
    rp.simulator.name, rp.simulator.version = "ai-dynamo", "1.6.1"
    rp.timing_model.kind, rp.timing_model.calibration = rpb.TIMING_MODEL_KIND_POLYNOMIAL, rpb.CALIBRATION_STATUS_UNCALIBRATED
    rp.aggregate.update({"mean_e2e_latency_ms": 66.0, "mean_ttft_ms": 20.0, "p90_ttft_ms": 30.0,
                         "duration_ms": 150.0, "gpu_hours": 1.0})
    outs = [o for o in fx.outcomes() if not (o.HasField("request") and o.request.request_id == "r5")]
    outs.append(fx._rout("r5", submit=105, sched=106, first=115, compl=175))  # r5 measured this time
    rep = C.compare(fx.manifest(), fx.workload(), outs, rp)
    assert rep.granularity == rpb.RESULT_GRANULARITY_AGGREGATE_ONLY
    assert "aggregate-only" in rep.label
    assert all(m.level == C.L_AGG for m in rep.metrics)
    # mean e2e over all 5 requests: (50 + 100 + 50 + 60 + 70) / 5 = 66 ms -> 0 % error
    e2e = _metric(rep, C.L_AGG, "mean_e2e_latency_ms")
    assert (e2e.measured_value, e2e.predicted_value, e2e.mape_pct) == pytest.approx((66, 66, 0))
    # duration: last completion 240 - first submit 100 = 140 ms measured vs 150 -> +50/7 %
    d = _metric(rep, C.L_AGG, "duration_ms")
    assert d.measured_value == pytest.approx(140) and d.signed_bias_pct == pytest.approx(50 / 7)
    # TTFT: r4 has no measured first token -> the mean would cover another request set
    assert "missing for 1 of 5" in _nc(rep, "mean_ttft_ms", "")[0].reason
    assert "percentile" in _nc(rep, "p90_ttft_ms", "")[0].reason
    assert "no measured counterpart" in _nc(rep, "gpu_hours", "")[0].reason
    # every per-record metric is listed as not compared (never reconstructed from aggregates)
    for level, metric in C.METRIC_KEYS:
        (n,) = [x for x in _nc(rep, metric, "") if x.level == level]
        assert "aggregate-only" in n.reason


def test_repeat_spread_by_hand():
    # repeat 2 stretches every time from the window start by 1.1, so every duration mean x1.1:
    # means m and 1.1 m -> mean 1.05 m, std(ddof=1) = 0.1 m / sqrt(2), cv = 100 * 0.0707107/1.05
    # max deviation = 0.05 / 1.05
    rep2 = (fx.manifest(trace_id="toy-2"), fx.workload(), fx.outcomes(scale=1.1))
    rep = C.compare(fx.manifest(), fx.workload(), fx.outcomes(), fx.replay(), repeats=[rep2])
    by = {(s.level, s.metric): s for s in rep.repeat_spread}
    assert set(by) == set(C.METRIC_KEYS)
    e2e = by[(C.L_REQ, "e2e")]
    assert e2e.repeats == 2
    assert e2e.cv_pct == pytest.approx(100 * 0.1 / 2**0.5 / 1.05, rel=1e-6)
    assert e2e.max_dev_pct == pytest.approx(100 * 0.05 / 1.05, rel=1e-6)
    other = (fx.manifest(trace_id="x", name="another"), fx.workload(), fx.outcomes())
    with pytest.raises(C.ComparisonError, match="repeat 'x'"):
        C.compare(fx.manifest(), fx.workload(), fx.outcomes(), fx.replay(), repeats=[other])


def test_report_is_a_contract_message_roundtrip():
    rep = _report()
    again = vpb.ValidationReport.FromString(rep.SerializeToString())
    assert again == rep and again.schema_version == "unirl_replay.v1"


def test_unavailable_boundary_leaves_out_only_its_metrics():
    """A turn with 0 output tokens has no first token (unavailable, with the reason): its TTFT is
    left out, its E2E and queueing delay are still compared."""
    import compare_fixtures as F
    from unirl_replay.report.matching import match

    workload, outcomes, replay = F.workload(), F.outcomes(), F.replay()
    out = next(r.request for r in outcomes if r.WhichOneof("record") == "request" and r.request.request_id == "r1")
    out.ClearField("first_token_ns")
    out.unavailable_reason = "0 output tokens: no first token"
    m = match(workload, outcomes, replay)
    nc = {(n.metric, n.record_id): n.reason for n in m.not_compared}
    assert "0 output tokens" in nc[("ttft", "r1")]
    assert ("e2e", "r1") not in nc and ("queueing_delay", "r1") not in nc
    assert "r1" in m.unavailable


def test_a_profile_of_other_hardware_makes_the_report_unvalidated():
    """CALIBRATED means a profile measured on the trace's own engine configuration: a profile whose provenance
    names another CPU is UNVALIDATED in the report (status, label, note); the replay result keeps its own."""
    m = fx.manifest()
    m.hardware.cpu_model = "AMD EPYC"
    prof = fx.replay(kind=rpb.TIMING_MODEL_KIND_PROFILE, calibration=rpb.CALIBRATION_STATUS_CALIBRATED)
    prov = {"measured": True, "hardware": {"cpu_model": "Intel Xeon", "cpu_count": 2}, "conditions": {}}
    rep = C.compare(m, fx.workload(), fx.outcomes(), prof, timing=(None, prov, "no tables in this test"))
    assert rep.timing_model.calibration == rpb.CALIBRATION_STATUS_UNVALIDATED
    assert prof.timing_model.calibration == rpb.CALIBRATION_STATUS_CALIBRATED
    assert "(UNVALIDATED on this host: CALIBRATED on other hardware)" in rep.label
    assert any("UNVALIDATED for this capture" in n and "Intel Xeon" in n for n in rep.notes)
    same = dict(prov, hardware={"cpu_model": "AMD EPYC", "cpu_count": 2})
    rep = C.compare(m, fx.workload(), fx.outcomes(), prof, timing=(None, same, "no tables in this test"))
    assert rep.timing_model.calibration == rpb.CALIBRATION_STATUS_CALIBRATED and rep.label.endswith("(CALIBRATED)")
