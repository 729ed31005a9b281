"""The one reader of a ``dynamo_profile`` NPZ (a timing profile): hostile-input checks before anything
uses it. Every reader of a profile goes through :func:`load_profile`: ``replay`` (the timing model,
before upstream sees the file), ``report`` (the model on the real schedule, the condition warnings)
and ``calibrate --level-to-probe`` (the base profile).

Every malformed file is an error of the caller's type (``err``: e.g.
:class:`~unirl_replay.replay.timing_models.TimingModelError`) naming the file and what is wrong,
never a traceback from numpy, zipfile or a reader of the provenance:

- at most :data:`MAX_PROFILE_BYTES` on disk, :data:`MAX_ARRAY_ELEMENTS` per array and
  :data:`MAX_PROVENANCE_CHARS` of provenance, each checked on the zip member's uncompressed size
  before it is read (a zip bomb cannot allocate gigabytes);
- float64 arrays only (``allow_pickle=False``; object / string arrays are refused, and so are integer or float32
  ones, which upstream's NPZ reader cannot read);
- axes ``prefill_isl``, ``decode_active_kv_tokens``, ``decode_context_length`` 1-D, strictly
  increasing, finite and > 0; ``prefill_ttft_ms`` the length of ``prefill_isl``; ``decode_itl``
  of shape (len(decode_active_kv_tokens), len(decode_context_length)); every value finite and > 0, the
  step times at most :data:`MAX_STEP_MS`, and so, on an engine's sizes (:func:`engine_extents`), are the
  times the simulator interpolates and extrapolates linearly off the grid (:func:`extrapolation_problem`:
  ``replay`` refuses such a profile, ``compare`` does not evaluate it);
- ``provenance`` (in the NPZ or the ``.provenance.json`` sidecar) a JSON object whose keys that this
  package reads have their types (:data:`PROVENANCE_SCHEMA`, a JSON Schema; ``conditions`` must be a
  ``RunConditions`` message in the JSON profile, or ``{"recorded": false}``; its ``cpu_signature``, which
  ``compare`` tells hosts apart by, typed here too): a hand-edited
  ``"hardware": "x"`` is refused here, naming the key, not met later as a traceback in ``compare``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from unirl_replay.contract.message_guard import CONTROL_CHARS, MAX_ID_CHARS

#: Largest profile file read.
MAX_PROFILE_BYTES = 256 << 20
#: Largest array of a profile (elements).
MAX_ARRAY_ELEMENTS = 1 << 22
#: Longest provenance (characters), in the NPZ or its ``.provenance.json`` sidecar (bytes).
MAX_PROVENANCE_CHARS = 16 << 20
AXES = ("prefill_isl", "decode_active_kv_tokens", "decode_context_length")
#: Largest time of one prefill pass or decode step a timing model may give (1 hour): beyond it upstream's
#: clock overflows ("timing duration ... is out of range", a poisoned engine worker) long before any real step.
MAX_STEP_MS = 3_600_000.0
def fixed_costs_problem(prefill_ms: float, decode_ms: float) -> str | None:
    """Why the costs of a ``fixed:PREFILL_MS,DECODE_MS`` timing model (ms per prefill pass, per decode step) are none
    a timing model may give (not finite, <= 0, or above :data:`MAX_STEP_MS`), or None. What ``replay`` refuses in a
    ``--timing-model`` spec and ``compare`` in a replay result's ``timing_model`` (a hand-edited one)."""
    import math

    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (prefill_ms, decode_ms)):
        return "costs must be finite and > 0 ms"
    if prefill_ms > MAX_STEP_MS or decode_ms > MAX_STEP_MS:
        return f"costs must be at most {MAX_STEP_MS:.0f} ms (1 hour) per pass or step"
    return None


#: The tables that are step times (ms), bounded by :data:`MAX_STEP_MS`.
TIME_TABLES = ("prefill_ttft_ms", "decode_itl")

_NUM = {"type": "number"}
_NULLABLE_NUM = {"type": ["number", "null"]}
_FIT_PART = {"type": "object", "properties": {
    "coefficients": {"type": "object", "additionalProperties": _NUM},
    "residuals": {"type": "object", "properties": {"mape_pct": _NUM, "max_abs_pct": _NUM}}}}
