"""The reference probe and the probe-levelled profile (``unirl-replay calibrate --level-to-probe``).

A calibrated profile has the right FORM for the engine but the LEVEL of its calibration session;
on a shared host the capture window's engine can run 1.4-1.8x slower (fidelity-findings.md). A
**reference probe** is a few fixed points run in the capture's own engine right before and after the
window (:data:`PROBE_POINTS`, a few repeats each), stored as the trace's ``ReferenceProbe``
entries (calibration role, never mixed into the window's records).

A **probe-levelled profile** is the base profile scaled to the level the probe measured: the
decode table by the median over decode points of (probe median / the base profile's fitted
``D`` at that point), the prefill table by (probe / fitted ``P``) at the prefill point(s). It is a
separate calibration workload with its own provenance: ``probe_levelled`` holds the base profile's
name and sha256, the probe entries and both levels; ``calibration_workloads`` adds
``probe:<trace_id>``; the replay labels it ``CALIBRATED+PROBE``. The base profile is unchanged.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

# the fixed reference probe's points (phase, batch size, context tokens, prefill tokens), repeats and
# decode steps are defined once, where the probe runs: capture.probe, inside the capture's engines
from unirl_replay.capture.probe import PROBE_DECODE_STEPS, PROBE_POINTS, PROBE_REPEATS
from unirl_replay.contract.json_profile import to_dict
from unirl_replay.v1 import manifest_pb2 as mpb

__all__ = ["PROBE_POINTS", "PROBE_REPEATS", "PROBE_DECODE_STEPS", "ProbeError", "levels", "level_profile"]


class ProbeError(ValueError):
    """The probe or the base profile cannot level a profile."""


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


def levels(probes: list[mpb.ReferenceProbe], prov: dict[str, Any]) -> dict[str, Any]:
    """Decode and prefill levels (probe / base profile's fitted model) with the points they rest on."""
    prefill, decode = _fit_models(prov)
    dec, pre, pts = [], [], []
    for probe in probes:
        for pt in probe.points:
            if not (math.isfinite(pt.median_ms) and pt.median_ms > 0):
                continue
            if pt.phase == "decode" and pt.batch_size and pt.context_tokens:
                ref, where = decode(pt.batch_size, pt.context_tokens), f"D(B={pt.batch_size}, ctx={pt.context_tokens})"
            elif pt.phase == "prefill" and pt.prefill_tokens:
                ref, where = prefill(pt.prefill_tokens), f"P({pt.prefill_tokens})"
            else:
                continue
            if not (math.isfinite(ref) and ref > 0):
                raise ProbeError(f"the base profile's fitted {where} is {ref!r} ms (not > 0): its fit cannot be levelled")
            r = pt.median_ms / ref
            if not (math.isfinite(r) and r > 0):
                raise ProbeError(f"probe {probe.engine_id!r} {probe.when!r}: {pt.phase} point median {pt.median_ms!r} "
                                 f"ms over the fitted {where} = {ref!r} ms is no usable level")
            (dec if pt.phase == "decode" else pre).append(r)
            pts.append({"engine_id": probe.engine_id, "when": probe.when, "phase": pt.phase,
                        "batch_size": pt.batch_size, "context_tokens": pt.context_tokens,
                        "prefill_tokens": pt.prefill_tokens, "median_ms": pt.median_ms, "level": round(r, 4)})
    if not dec or not pre:
        raise ProbeError("the probe needs at least one decode and one prefill point with a median")
    return {"decode_level": float(np.median(dec)), "prefill_level": float(np.median(pre)), "points": pts}


def level_profile(base: str | Path, manifest: mpb.TraceManifest, out: str | Path) -> tuple[Path, dict[str, Any]]:
    """Write ``out``: ``base`` scaled to the probe level of ``manifest.probes``; returns (path, provenance).

    Raises:
        ProbeError: no probe in the manifest, a base profile that is not measured, or ``out`` == ``base``.
    """
    from unirl_replay.calibrate.profiler import write_profile

    from unirl_replay.contract.profile_npz import load_profile

    base, out = Path(base), Path(out)
    side = out.with_name(out.name + ".provenance.json")
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
    try:
        lv = levels(list(manifest.probes), prov)
    except ProbeError as e:
        raise ProbeError(f"{base} levelled to the probe of {manifest.trace_id!r}: {e}") from None
    tables["decode_itl"] = tables["decode_itl"] * lv["decode_level"]
    tables["prefill_ttft_ms"] = tables["prefill_ttft_ms"] * lv["prefill_level"]
    new = dict(prov)
    new["calibration_workloads"] = list(prov.get("calibration_workloads", [])) + [f"probe:{manifest.trace_id}"]
    new["kind"] = "dynamo_profile+probe"
    new["probe_levelled"] = {
        "label": "CALIBRATED+PROBE",
        "base_profile": base.name, "base_sha256": hashlib.sha256(base.read_bytes()).hexdigest(),
        "trace_id": manifest.trace_id, "workload_name": manifest.workload_name,
        "decode_level": lv["decode_level"], "prefill_level": lv["prefill_level"], "points": lv["points"],
        "probes": [to_dict(p) for p in manifest.probes],
        "method": "decode_itl x median(probe / fitted D at the decode points); prefill_ttft_ms x "
                  "median(probe / fitted P at the prefill points); form unchanged",
    }
    return write_profile(out, tables, new), new
