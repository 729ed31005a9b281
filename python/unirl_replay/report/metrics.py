"""Pure error statistics over matched (predicted, measured) pairs.

Definitions (used by ``compare.py`` and written down in ``docs/comparison.md``):

- percentage error of a pair: ``pe = 100 * (predicted - measured) / measured`` (%); positive means
  the simulator predicts too slow. Pairs with ``measured == 0`` have no percentage error: they are
  excluded from every percentage statistic and counted in ``zero_measured``.
- absolute percentage error: ``ape = |pe|``.
- MAPE: mean of ``ape``; median / p90 APE: percentiles of ``ape``; signed bias: mean of ``pe``.
- percentiles: ``numpy.percentile`` with its default (``method="linear"``, i.e. linear
  interpolation between closest ranks, Hyndman & Fan type 7).

Every function takes plain sequences or 1-D numpy arrays of equal length and returns Python floats
(or ``None`` where the statistic is undefined, e.g. no pair with a non-zero measured value). Inputs
are never modified. Units are whatever the caller passes; ``compare.py`` passes nanoseconds and
converts percentiles to ms itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np

NS_PER_MS = 1_000_000


class ErrorStats(TypedDict):
    """Result of :func:`error_stats`. Percentages in %; percentiles in the input unit."""

    pairs: int
    zero_measured: int
    mape_pct: float | None
    median_ape_pct: float | None
    p90_ape_pct: float | None
    signed_bias_pct: float | None
    measured_mean: float | None
    predicted_mean: float | None
    measured_p50: float | None
    measured_p90: float | None
    measured_p99: float | None
    predicted_p50: float | None
    predicted_p90: float | None
    predicted_p99: float | None


def _as_1d(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def percentage_errors(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> np.ndarray:
    """Signed percentage errors ``100 * (p - m) / m`` of the pairs whose measured value is non-zero.

    Args:
        predicted, measured: 1-D, same length N, finite.
    Returns:
        float64 array of shape (K,), K = number of pairs with ``measured != 0``, in input order.
    Raises:
        ValueError: lengths differ, not 1-D, or non-finite values.
    """
    p = _as_1d(predicted, "predicted")
    m = _as_1d(measured, "measured")
    if p.shape != m.shape:
        raise ValueError(f"predicted has {p.size} values but measured has {m.size}")
    keep = m != 0
    return 100.0 * (p[keep] - m[keep]) / m[keep]


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation; ``None`` for an empty input."""
    arr = _as_1d(values, "values")
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q))


def mape(predicted, measured) -> float | None:
    """Mean absolute percentage error, %; ``None`` when no pair has a non-zero measured value."""
    pe = percentage_errors(predicted, measured)
    return float(np.mean(np.abs(pe))) if pe.size else None


def median_ape(predicted, measured) -> float | None:
    """Median absolute percentage error, %; ``None`` when undefined."""
    return percentile(np.abs(percentage_errors(predicted, measured)), 50)


def p90_ape(predicted, measured) -> float | None:
    """90th percentile absolute percentage error, %; ``None`` when undefined."""
    return percentile(np.abs(percentage_errors(predicted, measured)), 90)


def signed_bias(predicted, measured) -> float | None:
    """Mean signed percentage error, % (positive: predicted too slow); ``None`` when undefined."""
    pe = percentage_errors(predicted, measured)
    return float(np.mean(pe)) if pe.size else None


def error_stats(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> ErrorStats:
    """All statistics of one metric over N matched pairs.

    Args:
        predicted, measured: 1-D, same length N (N may be 0), finite, same unit.
    Returns:
        :class:`ErrorStats`; percentiles and means are over all N pairs, percentage statistics over
        the pairs with a non-zero measured value.
    Raises:
        ValueError: see :func:`percentage_errors`.
    """
    p = _as_1d(predicted, "predicted")
    m = _as_1d(measured, "measured")
    pe = percentage_errors(p, m)
    ape = np.abs(pe)
    return ErrorStats(
        pairs=int(p.size),
        zero_measured=int(np.count_nonzero(m == 0)),
        mape_pct=float(np.mean(ape)) if ape.size else None,
        median_ape_pct=percentile(ape, 50),
        p90_ape_pct=percentile(ape, 90),
        signed_bias_pct=float(np.mean(pe)) if pe.size else None,
        measured_mean=float(np.mean(m)) if m.size else None,
        predicted_mean=float(np.mean(p)) if p.size else None,
        measured_p50=percentile(m, 50),
        measured_p90=percentile(m, 90),
        measured_p99=percentile(m, 99),
        predicted_p50=percentile(p, 50),
        predicted_p90=percentile(p, 90),
        predicted_p99=percentile(p, 99),
    )


def repeat_spread(repeat_means: Sequence[float] | np.ndarray) -> tuple[float | None, float | None]:
    """Run-to-run spread of one metric over measured repeats of a workload.

    Args:
        repeat_means: the metric's mean in each repeat (R values, same unit).
    Returns:
        ``(cv_pct, max_dev_pct)``: coefficient of variation ``100 * std(ddof=1) / mean`` and the
        largest ``100 * |mean_i - mean| / mean``; both ``None`` when R < 2 or the mean is 0.
    """
    x = _as_1d(repeat_means, "repeat_means")
    if x.size < 2:
        return None, None
    mu = float(np.mean(x))
    if mu == 0:
        return None, None
    cv = 100.0 * float(np.std(x, ddof=1)) / abs(mu)
    dev = 100.0 * float(np.max(np.abs(x - mu))) / abs(mu)
    return cv, dev


def ecdf(values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF: ``(sorted values (N,), cumulative fractions (N,) in (0, 1])``."""
    x = np.sort(_as_1d(values, "values"))
    return x, np.arange(1, x.size + 1, dtype=np.float64) / max(x.size, 1)
