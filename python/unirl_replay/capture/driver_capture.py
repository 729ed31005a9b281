"""UniRL-side capture hooks (driver / trainer and every Ray actor hosting a rollout engine).

Installed by :func:`install` (normally through :func:`unirl_replay.capture.install`, the one
switch); importing this module patches nothing. All hooks wrap UniRL 0.2.0 methods from outside,
at class level, in whatever process they run in, and append to that process's shard
(:mod:`shard`: ``raw/driver-<host>-<pid>.jsonl`` in the driver, ``raw/worker-<host>-<pid>.jsonl``
in a Ray worker):

* ``VLLMRolloutEngine.generate`` (runs where the engine client lives: the Ray actor of a
  ``DevicePool`` worker, or the driver in a single-process run): one ``engine_call`` per round
  trip: a call id (uuid), the engine id (``vllm:<host>:<runtime pid>``, the same id the vLLM plugin
  computes in the runtime process), UniRL's pipe request id (the join key with the engine shard),
  the frontier Part's sample ids (their lineage and the ``r<rollout_id>:`` prefix UniRL's trainer
  puts on every root id), ``Part.output_version``, the trajectory id and turn when inside a
  trajectory, and the call interval.
* ``VLLMRolloutEngine._recv`` (private; inside the engine's client lock in the calling thread):
  the pipe ``expected_request_id``.
* ``AgenticRolloutEngine.generate`` (one call = one trajectory, on a slot thread of the actor):
  a trajectory id (uuid) is assigned here, where the trajectory starts, kept in a thread-local
  for the turns and ``env.step`` calls it makes, and CARRIED WITH THE TRAJECTORY: it is stamped
  into the per-sample ``metadata`` of the returned Sample's last Part
  (``unirl_replay.trajectory_id``), which Ray returns to the driver. The slot hold (generate
  enter/exit) and the engine's ``env.step`` durations are recorded.
* ``RolloutManager.submit`` / ``collect`` (driver): rollout batch boundaries; each collect lists,
  per returned group, the trajectory ids read from the returned Samples (never object identity).
* ``Handle.generate`` (driver; the controller-side method UniRL binds for a role's
  ``@distributed generate``, e.g. ``rollout.generate(sample)`` of a GRPO trainer, which scatters
  the batch over the engines and returns once every engine's share is back): one
  ``rollout_generate`` per call with a dispatch id (uuid), the frontier's root sample ids (the
  GRPO groups) and rollout ids, the sample count and the call interval. Its return is the rollout
  batch's ready time (the trainer gets the batch then); finalize joins it with the engine calls
  by rollout id and root sample ids on the host clock, never by object identity.

No text, token ids or tool arguments are written. Times are ``time.monotonic()`` (host-wide
CLOCK_MONOTONIC) plus one ``(wall, monotonic)`` pair per shard.

Plain mode (paired overhead runs): while ``raw/PLAIN`` exists every hook calls straight through
(one ``stat`` per call), in every process at once.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from unirl_replay.capture import shard

TRAJECTORY_KEY = "unirl_replay.trajectory_id"
PLAIN_SWITCH_FILE = "PLAIN"

_local = threading.local()
_installed: Dict[str, Any] = {}
_mode: Dict[str, Any] = {"active": True}


def set_active(active: bool) -> None:
    """In-process override (tests); the cross-process switch is the ``raw/PLAIN`` file."""
    _mode["active"] = bool(active)


def _now() -> Dict[str, float]:
    return {"wall": time.time(), "monotonic": time.monotonic()}


def _root(sample_id: str) -> str:
    return str(sample_id).split("/", 1)[0]


def rollout_id_of(sample_id: str) -> Optional[int]:
    """UniRL's trainer namespaces every root id ``r<rollout_id>:...`` (``prepare_input_sample``)."""
    root = _root(sample_id)
    if root.startswith("r"):
        head = root[1:].split(":", 1)[0]
        if head.isdigit():
            return int(head)
    return None


