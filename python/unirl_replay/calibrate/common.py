"""What every part of calibration shares: its error type and the fitted forms."""

from __future__ import annotations

from unirl_replay.contract.errors import UnirlReplayError

PREFILL_FORM = "P(n) = p0 + p1*n + p2*n^2 (ms, n = new prompt tokens in the pass)"
DECODE_FORM = "D(kv, ctx) = d0 + d1*kv + d2*B, B = clip(kv/ctx, 1, max_num_seqs) (ms per decode step)"
DRIVER_MODULE = "unirl_replay.reference.calibration_driver"




class CalibrationError(UnirlReplayError):
    """The calibration cannot run or its measurements cannot be fitted."""
