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
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from unirl_replay.reference import environments
from unirl_replay.calibrate.common import DECODE_FORM, DRIVER_MODULE, PREFILL_FORM, CalibrationError  # noqa: F401
from unirl_replay.calibrate.driver import reference_python, run_driver  # noqa: F401  (re-exported)
from unirl_replay.calibrate.fit import Fit, fit_profile  # noqa: F401  (re-exported)
from unirl_replay.calibrate.profile_file import check_tables, write_profile  # noqa: F401  (re-exported)

#: the METHOD's prefill clause of the default (one-row) sweep
ONE_ROW_PREFILL = ("isolated prefill sweep (one request at a time, unique prompts, max_tokens=1, median of vLLM "
                   "first_token_ts - scheduled_ts)")
METHOD = ("NVIDIA planner profiler method: " + ONE_ROW_PREFILL + "; decode: B identical-length requests "
          "at once (ignore_eos), median engine step gap in the middle of the all-decoding run -> "
          "(kv = B*(L+OSL/2), ctx = L+OSL/2); every request (prefill, decode, warm-up) with the rollout's "
          "per-request sampling work (see `sampling`: temperature 1, top_p 1, top_k off, logprobs=0 under the "
          "engine's logprobs_mode=processed_logprobs, as UniRL's vLLM runtime requests them); relative "
          "least-squares fit, sampled on a regular grid")
#: the METHOD's prefill clause with ``--prefill-row-tokens L`` (in place of :data:`ONE_ROW_PREFILL`)
MULTIROW_METHOD = ("multi-row prefill sweep (each point N one engine pass of ceil(N/L) rows of about L={row_tokens} new "
                   "tokens, L {source}, summing exactly N <= max_num_batched_tokens, after a lead row of {lead} tokens "
                   "in the same generate call{lead_fill}; a repeat is used only when vLLM's per-request scheduled_ts and "
                   "first_token_ts show every row in one pass, pass time = first_token_ts - scheduled_ts of that pass; "
                   "a point with fewer than {min_usable} usable repeats is refused (left out of the fit)")
#: the lead row of a multi-row prefill point (the probe's batched point sends 256 too): its least size
LEAD_ROW_TOKENS = 256
#: the method's words for the lead row of an engine without chunked prefill (``lead_budget_tokens``)
LEAD_FILL = (" (or more: {budget} - the smallest row + 1 tokens, so that no row can share the lead's pass and "
             "every row reaches the engine while it runs)")
#: repeats of the reference probe's points (``capture.probe.PROBE_POINTS``) measured in the calibration engine
REFERENCE_REPEATS = 3
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
# ---------------------------------------------------------------------------------------------
# Engine settings and the sweep plan


def _engine_settings(trace_dir, e) -> Dict[str, Any]:
    """One engine's settings as the calibration engine is built from them (no engine id)."""
    missing = [n for n, v in (("block_size_tokens", e.block_size_tokens), ("num_kv_blocks", e.num_kv_blocks),
                              ("max_num_seqs", e.max_num_seqs), ("max_model_len", e.max_model_len)) if not v]
    if missing:
        raise CalibrationError(f"{trace_dir}: engine {e.engine_id!r} lacks {missing}; cannot build the same engine")
    extra = dict(e.extra)
    eng: Dict[str, Any] = {
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
        "gpu_memory_utilization": _fraction(trace_dir, e.engine_id, extra.get("engine_kwargs.gpu_memory_utilization", "0.3")),
    }
    if eng["tp_size"] != 1:
        raise CalibrationError(f"{trace_dir}: tp_size {eng['tp_size']} is not supported by the CPU reference engine")
    return eng