def process_role() -> str:
    """``worker`` inside a Ray worker process, else ``driver``."""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if argv0 == "default_worker.py":  # ray/_private/workers/default_worker.py: every Ray worker process
        return "worker"
    worker_mod = sys.modules.get("ray._private.worker")
    ray = sys.modules.get("ray")
    if worker_mod is not None and ray is not None:
        try:
            if worker_mod.global_worker.mode == ray.WORKER_MODE:
                return "worker"
        except Exception:  # noqa: BLE001 - identity only
            pass
    return "driver"


def _actor_id() -> Optional[str]:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        return ray.get_runtime_context().get_actor_id()
    except Exception:  # noqa: BLE001
        return None


def current_context() -> Dict[str, Any]:
    ctx = getattr(_local, "ctx", None)
    return dict(ctx) if ctx else {}


def engine_id_of(engine: Any) -> Optional[str]:
    """``vllm:<host>:<runtime pid>`` of a ``VLLMRolloutEngine`` (the runtime is spawned on this host)."""
    pid = getattr(getattr(engine, "_process", None), "pid", None)
    return None if pid is None else f"vllm:{shard.host_name()}:{pid}"


def trajectory_ids_of(sample: Any) -> List[Optional[str]]:
    """The trajectory ids a returned Sample carries (one per row of its last Part)."""
    parts = getattr(sample, "parts", None) or []
    for part in reversed(parts):
        meta = getattr(part, "metadata", None) or []
        ids = [(m or {}).get(TRAJECTORY_KEY) if isinstance(m, dict) else None for m in meta]
        if any(ids):
            return ids
    return [None]


def _stamp(result: Any, trajectory_id: str) -> None:
    parts = getattr(result, "parts", None)
    if not parts:
        return
    last = parts[-1]
    rows = len(getattr(last, "sample_ids", []) or []) or 1
    meta = list(getattr(last, "metadata", None) or [])
    if len(meta) != rows:
        meta = [None] * rows
    try:
        last.metadata = [{**(m or {}), TRAJECTORY_KEY: trajectory_id} for m in meta]
    except Exception:  # noqa: BLE001 - a frozen Part: leave the data alone, the join reports it
        pass


def install(trace_dir: str, *, window: Dict[str, Any] | None = None) -> shard.ShardWriter:
    """Install the hooks on the UniRL classes in this process (idempotent). Returns the shard."""
    from unirl.rollout.engine.agentic.engine import AgenticRolloutEngine
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine
    from unirl.rollout.manager.rollout import RolloutManager

    from unirl.distributed.group.handle import Handle

    sink = _sink(trace_dir, window)
    _hook_handle(Handle, trace_dir)
    _hook_vllm(VLLMRolloutEngine, trace_dir)
    _hook_agentic(AgenticRolloutEngine, trace_dir)
    _hook_manager(RolloutManager, trace_dir)
    return sink


#: module -> (class name, hook installer): what :mod:`switch` installs as each module is imported
HOOKS = {
    "unirl.rollout.engine.vllm.engine": ("VLLMRolloutEngine", "_hook_vllm"),
    "unirl.rollout.engine.agentic.engine": ("AgenticRolloutEngine", "_hook_agentic"),
    "unirl.rollout.manager.rollout": ("RolloutManager", "_hook_manager"),
    "unirl.distributed.group.worker": ("Worker", "_hook_worker"),
    "unirl.distributed.group.handle": ("Handle", "_hook_handle"),
}


def install_for_module(module: Any, trace_dir: str) -> None:
    """Hook the one class of ``module`` (called right after UniRL imported it)."""
    cls_name, hook = HOOKS[module.__name__]
    globals()[hook](getattr(module, cls_name), trace_dir)


def _sink(trace_dir: str, window: Optional[Dict[str, Any]] = None) -> shard.ShardWriter:
    sink = _installed.get("sink")
    if sink is None:
        sink = shard.writer(trace_dir, process_role(), window=window or {}, unirl_rank=os.environ.get("RANK"))
        _installed["sink"] = sink
    return sink


def _active_fn(trace_dir: str):
    plain = str(Path(trace_dir) / "raw" / PLAIN_SWITCH_FILE)

    def active() -> bool:
        return _mode["active"] and not os.path.exists(plain)

    return active


