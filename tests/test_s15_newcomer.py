"""What a newcomer walking the README's tour tripped over (session 15). Hand-built inputs, no engine."""

from __future__ import annotations

from unirl_replay.report import profile_check as pc
from unirl_replay.report.steps import PH_FIRST, PH_PREFILL
from unirl_replay.v1 import report_pb2 as vpb


def _steps(passes):
    es = vpb.EngineSteps(engine_id="e0")
    for phase, tokens, real_ms, model_ms in passes:
        es.intervals.append(vpb.StepInterval(phase=phase, prefill_tokens=tokens, real_ms=real_ms, model_ms=model_ms))
    return [es]


def _growing(phase_of):
    # every size its own ratio, growing with the pass size (the model's form is off)
    sizes = (200, 400, 800, 1200, 1600, 2400, 3200, 4000)
    return [(phase_of(i), n, 10.0 * (1 + n / 2000), 10.0) for i, n in enumerate(sizes)]


def test_prefill_trend_over_first_passes_only_says_so():
    """agentic-a / agentic-ray-a: the table has no `prefill` row (every prompt is a first pass after idle),
    yet the reading said "prefill ratio grows with prompt length" without saying over which passes."""
    text = pc.reading([], _steps(_growing(lambda i: PH_FIRST)))
    assert "prefill ratio grows with prompt length" in text
    assert "over 8 passes, all first passes after idle" in text and "FORM is off" in text


def test_prefill_trend_names_the_mix_of_passes():
    mixed = pc.reading([], _steps(_growing(lambda i: PH_FIRST if i < 2 else PH_PREFILL)))
    assert "over 8 passes, 2 of them first passes after idle" in mixed
    later = pc.reading([], _steps(_growing(lambda i: PH_PREFILL)))
    assert "over 8 later prefill passes" in later
