"""The only module that imports ``aisimulate`` (an AISimulate dev build), and only in its own
environment.

The light environment never imports aisimulate (a 120 MB wheel, 1-6 s to import, heavy
dependencies). :class:`AISimulateSimulator` makes the build's cached isolated environment on first
use (``.cache/simulators/aisimulate-<version>/``, :func:`ensure_aisimulate_env`: the wheel by exact
pin with ``--no-deps`` plus the few packages its replay path imports, :data:`RUNTIME_DEPS`) and
talks to one long-lived worker process there, this module run as
``python -m unirl_replay.replay.simulators.aisimulate``, over JSON lines:

* worker hello: ``{"worker": "unirl-replay-aisimulate", "version": "<aisimulate version>"}``;
* request: ``{"config": <aisimulate CorePredictionConfig as a dict>}``;
* answer: ``{"status": "ok", "per_request": [...], "summary": {...}, "wall_ns": N}`` or
  ``{"status": "error", "type": "...", "message": "..."}``.

The worker runs ``aisimulate.predict.run_prediction`` with the built-in ``engine`` stack (the
``dynamo`` stack fails on version skew with ai-dynamo 1.6.1) and ``capture_per_request``; its rows
are those of ``dynamo.replay`` 1.6.1 plus ``first_admission_reused_input_tokens`` (see
``/work/shared/notes/aisimulate.md`` and the conformance case ``aisimulate_rows_identical``).

Timing models: ``fixed``, ``polynomial``, ``default`` (AISimulate's op-level GPU database,
spec ``aic:HARDWARE:MODEL``; UNVALIDATED, upstream ``functional_only``), and a measured
``dynamo_profile`` NPZ (spec ``profile:NPZ``), which this line cannot read natively (upstream:
"native timing provider is not installed"): it is re-expressed as an AISimulate FPM profile, the
onboarding route for measured forward passes (:func:`fpm_profile_spec`; the worker writes the
table, ``_build_fpm``): every forward pass the simulator asks about is answered from the
profile's own tables (``fpm_interpolation``, ``fallback_policy: deny``: a query outside the table
fails, never falls back to GPU data). What is NOT measured in that table: the system (a
placeholder system ``unirl_profile_<sha>`` whose GPU fields are a copy of ``h200_sxm.yaml``,
unused by FPM interpolation with fixed KV blocks) and the collector run identities (zeros: the
profile was measured by ``unirl-replay calibrate`` from request-level timings, not by Dynamo's
native FPM collector).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import MissingEnvironmentError, UnirlReplayError
from unirl_replay.replay.simulators import AISIMULATE_DEFAULT, Identity, SimulatorJob, SimulatorRun
from unirl_replay.replay.simulators import environments

SIMULATOR_NAME = "aisimulate"
WORKER_ID = "unirl-replay-aisimulate"
#: What the replay path imports besides the wheel itself (found by making everything else
#: unimportable; the wheel declares jax, flax, tfp-nightly, google-vizier, scipy, matplotlib, ...:
#: a 1.3 GB environment, none of it on this path). Bounds are the wheel's own.
RUNTIME_DEPS = ("numpy>=2.1,<3", "pandas>=2.2.3", "pyarrow>=15.0.0", "pydantic>=2.5", "pyyaml>=6.0",
                "psutil>=7.0,<8", "ijson>=3.4,<4", "cloudpickle", "python-dateutil", "packaging>=20.0")
#: ``engine.hardware`` is required by aisimulate's config even when the timing model ignores it
#: (``fixed`` / ``polynomial``); this placeholder is then never used for a time.
PLACEHOLDER_HARDWARE = "h200_sxm"
CACHE_DIR_ENV = "UNIRL_REPLAY_SIMULATOR_CACHE"
#: Batch sizes and token totals the FPM table derived from a profile covers (FPM never extrapolates).
FPM_BATCHES = tuple(2 ** i for i in range(11))  # 1 .. 1024 sequences in a pass
FPM_MAX_PREFILL_TOKENS = 1 << 16
FPM_MAX_CONTEXT_TOKENS = 1 << 17


class AISimulateError(UnirlReplayError):
    """The aisimulate worker refused a run or broke its protocol (the message has its error)."""


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env) if env else environments.CACHE_ROOT / "simulators"


def _stderr_log(msg: str) -> None:
    print(f"[aisimulate] {msg}", file=sys.stderr, flush=True)


def env_dir_for(version: str, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"aisimulate-{version}"


def ensure_aisimulate_env(version: str = AISIMULATE_DEFAULT, cache_dir: Path | None = None,
                          log: Callable[[str], None] = _stderr_log) -> Path:
    """Python of the cached environment of ``aisimulate==version`` (made on first use, ~450 MB).

    Raises:
        MissingEnvironmentError: the build could not be installed (e.g. no such dev build).
    """
    return environments.ensure_env(
        env_dir_for(version, cache_dir), label=f"aisimulate=={version}", no_deps=[f"aisimulate=={version}"],
        deps=RUNTIME_DEPS, log=log,
        hint="Check the build exists: `pip index versions --pre aisimulate` (dev builds such as "
             f"{AISIMULATE_DEFAULT}; the final 0.13.0 on PyPI is a download stub that cannot be installed).")


def _source_root(env_dir: Path) -> Path:
    """A directory holding only this package (a link), for the worker's ``PYTHONPATH``: the light
    environment's site-packages must never reach the simulator's environment."""
    root = env_dir / "unirl-replay-src"
    root.mkdir(exist_ok=True)
    link = root / "unirl_replay"
    pkg = Path(__file__).resolve().parents[2]
    if not (link.is_symlink() and link.resolve() == pkg):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(pkg, target_is_directory=True)
    return root


class _Worker:
    """One worker process in the aisimulate environment; requests are serialised by a lock."""

    def __init__(self, python: Path, env_dir: Path):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = str(_source_root(env_dir))
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [str(python), "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, env=env, cwd=str(env_dir))
        self._lock = threading.Lock()
        hello = self._read()
        if hello.get("worker") != WORKER_ID:
            raise AISimulateError(f"the aisimulate worker sent no hello: {hello}")
        self.version = str(hello.get("version", ""))

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-800:].strip()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.poll()
            raise AISimulateError(f"the aisimulate worker stopped (exit {code}); its stderr: {self._stderr_tail()}")
        try:
            return json.loads(line)
        except json.JSONDecodeError as e:
            raise AISimulateError(f"the aisimulate worker wrote a non-JSON line ({e}): {line[:200]!r}") from None

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(msg) + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError:
                raise AISimulateError(f"the aisimulate worker is gone; its stderr: {self._stderr_tail()}") from None
            return self._read()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._stderr.close()


_WORKERS: dict[str, _Worker] = {}
_WORKERS_LOCK = threading.Lock()


@atexit.register
def close_workers() -> None:
    """Stop every worker this process started."""
    with _WORKERS_LOCK:
        for w in _WORKERS.values():
            w.close()
        _WORKERS.clear()


def fpm_profile_spec(npz_path: str, fpm_root: Path) -> dict[str, str]:
    """Where the FPM re-expression of a ``dynamo_profile`` NPZ lives (keyed by the file's sha256)."""
    import hashlib

    sha = hashlib.sha256(Path(npz_path).read_bytes()).hexdigest()
    root = fpm_root / sha[:16]
    system = f"unirl_profile_{sha[:8]}"
    return {"npz": str(Path(npz_path).resolve()), "root": str(root), "system": system, "backend_version": "0",
            "model_dir": str(root / "model"), "systems_root": str(root / "systems"),
            "parquet": str(root / "systems" / "data" / system / "vllm" / "0" / "fpm_forward_perf.parquet")}


def engine_config(job: SimulatorJob, fpm: dict[str, str] | None = None) -> dict[str, Any]:
    """aisimulate's ``CorePredictionConfig`` (as a dict) for one job: the same engine settings as
    ``dynamo.replay``'s ``extra_engine_args`` (one aggregated vLLM worker), key by key. ``fpm``:
    the :func:`fpm_profile_spec` of a ``dynamo_profile`` timing model."""
    e, tm = job.engine, dict(job.timing_model)
    backend_version = None
    if tm.get("type") == "external":
        if fpm is None:
            raise AISimulateError("a dynamo_profile timing model needs its FPM re-expression (fpm_profile_spec)")
        tm = {"type": "default", "estimation_mode": "fpm_interpolation", "fallback_policy": "deny",
              "systems_paths": [fpm["systems_root"]], "fpm_parquet_path": fpm["parquet"],
              "hardware": fpm["system"], "model": fpm["model_dir"]}
        backend_version = fpm["backend_version"]
    source: dict[str, Any] = {"type": "trace", "paths": [str(Path(job.trace_file).resolve())],
                              "format": job.trace_format}
    if job.block_size:
        source["block_size"] = job.block_size  # aisimulate defaults to 512 otherwise
    load: dict[str, Any] = {"type": "trace_timestamps"}
    if job.trace_format == "agentic_mooncake" and job.lanes is not None:
        load["agentic_lanes"] = job.lanes
    kv: dict[str, Any] = {}
    if e.get("block_size"):
        kv["block_size"] = e["block_size"]
    if "enable_prefix_caching" in e:
        kv["prefix_caching"] = bool(e["enable_prefix_caching"])
    if e.get("num_gpu_blocks"):
        kv["capacity"] = {"type": "fixed", "blocks": e["num_gpu_blocks"]}
    sched = {k2: e[k1] for k1, k2 in (("max_num_batched_tokens", "max_batched_tokens"),
                                      ("max_num_seqs", "max_sequences")) if e.get(k1)}
    hardware = tm.pop("hardware", None) or PLACEHOLDER_HARDWARE
    model = tm.pop("model", None) or job.execution_model or "unirl-replay-target"
    engine: dict[str, Any] = {"mode": "aggregated", "model": model, "hardware": hardware, "backend": "vllm",
                              "workers": {"aggregated": {"scheduler": sched, "kv_cache": kv, "timing": tm}}}
    if backend_version is not None:
        engine["backend_version"] = backend_version
    if e.get("max_model_len"):
        engine["context_length"] = e["max_model_len"]
    if "enable_chunked_prefill" in e:
        engine["enable_chunked_prefill"] = bool(e["enable_chunked_prefill"])
    return {"traffic": {"source": source, "load": load}, "engine": engine}


class AISimulateSimulator:
    """An exact aisimulate dev build behind the simulator interface (run in its own environment)."""

    timing_types = ("fixed", "polynomial", "default", "external")

    def __init__(self, version: str = AISIMULATE_DEFAULT, cache_dir: Path | None = None,
                 log: Callable[[str], None] = _stderr_log):
        self.version, self.cache_dir, self.log = version, cache_dir, log

    def _worker(self) -> _Worker:
        env_dir = env_dir_for(self.version, self.cache_dir)
        key = str(env_dir)
        with _WORKERS_LOCK:
            w = _WORKERS.get(key)
            if w is not None and w.alive():
                return w
            py = ensure_aisimulate_env(self.version, self.cache_dir, self.log)
            w = _Worker(py, env_dir)
            if w.version != self.version:
                w.close()
                raise MissingEnvironmentError(f"{env_dir} holds aisimulate {w.version!r}, not {self.version}; "
                                              "remove the directory to reinstall")
            _WORKERS[key] = w
            return w

    def identity(self) -> Identity:
        w = self._worker()
        return Identity(SIMULATOR_NAME, w.version, {"stack": "engine"})

    def run(self, job: SimulatorJob) -> SimulatorRun:
        msg: dict[str, Any] = {"per_request": job.per_request}
        fpm = None
        if job.timing_model.get("type") == "external":
            if job.timing_model.get("provider") != "dynamo_profile":
                raise AISimulateError(f"timing provider {job.timing_model.get('provider')!r} is not available on aisimulate")
            fpm = fpm_profile_spec(job.timing_model["config"]["path"], env_dir_for(self.version, self.cache_dir) / "fpm")
            msg["fpm_build"] = fpm
        msg["config"] = engine_config(job, fpm)
        ans = self._worker().request(msg)
        if ans.get("status") != "ok":
            raise AISimulateError(f"aisimulate=={self.version} refused {job.trace_file}: "
                                  f"{ans.get('type', '')}: {ans.get('message', ans)}")
        notes = []
        if fpm is not None:
            notes.append(f"profile {Path(fpm['npz']).name} re-expressed as an aisimulate FPM table "
                         f"({fpm['root']}): forward passes sampled from the profile's tables, fpm_interpolation "
                         f"without fallback, placeholder system {fpm['system']} and collector identities; "
                         "aisimulate composes a mixed prefill+decode pass differently from dynamo_profile "
                         "(P + D), so rows differ from the ai-dynamo line's (see docs/replay-mapping.md)")
        return SimulatorRun(per_request=ans["per_request"] if job.per_request else None,
                            summary=ans.get("summary") or {}, wall_ns=int(ans.get("wall_ns", 0)), notes=notes)


def adapter(version: str | None = None, *, cache_dir: Path | None = None,
            log: Callable[[str], None] | None = None, **_options: Any) -> AISimulateSimulator:
    """The adapter for spec ``aisimulate[==VERSION]``."""
    return AISimulateSimulator(version or AISIMULATE_DEFAULT, cache_dir, log or _stderr_log)


# --------------------------------------------------------------------------------------------------
# The worker: runs only inside the aisimulate environment (``python -m ...simulators.aisimulate``).

def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    item = getattr(obj, "item", None)  # numpy scalars
    return _jsonable(item()) if callable(item) else str(obj)


def _build_fpm(spec: dict[str, str]) -> None:  # pragma: no cover - runs in the aisimulate environment
    """Write the FPM re-expression of a ``dynamo_profile`` NPZ (once; ``<root>/.complete`` marks it).

    Rows (schema 7 of ``aic_fpm_forward_perf``): a prefill pass of ``b`` sequences with ``T`` new
    tokens costs the profile's ``P(T)`` (linear interpolation of ``prefill_ttft_ms`` over
    ``prefill_isl``, extrapolated linearly, as dynamo_profile does; cached tokens cost nothing); a
    decode pass of ``b`` sequences reading ``K`` context tokens costs ``D(K, K / b)`` (bilinear in
    ``decode_itl`` over (active kv tokens, context length), extrapolated linearly, floor 1 ms as
    upstream).
    """
    import hashlib
    import shutil

    import aisimulate_core
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from aisimulate_core.sdk.fpm_identity import EXECUTION_COLUMNS, LEGACY_EXECUTION_IDENTITY

    root = Path(spec["root"])
    if (root / ".complete").exists():
        return
    z = np.load(spec["npz"], allow_pickle=False)
    prov = json.loads(str(z["provenance"])) if "provenance" in z.files else {}
    config = (prov.get("model") or {}).get("config")
    if not isinstance(config, dict):
        raise ValueError("the profile's provenance carries no model config (provenance.model.config): an FPM "
                         "profile needs the model architecture")
    shutil.rmtree(root, ignore_errors=True)
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    sysroot = root / "systems"
    parquet = Path(spec["parquet"])
    parquet.parent.mkdir(parents=True)
    template = (Path(aisimulate_core.__file__).parent / "systems" / "h200_sxm.yaml").read_text()
    (sysroot / f"{spec['system']}.yaml").write_text(
        "# PLACEHOLDER system for a measured profile re-expressed as FPM rows (unirl-replay): the GPU fields\n"
        "# below are h200_sxm's and are not used by fpm_interpolation with fixed KV blocks.\n"
        + template.replace("data_dir: data/h200_sxm", f"data_dir: data/{spec['system']}"))

    def lin(x, xs, ys):
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        if xs.size == 1:
            return float(ys[0])
        i = int(np.clip(np.searchsorted(xs, x) - 1, 0, xs.size - 2))
        return float(ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i]))

    isl, ttft = z["prefill_isl"], z["prefill_ttft_ms"]
    akv, ctx, itl = z["decode_active_kv_tokens"], z["decode_context_length"], z["decode_itl"]

    def decode_ms(kv, c):
        col = [lin(c, ctx, itl[i]) for i in range(akv.size)]
        return max(1.0, lin(kv, akv, col))

    def geo(lo, hi, n):
        return sorted({int(round(v)) for v in np.geomspace(max(lo, 1), hi, n)})

    base = {"cell_id": spec["system"], "model_path": spec["model_dir"], "system": spec["system"], "backend": "vllm",
            "backend_version": spec["backend_version"], "weight_quantization": "bfloat16",
            "gemm_quant_mode": "bfloat16", "moe_quant_mode": "bfloat16", "fmha_quant_mode": "bfloat16",
            "comm_quant_mode": "half", "kv_cache_dtype": "bfloat16", "tp": 1, "pp": 1, "dp": 1, "moe_tp": 1,
            "moe_ep": 1, "cp": 1, "moe_backend": "auto", "attention_backend": "auto", "enable_wideep": False,
            "enable_eplb": False, **dict(zip(EXECUTION_COLUMNS, LEGACY_EXECUTION_IDENTITY)),
            "partition_policy": "balanced_v1", "source_plan_sha256": "0" * 64,
            "collector_attempt_id": "unirl-replay-profile", "runtime_run_id": "unirl-replay-profile",
            "runtime_grid_digest": "0" * 64}
    rows = []
    for b in FPM_BATCHES:
        for t in geo(b, FPM_MAX_PREFILL_TOKENS, 24):
            p = max(1e-3, lin(t, isl, ttft))
            for k in [0, *geo(1, b * FPM_MAX_CONTEXT_TOKENS, 12)]:
                rows.append({**base, "workload_kind": "prefill", "batch_size": b, "total_prefill_tokens": t,
                             "total_kv_read_tokens": k, "latency_ms": p})
        for k in geo(b, b * FPM_MAX_CONTEXT_TOKENS, 32):
            rows.append({**base, "workload_kind": "decode", "batch_size": b, "total_prefill_tokens": 0,
                         "total_kv_read_tokens": k, "latency_ms": decode_ms(k, k / b)})
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    meta = {"schema_name": "aic_fpm_forward_perf", "schema_version": 7,
            "coordinate_system": "iteration_totals_balanced_v1",
            # the only policy the runtime accepts; what was really done is in unirl_replay_source_profile
            "measurement_policy": "dynamo_native_single_sample_v1",
            "warmup_repeats": 0, "measurement_repeats": 1, "row_count": len(rows),
            "parquet_sha256": hashlib.sha256(parquet.read_bytes()).hexdigest(),
            "source_plan_sha256": ["0" * 64], "collector_attempt_ids": ["unirl-replay-profile"],
            "runtime_run_ids": ["unirl-replay-profile"], "runtime_grid_digests": ["0" * 64],
            "aic_revision": "none", "model_paths": [spec["model_dir"]], "system": spec["system"], "backend": "vllm",
            "backend_version": spec["backend_version"],
            "unirl_replay_source_profile": {"path": spec["npz"], "note": "rows sampled from a dynamo_profile NPZ "
                                            "(unirl-replay calibrate); not a native FPM collection"}}
    parquet.with_name("fpm_forward_perf.metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    (root / ".complete").write_text(spec["npz"] + "\n")


def _worker_main() -> int:  # pragma: no cover - runs in the aisimulate environment
    import time
    from importlib import metadata

    # Anything the simulator prints goes to stderr; stdout carries the protocol only.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from aisimulate.config.cli import CorePredictionConfig
    from aisimulate.predict import run_prediction
    from aisimulate.runner import EngineReplayRunnerFactory
    from aisimulate.sweeper.replay import ReplayOutputRequirements

    proto.write(json.dumps({"worker": WORKER_ID, "version": metadata.version("aisimulate")}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            if msg.get("fpm_build"):
                _build_fpm(msg["fpm_build"])
            config = CorePredictionConfig.model_validate(msg["config"])
            t0 = time.perf_counter_ns()
            res = run_prediction(config, stack="engine", runner_factory=EngineReplayRunnerFactory(),
                                 output_requirements=ReplayOutputRequirements(
                                     include_raw_report=True, capture_per_request=bool(msg.get("per_request", True))))
            wall = time.perf_counter_ns() - t0
            native = res.native or {}
            ans = {"status": "ok", "per_request": _jsonable(native.get("per_request") or []),
                   "summary": _jsonable(native.get("summary") or res.summary), "wall_ns": wall}
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            ans = {"status": "error", "type": type(e).__name__, "message": str(e)[:2000]}
        proto.write(json.dumps(ans) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_worker_main())
