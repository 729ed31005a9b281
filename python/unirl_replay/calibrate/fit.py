"""The fit: relative non-negative least squares of the prefill and decode forms, sampled on a grid.

Pure numpy. ``fit_profile(raw, eng)`` turns the driver's raw measurements into the
``dynamo_profile`` tables and the fit's residuals (see :mod:`unirl_replay.calibrate.profiler` for
the forms and docs/calibration.md for the method).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from unirl_replay.calibrate.common import DECODE_FORM, PREFILL_FORM, CalibrationError



def _nn_rel_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min sum(((X c - y) / y)^2) with c >= 0 (exhaustive active set; a handful of features)."""
    w = 1.0 / y
    best: Optional[Tuple[float, np.ndarray]] = None
    n = x.shape[1]
    for k in range(n, 0, -1):
        for cols in itertools.combinations(range(n), k):
            a = x[:, cols] * w[:, None]
            c, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
            if np.any(c < 0):
                continue
            full = np.zeros(n)
            full[list(cols)] = c
            err = float(np.sum(((x @ full - y) * w) ** 2))
            if best is None or err < best[0] - 1e-15:
                best = (err, full)
    if best is None:
        raise CalibrationError("no non-negative fit exists for the measurements")
    return best[1]


def _residuals(pred: np.ndarray, meas: np.ndarray) -> Dict[str, Any]:
    pe = 100.0 * (pred - meas) / meas
    return {"pct": [round(float(v), 3) for v in pe], "mape_pct": float(np.mean(np.abs(pe))),
            "max_abs_pct": float(np.max(np.abs(pe)))}


def prefill_features(n: np.ndarray) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    return np.stack([np.ones_like(n), n, n * n], axis=1)


def decode_features(kv: np.ndarray, ctx: np.ndarray, max_num_seqs: int) -> np.ndarray:
    kv = np.asarray(kv, dtype=np.float64)
    ctx = np.asarray(ctx, dtype=np.float64)
    b = np.clip(kv / ctx, 1.0, float(max_num_seqs))
    return np.stack([np.ones_like(kv), kv, b], axis=-1)


def _log_grid(top: float, points: int) -> np.ndarray:
    """1 .. top, geometric, rounded to whole tokens, strictly increasing."""
    g = np.unique(np.round(np.geomspace(1.0, top, points)))
    return g.astype(np.float64)


@dataclass
class Fit:
    """Fitted tables and the fit record (goes into the provenance)."""

    tables: Dict[str, np.ndarray]
    record: Dict[str, Any]


def fit_profile(raw: Dict[str, Any], eng: Dict[str, Any], *, grid_points: int = 65, kv_points: int = 129,
                ctx_points: int = 65) -> Fit:
    """Fit the prefill and decode models to ``raw`` (driver output) and sample them on a grid.

    The prefill grid is regular (linspace) over 1 .. max(max_num_batched_tokens, largest measured
    ISL). The decode grid covers kv 1 .. the engine's KV capacity (num_kv_blocks * block_size) and
    ctx 1 .. max_model_len, regular in log space: a linear grid over a CPU engine's 1.5 M-token
    capacity would put every real batch (<= tens of thousands of tokens) inside its first cell,
    where bilinear interpolation of the per-sequence term (kv / ctx) is badly wrong; geometric
    spacing keeps the interpolation error of that term below ~0.5 % everywhere.

    Raises:
        CalibrationError: too few usable measurements.
    """
    pre = [r for r in raw.get("prefill", []) if r.get("ttft_ms") is not None and r["ttft_ms"] > 0]
    isls = sorted({int(r["isl"]) for r in pre})
    if len(isls) < 3:
        raise CalibrationError(f"prefill sweep has {len(isls)} usable ISLs; need >= 3")
    med = np.array([np.median([r["ttft_ms"] for r in pre if r["isl"] == n]) for n in isls])
    spread = [float(np.percentile([r["ttft_ms"] for r in pre if r["isl"] == n], 75)
                    - np.percentile([r["ttft_ms"] for r in pre if r["isl"] == n], 25)) for n in isls]
    x = np.array(isls, dtype=np.float64)
    pc = _nn_rel_lstsq(prefill_features(x), med)

    dec = [d for d in raw.get("decode", []) if d.get("itl_ms") is not None and d["itl_ms"] > 0]
    if len(dec) < 3:
        raise CalibrationError(f"decode sweep has {len(dec)} usable points; need >= 3")
    keys = sorted({(d["kv"], d["ctx"]) for d in dec})
    kv = np.array([k[0] for k in keys], dtype=np.float64)
    ctx = np.array([k[1] for k in keys], dtype=np.float64)
    itl = np.array([np.median([d["itl_ms"] for d in dec if (d["kv"], d["ctx"]) == k]) for k in keys])
    mns = int(eng["max_num_seqs"])
    dc = _nn_rel_lstsq(decode_features(kv, ctx, mns), itl)

    top = float(max(eng["max_num_batched_tokens"], isls[-1]))
    isl_grid = np.unique(np.round(np.linspace(1.0, top, grid_points)))
    capacity = float(eng["num_kv_blocks"] * eng["block_size"])
    kv_grid = _log_grid(capacity, kv_points)
    ctx_grid = _log_grid(float(eng["max_model_len"]), ctx_points)
    kk, cc = np.meshgrid(kv_grid, ctx_grid, indexing="ij")
    tables = {
        "prefill_isl": isl_grid.astype(np.float64),
        "prefill_ttft_ms": (prefill_features(isl_grid) @ pc).astype(np.float64),
        "decode_active_kv_tokens": kv_grid.astype(np.float64),
        "decode_context_length": ctx_grid.astype(np.float64),
        "decode_itl": (decode_features(kk, cc, mns) @ dc).astype(np.float64),
    }
    record = {
        "prefill": {"form": PREFILL_FORM, "coefficients": {"p0": pc[0], "p1": pc[1], "p2": pc[2]},
                    "isl": isls, "median_ms": [float(v) for v in med], "iqr_ms": spread,
                    "residuals": _residuals(prefill_features(x) @ pc, med)},
        "decode": {"form": DECODE_FORM, "coefficients": {"d0": dc[0], "d1": dc[1], "d2": dc[2]},
                   "kv": [float(v) for v in kv], "ctx": [float(v) for v in ctx],
                   "median_itl_ms": [float(v) for v in itl],
                   "residuals": _residuals(decode_features(kv, ctx, mns) @ dc, itl)},
        "grid": {"prefill_isl": [float(isl_grid[0]), float(isl_grid[-1]), int(isl_grid.size)],
                 "decode_active_kv_tokens": [float(kv_grid[0]), float(kv_grid[-1]), int(kv_grid.size)],
                 "decode_context_length": [float(ctx_grid[0]), float(ctx_grid[-1]), int(ctx_grid.size)],
                 "note": "[first, last, count]; prefill linspace, decode axes geometric (regular in log space); "
                         "upstream interpolates (bi)linearly and extrapolates linearly off-grid"},
    }
    for part in ("prefill", "decode"):
        record[part]["coefficients"] = {k: float(v) for k, v in record[part]["coefficients"].items()}
    return Fit(tables=tables, record=record)