_STRS = {"type": "array", "items": {"type": "string"}}
_UINT = {"type": "integer", "minimum": 0}
#: ``conditions.cpu_signature`` (manifest.CpuSignature in the JSON profile): what ``compare`` tells hosts apart by
_CPU_SIGNATURE = {"type": "object", "properties": {
    "vendor_id": {"type": "string"}, "cpu_family": _UINT, "model": _UINT, "stepping": _UINT,
    "microcode": {"type": "string"}, "flags_digest": {"type": "string"}, "isa_flags": _STRS,
    "isa_flags_checked": _STRS}}
#: The provenance keys this package reads, with the types it reads them as (other keys: anything).
PROVENANCE_SCHEMA = {
    "type": "object",
    "properties": {
        "measured": {"type": "boolean"},
        "kind": {"type": "string"},
        # workload names a report compares the trace's with (a holdout compared with a profile calibrated on it is
        # refused) and prints: names as a manifest's (message_guard.MAX_ID_CHARS, no control characters)
        "calibration_workloads": {"type": "array", "maxItems": 256, "items": {
            "type": "string", "maxLength": MAX_ID_CHARS + len("probe:"), "pattern": f"^[^{CONTROL_CHARS}]*$"}},
        "probe_levelled": {"type": "object"},
        "hardware": {"type": "object", "properties": {"cpu_model": {"type": "string"},
                                                      "cpu_count": {"type": "integer", "minimum": 0}}},
        "loadavg": {"type": "object", "additionalProperties": {"type": "array", "items": _NUM}},
        "conditions": {"type": "object", "properties": {"cpu_signature": _CPU_SIGNATURE}},
        "engine": {"type": "object", "properties": {"from_trace": {"type": "object", "properties": {
            "max_num_seqs": {"type": "integer", "minimum": 1}}}}},
        "engine_env": {"type": "object", "additionalProperties": {"type": "string"}},
        "fit": {"type": "object", "properties": {"prefill": _FIT_PART, "decode": _FIT_PART}},
        "raw": {"type": "object", "properties": {
            "prefill": {"type": "array", "items": {"type": "object", "properties": {
                "isl": {"type": "integer"}, "ttft_ms": _NULLABLE_NUM}}},
            "decode": {"type": "array", "items": {"type": "object", "properties": {
                "batch": {"type": "integer"}, "length": {"type": ["integer", "null"]}, "kv": _NUM, "ctx": _NUM,
                "itl_ms": _NULLABLE_NUM}}}}},
        "model": {"type": "object", "properties": {"config": {"type": "object"}}},
        # the calibration session's own medians of the probe's points (calibrate.probe._references divides by them)
        "reference_points": {"type": "array", "items": {"type": "object", "properties": {
            "key": {"type": "string"}, "phase": {"type": "string"}, "batch_size": _UINT, "context_tokens": _UINT,
            "prefill_tokens": _UINT, "repeats": _UINT,
            "median_ms": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_STEP_MS},
            "p25_ms": _NUM, "p75_ms": _NUM}}},
    },
}

__all__ = ["MAX_PROFILE_BYTES", "MAX_ARRAY_ELEMENTS", "MAX_PROVENANCE_CHARS", "MAX_STEP_MS", "fixed_costs_problem", "engine_extents", "UPSTREAM_ENGINE_DEFAULTS", "extrapolation_problem", "fit_problem", "PROVENANCE_SCHEMA", "check_provenance", "load_profile"]



def first_schema_problem(schema: dict, doc: object) -> tuple[str, str] | None:
    """The first JSON Schema violation of ``doc`` (by path order) as ``(dotted path or "(top level)", message)``,
    or None when it conforms."""
    import jsonschema

    problem = next(iter(sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc),
                               key=lambda e: list(map(str, e.absolute_path)))), None)
    if problem is None:
        return None
    return ".".join(str(x) for x in problem.absolute_path) or "(top level)", problem.message

