"""Timing-model specs: ``polynomial`` | ``fixed:PREFILL_MS,DECODE_MS`` | ``profile:NPZ`` |
``aic:HARDWARE:MODEL``.

:func:`parse_timing_model` returns the contract ``TimingModel`` message and the upstream
``engine.timing_model`` dict. Calibration status is labelled honestly:

* ``polynomial`` -> UNCALIBRATED (upstream's one generic curve, never fitted to this engine);
* ``fixed`` -> FIXED (analytic; conformance only);
* ``profile`` -> CALIBRATED only when the profile's provenance says it was measured, else
  UNCALIBRATED; CALIBRATED_PROBE ("CALIBRATED+PROBE") when it is a measured profile levelled to a
  reference probe (provenance ``probe_levelled``, ``unirl-replay calibrate --level-to-probe``). Provenance is read from the NPZ key ``provenance`` (a 0-d string array holding
  JSON) or from a sidecar ``<file>.provenance.json``; it counts as measured when it holds
  ``"measured": true`` (``calibration_workloads`` is copied into the message);
* ``aic:HARDWARE:MODEL`` (aisimulate line only) -> HARDWARE_DATABASE, always UNVALIDATED: AISimulate's
  op-level GPU database (``timing.type: default``) for ``HARDWARE`` (e.g. ``h200_sxm``) and ``MODEL``
  (a local directory holding a Hugging Face ``config.json``; nothing is downloaded, or a model id
  the build bundles, e.g. ``Qwen/Qwen3-0.6B``). Upstream labels such runs ``functional_only``: no
  execution on that hardware was measured for this trace, so it is never a calibrated prediction.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.v1 import replay_pb2

PROFILE_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


class TimingModelError(UnirlReplayError):
    """A timing-model spec or profile file is invalid."""


def _read_provenance(path: Path, npz) -> dict:
    if "provenance" in npz.files:
        try:
            return json.loads(str(npz["provenance"]))
        except json.JSONDecodeError as e:
            raise TimingModelError(f"{path}: 'provenance' is not JSON: {e}") from e
    side = path.with_name(path.name + ".provenance.json")
    if side.exists():
        return json.loads(side.read_text())
    return {}


#: (TraceManifest.model field, the profile provenance's model.config key) compared by :func:`profile_model_problem`
MODEL_FIELDS = (("architecture", "model_type"), ("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                ("num_attention_heads", "num_attention_heads"), ("num_kv_heads", "num_key_value_heads"),
                ("vocab_size", "vocab_size"), ("intermediate_size", "intermediate_size"))


def profile_model_problem(tm: replay_pb2.TimingModel, manifest) -> str | None:
    """Why a measured profile (``tm``: CALIBRATED / CALIBRATED+PROBE) is no calibration of ``manifest``'s model:
    its provenance names another model (weights sha256, or an architecture field, where both sides record
    it), else None. A profile measures one model's step times; on another model it is no calibration."""
    if tm.kind != replay_pb2.TIMING_MODEL_KIND_PROFILE or tm.calibration not in (
            replay_pb2.CALIBRATION_STATUS_CALIBRATED, replay_pb2.CALIBRATION_STATUS_CALIBRATED_PROBE):
        return None
    from unirl_replay.contract.profile_npz import load_profile

    _, _, prov = load_profile(Path(tm.profile_path), PROFILE_KEYS, TimingModelError)
    pm = prov.get("model") if isinstance(prov.get("model"), dict) else {}
    cfg = pm.get("config") if isinstance(pm.get("config"), dict) else {}
    mm = manifest.model
    diff = []
    sha = pm.get("weights_sha256")
    if isinstance(sha, str) and sha and mm.weights_sha256 and sha != mm.weights_sha256:
        diff.append(f"weights sha256 {sha[:12]}... vs {mm.weights_sha256[:12]}...")
    for field, key in MODEL_FIELDS:
        ours, theirs = getattr(mm, field), cfg.get(key)
        if ours and theirs not in (None, "", 0) and not isinstance(theirs, (dict, list)) and str(theirs) != str(ours):
            diff.append(f"{field} {theirs} vs {ours}")
    if not diff:
        return None
    return (f"profile {tm.profile_path} was measured on another model than trace {manifest.trace_id!r}'s "
            f"({'; '.join(diff)}; the profile's first): it is no calibration of this model, and a replay with it "
            "would be labelled CALIBRATED. Calibrate on this trace's engine (`unirl-replay calibrate --like TRACE`) "
            "or replay with an uncalibrated model (polynomial, fixed:P,D)")


def profile_hardware_problem(tm: replay_pb2.TimingModel, manifest) -> str | None:
    """Why a measured profile (``tm``: CALIBRATED / CALIBRATED+PROBE) was measured on other hardware than
    ``manifest``'s capture (:func:`unirl_replay.contract.cpu_signature.other_hardware`: CPU model or the CPU
    signature's processor fields), else None. CALIBRATED means "measured on the same engine configuration as the
    trace" (replay.proto): such a replay is UNVALIDATED for this capture, never CALIBRATED."""
    if tm.kind != replay_pb2.TIMING_MODEL_KIND_PROFILE or tm.calibration not in (
            replay_pb2.CALIBRATION_STATUS_CALIBRATED, replay_pb2.CALIBRATION_STATUS_CALIBRATED_PROBE):
        return None
    from unirl_replay.contract.cpu_signature import other_hardware
    from unirl_replay.contract.profile_npz import load_profile

    _, _, prov = load_profile(Path(tm.profile_path), PROFILE_KEYS, TimingModelError)
    return other_hardware(manifest, prov)