def _fraction(trace_dir, engine_id: str, text: str) -> float:
    """``engines[].extra["engine_kwargs.gpu_memory_utilization"]``: a fraction in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 < v <= 1:  # NaN too
        raise CalibrationError(f"{trace_dir}/manifest.json: engine {engine_id!r}: extra "
                               f"engine_kwargs.gpu_memory_utilization {text!r} is not a fraction in (0, 1]")
    return v


def engine_from_manifest(trace_dir: str | os.PathLike) -> Tuple[Dict[str, Any], Any]:
    """The engine settings of a trace (manifest only) and the manifest.

    A trace of several engines (UniRL's Ray wiring: one engine per actor) is accepted when every engine has
    the same settings (the profile then stands for each of them; ``engine_ids`` lists them); ``engine_id``
    is the first engine's. Their KV capacities may differ (vLLM sizes the cache from the memory free at
    start): the calibration engine gets the largest, so the profile's decode grid covers every engine's.

    Raises:
        CalibrationError: the trace has no engine, its engines' settings differ (the differing settings
        named), or an engine lacks the settings a profile needs.
    """
    from unirl_replay.contract.gate import gate

    man = gate(trace_dir, "calibrate").manifest
    if not man.engines:
        raise CalibrationError(f"{trace_dir}: calibrate --like needs a trace with an engine, found none")
    settings = [_engine_settings(trace_dir, e) for e in man.engines]
    eng = settings[0]
    for e, other in zip(man.engines[1:], settings[1:]):
        diff = sorted(k for k in eng if eng[k] != other[k] and k != "num_kv_blocks")
        if diff:
            raise CalibrationError(
                f"{trace_dir}: calibrate --like needs engines with the same settings (one profile stands for all "
                f"of them); engine {e.engine_id!r} differs from {man.engines[0].engine_id!r} in "
                + ", ".join(f"{k} ({other[k]!r} vs {eng[k]!r})" for k in diff))
    eng = {"engine_id": man.engines[0].engine_id, **eng,
           "num_kv_blocks": max(int(x["num_kv_blocks"]) for x in settings)}
    if len(man.engines) > 1:
        eng["engine_ids"] = [e.engine_id for e in man.engines]
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
               lengths: Optional[Sequence[int]] = None, min_isl: int = 16, seed: int = 0,
               row_tokens: Optional[int] = None, reference_repeats: Optional[int] = None) -> Dict[str, Any]:
    """The measurement plan for the engine ``eng`` (the driver's spec minus model identity).

    ``row_tokens``: each prefill point N is one pass of ``ceil(N / row_tokens)`` rows (the grid tops at
    ``min(max_num_batched_tokens, max_model_len - 1)``: a pass cannot hold more). ``reference_repeats``: the
    reference probe's points measured in the calibration engine (0: none; default
    :data:`REFERENCE_REPEATS` with ``row_tokens``, 0 without: the one-row sweep's plan is unchanged)."""
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
    prefill: Dict[str, Any] = {"isl": isl, "repeats": int(repeats)}
    if row_tokens:
        if not 1 <= int(row_tokens) <= top:
            raise CalibrationError(f"--prefill-row-tokens {row_tokens}: a row must hold 1..{top} tokens "
                                   f"(max_num_batched_tokens {mnbt}, max_model_len {mml})")
        # chunked prefill off: a lead row of max_num_batched_tokens - (smallest row) + 1 tokens cannot share its
        # pass with any row (vLLM V1 schedules waiting requests first come first served and stops at the first
        # one over the budget), and its pass (~0.2 s at 4k tokens) outlasts the delivery of every row of the call
        # (a 256-token lead ran ~15 ms: 2-row and 23-row points lost rows to the race and were refused)
        lead_budget = 0 if eng.get("enable_chunked_prefill") else int(min(mnbt, mml - 1))
        prefill.update(row_tokens=int(row_tokens), lead_tokens=LEAD_ROW_TOKENS, lead_budget_tokens=lead_budget,
                       grid_note=f"N capped at min(max_num_batched_tokens {mnbt}, max_model_len - 1) = {top}: one "
                                 "pass cannot hold more new tokens")
    spec: Dict[str, Any] = {"engine": eng, "seed": seed, "warmup_isl": [64, min(512, top)],
                            "sampling": dict(ROLLOUT_SAMPLING), "prefill": prefill,
                            "decode": {"points": points, "osl": int(osl), "repeats": int(decode_repeats)}}
    if reference_repeats is None:
        reference_repeats = REFERENCE_REPEATS if row_tokens else 0
    if reference_repeats:
        from unirl_replay.calibrate.probe import reference_plan

        spec["reference_points"] = reference_plan(int(reference_repeats), int(eng["max_num_seqs"]), int(mnbt))
    return spec


# ---------------------------------------------------------------------------------------------
# Raw driver data (``--raw-out`` / ``--from-raw``)

_OPT_NUM = {"type": ["number", "null"]}
#: The raw driver JSON as :func:`fit_profile` and :func:`build_provenance` read it (other keys: anything).
RAW_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "required": ["prefill", "decode"],
    "properties": {
        "prefill": {"type": "array", "items": {"type": "object", "required": ["isl"], "properties": {
            "isl": {"type": "integer", "minimum": 1}, "ttft_ms": _OPT_NUM}}},
        "decode": {"type": "array", "items": {"type": "object", "required": ["kv", "ctx"], "properties": {
            "kv": {"type": "number", "exclusiveMinimum": 0}, "ctx": {"type": "number", "exclusiveMinimum": 0},
            "batch": {"type": "integer", "minimum": 1}, "length": {"type": ["integer", "null"]}, "itl_ms": _OPT_NUM}}},
        "warmup": {"type": ["array", "null"]},
        "pins": {"type": "object"}, "model": {"type": "object"}, "sampling": {"type": ["object", "null"]},
        "engine_actual": {"type": ["object", "null"]}, "llm_kwargs": {"type": ["object", "null"]},
        "loadavg": {"type": ["object", "null"], "additionalProperties": {"type": "array", "items": {"type": "number"}}},
        "engine_start_s": _OPT_NUM,
    },
}
#: Largest raw driver JSON read (a sweep's raw data is a few MB).
MAX_RAW_BYTES = 256 << 20