def _once(name: str) -> bool:
    if name in _installed:
        return False
    _installed[name] = True
    return True


def _hook_vllm(VLLMRolloutEngine: Any, trace_dir: str) -> None:
    if not _once("vllm"):
        return
    active = _active_fn(trace_dir)

    def emit(record):
        _sink(trace_dir).emit(record)

    # --- VLLMRolloutEngine -------------------------------------------------------------------
    original_recv = VLLMRolloutEngine._recv

    @functools.wraps(original_recv)
    def _recv(self, *, connection, timeout_s, expected_request_id=None, expected_command=None):
        if expected_command == "generate":
            _local.pipe_request_id = expected_request_id
            _local.pipe_send_monotonic = time.monotonic()
        return original_recv(self, connection=connection, timeout_s=timeout_s,
                             expected_request_id=expected_request_id, expected_command=expected_command)

    VLLMRolloutEngine._recv = _recv
    original_vgen = VLLMRolloutEngine.generate

    @functools.wraps(original_vgen)
    def vllm_generate(self, sample):
        if not active():
            return original_vgen(self, sample)
        ctx = getattr(_local, "ctx", None)
        turn = None
        if ctx is not None:
            turn = ctx["turn"]
            ctx["turn"] += 1
        frontier = sample.parts[-1]
        sample_ids = [str(s) for s in frontier.sample_ids]
        _local.pipe_request_id = None
        engine_id = engine_id_of(self)  # before the call: a failed runtime may be gone after it
        t0 = _now()
        error = None
        result = None
        try:
            result = original_vgen(self, sample)
            return result
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            t1 = _now()
            out_part = result.parts[-1] if result is not None and getattr(result, "parts", None) else None
            status = None
            if out_part is not None and getattr(out_part, "status", None) is not None:
                try:
                    status = [int(v) for v in out_part.status.tolist()]
                except Exception:  # noqa: BLE001
                    status = str(out_part.status)
            emit({
                "kind": "engine_call",
                "call_id": shard.new_id(),
                "engine_id": engine_id or engine_id_of(self),
                "actor_id": _actor_id(),
                "thread": threading.current_thread().name,
                "pipe_request_id": getattr(_local, "pipe_request_id", None),
                "pipe_send_monotonic": getattr(_local, "pipe_send_monotonic", None),
                "sample_ids": sample_ids,
                "parent_ids": [str(s) for s in sample.parts[-2].sample_ids] if len(sample.parts) >= 2 else [],
                "rollout_ids": sorted({r for r in map(rollout_id_of, sample_ids) if r is not None}),
                "output_version": getattr(out_part, "output_version", None) if out_part is not None else None,
                "engine_version": getattr(self, "_version", None),
                "segment_status": status,
                "trajectory_id": ctx["trajectory_id"] if ctx else None,
                "turn": turn,
                "enter": t0,
                "exit": t1,
                "error": error,
            })

    VLLMRolloutEngine.generate = vllm_generate