def check_provenance(prov: object, name: str, err: Callable[[str], Exception]) -> dict:
    """``prov`` when it is a provenance this package can read (:data:`PROVENANCE_SCHEMA`), else ``err``
    naming the profile, the first offending key (dotted path) and what it should be."""

    from unirl_replay.contract import json_profile
    from unirl_replay.contract.errors import TraceFormatError
    from unirl_replay.v1 import manifest_pb2

    if not isinstance(prov, dict):
        raise err(f"profile {name!r}: 'provenance' is not a JSON object")
    problem = first_schema_problem(PROVENANCE_SCHEMA, prov)
    if problem is not None:
        where, message = problem
        raise err(f"profile {name!r}: provenance.{where}: {message} (a profile `unirl-replay calibrate` "
                  "wrote holds the right types; was the provenance edited?)")
    cond = prov.get("conditions")
    if isinstance(cond, dict) and "recorded" in cond and not (len(cond) == 1 and cond["recorded"] is False):
        # the marker calibrate writes when the sweep recorded no conditions: nothing else beside it (its readers
        # would read the keys beside it unchecked: a hand-edited {"recorded": false, "engine_uptime_ns": "abc"})
        raise err(f"profile {name!r}: provenance.conditions: {{\"recorded\": false}} marks a sweep that recorded no "
                  f"conditions and holds no other key (found keys {sorted(map(str, cond))[:8]!r}, "
                  f"recorded={str(cond['recorded'])[:40]!r}): a profile `unirl-replay calibrate` wrote holds either "
                  "that marker or a RunConditions message; was the provenance edited?")
    if isinstance(cond, dict) and cond and "recorded" not in cond:
        try:  # the RunConditions message, as calibrate writes it; keys of a newer revision are skipped
            msg = json_profile.parse_dict(cond, manifest_pb2.RunConditions, on_unknown=lambda _keys: None)
        except TraceFormatError as e:
            raise err(f"profile {name!r}: provenance.conditions is not a RunConditions message: {e}") from None
        from unirl_replay.contract.cpu_signature import signature_problems

        problems = signature_problems(msg.cpu_signature)  # what the gate checks of a trace's (manifest.conditions)
        if problems:
            raise err(f"profile {name!r}: provenance.conditions: cpu_signature.{problems[0]} (the rule "
                      "manifest.conditions of a trace's conditions; was the provenance edited?)")
    return prov


#: :func:`fit_problem`: the fit's median ratio to the profile's own tables may lie at most this factor from 1
MAX_FIT_TABLE_RATIO = 4.0


def fit_problem(tables: dict, prov: dict) -> str | None:
    """Why the fitted model in ``prov["fit"]`` (what ``calibrate --level-to-probe`` levels against) does not describe
    the profile's own tables, or None (no fit recorded: None too). The fit is fitted to those tables (a calibrated
    profile's tables are the fit; a probe-levelled one's are the fit times its level, 1.0-2.0 in every holdout):
    a median table / fit ratio beyond :data:`MAX_FIT_TABLE_RATIO` either way, or a fit not finite and > 0 on the
    tables' grid, is an edited or broken provenance."""
    fit = prov.get("fit") if isinstance(prov.get("fit"), dict) else None
    try:
        p = {k: float(v) for k, v in fit["prefill"]["coefficients"].items()}
        d = {k: float(v) for k, v in fit["decode"]["coefficients"].items()}
        p0, p1, p2, d0, d1, d2 = p["p0"], p["p1"], p["p2"], d["d0"], d["d1"], d["d2"]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # no fit: the caller says what it needs
    max_seqs = float(((prov.get("engine") or {}).get("from_trace") or {}).get("max_num_seqs") or 1 << 20)
    isl = np.asarray(tables["prefill_isl"], dtype=float)
    K = np.asarray(tables["decode_active_kv_tokens"], dtype=float)[:, None]
    C = np.asarray(tables["decode_context_length"], dtype=float)[None, :]
    with np.errstate(all="ignore"):
        fits = {"prefill_ttft_ms": p0 + p1 * isl + p2 * isl * isl,
                "decode_itl": d0 + d1 * K + d2 * np.clip(K / C, 1.0, max_seqs)}
        for k, f in fits.items():
            if not np.all(np.isfinite(f)) or np.any(f <= 0):
                return f"the fit of {k} is not > 0 (or not finite) on the profile's own grid"
            r = float(np.median(np.asarray(tables[k], dtype=float) / f))
            if not (1 / MAX_FIT_TABLE_RATIO <= r <= MAX_FIT_TABLE_RATIO):
                return (f"the fit of {k} is {1 / r if r else float('inf'):.3g}x the profile's own table (median over its "
                        f"grid; at most {MAX_FIT_TABLE_RATIO:g}x either way): the fit does not describe this profile")
    return None