def profile_extrapolation_problem(tm: replay_pb2.TimingModel, engines) -> str | None:
    """Why a profile timing model (``tm``) gives, off its grid, a pass or step time above the bound of every timing
    model somewhere one of ``engines`` (``manifest.EngineConfig``) runs
    (:func:`unirl_replay.contract.profile_npz.extrapolation_problem`), else None (any other kind: None)."""
    if tm.kind != replay_pb2.TIMING_MODEL_KIND_PROFILE:
        return None
    from unirl_replay.contract.profile_npz import extrapolation_problem, load_profile

    _, tables, _ = load_profile(Path(tm.profile_path), PROFILE_KEYS, TimingModelError)
    for engine in engines:
        why = extrapolation_problem(tables, tm.profile_path, engine)
        if why:
            return why
    return None


def parse_timing_model(spec: str) -> tuple[replay_pb2.TimingModel, dict]:
    """Parse a ``--timing-model`` spec.

    Returns:
        (TimingModel message, upstream ``timing_model`` dict for ``extra_engine_args.engine``).

    Raises:
        TimingModelError: unknown kind, bad numbers (must be finite and > 0), a missing or
            malformed NPZ (keys, float arrays, strictly increasing axes).
    """
    kind, _, arg = spec.partition(":")
    if kind == "polynomial" and not arg:
        return (replay_pb2.TimingModel(kind=replay_pb2.TIMING_MODEL_KIND_POLYNOMIAL,
                                       calibration=replay_pb2.CALIBRATION_STATUS_UNCALIBRATED),
                {"type": "polynomial"})
    if kind == "fixed":
        try:
            p, d = (float(x) for x in arg.split(","))
        except ValueError:
            raise TimingModelError(f"fixed timing model needs 'fixed:PREFILL_MS,DECODE_MS', got {spec!r}") from None
        from unirl_replay.contract.profile_npz import fixed_costs_problem

        why = fixed_costs_problem(p, d)
        if why:
            raise TimingModelError(f"fixed timing model {why}, got {spec!r}")
        return (replay_pb2.TimingModel(kind=replay_pb2.TIMING_MODEL_KIND_FIXED,
                                       calibration=replay_pb2.CALIBRATION_STATUS_FIXED,
                                       prefill_ms=p, decode_ms=d),
                {"type": "fixed", "prefill_ms": p, "decode_ms": d})
    if kind == "profile" and not arg.strip():  # `profile:$UNSET`
        raise TimingModelError(f"the profile timing model needs 'profile:NPZ', the path of a dynamo_profile NPZ "
                               f"(e.g. profile:profiles/vllm-cpu-tiny-qwen2-20261130b.npz), got {spec!r}")
    if kind == "profile" and arg:
        from unirl_replay.contract.profile_npz import load_profile

        path = Path(arg)
        data, _, prov = load_profile(path, PROFILE_KEYS, TimingModelError)  # every malformed file: a typed error
        measured = prov.get("measured") is True
        status = (replay_pb2.CALIBRATION_STATUS_UNCALIBRATED if not measured else
                  replay_pb2.CALIBRATION_STATUS_CALIBRATED_PROBE if isinstance(prov.get("probe_levelled"), dict)
                  else replay_pb2.CALIBRATION_STATUS_CALIBRATED)
        tm = replay_pb2.TimingModel(
            kind=replay_pb2.TIMING_MODEL_KIND_PROFILE, calibration=status,
            profile_path=arg, profile_sha256=hashlib.sha256(data).hexdigest(),
            calibration_workloads=[str(w) for w in prov.get("calibration_workloads", [])
                                   if isinstance(prov.get("calibration_workloads"), list)])
        return tm, {"type": "external", "provider": "dynamo_profile",
                    "config": {"path": str(path.resolve())}}
    if kind == "aic":
        hardware, _, model = arg.partition(":")
        if not re.fullmatch(r"[a-z0-9][a-z0-9_]*", hardware) or not model:
            raise TimingModelError(f"the GPU-database timing model needs 'aic:HARDWARE:MODEL' (e.g. "
                                   f"aic:h200_sxm:/path/to/hf-model-dir), got {spec!r}")
        path = Path(model)
        if model.startswith((".", "/", "~")) or path.exists():  # a local directory, else a bundled model id
            try:
                path = path.expanduser()
            except RuntimeError:  # "~nouser/...": no such user's home (it was a RuntimeError traceback)
                raise TimingModelError(f"aic model {model!r}: {model.split('/')[0]!r} names no user's home "
                                       "directory here") from None
            if not (path / "config.json").is_file():
                raise TimingModelError(f"aic model {model!r}: no Hugging Face config.json in that directory")
            model = str(path.resolve())
        return (replay_pb2.TimingModel(kind=replay_pb2.TIMING_MODEL_KIND_HARDWARE_DATABASE,
                                       calibration=replay_pb2.CALIBRATION_STATUS_UNVALIDATED,
                                       hardware=hardware, model=model),
                {"type": "default", "hardware": hardware, "model": model})
    raise TimingModelError(f"unknown timing model {spec!r}; use polynomial | fixed:PREFILL_MS,DECODE_MS | "
                           "profile:NPZ | aic:HARDWARE:MODEL")