def _hook_agentic(AgenticRolloutEngine: Any, trace_dir: str) -> None:
    if not _once("agentic"):
        return
    active = _active_fn(trace_dir)

    def emit(record):
        _sink(trace_dir).emit(record)

    original_agen = AgenticRolloutEngine.generate

    def _wrap_env(engine) -> None:
        env = engine._env
        if getattr(env, "_unirl_replay_wrapped", False):
            return
        original_step = env.step

        def step(sample):
            ctx = getattr(_local, "ctx", None)
            if ctx is None or not active():
                return original_step(sample)
            t0 = _now()
            error = None
            done = None
            n_calls = None
            try:
                observation, done, info = original_step(sample)
                if isinstance(info, dict) and isinstance(info.get("tool_calls"), list):
                    n_calls = sum(1 for c in info["tool_calls"] if c is not None)
                return observation, done, info
            except BaseException as exc:
                error = type(exc).__name__
                raise
            finally:
                t1 = _now()
                emit({"kind": "env_step", "trajectory_id": ctx["trajectory_id"], "turn": ctx["turn"] - 1,
                           "start": t0, "end": t1, "duration_s": t1["monotonic"] - t0["monotonic"], "done": done,
                           "tool_calls": n_calls, "error": error})

        env.step = step
        env._unirl_replay_wrapped = True

    @functools.wraps(original_agen)
    def agentic_generate(self, sample):
        if not active():
            return original_agen(self, sample)
        _wrap_env(self)
        trajectory_id = shard.new_id()
        ids = [str(s) for s in sample.parts[-1].sample_ids]
        roots = sorted({_root(s) for s in ids})
        _local.ctx = {"trajectory_id": trajectory_id, "turn": 0}
        t0 = _now()
        result = None
        try:
            result = original_agen(self, sample)
            return result
        finally:
            t1 = _now()
            ctx = _local.ctx
            _local.ctx = None
            if result is not None:
                _stamp(result, trajectory_id)
            last = result.parts[-1] if result is not None and getattr(result, "parts", None) else None
            emit({
                "kind": "trajectory",
                "trajectory_id": trajectory_id,
                "engine_id": engine_id_of(getattr(self, "_inner", None)),
                "actor_id": _actor_id(),
                "thread": threading.current_thread().name,
                "group": roots[0] if len(roots) == 1 else roots,
                "rollout_ids": sorted({r for r in map(rollout_id_of, ids) if r is not None}),
                "turns": ctx["turn"],
                "harness_status": getattr(last, "harness_status", None),
                "slot_hold": {"start": t0, "end": t1},
            })

    AgenticRolloutEngine.generate = agentic_generate


def _hook_manager(RolloutManager: Any, trace_dir: str) -> None:
    if not _once("manager"):
        return
    active = _active_fn(trace_dir)

    def emit(record):
        _sink(trace_dir).emit(record)

    def flush():
        _sink(trace_dir).flush()

    original_submit = RolloutManager.submit
    original_collect = RolloutManager.collect

    @functools.wraps(original_submit)
    def submit(self, tasks):
        if not active():
            return original_submit(self, tasks)
        tasks = list(tasks)
        ids = [str(s) for t in tasks for s in t.parts[-1].sample_ids]
        emit({"kind": "submit", "submit_id": shard.new_id(), "tasks": len(tasks),
                   "groups": sorted({_root(s) for s in ids}),
                   "rollout_ids": sorted({r for r in map(rollout_id_of, ids) if r is not None}),
                   "at": _now(), "capacities": list(getattr(self._pool, "_capacities", [])),
                   "group_size": getattr(self, "_group_size", None)})
        return original_submit(self, tasks)

    @functools.wraps(original_collect)
    def collect(self, n, *, current_version):
        if not active():
            return original_collect(self, n, current_version=current_version)
        t0 = _now()
        groups = original_collect(self, n, current_version=current_version)
        t1 = _now()
        out = []
        for group in groups:
            roots = sorted({_root(s) for t in group for s in t.parts[0].sample_ids})
            tids = [tid for t in group for tid in trajectory_ids_of(t)]
            out.append({"roots": roots, "trajectory_ids": tids,
                        "rollout_ids": sorted({r for r in map(rollout_id_of, roots) if r is not None})})
        emit({"kind": "collect", "collect_id": shard.new_id(), "n": int(n),
                   "current_version": int(current_version), "enter": t0, "exit": t1, "groups": out,
                   "group_size": getattr(self, "_group_size", None),
                   "capacities": list(getattr(self._pool, "_capacities", []))})
        flush()  # a batch boundary: make it durable now
        return groups

    RolloutManager.submit = submit
    RolloutManager.collect = collect