def _linear(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``y(x)`` at ``v``, linear between the points and extrapolated linearly off both ends (upstream's
    ``ndarray_interp`` Linear; :func:`unirl_replay.report.timing_eval._interp1`, vectorized)."""
    if x.size == 1:
        return np.full(v.shape, float(y[0]))
    i = np.clip(np.searchsorted(x, v, side="right") - 1, 0, x.size - 2)
    return y[i] + (v - x[i]) / (x[i + 1] - x[i]) * (y[i + 1] - y[i])


def _bilinear(x: np.ndarray, y: np.ndarray, z: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``z[x, y]`` at ``(u, v)``, bilinear and extrapolated linearly off the grid (timing_eval._interp2, vectorized)."""
    if x.size == 1 and y.size == 1:
        return np.full(np.broadcast(u, v).shape, float(z[0, 0]))
    if x.size == 1:
        return np.broadcast_to(_linear(y, z[0], v), np.broadcast(u, v).shape)
    if y.size == 1:
        return np.broadcast_to(_linear(x, z[:, 0], u), np.broadcast(u, v).shape)
    i = np.clip(np.searchsorted(x, u, side="right") - 1, 0, x.size - 2)
    j = np.clip(np.searchsorted(y, v, side="right") - 1, 0, y.size - 2)
    tx, ty = (u - x[i]) / (x[i + 1] - x[i]), (v - y[j]) / (y[j + 1] - y[j])
    a = z[i, j] + tx * (z[i + 1, j] - z[i, j])
    b = z[i, j + 1] + tx * (z[i + 1, j + 1] - z[i, j + 1])
    return a + ty * (b - a)


def _breaks(axis: np.ndarray, hi: float) -> np.ndarray:
    """1, ``hi`` and the grid points between: where a piecewise-linear function of [1, hi] has its extremes."""
    return np.unique(np.concatenate([[1.0, hi], axis[(axis > 1.0) & (axis < hi)]]))


#: What the pinned simulator runs with where a trace leaves an engine size unknown (``convert.common.engine_args``
#: omits a field at 0 so the upstream default applies): Dynamo Replay 1.6.1's mocker defaults,
#: ``dynamo.mocker.config.normalize_mocker_config()["engine"]`` (equal by a test); no ``max_model_len`` there, so
#: a sequence's context is bounded by the KV cache.
UPSTREAM_ENGINE_DEFAULTS = {"max_num_batched_tokens": 8192, "num_gpu_blocks": 16384, "block_size": 64}


def engine_extents(engine) -> list[tuple[str, float, str]]:
    """The largest sizes a simulated engine (a ``manifest.EngineConfig``) runs, as ``(axis, tokens, where from)``:
    a prefill pass of at most ``max_num_batched_tokens`` new tokens, a decode step over at most its KV cache
    (``num_kv_blocks`` x ``block_size_tokens``) of context tokens, each sequence's context at most
    ``max_model_len`` (else the KV cache); a field the trace leaves unknown, what the simulator then runs with
    (:data:`UPSTREAM_ENGINE_DEFAULTS`)."""
    d = UPSTREAM_ENGINE_DEFAULTS
    if engine.max_num_batched_tokens > 0:
        pre = (float(engine.max_num_batched_tokens), "max_num_batched_tokens")
    else:
        pre = (float(d["max_num_batched_tokens"]), f"upstream's default {d['max_num_batched_tokens']}, "
               "max_num_batched_tokens unknown")
    blocks = engine.num_kv_blocks if engine.num_kv_blocks > 0 else d["num_gpu_blocks"]
    block = engine.block_size_tokens if engine.block_size_tokens > 0 else d["block_size"]
    kv = (float(blocks * block), "num_kv_blocks x block_size_tokens" if engine.num_kv_blocks > 0 and
          engine.block_size_tokens > 0 else f"{blocks} x {block}, upstream's default for what the trace leaves unknown")
    ctx = ((float(engine.max_model_len), "max_model_len") if engine.max_model_len > 0 else
           (kv[0], "the KV cache, max_model_len unknown"))
    return [("prefill", *pre), ("kv", *kv), ("context", *ctx)]


def extrapolation_problem(tables: dict, name: str, engine) -> str | None:
    """Why profile ``tables`` (checked by :func:`load_profile`) give a pass or step time above :data:`MAX_STEP_MS`
    somewhere the simulated ``engine`` runs (:func:`engine_extents`), or None. The tables are bounded, but the
    simulator interpolates them (bi)linearly and extrapolates linearly off the grid: a grid that ends early with a
    steep last segment gives times of years (a replay of a 584-day makespan) or beyond what a result holds (an
    int64 ns "Value out of range" traceback). The extremes of a piecewise (bi)linear function over a box lie on
    the lattice of its grid points and the box's corners, so those are evaluated."""
    ext = {axis: (hi, where) for axis, hi, where in engine_extents(engine)}
    isl, ttft = tables["prefill_isl"], tables["prefill_ttft_ms"]
    kv, ctx, itl = tables["decode_active_kv_tokens"], tables["decode_context_length"], tables["decode_itl"]
    with np.errstate(all="ignore"):
        xs = _breaks(isl, ext["prefill"][0])
        p = _linear(isl, ttft, xs)
        u, v = _breaks(kv, ext["kv"][0]), _breaks(ctx, ext["context"][0])
        d = _bilinear(kv, ctx, itl, u[:, None], v[None, :])
    eid = getattr(engine, "engine_id", "")
    if not np.all(p[~np.isnan(p)] <= MAX_STEP_MS) or np.isnan(p).any():
        k = int(np.nanargmax(np.where(np.isnan(p), np.inf, p)))
        return (f"profile {name!r}: a prefill pass of {xs[k]:.0f} new tokens takes {float(p[k]):.6g} ms by the "
                f"profile, extrapolated linearly off its grid (prefill_isl ends at {float(isl[-1]):.10g}) as the simulator "
                f"does, above {MAX_STEP_MS:.0f} ms (1 hour) per pass; engine {eid!r} runs passes up to "
                f"{ext['prefill'][0]:.0f} tokens ({ext['prefill'][1]}). A profile's grid covers the engine it models "
                "(`unirl-replay calibrate --like TRACE` samples up to its limits)")
    if np.isnan(d).any() or not np.all(d <= MAX_STEP_MS):
        k = np.unravel_index(int(np.argmax(np.where(np.isnan(d), np.inf, d))), d.shape)
        return (f"profile {name!r}: a decode step over {u[k[0]]:.0f} active KV tokens at a context of {v[k[1]]:.0f} "
                f"tokens takes {float(d[k]):.6g} ms by the profile, extrapolated linearly off its grid "
                f"(decode_active_kv_tokens ends at {float(kv[-1]):.10g}, decode_context_length at {float(ctx[-1]):.10g}) as "
                f"the simulator does, above {MAX_STEP_MS:.0f} ms (1 hour) per step; engine {eid!r} holds up to "
                f"{ext['kv'][0]:.0f} KV tokens ({ext['kv'][1]}) and contexts up to {ext['context'][0]:.0f} tokens "
                f"({ext['context'][1]}). A profile's grid covers the engine it models (`unirl-replay calibrate "
                "--like TRACE` samples up to its limits)")
    return None


def load_profile(path: Path, keys: tuple[str, ...], err: Callable[[str], Exception]) -> tuple[bytes, dict, dict]:
    """Read and check a profile. Returns (file bytes, arrays by key, provenance dict)."""
    from unirl_replay.contract import json_guard
    from unirl_replay.contract.errors import TraceFormatError

    name = str(path)
    if not path.is_file():
        raise err(f"profile {name!r} does not exist or is not a regular file")
    if path.stat().st_size > MAX_PROFILE_BYTES:
        raise err(f"profile {name!r} is larger than {MAX_PROFILE_BYTES} bytes")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise err(f"profile {name!r} cannot be read: {e.strerror or e}") from None
    arrays: dict[str, np.ndarray] = {}
    prov_text = None
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = list(npz.files)
            for k in (*keys, "provenance"):
                if k not in files:
                    continue
                info = npz.zip.getinfo(k + ".npy") if hasattr(npz, "zip") and npz.zip else None
                limit = MAX_PROVENANCE_CHARS * 4 if k == "provenance" else MAX_ARRAY_ELEMENTS * 16  # 'U': 4 B/char
                if info is not None and info.file_size > limit + 4096:
                    raise err(f"profile {name!r}: array {k} is too large ({info.file_size} bytes uncompressed)")
                a = npz[k]
                if k == "provenance":
                    prov_text = str(a)
                    continue
                if a.size > MAX_ARRAY_ELEMENTS:
                    raise err(f"profile {name!r}: array {k} has {a.size} elements (limit {MAX_ARRAY_ELEMENTS})")
                if a.dtype.kind != "f" or a.dtype.itemsize != 8:
                    # upstream's NPZ reader (dynamo_profile) reads float64 arrays only: an int64 / float32 table
                    # passed here and was a ValueError traceback out of the simulator ("incorrect descriptor")
                    raise err(f"profile {name!r}: array {k} has dtype {a.dtype}; a dynamo_profile holds float64 "
                              "arrays (the simulator's NPZ reader reads no other dtype; `unirl-replay calibrate` "
                              "writes float64)")
                arrays[k] = np.asarray(a, dtype=float)
    except Exception as e:  # noqa: BLE001 - numpy / zipfile / zlib raise many types on a broken file
        if isinstance(e, type(err(""))):
            raise
        raise err(f"profile {name!r} is not a dynamo_profile NPZ file (numpy could not read it as an .npz of "
                  "plain arrays); make one with `unirl-replay calibrate`") from None
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise err(f"profile {name!r} lacks arrays {missing}")
    for k in AXES:
        a = arrays[k]
        if a.ndim != 1 or a.size < 1 or np.any(np.diff(a) <= 0):
            raise err(f"profile {name!r}: axis {k} must be 1-D and strictly increasing")
    for k, a in arrays.items():
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise err(f"profile {name!r}: array {k} must hold finite values > 0")
        if k in TIME_TABLES and np.any(a > MAX_STEP_MS):
            raise err(f"profile {name!r}: array {k} holds {float(a.max())!r} ms, above {MAX_STEP_MS:.0f} ms (1 hour) "
                      "per pass or step")
    if arrays["prefill_ttft_ms"].shape != arrays["prefill_isl"].shape:
        raise err(f"profile {name!r}: prefill_ttft_ms has shape {arrays['prefill_ttft_ms'].shape}, prefill_isl "
                  f"{arrays['prefill_isl'].shape}")
    want = (arrays["decode_active_kv_tokens"].size, arrays["decode_context_length"].size)
    if arrays["decode_itl"].shape != want:
        raise err(f"profile {name!r}: decode_itl has shape {arrays['decode_itl'].shape}, expected {want}")
    prov: object = {}
    try:
        if prov_text is not None:
            prov = json_guard.loads(prov_text, file=name)
        else:
            side = path.with_name(path.name + ".provenance.json")
            if side.is_file():
                if side.stat().st_size > MAX_PROVENANCE_CHARS:
                    raise err(f"{side}: larger than {MAX_PROVENANCE_CHARS >> 20} MiB")
                prov = json_guard.loads(side.read_bytes(), file=side.name)
    except TraceFormatError as e:
        raise err(f"profile {name!r}: 'provenance' is not valid JSON: {e}") from None
    return data, arrays, check_provenance(prov, name, err)
