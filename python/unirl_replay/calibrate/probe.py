"""The reference probe and the probe-levelled profile (``unirl-replay calibrate --level-to-probe``).

A calibrated profile has the right FORM for the engine but the LEVEL of its calibration session;
on a shared host the capture window's engine can run 1.4-1.8x slower (fidelity-findings.md). A
**reference probe** is a few fixed points run in the capture's own engine right before and after the
window (:data:`PROBE_POINTS`, a few repeats each), stored as the trace's ``ReferenceProbe``
entries (calibration role, never mixed into the window's records).

A **probe-levelled profile** is the base profile scaled to the level the probe measured
(:func:`level_profile`), by one of two methods (``levelling=``):

* ``two_term``. **Decode**: the fitted ``D(B, ctx) = d0 + d1*B*ctx + d2*B`` gets two
  factors, ``D'(B, ctx) = a*d0 + c*(d1*B*ctx + d2*B)``: ``a`` levels the fixed per-step part,
  ``c`` the per-sequence part, solved from the decode points' medians (one median per (B, ctx) over
  the probe's entries: B=1 and B=32 at 128 tokens; least squares when more). Refused, with the
  reason recorded, when there are fewer than two distinct points, ``d0 <= 0``, the 2-column system
  is ill-conditioned (:data:`MAX_CONDITION`), or ``a`` or ``c`` comes out <= 0: the decode table is
  then scaled by the scalar level (the fallback is recorded). The ``decode_itl (K, C)`` table is scaled
  cell by cell by ``D'(B, C) / D(B, C)`` with ``B = K / C`` (clipped to 1..max_num_seqs as the fit
  does), which keeps the table's measured residual form. **Prefill**: one level per prefill point
  (probe median / fitted ``P(n)``, ``n`` = the pass's new tokens: the isolated 512-token row and the
  batched 8-row 2048-token pass), the median per ``n``; the table is scaled by a level that varies
  with the pass's new tokens, interpolated in log tokens between the points and flat outside them.
  A batched point that carries its repeats' own pass sizes (7 or 8 rows) is levelled per repeat
  (``repeat_step_ms / P(repeat_pass_tokens)``), placed at its median-low size.
  Not a fixed + per-token fit like decode: ``p0`` is ~2 % of ``P(512)`` on the bound profile, so two
  points whose levels differ put the difference on the fixed part, amplified ~50x (``a`` < 0 on
  the last holdout's levels 1.0 / 1.24); that fit is computed and recorded (``prefill.two_term_check``)
  but never used.
* ``scalar`` (the default: it measured closer than ``two_term`` in both holdouts that compared them,
  results/holdout-quiet-twoterm and results/holdout-probe2: GRPO readiness 21.5 vs 21.8 % and 18.1 vs
  21.3 %, request E2E 15.6 vs 16.1 % and 10.2 vs 12.3 %; agentic equal): the decode table x the median over decode
  points of (probe / fitted ``D``); the prefill table x the median over the isolated prefill points
  (batch size <= 1) of (probe / fitted ``P``).

Which points: ``probe_condition="isolated"`` (default) rests on ``ReferenceProbe.points``, measured with
every engine running the same point at once; ``"contended"`` on ``contended_points``, each measured on one
engine while every other engine ran a steady decode load (capture.probe's contended part,
``capture --probe-contended N``): a batched prefill pass ran ~1.2x slower while the other engine decoded
than while it idled or prefilled (results/holdout-probe2/probe_overlap.md), and a GRPO window's engines
decode side by side; ``"mixed"`` takes decode from the contended points and prefill from the probe's own
(exploratory: chosen after results/holdout-probe3, where the windows' decode sat nearer the contended level
and their prefill nearer the isolated one). The provenance names it (``probe_condition``; ``variant`` ``CALIBRATED+PROBE contended``).

The scalar levels are computed and recorded either way (``decode_level``, ``prefill_level``), so a
report can show both. It is a separate calibration workload with its own provenance:
``probe_levelled`` holds the base profile's name and sha256, the probe entries, the method, both
methods' factors and the points they rest on; ``calibration_workloads`` adds ``probe:<trace_id>``;
the replay labels it ``CALIBRATED+PROBE``. The base profile is unchanged.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

# the fixed reference probe's points (phase, batch size, context tokens, prefill tokens), repeats and
# decode steps are defined once, where the probe runs: capture.probe, inside the capture's engines
from unirl_replay.capture.probe import (DECODE_PROMPT_TOKENS, PROBE_DECODE_STEPS, PROBE_POINTS, PROBE_REPEATS,
                                        point_key, probe_points)
from unirl_replay.contract.json_profile import to_dict
from unirl_replay.v1 import manifest_pb2 as mpb

__all__ = ["PROBE_POINTS", "PROBE_REPEATS", "PROBE_DECODE_STEPS", "ProbeError", "levels", "level_profile",
           "decode_two_term", "prefill_by_tokens", "LEVELLING_METHODS", "MAX_CONDITION", "PROBE_CONDITIONS",
           "probes_for", "reference_plan", "reference_summary"]

#: ``level_profile(levelling=...)``
LEVELLING_METHODS = ("two_term", "scalar")
#: ``level_profile(probe_condition=...)``: which of a probe entry's points it rests on
PROBE_CONDITIONS = ("isolated", "contended", "mixed")
CONTENDED_CONDITION = ("levelled to ReferenceProbe.contended_points (each point measured on one engine while every "
                       "other engine ran a steady decode load; capture.probe's contended part), not to points")
MIXED_CONDITION = ("decode levelled to ReferenceProbe.contended_points (the other engines decoding), prefill to the "
                   "probe's points (every engine running the same point): a GRPO window's engines decode side by "
                   "side and start a batch's prefill together; exploratory (results/holdout-probe3)")
#: the two-term decode system (columns scaled to unit norm) is refused above this condition number
MAX_CONDITION = 100.0


class ProbeError(ValueError):
    """The probe or the base profile cannot level a profile."""


def reference_plan(repeats: int, max_num_seqs: int = 1 << 20, max_num_batched_tokens: int = 1 << 20) -> dict[str, Any]:
    """The calibration driver's spec for measuring the probe's own points (:data:`PROBE_POINTS`, the same
    definitions: decode prompts of ``DECODE_PROMPT_TOKENS`` tokens and ``PROBE_DECODE_STEPS`` steps, the isolated
    512-token row, the batched pass as a lead row + 8 rows of 256) in the calibration engine. A point the engine
    cannot run as the probe defines it (a decode batch above ``max_num_seqs``, a prefill pass above
    ``max_num_batched_tokens``) is left out and listed in ``skipped`` with the reason."""
    keep, skipped = [], []
    for p in PROBE_POINTS:
        phase, b, _ctx, pre = p
        if phase == "decode" and b > max_num_seqs:
            skipped.append({"key": point_key(p), "reason": f"batch {b} > max_num_seqs {max_num_seqs}"})
        elif phase == "prefill" and pre > max_num_batched_tokens:
            skipped.append({"key": point_key(p), "reason": f"{pre} tokens > max_num_batched_tokens {max_num_batched_tokens}"})
        else:
            keep.append(list(p))
    return {"points": keep, "repeats": int(repeats), "skipped": skipped,
            "decode_prompt_tokens": DECODE_PROMPT_TOKENS, "decode_steps": PROBE_DECODE_STEPS}


def reference_summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The driver's reference-point records summarised as the probe summarises its own (``capture.probe.probe_points``:
    per point median and quartiles, usable and unusable repeats, the batched pass's rows and tokens), each with its
    ``key`` (:func:`capture.probe.point_key`)."""
    return probe_points(records, keep_key=True)