def _hook_worker(Worker: Any, trace_dir: str) -> None:
    """``Worker.teardown`` (``DevicePool.shutdown`` calls it, then ``ray.kill``s the actor, so no atexit
    runs): close this process's shard there, so a clean shutdown is not reported as a lost process."""
    if not _once("worker"):
        return
    original = Worker.teardown

    @functools.wraps(original)
    def teardown(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            shard.close_all()

    Worker.teardown = teardown


def _hook_handle(Handle: Any, trace_dir: str) -> None:
    """``Handle._make_handle_fn`` (UniRL binds one controller-side function per ``@distributed`` method of a
    role when the Handle is built): the bound ``generate`` is wrapped so its return in the driver is
    recorded (``rollout_generate``): the rollout batch's ready time, distinct from any group's completion."""
    if not _once("handle"):
        return
    active = _active_fn(trace_dir)
    original_make = Handle._make_handle_fn

    @functools.wraps(original_make)
    def _make_handle_fn(self, method_name, *args, **kwargs):
        fn = original_make(self, method_name, *args, **kwargs)
        if method_name != "generate":
            return fn
        role_cls = getattr(self, "role_cls", None)
        role_class = getattr(getattr(role_cls, "__self__", None), "__name__", None) or getattr(role_cls, "__name__", "")

        @functools.wraps(fn)
        def generate(*call_args, **call_kwargs):
            if not active():
                return fn(*call_args, **call_kwargs)
            sample = call_args[0] if call_args else call_kwargs.get("sample")
            try:
                ids = [str(s) for s in sample.parts[-1].sample_ids]
            except Exception:  # noqa: BLE001 - not a Sample: record the interval only
                ids = []
            t0 = _now()
            error = None
            try:
                return fn(*call_args, **call_kwargs)
            except BaseException as exc:
                error = type(exc).__name__
                raise
            finally:
                t1 = _now()
                sink = _sink(trace_dir)
                sink.emit({"kind": "rollout_generate", "dispatch_id": shard.new_id(),
                           "role": getattr(self, "role_name", None), "role_class": role_class,
                           "groups": sorted({_root(s) for s in ids}),
                           "rollout_ids": sorted({r for r in map(rollout_id_of, ids) if r is not None}),
                           "samples": len(ids), "dp_size": getattr(self, "dp_size", None),
                           "enter": t0, "exit": t1, "error": error})
                sink.flush()  # a batch boundary: make it durable now

        return generate

    Handle._make_handle_fn = _make_handle_fn


def close() -> None:
    """Flush and close this process's shard (also done at exit)."""
    sink: Optional[shard.ShardWriter] = _installed.get("sink")
    if sink is not None:
        sink.close()


def mark(kind: str, **fields: Any) -> None:
    """Emit a record into this process's shard while the capture is on (``UNIRL_REPLAY_TRACE_DIR``).

    Recipes use it for what the hooks cannot see: ``window_start`` / ``window_end`` (the window's
    clock zero and end; ``rollout_ids=[...]`` names the window when a run holds several),
    ``labels`` (``labels={...}``: manifest labels), ``overhead_pairs``. Window and probe marks
    carry a snapshot of the host and of the run's engine processes (:mod:`procfs`), from which
    finalize fills the manifest's ``RunConditions``.
    """
    sink: Optional[shard.ShardWriter] = _installed.get("sink")
    if sink is None:
        trace_dir = os.environ.get(shard.TRACE_DIR_ENV)
        if not trace_dir:
            return
        sink = _sink(trace_dir)
    if kind in CONDITION_MARKS and "conditions" not in fields:
        fields["conditions"] = _conditions_snapshot()
    sink.emit({"kind": kind, "at": _now(), **fields})


#: marks that carry a host + engine-process snapshot (:mod:`procfs`): finalize's RunConditions come from them
CONDITION_MARKS = ("window_start", "window_end", "probe_start", "probe_end")


def _conditions_snapshot() -> Dict[str, Any]:
    from unirl_replay.capture import procfs

    try:
        return procfs.snapshot(Path(os.environ.get(shard.TRACE_DIR_ENV, ".")) / "raw")
    except Exception as exc:  # noqa: BLE001 - a capture must never break a run
        return {"error": f"{type(exc).__name__}: {exc}"}


__all__ = ["current_context", "close", "install", "mark", "set_active", "rollout_id_of", "trajectory_ids_of",
           "TRAJECTORY_KEY"]
