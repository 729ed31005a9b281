"""Engine steps rebuilt from measured outcomes, and the timing model evaluated outside the simulator.

Hand-built outcomes (times in ms, one engine, max_num_batched_tokens 2048):

    request A (n=2, 100 prompt tokens, outputs 3 and 1): scheduled 10; a0 first 20, completion 40;
                                                        a1 first 20, completion 20
    request B (n=1, 50 prompt tokens, output 2):        scheduled 21; first 30, completion 40

gives three steps: 0 @20 (first pass: prefill a0, a1 = 200 tokens), 1 @30 (prefill B = 50 tokens,
decode a0 with context 101), 2 @40 (decode a0 ctx 102 and B ctx 51).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from replay_build import batch, engine, group, index, manifest, req
from unirl_replay.report import profile_check as pc
from unirl_replay.report.matching import index_workload
from unirl_replay.report.steps import rebuild_steps
from unirl_replay.report.timing_eval import StepModel, read_profile, step_model
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb

MS = 1_000_000
REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def hand_workload():
    return [req("A", inp=100, out=(3, 1), at_ms=0, group="G1", batch="B1"),
            req("B", inp=50, out=(2,), at_ms=0, group="G1", batch="B1"),
            group("G1", ["A", "B"], 2, batch="B1"), batch("B1", ["G1"])]


def out(rid, submit, queued, sched, samples=None, first=None, compl=None):
    o = opb.RequestOutcome(request_id=rid, submit_ns=submit * MS, queued_ns=queued * MS, scheduled_ns=sched * MS)
    if first is not None:
        o.first_token_ns, o.completion_ns = first * MS, compl * MS
    for i, (f, c) in enumerate(samples or []):
        o.samples.add(sample_id=f"{rid}/s{i}", first_token_ns=f * MS, completion_ns=c * MS)
    return opb.OutcomeRecord(request=o)


def hand_outcomes():
    return [out("A", 0, 4, 10, samples=[(20, 40), (20, 20)]),
            out("B", 0, 21, 21, first=30, compl=40),
            opb.OutcomeRecord(group=opb.GroupOutcome(group_id="G1", completed_ns=40 * MS)),
            opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B1", ready_ns=45 * MS))]


def rebuild(workload=None, outcomes=None, eng=None):
    from replay_build import record
    idx = index_workload([record(x) for x in (workload or hand_workload())])
    return idx, rebuild_steps(idx, outcomes or hand_outcomes(), [eng or engine(mnbt=2048, seqs=8)])


def test_steps_rebuilt_by_hand():
    _, rb = rebuild()
    (es,) = rb.engines
    assert es.unavailable_reason == "" and es.samples == 3
    assert [(s.index, s.phase, s.prefill_sequences, s.prefill_tokens, s.decode_sequences, s.kv_tokens)
            for s in es.steps] == [(0, vpb.STEP_PHASE_FIRST_PASS, 2, 200, 0, 0),
                                   (1, vpb.STEP_PHASE_PREFILL, 1, 50, 1, 101),
                                   (2, vpb.STEP_PHASE_DECODE, 0, 0, 2, 153)]
    assert [s.end_ns for s in es.steps] == [20 * MS, 30 * MS, 40 * MS]
    assert es.steps[2].mean_context_tokens == pytest.approx(76.5)
    assert [(iv.first_step, iv.last_step, iv.start_ns, iv.end_ns, iv.phase) for iv in es.intervals] == [
        (0, 0, 10 * MS, 20 * MS, vpb.STEP_PHASE_FIRST_PASS), (1, 1, 20 * MS, 30 * MS, vpb.STEP_PHASE_PREFILL),
        (2, 2, 30 * MS, 40 * MS, vpb.STEP_PHASE_DECODE)]
    assert all(c.passed for c in es.checks)
    assert rb.contexts[("e0", 0, 2)] == ([], [], [102, 51])


def test_contradicting_output_length_is_not_guessed():
    w = hand_workload()
    w[0].output_tokens[:] = [3, 2]  # a1: 2 tokens, but its first token and completion are the same step
    _, rb = rebuild(workload=w)
    (es,) = rb.engines
    assert not es.steps and "contradict the step numbering" in es.unavailable_reason
    assert any(not c.passed for c in es.checks)
    w = hand_workload()
    w[1].output_tokens[:] = [3]  # B: 3 tokens from step 1 ties 30 ms to A's first step: order contradicts time
    _, rb = rebuild(workload=w)
    assert not rb.engines[0].steps and "contradicts time order" in rb.engines[0].unavailable_reason


def test_ambiguous_overlap_is_reported_not_guessed():
    w = [req("A", inp=10, out=(10,), at_ms=0, batch="B1"), req("B", inp=10, out=(2,), at_ms=0, batch="B1")]
    o = [out("A", 0, 1, 1, first=20, compl=80), out("B", 0, 1, 25, first=30, compl=40)]
    _, rb = rebuild(w, o)
    assert "ambiguous" in rb.engines[0].unavailable_reason and not rb.engines[0].steps


def test_ambiguous_overlap_leaves_out_only_its_span():
    # the ambiguous pair A/B (20-80 ms) as above, then C alone at 200-220 ms after an idle engine: C's span is
    # rebuilt, A and B are left out and named, never guessed
    w = [req("A", inp=10, out=(10,), at_ms=0, batch="B1"), req("B", inp=10, out=(2,), at_ms=0, batch="B1"),
         req("C", inp=10, out=(3,), at_ms=0, batch="B2")]
    o = [out("A", 0, 1, 1, first=20, compl=80), out("B", 0, 1, 25, first=30, compl=40),
         out("C", 150, 151, 190, first=200, compl=220)]
    _, rb = rebuild(w, o)
    (es,) = rb.engines
    assert es.unavailable_reason == "" and es.samples == 1
    assert [(s.segment, s.index, s.end_ns) for s in es.steps if s.HasField("end_ns")] == [(0, 0, 200 * MS),
                                                                                         (0, 2, 220 * MS)]
    (bad,) = [c for c in es.checks if not c.passed]
    assert "1 spans left out (2 of 3 samples, requests 'A', 'B')" in bad.detail and "ambiguous" in bad.detail
    assert any("not rebuilt" in n for n in es.notes)
    assert set(rb.placement["e0"]) == {"C"}
    assert es.intervals[0].start_ns == 190 * MS  # the left-out span ended at 80 ms, before C's pass


def test_unique_shift_joins_overlapping_requests():
    # A: 4 tokens 20 -> 50 (steps 0..3), B: 3 tokens 30 -> 60; time order forces B to start on A's step 2
    w = [req("A", inp=10, out=(4,), at_ms=0, batch="B1"), req("B", inp=10, out=(3,), at_ms=0, batch="B1")]
    o = [out("A", 0, 1, 1, first=20, compl=50), out("B", 0, 1, 25, first=30, compl=60)]
    _, rb = rebuild(w, o)
    es = rb.engines[0]
    assert es.unavailable_reason == ""
    assert [(s.prefill_sequences, s.decode_sequences) for s in es.steps] == [(1, 0), (0, 1), (1, 1), (0, 2), (0, 1)]


def test_incomplete_sample_timings_and_chunked_prefill_make_the_engine_unavailable():
    o = hand_outcomes()
    del o[0].request.samples[1]
    _, rb = rebuild(outcomes=o)
    assert "not one first-token and completion time per sample" in rb.engines[0].unavailable_reason
    _, rb = rebuild(eng=engine(mnbt=150, seqs=8))
    assert "max_num_batched_tokens" in rb.engines[0].unavailable_reason


def test_profile_check_on_hand_steps_with_a_fixed_model():
    _, rb = rebuild()
    pc.evaluate_steps(rb.engines, {"e0": StepModel("fixed", 0, fixed=(4.0, 1.0))}, rb.contexts)
    es = rb.engines[0]
    assert [s.model_ms for s in es.steps] == [4.0, 5.0, 1.0]
    ph = {p.phase: p for p in pc.phase_ratios(rb.engines)}
    assert ph["first_pass"].median_ratio == pytest.approx(10 / 4)
    assert ph["prefill"].total_ratio == pytest.approx(10 / 5)
    assert ph["decode B=2-3"].real_ms == pytest.approx(10.0)


def test_interpolation_matches_the_tables_and_extrapolates_linearly():
    from unirl_replay.report.timing_eval import _interp1, _interp2

    tables, prov, _ = read_profile(PROFILE)
    assert prov.get("measured") is True
    m = StepModel("profile", 0, tables=tables)
    isl, ttft = tables["prefill_isl"], tables["prefill_ttft_ms"]
    assert m.prefill_ms([int(isl[3])]) == pytest.approx(ttft[3]) or isl[3] != int(isl[3])
    x, y = np.array([1.0, 2.0, 4.0]), np.array([10.0, 20.0, 30.0])
    assert _interp1(x, y, 3.0) == pytest.approx(25.0)
    assert _interp1(x, y, 6.0) == pytest.approx(40.0)   # linear off the top
    assert _interp1(x, y, 0.0) == pytest.approx(0.0)    # and off the bottom
    z = np.array([[1.0, 2.0], [3.0, 5.0]])
    gx, gy = np.array([0.0, 1.0]), np.array([0.0, 1.0])
    assert _interp2(gx, gy, z, 1.0, 1.0) == pytest.approx(5.0)
    assert _interp2(gx, gy, z, 0.5, 0.5) == pytest.approx(2.75)
    assert _interp2(gx, gy, z, 2.0, 0.0) == pytest.approx(5.0)  # extrapolated along x
    assert StepModel("fixed", 0, fixed=(4.0, 0.5)).decode_ms([10]) == 1.0  # the mocker's 1 ms decode floor


@pytest.mark.parametrize("spec", ["profile", "polynomial"])
def test_model_equals_the_real_simulator(spec):
    """The evaluator reproduces Dynamo Replay's own step times (TTFT = one pass, ITL = decode steps)."""
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_workload

    tm_spec = f"profile:{PROFILE}" if spec == "profile" else "polynomial"
    eng = engine(bs=16, blocks=2048, seqs=32, mnbt=2048, pc=False)
    cases = [((req("r0", inp=400, out=(50,), at_ms=0, bs=16),), [400], [(400, 50)]),
             (tuple(req(f"q{i}", inp=100, out=(20,), at_ms=0, bs=16) for i in range(4)), [100] * 4,
              [(100, 20)] * 4)]
    for reqs, prompts, seqs in cases:
        res = replay_workload(index(*reqs), manifest(eng), tm_spec)
        model, _, why = step_model(res.timing_model, 2048 * 16)
        assert why == ""
        r = res.requests[0]
        ttft_ms = (r.first_token_ns - r.arrival_ns) / MS
        assert ttft_ms == pytest.approx(model.prefill_ms(prompts), rel=0.01)
        # decode: every sequence decodes together after the one prefill pass
        k = seqs[0][1]
        dec = sum(model.decode_ms([p + s for p, _ in seqs]) for s in range(1, k))
        assert (r.completion_ns - r.first_token_ns) / MS == pytest.approx(dec, rel=0.02)