def read_raw(path: str | os.PathLike) -> Dict[str, Any]:
    """An earlier ``--raw-out`` file, checked (hostile JSON, :data:`RAW_SCHEMA`); CalibrationError naming
    the file and the first offending key otherwise."""

    from unirl_replay.contract import json_guard
    from unirl_replay.contract.errors import TraceFormatError

    p = Path(path)
    if not p.is_file() or p.stat().st_size > MAX_RAW_BYTES:
        raise CalibrationError(f"--from-raw {p}: not a regular file of at most {MAX_RAW_BYTES} bytes")
    try:
        raw = json_guard.loads(p.read_bytes(), file=str(p))
    except TraceFormatError as e:
        raise CalibrationError(f"--from-raw {e}: not the raw driver JSON of `calibrate --raw-out`") from None
    from unirl_replay.contract.profile_npz import first_schema_problem

    problem = first_schema_problem(RAW_SCHEMA, raw)
    if problem is not None:
        where, message = problem
        raise CalibrationError(f"--from-raw {p}: {where}: {message} (not the raw driver JSON of "
                               "`calibrate --raw-out`)")
    return raw


# ---------------------------------------------------------------------------------------------
# Provenance and the whole command


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
        "hardware": environments.hardware(),
        "loadavg": raw.get("loadavg"),
        "engine_start_s": raw.get("engine_start_s"),
        "plan": {k: spec[k] for k in ("prefill", "decode", "warmup_isl", "seed", "sampling")},
        "raw": {"prefill": raw.get("prefill"), "decode": raw.get("decode"), "warmup": raw.get("warmup")},
        "fit": fit.record,
    }


def like_row_tokens(trace_dir: str | os.PathLike) -> int:
    """``--prefill-row-tokens like``: the token-weighted mean prompt length ``sum(n_i^2) / sum(n_i)`` (``n_i`` =
    ``Request.input_tokens`` of the trace's requests, rounded to an int, tokens). Token-weighted, not the median
    request: a pass of N tokens in equal rows of L tokens has ``sum n^2 = N * L``, so this L gives the sweep's passes
    the workload's quadratic (attention) work per token, and a prompt's tokens weigh as much in the sweep as in the
    passes they fill. CalibrationError saying what is missing when the trace has none."""
    from unirl_replay.contract.gate import gate

    lens = []
    for _, rec in gate(trace_dir, "calibrate").iter_workload():
        if rec.WhichOneof("record") == "request" and rec.request.input_tokens > 0:
            lens.append(int(rec.request.input_tokens))
    if not lens:
        raise CalibrationError(f"--prefill-row-tokens like: {trace_dir}/workload has no request with input_tokens > 0 "
                               "(Request.input_tokens): nothing to take the row length from; give --prefill-row-tokens L")
    n = np.asarray(lens, dtype=np.float64)
    return max(1, int(round(float((n * n).sum() / n.sum()))))


#: a multi-row prefill point needs at least this share of its repeats usable (all rows in one pass)
MIN_USABLE_SHARE = 0.5


def min_usable_repeats(repeats: int) -> int:
    """The usable repeats a multi-row prefill point of ``repeats`` needs (:data:`MIN_USABLE_SHARE`, at least 1)."""
    return max(1, int(np.ceil(MIN_USABLE_SHARE * repeats)))


