"""The profile check's reading of prefill passes: a trend with size (the model's form) against same-size
passes that ran at different speeds (the engine's speed varied within the window). Hand-built intervals."""

from __future__ import annotations

from unirl_replay.report import profile_check as pc
from unirl_replay.report.steps import PH_FIRST, PH_PREFILL
from unirl_replay.v1 import report_pb2 as vpb


def _steps(passes):
    es = vpb.EngineSteps(engine_id="e0")
    for phase, tokens, real_ms, model_ms in passes:
        es.intervals.append(vpb.StepInterval(phase=phase, prefill_tokens=tokens, real_ms=real_ms, model_ms=model_ms))
    return [es]


def test_same_size_passes_at_two_speeds_read_as_a_varying_speed_not_the_form():
    # a GRPO window's budget-filled passes of ~4k tokens (holdout-closed-f26m2 r1): 0.9-1.0x or 1.7-2.2x the model,
    # plus the calls' last, shorter passes at ~1x: "grows with prompt length" would be a wrong reading
    ratios = [2.14, 1.00, 2.12, 0.91, 0.92, 1.71, 2.16, 0.94, 0.94, 1.01, 0.99, 1.47, 1.78, 0.92, 0.97, 1.76]
    passes = [(PH_PREFILL, 3900 + 10 * i, 100.0 * r, 100.0) for i, r in enumerate(ratios)]
    passes += [(PH_PREFILL, 900, 50.0, 48.0), (PH_PREFILL, 2800, 88.0, 91.0), (PH_FIRST, 119, 15.0, 6.0)]
    spread = pc.same_size_spread(_steps(passes)[0].intervals)
    assert spread["passes"] == 16 and (spread["tokens_lo"], spread["tokens_hi"]) == (3900, 4050)
    assert spread["q90"] / spread["q10"] > pc.FORM_FACTOR ** 2 and spread["slow"] == 7
    text = pc.reading([], _steps(passes))
    assert "SPEED VARIED" in text and "16 passes of 3900-4050 new tokens" in text
    assert "FORM" not in text


def test_a_clean_trend_with_size_still_reads_as_the_form():
    # every size its own ratio, growing with the pass size; same-size passes agree
    passes = [(PH_PREFILL, n, 10.0 * (1 + n / 2000), 10.0) for n in (200, 400, 800, 1200, 1600, 2400, 3200, 4000)]
    assert pc.same_size_spread(_steps(passes)[0].intervals) is None
    assert "prefill ratio grows with prompt length" in pc.reading([], _steps(passes))


def test_too_few_same_size_passes_say_nothing_about_speed():
    passes = [(PH_PREFILL, 4000, 200.0, 100.0), (PH_PREFILL, 4010, 95.0, 100.0), (PH_PREFILL, 4020, 210.0, 100.0)]
    assert pc.same_size_spread(_steps(passes)[0].intervals) is None


def test_the_recorded_binding_names_who_may_share_the_workers_core():
    from unirl_replay.report.conditions import shared_cores

    text = ("OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=1; pid 3457 python: 7 threads, affinity 0-1 x7; "
            "pid 3523 VLLM::EngineCor: 13 threads, affinity 0-1 x13; pid 3549 VLLM::Worker: 46 threads, affinity 1 x46")
    assert shared_cores(text) == ("pid 3549 VLLM::Worker is bound to CPU 1, where pid 3457 python (7 threads) and "
                                  "pid 3523 VLLM::EngineCor (13 threads) may also run")
    # the others kept off the worker's core: nothing shares it
    apart = text.replace("affinity 0-1 x7", "affinity 0 x7").replace("affinity 0-1 x13", "affinity 0 x13")
    assert shared_cores(apart) is None
    assert shared_cores("VLLM_CPU_OMP_THREADS_BIND unset; pid 1 python: 3 threads, affinity 0-1 x3") is None
    assert shared_cores("garbage; pid x y: z threads, affinity ?") is None
    mixed = "pid 9 VLLM::Worker: 4 threads, affinity 2 x3, 0-3 x1; pid 8 python: 2 threads, affinity 0-3 x2"
    assert shared_cores(mixed) is None  # a worker thread may run anywhere: not bound to a subset
