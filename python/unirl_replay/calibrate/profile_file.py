"""The ``dynamo_profile`` NPZ: table checks and the atomic writer (profile + provenance sidecar)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import numpy as np

from unirl_replay.calibrate.common import CalibrationError



def check_tables(tables: Dict[str, np.ndarray]) -> None:
    """The ``dynamo_profile`` shape rules (float64, 1-D strictly increasing axes, (K, C) table, > 0)."""
    for k in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        a = tables[k]
        if a.dtype != np.float64 or a.ndim != 1 or a.size < 2 or np.any(np.diff(a) <= 0):
            raise CalibrationError(f"{k} must be 1-D float64, strictly increasing, >= 2 points")
    if tables["prefill_ttft_ms"].shape != tables["prefill_isl"].shape:
        raise CalibrationError("prefill_ttft_ms must match prefill_isl")
    shape = (tables["decode_active_kv_tokens"].size, tables["decode_context_length"].size)
    if tables["decode_itl"].shape != shape:
        raise CalibrationError(f"decode_itl must be {shape}, is {tables['decode_itl'].shape}")
    from unirl_replay.contract.profile_npz import MAX_STEP_MS

    for k in ("prefill_ttft_ms", "decode_itl"):
        if tables[k].dtype != np.float64 or not np.all(np.isfinite(tables[k])) or np.any(tables[k] <= 0):
            raise CalibrationError(f"{k} must be finite float64 > 0")
        if np.any(tables[k] > MAX_STEP_MS):  # what every reader refuses (contract.profile_npz): never written
            raise CalibrationError(f"the fitted {k} table holds {float(tables[k].max()):.3g} ms, above "
                                   f"{MAX_STEP_MS:.0f} ms (1 hour) per pass or step: a measurement (a repeat of "
                                   "--from-raw?) cannot be right")


def write_profile(path: str | os.PathLike, tables: Dict[str, np.ndarray], provenance: Dict[str, Any]) -> Path:
    """Write the NPZ (tables + ``provenance`` JSON) and the sidecar ``<file>.provenance.json``, atomically."""
    check_tables(tables)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(provenance, indent=1, sort_keys=True, default=_json_default)
    tmp = path.with_name(path.name + ".tmp.npz")
    # compressed: the provenance (raw measurements) is a UTF-32 string array; upstream reads deflated NPZ
    np.savez_compressed(tmp, **{k: np.ascontiguousarray(v, dtype=np.float64) for k, v in tables.items()},
                        provenance=np.array(text))
    side = path.with_name(path.name + ".provenance.json")
    side_tmp = side.with_name(side.name + ".tmp")
    side_tmp.write_text(text + "\n")
    os.replace(tmp, path)
    os.replace(side_tmp, side)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
