"""metrics.py against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unirl_replay.report import metrics as M


def test_percentage_errors_skip_zero_measured():
    # (p - m) / m: (12-10)/10 = +20 %, (9-12)/12 = -25 %, measured 0 dropped
    assert M.percentage_errors([12, 9, 5], [10, 12, 0]).tolist() == pytest.approx([20, -25])


def test_error_stats_by_hand():
    p = [110, 80, 300, 50, 0]
    m = [100, 100, 200, 50, 10]
    # pe: +10, -20, +50, 0, -100; |pe| sorted 0, 10, 20, 50, 100
    st = M.error_stats(p, m)
    assert st["pairs"] == 5 and st["zero_measured"] == 0
    assert st["mape_pct"] == pytest.approx(180 / 5)            # 36
    assert st["median_ape_pct"] == pytest.approx(20)
    assert st["p90_ape_pct"] == pytest.approx(50 + 0.6 * 50)   # rank 0.9*4 = 3.6 -> 80
    assert st["signed_bias_pct"] == pytest.approx(-60 / 5)     # -12
    # measured sorted 10, 50, 100, 100, 200: p50 100, p90 rank 3.6 -> 100 + 0.6*100 = 160,
    # p99 rank 3.96 -> 100 + 0.96*100 = 196
    assert (st["measured_p50"], st["measured_p90"], st["measured_p99"]) == pytest.approx((100, 160, 196))
    # predicted sorted 0, 50, 80, 110, 300: p50 80, p90 110 + 0.6*190 = 224, p99 110 + 0.96*190 = 292.4
    assert (st["predicted_p50"], st["predicted_p90"], st["predicted_p99"]) == pytest.approx((80, 224, 292.4))
    assert (st["measured_mean"], st["predicted_mean"]) == pytest.approx((92, 108))


def test_single_functions_agree_with_error_stats():
    p, m = [110, 80, 300], [100, 100, 200]
    st = M.error_stats(p, m)
    assert M.mape(p, m) == st["mape_pct"]
    assert M.median_ape(p, m) == st["median_ape_pct"]
    assert M.p90_ape(p, m) == st["p90_ape_pct"]
    assert M.signed_bias(p, m) == st["signed_bias_pct"]


def test_empty_and_all_zero_measured_are_undefined_not_zero():
    st = M.error_stats([], [])
    assert st["pairs"] == 0 and st["mape_pct"] is None and st["measured_p50"] is None
    st = M.error_stats([1, 2], [0, 0])
    assert st["zero_measured"] == 2 and st["mape_pct"] is None and st["signed_bias_pct"] is None
    assert st["measured_p50"] == 0


def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="predicted has 2 values but measured has 1"):
        M.error_stats([1, 2], [1])
    with pytest.raises(ValueError, match="NaN"):
        M.error_stats([math.nan], [1])
    with pytest.raises(ValueError, match="1-D"):
        M.error_stats(np.ones((2, 2)), np.ones((2, 2)))


def test_repeat_spread_by_hand():
    # means 9, 10, 11: mean 10, std(ddof=1) = 1 -> cv 10 %; max |x - 10| / 10 = 10 %
    assert M.repeat_spread([9, 10, 11]) == pytest.approx((10, 10))
    assert M.repeat_spread([5]) == (None, None)


def test_ecdf():
    x, f = M.ecdf([3, 1, 2, 2])
    assert x.tolist() == [1, 2, 2, 3] and f.tolist() == [0.25, 0.5, 0.75, 1.0]