def multirow_points(raw: Dict[str, Any], repeats: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """Per multi-row point: rows, tokens, usable / unusable repeats, refused; and the raw copy the fit reads (a
    refused point's repeats without ``ttft_ms``, so the fit leaves it out; unusable repeats have none already)."""
    need = min_usable_repeats(repeats)
    by: Dict[int, List[Dict[str, Any]]] = {}
    for r in raw.get("prefill", []):
        by.setdefault(int(r["isl"]), []).append(r)
    pts, refused = [], set()
    for n, rs in sorted(by.items()):
        ok = [r for r in rs if r.get("ttft_ms") is not None and r["ttft_ms"] > 0]
        q = {"tokens": n, "rows": int(rs[0].get("rows") or 1), "usable_repeats": len(ok),
             "unusable_repeats": len(rs) - len(ok), "refused": len(ok) < need}
        reasons = sorted({str(r.get("unusable")) for r in rs if r.get("unusable")})
        if reasons:
            q["unusable_reasons"] = reasons
        if ok:
            q["median_ms"] = float(np.median([r["ttft_ms"] for r in ok]))
        if q["refused"]:
            refused.add(n)
        pts.append(q)
    fit_raw = dict(raw)
    fit_raw["prefill"] = [r if int(r["isl"]) not in refused else {**r, "ttft_ms": None} for r in raw.get("prefill", [])]
    return fit_raw, pts


def calibrate(like: str, out: str, *, workload_name: Optional[str] = None, repeats: int = 5, osl: int = 64,
              decode_repeats: int = 1, max_kv: int = 32768, batches: Optional[Sequence[int]] = None,
              lengths: Optional[Sequence[int]] = None, model_dir: Optional[str] = None,
              model: Optional[str] = None,
              raw_in: Optional[str] = None, raw_out: Optional[str] = None, log=None,
              timeout_s: float = 3600, engine_env: Optional[Dict[str, str]] = None,
              prefill_row_tokens: Optional[Any] = None,
              before_measuring: Optional[Callable[[], None]] = None) -> Tuple[Path, Dict[str, Any]]:
    """The whole ``calibrate`` command: plan, measure (or reuse ``raw_in``), fit, write.

    ``model``: a local Hugging Face model directory to serve instead of the tiny model (``model_dir``
    is where the tiny model is built); it must be the trace's model when the manifest has its digest.
    ``engine_env``: environment variables the driver and its engine run with (e.g. the capture's thread
    binding ``OMP_NUM_THREADS=1``, ``VLLM_CPU_OMP_THREADS_BIND=0``), recorded as ``engine_env`` in the
    provenance; the binding the engine's processes actually held is in ``conditions.worker_threads``.
    ``prefill_row_tokens``: None (one row per prefill point, the default), an int L, or ``"like"`` (L = the
    token-weighted prompt length of the ``like`` trace's requests, :func:`like_row_tokens`): each prefill point N is measured as one pass of ceil(N / L)
    rows, and the reference probe's points are measured too (provenance ``prefill_rows``, ``reference_points``).
    ``before_measuring``: called once the inputs are checked and the reference environment found, right before the
    engine starts (the CLI's load report and ``--max-load`` refusal); not called with ``raw_in``.

    Raises:
        MissingEnvironmentError: no reference environment. CalibrationError: bad trace / failed run, or
        ``out`` (or its sidecar ``<out>.provenance.json``) exists: a profile is never overwritten, and this is
        checked before anything is measured.
    """
    side = Path(out).with_name(Path(out).name + ".provenance.json")
    from unirl_replay.contract.out_dir import trace_file_problem

    for target in (out, side, raw_out):  # `--out TRACE/x.partial`: the trace was INCOMPLETE for every reader after
        why = trace_file_problem(target) if target else None
        if why:
            raise CalibrationError(why)
    for existing in (Path(out), side):
        if existing.exists() or existing.is_symlink():
            raise CalibrationError(f"{existing} exists: calibrate never overwrites a profile (choose another --out, "
                                   "or move the old one away)")
    if raw_out:  # checked before anything is measured, like --out: the raw data never replace a file
        if os.path.lexists(raw_out):
            raise CalibrationError(f"--raw-out {raw_out} exists: calibrate never overwrites a file (choose another "
                                   "--raw-out, or move the old one away)")
        if Path(raw_out).absolute() in (Path(out).absolute(), side.absolute()):
            raise CalibrationError(f"--raw-out {raw_out} is the profile --out writes: give it a name of its own")
    eng, man = engine_from_manifest(like)
    name = workload_name or default_workload_name()
    if name == man.workload_name:
        raise CalibrationError(f"calibration workload name {name!r} equals the trace's workload name: "
                               "calibration and holdout must be disjoint")
    row_tokens, row_source = None, None
    if prefill_row_tokens == "like":
        row_tokens, row_source = like_row_tokens(like), f"like:{man.trace_id}"
    elif prefill_row_tokens is not None:
        row_tokens, row_source = int(prefill_row_tokens), "explicit"
    spec = plan_sweep(eng, repeats=repeats, osl=osl, decode_repeats=decode_repeats, max_kv=max_kv,
                      batches=batches, lengths=lengths, row_tokens=row_tokens)
    seed_label = man.labels.get("knob.model_seed")
    if seed_label and not (seed_label.isascii() and seed_label.isdigit()):
        raise CalibrationError(f"{like}/manifest.json: label knob.model_seed {seed_label!r} is not a non-negative "
                               "integer (the seed of the tiny model's weights)")
    spec.update(model_dir=model_dir, model_seed=int(seed_label) if seed_label else 0,
                weights_sha256=man.model.weights_sha256 or None)
    if model:
        if not (Path(model) / "config.json").exists():
            raise CalibrationError(f"--model {model}: not a Hugging Face model directory (no config.json)")
        spec["model"] = str(Path(model).resolve())
    conditions = None
    if raw_in:
        raw = read_raw(raw_in)
    else:
        from unirl_replay.calibrate import conditions as cond

        reference_python()  # fail early with the clear message
        if before_measuring is not None:
            before_measuring()
        t0 = cond.snapshot()
        observed: Dict[str, Any] = {}
        raw = run_driver(spec, log=log, timeout_s=timeout_s, observed=observed, env=engine_env)
        conditions = cond.conditions_json(cond.run_conditions(t0, cond.snapshot(), hardware=environments.hardware(),
                                                              process_tree=observed.get("process_tree")))
    if raw_out:  # exclusive create: a file that appeared since the check above is not replaced either
        Path(raw_out).parent.mkdir(parents=True, exist_ok=True)
        with open(raw_out, "x", encoding="utf-8") as f:
            f.write(json.dumps(raw, indent=1) + "\n")
    rows_record = None
    fit_raw = raw
    if row_tokens:
        fit_raw, rows_pts = multirow_points(raw, repeats)
        rows_record = {"row_tokens": row_tokens, "source": row_source, "lead_tokens": spec["prefill"]["lead_tokens"],
                       "lead_budget_tokens": int(spec["prefill"].get("lead_budget_tokens") or 0),
                       "min_usable_repeats": min_usable_repeats(repeats),
                       "grid": spec["prefill"]["grid_note"], "points": rows_pts}
    fit = fit_profile(fit_raw, eng)
    prov = build_provenance(raw=raw, fit=fit, eng=eng, manifest=man, workload_name=name, spec=spec)
    if rows_record is not None:
        prov["prefill_rows"] = rows_record
        if str(row_source).startswith("like:"):  # the row length is read from the like trace's requests
            prov["like_trace"]["note"] = ("engine settings, model and the prefill row length (prefill_rows: the "
                                          "token-weighted mean prompt length of its requests); no time of this "
                                          "trace is used")
        prov["method"] = METHOD.replace(
            ONE_ROW_PREFILL,
            MULTIROW_METHOD.format(row_tokens=row_tokens, source=row_source, lead=rows_record["lead_tokens"],
                                   lead_fill=LEAD_FILL.format(budget=rows_record["lead_budget_tokens"])
                                   if rows_record["lead_budget_tokens"] else "",
                                   min_usable=rows_record["min_usable_repeats"]))
    if raw.get("reference_points"):
        from unirl_replay.calibrate.probe import reference_summary

        prov["reference_points"] = reference_summary(raw["reference_points"])
        prov["reference_points_skipped"] = spec["reference_points"].get("skipped", [])
        prov["reference_points_method"] = (
            "the reference probe's points (capture.probe.PROBE_POINTS, the same definitions) measured in this "
            f"calibration engine after the sweep, {spec['reference_points']['repeats']} repeats, summarised as the "
            "probe summarises its own (capture.probe.probe_points); --level-to-probe divides a window probe's median "
            "by these (like with like) instead of the fit")
    # RunConditions of the sweep (manifest.proto), the same message a capture records: compare warns when
    # they differ. A refit (--from-raw) has none: the raw data did not record them.
    prov["conditions"] = conditions or {"recorded": False}
    prov["engine_env"] = dict(engine_env or {})
    from unirl_replay.contract.profile_npz import check_provenance

    check_provenance(json.loads(json.dumps(prov, default=str)), str(out), CalibrationError)  # readable as written
    return write_profile(out, fit.tables, prov), prov


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `unirl-replay calibrate`")