def test_profile_file_that_changed_is_not_evaluated(tmp_path):
    copy = tmp_path / "p.npz"
    copy.write_bytes(PROFILE.read_bytes())
    tm = rpb.TimingModel(kind=rpb.TIMING_MODEL_KIND_PROFILE, calibration=rpb.CALIBRATION_STATUS_CALIBRATED,
                         profile_path=str(copy), profile_sha256="0" * 64)
    model, _, why = step_model(tm, 1)
    assert model is None and "not the file the replay used" in why
    tm.profile_path = "nowhere.npz"
    assert "not found" in step_model(tm, 1)[2]


def _synthetic(ratio_of_b, prefill_ratio):
    es = vpb.EngineSteps(engine_id="e0")
    k = 0
    for b in (2, 4, 8, 16, 32):
        for _ in range(3):
            es.intervals.add(segment=k, first_step=1, last_step=1, phase=vpb.STEP_PHASE_DECODE, decode_sequences=b,
                             real_ms=2.0 * ratio_of_b(b), model_ms=2.0)
            k += 1
    es.intervals.add(segment=k, first_step=1, last_step=1, phase=vpb.STEP_PHASE_PREFILL, prefill_tokens=500,
                     real_ms=10.0 * prefill_ratio, model_ms=10.0)
    return [es]


@pytest.mark.parametrize("ratio,prefill,expect", [
    (lambda b: b ** 0.3, 1.5, "grows with batch size"),
    (lambda b: 1.5, 1.5, "LEVEL"),
    (lambda b: 1.02, 0.98, "fits this window"),
    (lambda b: 1.5, 0.6, "differs between phases"),
])
def test_the_reading_tells_form_from_level(ratio, prefill, expect):
    es = _synthetic(ratio, prefill)
    assert expect in pc.reading(pc.phase_ratios(es), es)