def _reference_medians(prov: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The calibration session's own medians of the probe's points (provenance ``reference_points``), by key."""
    out = {}
    for q in prov.get("reference_points") or []:
        if isinstance(q, dict) and isinstance(q.get("median_ms"), (int, float)) and q["median_ms"] > 0 and q.get("key"):
            out[str(q["key"])] = q
    return out


#: ``levels`` / ``decode_two_term`` / ``prefill_by_tokens``: what a probe point is divided by
REFERENCE_SESSION, REFERENCE_FIT = "calibration_session", "fit"


def _references(prov: dict[str, Any]):
    """``ref(phase, batch_size, context_tokens, prefill_tokens) -> (ms, source)``: the calibration session's median of
    the same probe point where the provenance has it (``reference_points``; the batched pass at another size than the
    session's is scaled by the fit, ``median * P(n) / P(n_ref)``), else the base fit's ``D`` / ``P`` (``source`` says
    which: :data:`REFERENCE_SESSION` or :data:`REFERENCE_FIT`). Like with like: a profile swept with multi-row passes
    no longer describes a one-row 512-token pass by its fit, so its probe levels rest on its own measured points."""
    prefill, decode = _fit_models(prov)
    refs = _reference_medians(prov)
    batched = next((q for k, q in refs.items() if k.startswith("prefill:b")
                    and int(q.get("prefill_tokens") or 0) > 0), None)

    def ref(phase: str, b: int, ctx: int, n: int) -> tuple[float, str]:
        if phase == "decode":
            q = refs.get(point_key(("decode", b, ctx, 0)))
            return (float(q["median_ms"]), REFERENCE_SESSION) if q else (decode(b, ctx), REFERENCE_FIT)
        if b > 1:
            if batched is None:
                return prefill(n), REFERENCE_FIT
            n_ref = int(batched["prefill_tokens"])
            scale = 1.0 if n == n_ref else prefill(n) / prefill(n_ref)
            return float(batched["median_ms"]) * scale, REFERENCE_SESSION
        q = refs.get(point_key(("prefill", 0, 0, n)))
        return (float(q["median_ms"]), REFERENCE_SESSION) if q else (prefill(n), REFERENCE_FIT)

    return ref


#: The tables of a ``dynamo_profile`` NPZ (every one is levelled or copied).
PROFILE_TABLES = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


def _fit_models(prov: dict[str, Any]):
    fit = prov.get("fit") or {}
    try:
        p = fit["prefill"]["coefficients"]
        d = fit["decode"]["coefficients"]
        p0, p1, p2 = float(p["p0"]), float(p["p1"]), float(p["p2"])
        d0, d1, d2 = float(d["d0"]), float(d["d1"]), float(d["d2"])
    except (KeyError, TypeError, ValueError) as e:
        raise ProbeError(f"the base profile's provenance has no fitted coefficients ({e}): it cannot be levelled") from e
    max_seqs = float(((prov.get("engine") or {}).get("from_trace") or {}).get("max_num_seqs") or 1 << 20)

    def prefill(n: float) -> float:
        return p0 + p1 * n + p2 * n * n

    def decode(b: int, ctx: int) -> float:
        return d0 + d1 * b * ctx + d2 * min(max(b, 1), max_seqs)

    return prefill, decode


def _coefficients(prov: dict[str, Any]) -> tuple[dict[str, float], dict[str, float], float]:
    _fit_models(prov)  # raises ProbeError when they are missing
    fit = prov["fit"]
    p = {k: float(v) for k, v in fit["prefill"]["coefficients"].items()}
    d = {k: float(v) for k, v in fit["decode"]["coefficients"].items()}
    max_seqs = float(((prov.get("engine") or {}).get("from_trace") or {}).get("max_num_seqs") or 1 << 20)
    return p, d, max_seqs


def _median_by(points: list[tuple[Any, float]]) -> dict[Any, float]:
    by: dict[Any, list[float]] = {}
    for key, v in points:
        by.setdefault(key, []).append(v)
    return {k: float(np.median(v)) for k, v in sorted(by.items())}


def _two_factors(x0: list[float], x1: list[float], m: list[float]) -> tuple[float | None, float | None, str | None, float]:
    """Least squares of ``m = a*x0 + c*x1``: (a, c, refusal reason or None, condition number)."""
    A = np.array([x0, x1], dtype=np.float64).T
    norms = np.linalg.norm(A, axis=0)
    if np.any(norms <= 0):
        return None, None, "a column of the two-term system is zero", float("inf")
    cond = float(np.linalg.cond(A / norms))
    if not np.isfinite(cond) or cond > MAX_CONDITION:
        return None, None, f"the two-term system is ill-conditioned (condition number {cond:.3g} > {MAX_CONDITION:g})", cond
    (a, c), *_ = np.linalg.lstsq(A, np.asarray(m, dtype=np.float64), rcond=None)
    if a <= 0 or c <= 0:
        return float(a), float(c), (f"the solution is not positive (fixed factor {a:.4g}, variable factor {c:.4g}): "
                                    "the points do not support two separate levels"), cond
    return float(a), float(c), None, cond


def decode_two_term(probes: list[mpb.ReferenceProbe], prov: dict[str, Any]) -> dict[str, Any]:
    """The two decode factors ``a`` (fixed part ``d0``) and ``c`` (per-sequence part) from the probe.

    Returns ``{"method": "two_term", "fixed_factor", "per_sequence_factor", "points", "condition",
    "residual_pct"}``, or ``{"method": "refused", "reason", "points", ...}`` (never raises for a
    refusal: the caller falls back to the scalar level and records why).
    """
    _p, d, max_seqs = _coefficients(prov)
    d0, d1, d2 = d["d0"], d["d1"], d["d2"]
    ref = _references(prov)
    probe_med = _median_by([((pt.batch_size, pt.context_tokens), pt.median_ms) for probe in probes for pt in probe.points
                            if pt.phase == "decode" and pt.batch_size and pt.context_tokens and pt.median_ms > 0])
    pts, med = [], {}
    for (b, ctx), m in probe_med.items():
        fitted = d0 + d1 * b * ctx + d2 * min(max(b, 1), max_seqs)
        r, source = ref("decode", b, ctx, 0)
        med[(b, ctx)] = m / r * fitted  # the level (probe / reference) times the fit: what D' must give there
        pts.append({"batch_size": b, "context_tokens": ctx, "probe_median_ms": round(m, 4),
                    "fitted_ms": round(fitted, 4), "reference_ms": round(r, 4), "reference": source,
                    "target_ms": round(med[(b, ctx)], 4)})
    out: dict[str, Any] = {"points": pts}
    if len(med) < 2:
        return {**out, "method": "refused", "reason": f"{len(med)} distinct decode point(s): two are needed"}
    if d0 <= 0:
        return {**out, "method": "refused", "reason": f"the base fit's fixed part d0 = {d0:.4g} ms is not positive"}
    x0 = [d0] * len(med)
    x1 = [d1 * b * ctx + d2 * min(max(b, 1), max_seqs) for b, ctx in med]
    a, c, why, cond = _two_factors(x0, x1, list(med.values()))
    out["condition"] = round(cond, 4)
    if why:
        return {**out, "method": "refused", "reason": why, "fixed_factor": a, "per_sequence_factor": c}
    fitted = [a * u + c * v for u, v in zip(x0, x1)]
    res = [100.0 * (f - m) / m for f, m in zip(fitted, med.values())]
    for pt, f in zip(pts, fitted):
        pt["levelled_ms"] = round(f, 4)
    return {**out, "method": "two_term", "fixed_factor": a, "per_sequence_factor": c,
            "residual_pct": [round(r, 4) for r in res]}


def decode_table_ratio(kv: np.ndarray, ctx: np.ndarray, prov: dict[str, Any], a: float, c: float) -> np.ndarray:
    """``D'(B, C) / D(B, C)`` on the ``decode_itl`` grid (rows: summed context K, columns: mean context C)."""
    _p, d, max_seqs = _coefficients(prov)
    K = np.asarray(kv, dtype=np.float64)[:, None]
    C = np.asarray(ctx, dtype=np.float64)[None, :]
    B = np.clip(K / C, 1.0, max_seqs)
    var = d["d1"] * K + d["d2"] * B
    base = d["d0"] + var
    if np.any(base <= 0):
        raise ProbeError("the base fit's D(B, C) is not positive on part of the decode grid: it cannot be levelled "
                         "cell by cell")
    return (a * d["d0"] + c * var) / base


def prefill_by_tokens(probes: list[mpb.ReferenceProbe], prov: dict[str, Any]) -> dict[str, Any]:
    """Prefill levels per pass size (new tokens): ``{"method", "points": [{tokens, rows, level, ...}],
    "two_term_check"}``; the table's level is interpolated in log tokens between them, flat outside."""
    p, _d, _ = _coefficients(prov)
    ref = _references(prov)

    def P(n: float) -> float:
        return p["p0"] + p["p1"] * n + p["p2"] * n * n

    used: dict[Any, str] = {}

    def R(b: int, n: int, key: Any) -> float:
        r, source = ref("prefill", b, 0, n)
        used[key] = source
        return r

    # one level per repeat where the point carries its repeats' own pass sizes (the batched pass: 7 or 8 rows),
    # else the point's median over the model at its size; the median per point size (isolated / batched)
    # the batched point's entries are one point whatever size each entry's passes had (its position: the
    # median-low of all its passes' tokens); the isolated point(s) by their tokens
    raw: list[tuple[Any, float]] = []
    rows: dict[Any, set[int]] = {}
    sizes: dict[Any, list[int]] = {}
    for probe in probes:
        for pt in probe.points:
            if pt.phase != "prefill" or not pt.prefill_tokens or pt.median_ms <= 0:
                continue
            key = ("batched", 0) if pt.batch_size > 1 else ("isolated", pt.prefill_tokens)
            rows.setdefault(key, set()).add(max(pt.batch_size, 1))
            if len(pt.repeat_step_ms) and len(pt.repeat_pass_tokens) == len(pt.repeat_step_ms):
                raw += [(key, ms / R(pt.batch_size, n, key)) for ms, n in zip(pt.repeat_step_ms, pt.repeat_pass_tokens)
                        if ms > 0 and n > 0]
                sizes.setdefault(key, []).extend(n for ms, n in zip(pt.repeat_step_ms, pt.repeat_pass_tokens)
                                                 if ms > 0 and n > 0)
                rows[key].update(pt.repeat_pass_rows)
            else:
                raw.append((key, pt.median_ms / R(pt.batch_size, pt.prefill_tokens, key)))
                sizes.setdefault(key, []).append(pt.prefill_tokens)
    by_key = _median_by(raw)
    where = {k: int(np.percentile(sizes[k], 50, method="lower")) for k in by_key}
    lv: dict[int, float] = {}
    for k, v in sorted(by_key.items(), key=lambda kv: where[kv[0]]):
        if where[k] in lv:  # an isolated and a batched point at one size: their mean level there
            v = 0.5 * (lv[where[k]] + v)
        lv[where[k]] = v
    pts = [{"tokens": where[k], "kind": k[0], "rows": sorted(rows[k]), "level": round(lv[where[k]], 4),
            "fitted_ms": round(P(where[k]), 4), "levels": sum(1 for kk, _ in raw if kk == k),
            "reference": used.get(k, REFERENCE_FIT)}
           for k in sorted(by_key, key=lambda k: where[k])]
    if len({q["tokens"] for q in pts}) < len(pts):
        seen: set[int] = set()
        pts = [q for q in pts if not (q["tokens"] in seen or seen.add(q["tokens"]))]
    out: dict[str, Any] = {"method": "log_tokens_interpolation" if len(lv) > 1 else "flat", "points": pts}
    if len(lv) > 1:
        ns = list(lv)
        a, c, why, cond = _two_factors([p["p0"]] * len(ns), [p["p1"] * n + p["p2"] * n * n for n in ns],
                                       [lv[n] * P(n) for n in ns])
        out["two_term_check"] = {"fixed_factor": a, "per_token_factor": c, "condition": round(cond, 4),
                                 "refused": why, "used": False}
    return out


def prefill_table_ratio(isl: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    pts = info["points"]
    ns = np.log([float(q["tokens"]) for q in pts])
    lv = np.array([float(q["level"]) for q in pts])
    return np.interp(np.log(np.maximum(np.asarray(isl, dtype=np.float64), 1.0)), ns, lv)


def levels(probes: list[mpb.ReferenceProbe], prov: dict[str, Any]) -> dict[str, Any]:
    """The scalar decode and prefill levels (probe / base profile's fitted model) with the points they rest on.

    ``prefill_level`` rests on the isolated prefill points (batch size <= 1; the batched pass only when
    no isolated point has a median); ``points`` lists every point with its own level.

    Raises:
        ProbeError: a fitted reference that is not > 0 or a level that is not finite and > 0, or no
            decode / prefill point with a median.
    """
    ref = _references(prov)
    dec: list[float] = []
    pre: list[float] = []
    batched: list[float] = []
    pts = []
    for probe in probes:
        for pt in probe.points:
            if not (math.isfinite(pt.median_ms) and pt.median_ms > 0):
                continue
            reps: list[float] = []
            if pt.phase == "decode" and pt.batch_size and pt.context_tokens:
                (ref_ms, source), where = (ref("decode", pt.batch_size, pt.context_tokens, 0),
                                           f"D(B={pt.batch_size}, ctx={pt.context_tokens})")
            elif pt.phase == "prefill" and pt.prefill_tokens:
                (ref_ms, source), where = ref("prefill", pt.batch_size, 0, pt.prefill_tokens), f"P({pt.prefill_tokens})"
                for ms, n in zip(pt.repeat_step_ms, pt.repeat_pass_tokens):
                    if not (math.isfinite(ms) and ms > 0 and n > 0):
                        continue
                    ref_n, _ = ref("prefill", pt.batch_size, 0, n)
                    if not (math.isfinite(ref_n) and ref_n > 0):
                        raise ProbeError(f"the base profile's reference P({n}) is {ref_n!r} ms (not > 0): its fit cannot "
                                         "be levelled")
                    reps.append(ms / ref_n)
            else:
                continue
            if not (math.isfinite(ref_ms) and ref_ms > 0):
                raise ProbeError(f"the base profile's {source} {where} is {ref_ms!r} ms (not > 0): its fit cannot be "
                                 "levelled")
            r = float(np.median(reps)) if reps else pt.median_ms / ref_ms
            if not (math.isfinite(r) and r > 0):
                raise ProbeError(f"probe {probe.engine_id!r} {probe.when!r}: {pt.phase} point median {pt.median_ms!r} "
                                 f"ms over the {source} {where} = {ref_ms!r} ms is no usable level")
            if pt.phase == "decode":
                dec.append(r)
            elif pt.batch_size <= 1:  # the scalar method's prefill level: the isolated row(s) only
                pre.append(r)
            else:
                batched.append(r)
            pts.append({"engine_id": probe.engine_id, "when": probe.when, "phase": pt.phase,
                        "batch_size": pt.batch_size, "context_tokens": pt.context_tokens,
                        "prefill_tokens": pt.prefill_tokens, "median_ms": pt.median_ms, "level": round(r, 4),
                        "reference": source, "reference_ms": round(ref_ms, 4)})
    if not pre and batched:  # no isolated row measured: the scalar prefill level falls back on the batched pass
        pre = batched
    if not dec or not pre:
        raise ProbeError("the probe needs at least one decode and one prefill point with a median")
    return {"decode_level": float(np.median(dec)), "prefill_level": float(np.median(pre)), "points": pts,
            "reference": sorted({q["reference"] for q in pts})}


def probes_for(manifest: mpb.TraceManifest, condition: str) -> list[mpb.ReferenceProbe]:
    """The probe entries a levelling rests on: ``isolated`` = ``ReferenceProbe.points`` (every engine running
    the same point), ``contended`` = copies whose points are ``contended_points`` (this engine measured while
    every other engine ran a steady decode load); entries without contended points are left out.

    Raises:
        ProbeError: an unknown condition, or ``contended`` where no probe entry has contended points.
    """
    if condition not in PROBE_CONDITIONS:
        raise ProbeError(f"unknown probe condition {condition!r}: expected one of {', '.join(PROBE_CONDITIONS)}")
    if condition == "isolated":
        return list(manifest.probes)
    out = []
    for p in manifest.probes:
        if not any(pt.median_ms > 0 for pt in p.contended_points):
            continue
        q = mpb.ReferenceProbe(engine_id=p.engine_id, when=p.when, artifact_path=p.artifact_path)
        if condition == "mixed":  # decode from the contended points, prefill from the probe's own points
            q.points.extend(pt for pt in p.contended_points if pt.phase == "decode")
            q.points.extend(pt for pt in p.points if pt.phase == "prefill")
        else:
            q.points.extend(p.contended_points)
        q.conditions.CopyFrom(p.conditions)
        out.append(q)
    if not out:
        raise ProbeError(f"trace {manifest.trace_id!r} has no contended probe points (ReferenceProbe.contended_points; "
                         "capture --probe --probe-contended N records them): nothing to level the profile to under "
                         "contention")
    return out


def level_profile(base: str | Path, manifest: mpb.TraceManifest, out: str | Path,
                  levelling: str = "scalar", probe_condition: str = "isolated") -> tuple[Path, dict[str, Any]]:
    """Write ``out``: ``base`` scaled to the probe level of ``manifest.probes``; returns (path, provenance).

    ``levelling``: ``"two_term"`` (decode fixed + per-sequence factors, prefill level by pass size) or
    ``"scalar"`` (one level per phase); see the module docstring. ``probe_condition``: which points
    (:func:`probes_for`): ``isolated`` (the probe's points) or ``contended`` (its contended part); the
    provenance names it (``probe_condition``, ``variant`` ``CALIBRATED+PROBE contended``).

    Raises:
        ProbeError: no probe in the manifest (or no contended point for ``contended``), a base profile
            that is not measured, ``out`` == ``base``, an unknown ``levelling`` or ``probe_condition``.
    """
    if levelling not in LEVELLING_METHODS:
        raise ProbeError(f"unknown levelling {levelling!r}: expected one of {', '.join(LEVELLING_METHODS)}")
    if probe_condition not in PROBE_CONDITIONS:
        raise ProbeError(f"unknown probe condition {probe_condition!r}: expected one of {', '.join(PROBE_CONDITIONS)}")
    from unirl_replay.calibrate.profiler import write_profile

    from unirl_replay.contract.profile_npz import MAX_STEP_MS, load_profile

    base, out = Path(base), Path(out)
    side = out.with_name(out.name + ".provenance.json")
    from unirl_replay.contract.out_dir import trace_file_problem

    for p in (out, side):
        why = trace_file_problem(p)  # `--out TRACE/x.partial`: the trace read as INCOMPLETE afterwards
        if why:
            raise ProbeError(why)
    for p in (out, side):
        if p.resolve() == base.resolve() or p.exists() or p.is_symlink():
            raise ProbeError(f"{p} exists (or is the base profile): a probe-levelled profile never overwrites a file")
    if not manifest.probes:
        raise ProbeError(f"trace {manifest.trace_id!r} has no reference probe (TraceManifest.probes): nothing to "
                         "level the profile to")
    # the one checked reader of a profile: a file that is no dynamo_profile NPZ, missing or bad tables, a
    # provenance that is not JSON or has keys of the wrong type are ProbeErrors naming the base profile
    _, tables, prov = load_profile(base, PROFILE_TABLES, ProbeError)
    if prov.get("measured") is not True:
        raise ProbeError(f"{base} is not a measured profile: only a calibrated profile can be probe-levelled")
    probes = probes_for(manifest, probe_condition)
    try:
        lv = levels(probes, prov)
        dec = decode_two_term(probes, prov)
        pre = prefill_by_tokens(probes, prov)
    except ProbeError as e:
        raise ProbeError(f"{base} levelled to the probe of {manifest.trace_id!r}: {e}") from None
    if levelling == "two_term" and dec["method"] == "two_term":
        dec_applied = {"method": "two_term", "fixed_factor": dec["fixed_factor"],
                       "per_sequence_factor": dec["per_sequence_factor"]}
        ratio = decode_table_ratio(tables["decode_active_kv_tokens"], tables["decode_context_length"], prov,
                                   dec["fixed_factor"], dec["per_sequence_factor"])
        tables["decode_itl"] = tables["decode_itl"] * ratio
        dec_applied["table_ratio_range"] = [round(float(ratio.min()), 4), round(float(ratio.max()), 4)]
    else:
        dec_applied = {"method": "scalar", "level": lv["decode_level"]}
        if levelling == "two_term":
            dec_applied["fallback_reason"] = dec["reason"]
        tables["decode_itl"] = tables["decode_itl"] * lv["decode_level"]
    if levelling == "two_term":
        ratio = prefill_table_ratio(tables["prefill_isl"], pre)
        tables["prefill_ttft_ms"] = tables["prefill_ttft_ms"] * ratio
        pre_applied = {"method": pre["method"], "table_ratio_range": [round(float(ratio.min()), 4),
                                                                      round(float(ratio.max()), 4)]}
    else:
        pre_applied = {"method": "scalar", "level": lv["prefill_level"]}
        tables["prefill_ttft_ms"] = tables["prefill_ttft_ms"] * lv["prefill_level"]
    for name in ("decode_itl", "prefill_ttft_ms"):
        if not (np.all(np.isfinite(tables[name])) and np.all(tables[name] > 0)):
            raise ProbeError(f"{base} levelled to the probe of {manifest.trace_id!r}: the levelled {name} table is not "
                             "finite and > 0 everywhere (a probe point or the base table cannot level it)")
        if np.any(tables[name] > MAX_STEP_MS):  # what every reader of the profile refuses (contract.profile_npz)
            raise ProbeError(f"{base} levelled to the probe of {manifest.trace_id!r}: the levelled {name} table holds "
                             f"{float(tables[name].max()):.3g} ms, above {MAX_STEP_MS:.0f} ms (1 hour) per pass or step "
                             f"(levels: decode x{lv['decode_level']:.3g}, prefill x{lv['prefill_level']:.3g}): a probe "
                             "point or a reference median of the base cannot be right")
    new = dict(prov)
    new["calibration_workloads"] = list(prov.get("calibration_workloads", [])) + [f"probe:{manifest.trace_id}"]
    new["kind"] = "dynamo_profile+probe"
    new["probe_levelled"] = {
        "label": "CALIBRATED+PROBE",
        "probe_condition": probe_condition,
        "variant": "CALIBRATED+PROBE" + ("" if probe_condition == "isolated" else f" {probe_condition}"),
        "base_profile": base.name, "base_sha256": hashlib.sha256(base.read_bytes()).hexdigest(),
        "trace_id": manifest.trace_id, "workload_name": manifest.workload_name,
        "decode_level": lv["decode_level"], "prefill_level": lv["prefill_level"], "points": lv["points"],
        # what each point's level divides by: the calibration session's own median of the same point
        # (the base provenance's reference_points) or, where it has none, the base fit
        "reference": lv["reference"],
        "reference_method": (REFERENCE_METHOD if REFERENCE_SESSION in lv["reference"] else REFERENCE_FIT_METHOD),
        "probes": [to_dict(p) for p in manifest.probes],
        "levelling": levelling,
        "decode": {"applied": dec_applied, "two_term": dec},
        "prefill": {"applied": pre_applied, "by_tokens": pre},
        "method": (TWO_TERM_METHOD if levelling == "two_term" else SCALAR_METHOD)
        + (f"; {REFERENCE_METHOD}" if REFERENCE_SESSION in lv["reference"] else "")
        + (f"; decode fell back to the scalar level: {dec_applied['fallback_reason']}"
           if "fallback_reason" in dec_applied else ""),
        "scalar_method": SCALAR_METHOD,
    }
    if probe_condition != "isolated":
        new["probe_levelled"]["condition_method"] = (CONTENDED_CONDITION if probe_condition == "contended"
                                                     else MIXED_CONDITION)
        new["probe_levelled"]["method"] += "; " + new["probe_levelled"]["condition_method"]
    return write_profile(out, tables, new), new


REFERENCE_METHOD = ("each level = probe median / the calibration session's median of the same point (the base "
                    "profile's reference_points, measured in the sweep's engine), not the fit: like with like")
REFERENCE_FIT_METHOD = "each level = probe median / the base fit at the point (the base profile has no reference_points)"
SCALAR_METHOD = ("decode_itl x median(probe / fitted D at the decode points); prefill_ttft_ms x "
                 "median(probe / fitted P at the isolated prefill points); form unchanged")
TWO_TERM_METHOD = ("decode_itl (K, C) x D'(B, C) / D(B, C) cell by cell, B = K / C, D' = a*d0 + c*(d1*B*C + d2*B) "
                   "with a, c solved from the decode points' medians; prefill_ttft_ms (n) x the level (probe / fitted "
                   "P) interpolated in log n between the prefill points (isolated row, batched pass), flat outside")
