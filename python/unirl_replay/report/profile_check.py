"""Profile check: the replay's timing model evaluated on the REAL step schedule.

For every rebuilt step (:mod:`unirl_replay.report.steps`) the model's cost of that exact pass is
computed (:mod:`unirl_replay.report.timing_eval`, the mocker's math) and written into
``EngineStep.model_ms``; every measured interval gets the sum over its steps (``StepInterval.model_ms``).
The ratio real / model is then summarised per phase: the first pass after idle, later (batched)
prefill passes, and decode steps by batch-size bucket (1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+),
with the median and quartiles over intervals and the total ratio, next to the profile's own
repeat spread from its provenance.

The reading (``ProfileCheck.reading``), with the rule written down:

- decode buckets with at least :data:`MIN_INTERVALS` intervals are compared; when the per-interval
  ratio rises with batch size (Spearman rank correlation over decode intervals > :data:`TREND_RHO`
  and the last bucket's median / the first's > :data:`FORM_FACTOR`; or the mirror image: falls),
  the ratio **grows (falls) with batch size: the model's form** is wrong;
- likewise prefill intervals against their new-token count (ratio of the upper half over the
  lower half of prompt lengths > :data:`FORM_FACTOR`): **grows with prompt length**; read over the
  later prefill passes (never mixed with first passes after idle, which hold first-call stalls), or,
  in a window with fewer than ``2 x`` :data:`MIN_INTERVALS` of them, over its first passes, said so;
- but first, the largest group of later prefill passes of about the same size (new tokens within a
  factor :data:`SAME_SIZE_FACTOR`, at least ``2 x`` :data:`MIN_INTERVALS` passes): when their ratios
  spread by more than ``FORM_FACTOR ** 2`` (90th over 10th percentile), **same-size passes ran at
  different speeds**: the engine's speed varied within the window (contention on its cores), which no
  form of the model explains, and no trend with prompt length is read through it (a GRPO window's
  budget-filled passes of ~4k tokens ran 0.9x or 2x the model, bimodal, on a 2-core host);
- otherwise, when every phase's median lies within a factor :data:`FORM_FACTOR` of the decode
  median, the ratio is **uniform: the engine's level (or the conditions) differ** between the
  calibration and the capture; the form of the profile holds;
- a uniform ratio near 1 (within the profile's spread) reads as "the profile fits this window".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from unirl_replay.report.steps import PH_DECODE, PH_FIRST, PH_PREFILL
from unirl_replay.report.timing_eval import StepModel
from unirl_replay.v1 import report_pb2 as vpb

MIN_INTERVALS = 3
FORM_FACTOR = 1.25
TREND_RHO = 0.5
#: prefill passes whose new-token counts lie within this factor of one another are "the same size"
SAME_SIZE_FACTOR = 1.15


def same_size_spread(intervals: Sequence[vpb.StepInterval]) -> dict | None:
    """The largest group of later prefill passes (``PH_PREFILL`` intervals with a model cost) whose new-token
    counts lie within :data:`SAME_SIZE_FACTOR`, when it holds at least ``2 * MIN_INTERVALS`` passes and their
    real / model ratios spread by more than ``FORM_FACTOR ** 2`` (90th over 10th percentile); else None.

    Returns ``{"passes", "tokens_lo", "tokens_hi", "q10", "q90", "slow"}`` (``slow``: passes more than
    :data:`FORM_FACTOR` times the group's 25th-percentile ratio)."""
    ivs = sorted((iv for iv in intervals if iv.phase == PH_PREFILL and iv.HasField("model_ms") and iv.model_ms > 0
                  and iv.prefill_tokens > 0), key=lambda iv: iv.prefill_tokens)
    best: list = []
    j = 0
    for i in range(len(ivs)):
        j = max(j, i)
        while j + 1 < len(ivs) and ivs[j + 1].prefill_tokens <= ivs[i].prefill_tokens * SAME_SIZE_FACTOR:
            j += 1
        if j - i + 1 > len(best):
            best = ivs[i:j + 1]
    if len(best) < 2 * MIN_INTERVALS:
        return None
    r = np.array([iv.real_ms / iv.model_ms for iv in best])
    q10, q25, q90 = (float(x) for x in np.percentile(r, [10, 25, 90]))
    if q10 <= 0 or q90 / q10 <= FORM_FACTOR ** 2:
        return None
    return {"passes": len(best), "tokens_lo": int(best[0].prefill_tokens), "tokens_hi": int(best[-1].prefill_tokens),
            "q10": q10, "q90": q90, "slow": int(np.sum(r > FORM_FACTOR * q25))}


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); 0 when either side is constant."""
    def ranks(v):
        a = np.asarray(v, dtype=np.float64)
        order = np.argsort(a, kind="mergesort")
        r = np.empty(a.size)
        r[order] = np.arange(a.size, dtype=np.float64)
        for val in np.unique(a):  # ties: average rank
            m = a == val
            r[m] = r[m].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])
BUCKETS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 1 << 30))


def bucket_name(b: int) -> str:
    for lo, hi in BUCKETS:
        if lo <= b <= hi:
            return f"decode B={lo}" if lo == hi else (f"decode B={lo}-{hi}" if hi < 1 << 30 else f"decode B>={lo}")
    return "decode B=0"


def evaluate_steps(engine_steps: Sequence[vpb.EngineSteps], models: dict[str, StepModel],
                   contexts: dict[tuple[str, int, int], tuple[list[int], list[int], list[int]]]) -> None:
    """Fill ``model_ms`` of every step and interval in place.

    ``contexts[(engine, segment, step)] = (prefill new tokens, prefill prefix tokens, decode contexts)``
    per sequence (``steps.Rebuild.contexts``).
    """
    for es in engine_steps:
        model = models.get(es.engine_id)
        if es.unavailable_reason or model is None:
            continue
        by_key = {}
        for st in es.steps:
            pre_new, pre_prefix, dec = contexts[(es.engine_id, st.segment, st.index)]
            st.model_ms = model.pass_ms(pre_new, dec, pre_prefix)
            by_key[(st.segment, st.index)] = st.model_ms
        for iv in es.intervals:
            iv.model_ms = sum(by_key[(iv.segment, s)] for s in range(iv.first_step, iv.last_step + 1))


def phase_of(iv: vpb.StepInterval) -> str | None:
    if iv.phase == PH_FIRST:
        return "first_pass"
    if iv.phase == PH_PREFILL:
        return "prefill"
    if iv.phase == PH_DECODE:
        return bucket_name(iv.decode_sequences)
    return None


def phase_ratios(engine_steps: Sequence[vpb.EngineSteps]) -> list[vpb.PhaseRatio]:
    groups: dict[str, list[vpb.StepInterval]] = {}
    for es in engine_steps:
        for iv in es.intervals:
            name = phase_of(iv)
            if name is not None and iv.HasField("model_ms") and iv.model_ms > 0:
                groups.setdefault(name, []).append(iv)
    order = ["first_pass", "prefill"] + [bucket_name(lo) for lo, _ in BUCKETS]
    out = []
    for name in order:
        ivs = groups.get(name)
        if not ivs:
            continue
        r = np.array([iv.real_ms / iv.model_ms for iv in ivs])
        real = float(sum(iv.real_ms for iv in ivs))
        mod = float(sum(iv.model_ms for iv in ivs))
        out.append(vpb.PhaseRatio(phase=name, intervals=len(ivs),
                                  steps=sum(iv.last_step - iv.first_step + 1 for iv in ivs),
                                  median_ratio=float(np.median(r)), p25_ratio=float(np.percentile(r, 25)),
                                  p75_ratio=float(np.percentile(r, 75)), total_ratio=real / mod,
                                  real_ms=real, model_ms=mod))
    return out


def reading(phases: Sequence[vpb.PhaseRatio], engine_steps: Sequence[vpb.EngineSteps]) -> str:
    dec = [p for p in phases if p.phase.startswith("decode") and p.intervals >= MIN_INTERVALS]
    words = []
    ivs = [iv for es in engine_steps for iv in es.intervals if iv.phase == PH_DECODE and iv.HasField("model_ms")
           and iv.model_ms > 0 and iv.decode_sequences > 0]
    if len(dec) >= 2 and len(ivs) >= 2 * MIN_INTERVALS:
        rho = _spearman([iv.decode_sequences for iv in ivs], [iv.real_ms / iv.model_ms for iv in ivs])
        first, last = dec[0].median_ratio, dec[-1].median_ratio
        trend = ("grows" if rho > TREND_RHO and first > 0 and last / first > FORM_FACTOR else
                 "falls" if rho < -TREND_RHO and last > 0 and first / last > FORM_FACTOR else "")
        if trend:
            words.append(f"decode ratio {trend} with batch size ({dec[0].phase} {first:.2f}x -> {dec[-1].phase} "
                         f"{last:.2f}x, Spearman {rho:+.2f} over {len(ivs)} intervals): the model's FORM is off")
    pre = [iv for es in engine_steps for iv in es.intervals if iv.phase in (PH_PREFILL, PH_FIRST)
           and iv.HasField("model_ms") and iv.model_ms > 0]
    spread = same_size_spread(pre)
    if spread:
        words.append(f"prefill passes of about the same size ({spread['passes']} passes of {spread['tokens_lo']}-"
                     f"{spread['tokens_hi']} new tokens) ran {spread['q10']:.2f}x-{spread['q90']:.2f}x the model (10th-90th "
                     f"percentile; {spread['slow']} of {spread['passes']} more than {FORM_FACTOR}x the group's 25th "
                     "percentile): the engine's SPEED VARIED within the window (contention: a process on the worker's "
                     "core, or the host's: on a VM whose vCPUs share a physical core a pass runs at about half speed "
                     "while another vCPU is busy, benchmarks/sibling_interference.py), which no form of the model "
                     "explains; no trend with prompt length is read through it")
    else:
        # The prompt-length trend is read over later prefill passes only, as the uniform reading below is (a first
        # pass after idle also holds first-call stalls); only a window with too few of them (an agentic window:
        # every prompt a first pass) is read over its first passes, and the reading says so.
        later = [iv for iv in pre if iv.phase == PH_PREFILL]
        firsts = [iv for iv in pre if iv.phase == PH_FIRST]
        if len(later) >= 2 * MIN_INTERVALS:
            sel, which = later, f"{len(later)} later prefill passes"
        else:
            sel, which = firsts, (f"{len(firsts)} passes, all first passes after idle, which also hold first-call "
                                  "stalls")
        if len(sel) >= 2 * MIN_INTERVALS:
            sel.sort(key=lambda iv: iv.prefill_tokens)
            h = len(sel) // 2
            lo = float(np.median([iv.real_ms / iv.model_ms for iv in sel[:h]]))
            hi = float(np.median([iv.real_ms / iv.model_ms for iv in sel[h:]]))
            if lo > 0 and hi / lo > FORM_FACTOR:  # lo 0: the short half are passes of no measured length (a
                # first pass scheduled at its first token), no level to compare with
                words.append(f"prefill ratio grows with prompt length ({lo:.2f}x short, {hi:.2f}x long over "
                             f"{which}): the model's FORM is off")
    if words:
        return "; ".join(words)
    usable = [p for p in phases if p.phase != "first_pass" and (p.intervals >= MIN_INTERVALS or p.phase == "prefill")]
    if not usable:
        return "too few measured intervals to read (fewer than %d per phase)" % MIN_INTERVALS
    dec_all = [p for p in phases if p.phase.startswith("decode")]
    ref = (sum(p.real_ms for p in dec_all) / sum(p.model_ms for p in dec_all)) if dec_all else usable[0].total_ratio
    far = [p for p in usable if not (ref > 0 and 1 / FORM_FACTOR <= p.median_ratio / ref <= FORM_FACTOR)]
    listed = ", ".join(f"{p.phase} {p.median_ratio:.2f}x" for p in usable)
    first = next((p for p in phases if p.phase == "first_pass"), None)
    tail = (f"; first passes after idle {first.median_ratio:.2f}x (first-call stalls and passes holding only the "
            f"requests already delivered)") if first else ""
    if far:
        return (f"ratio differs between phases ({listed}; decode overall {ref:.2f}x): neither a uniform level nor "
                f"a trend with batch size or prompt length" + tail)
    lvl = sum(p.real_ms for p in usable) / sum(p.model_ms for p in usable)
    if abs(lvl - 1) < 0.1:
        return f"ratio uniform and near 1 ({lvl:.2f}x; {listed}): the profile fits this window's engine" + tail
    return (f"ratio uniform across phases and batch sizes ({listed}; overall {lvl:.2f}x): the profile's FORM "
            f"holds; the engine's LEVEL (its speed under this window's conditions) differs from the calibration's "
            f"by {lvl:.2f}x" + tail)
