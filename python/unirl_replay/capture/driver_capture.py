"""Driver-side capture hooks around UniRL's rollout classes (installed only on explicit request).

Installed by :func:`install` when a capture is switched on (``UNIRL_REPLAY_TRACE_DIR``); importing
this module patches nothing. All hooks wrap UniRL 0.2.0 methods from outside:

* ``VLLMRolloutEngine.generate`` (one call = one engine round trip of one Sample): sample ids of the
  frontier gen Part (``sample.parts[-1].sample_ids``), their group (root prompt id,
  ``sample.parts[-1].group_ids`` / root of the id string), ``Part.output_version`` of the result,
  per-sample ``Part.status``, the engine (runtime pid), and the call interval.
* ``VLLMRolloutEngine._recv`` (private; runs inside the engine's client lock in the calling
  thread): the pipe ``expected_request_id``, i.e. the join key with the runtime-side record.
* ``AgenticRolloutEngine.generate`` (one call = one trajectory): the capture assigns a trajectory
  id (sibling trajectories share UniRL sample ids), keeps the turn index in a thread-local, times
  the slot hold as seen by the worker, and wraps the engine's environment ``step`` to time it.
* ``RolloutManager.submit`` / ``collect``: rollout batch boundaries (the collect the trainer waits
  on) and which trajectories each collect returned.

Records are plain JSON lines in ``$TRACE_DIR/raw/driver-<pid>.jsonl`` (raw input of
:mod:`unirl_replay.capture.trace_builder`). No text, token ids or tool arguments are written.
Times are ``time.monotonic()`` (host-wide CLOCK_MONOTONIC) with one ``(wall, monotonic)`` pair per
process for the window's human start time.

:func:`set_active` switches the hooks to a pass-through (plain) mode for paired overhead runs in
the same processes; :func:`set_phase` tags records (``window`` vs ``overhead``) so the trace
builder keeps only the window.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

_local = threading.local()
_lock = threading.Lock()
_installed: Dict[str, Any] = {}
_mode: Dict[str, Any] = {"active": True, "phase": "window"}
#: phase -> [seconds spent serializing and writing driver records, records] (the hooks' main cost)
_cost: Dict[str, List[Any]] = {}


def set_active(active: bool) -> None:
    """Instrumented (True) or pass-through (False) hooks; used by the overhead pairs."""
    _mode["active"] = bool(active)


def set_phase(phase: str) -> None:
    """Tag subsequent records with ``phase`` (``window`` records become the trace)."""
    _mode["phase"] = phase


def _now() -> Dict[str, float]:
    return {"wall": time.time(), "monotonic": time.monotonic()}


def _root(sample_id: str) -> str:
    return str(sample_id).split("/", 1)[0]


class _Sink:
    def __init__(self, trace_dir: str) -> None:
        raw = Path(trace_dir) / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        self.path = raw / f"driver-{os.getpid()}.jsonl"
        # Block-buffered: one write syscall per ~64 KiB instead of per record (the raw file is only
        # read after the window, when close() has flushed it; an aborted capture is never finalized).
        self._fh = open(self.path, "a", buffering=1 << 16, encoding="utf-8")

    def emit(self, record: Dict[str, Any]) -> None:
        t = time.perf_counter()
        record.setdefault("phase", _mode["phase"])
        line = json.dumps(record, sort_keys=True)
        with _lock:
            self._fh.write(line + "\n")
            cost = _cost.setdefault(record["phase"], [0.0, 0])
            cost[0] += time.perf_counter() - t
            cost[1] += 1

    def close(self) -> None:
        with _lock:
            self._fh.close()


def current_context() -> Dict[str, Any]:
    ctx = getattr(_local, "ctx", None)
    return dict(ctx) if ctx else {}


def install(trace_dir: str, *, window: Dict[str, Any] | None = None) -> _Sink:
    """Install the driver hooks (idempotent) and return the sink."""
    if "sink" in _installed:
        return _installed["sink"]
    from unirl.rollout.engine.agentic.engine import AgenticRolloutEngine
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine
    from unirl.rollout.manager.rollout import RolloutManager

    sink = _Sink(trace_dir)
    _installed["sink"] = sink
    sink.emit({"kind": "driver_process", "pid": os.getpid(), "clock_pair": _now(), "window": window or {}})
    gen_counter = itertools.count()
    traj_counter = itertools.count()
    batch_counter = itertools.count()
    submit_counter = itertools.count()
    traj_of_result: Dict[int, tuple] = {}

    # --- VLLMRolloutEngine -------------------------------------------------------------------
    original_recv = VLLMRolloutEngine._recv

    @functools.wraps(original_recv)
    def _recv(self, *, connection, timeout_s, expected_request_id=None, expected_command=None):
        if expected_command == "generate" and _mode["active"]:
            _local.pipe_request_id = expected_request_id
            _local.pipe_send_monotonic = time.monotonic()
        return original_recv(
            self,
            connection=connection,
            timeout_s=timeout_s,
            expected_request_id=expected_request_id,
            expected_command=expected_command,
        )

    VLLMRolloutEngine._recv = _recv

    original_vgen = VLLMRolloutEngine.generate

    @functools.wraps(original_vgen)
    def vllm_generate(self, sample):
        if not _mode["active"]:
            return original_vgen(self, sample)
        ctx = getattr(_local, "ctx", None)
        turn = None
        if ctx is not None:
            turn = ctx["turn"]
            ctx["turn"] += 1
        call_index = next(gen_counter)
        frontier = sample.parts[-1]
        sample_ids = [str(s) for s in frontier.sample_ids]
        _local.pipe_request_id = None
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
            out_part = result.parts[-1] if result is not None and result.parts else None
            status = None
            if out_part is not None and getattr(out_part, "status", None) is not None:
                try:
                    status = [int(v) for v in out_part.status.tolist()]
                except Exception:  # noqa: BLE001
                    status = str(out_part.status)
            sink.emit(
                {
                    "kind": "driver_generate",
                    "call_index": call_index,
                    "engine_runtime_pid": getattr(getattr(self, "_process", None), "pid", None),
                    "engine_object": f"VLLMRolloutEngine@{id(self):x}",
                    "thread": threading.current_thread().name,
                    "pipe_request_id": getattr(_local, "pipe_request_id", None),
                    "pipe_send_monotonic": getattr(_local, "pipe_send_monotonic", None),
                    "sample_ids": sample_ids,
                    "groups": [_root(s) for s in sample_ids],
                    "parent_ids": [str(s) for s in sample.parts[-2].sample_ids] if len(sample.parts) >= 2 else [],
                    "output_version": getattr(out_part, "output_version", None) if out_part is not None else None,
                    "engine_version": getattr(self, "_version", None),
                    "segment_status": status,
                    "trajectory_id": ctx["trajectory_id"] if ctx else None,
                    "turn": turn,
                    "enter": t0,
                    "exit": t1,
                    "error": error,
                }
            )

    VLLMRolloutEngine.generate = vllm_generate

    # --- AgenticRolloutEngine ----------------------------------------------------------------
    original_agen = AgenticRolloutEngine.generate

    def _wrap_env(engine) -> None:
        env = engine._env
        if getattr(env, "_unirl_replay_wrapped", False):
            return
        original_step = env.step

        def step(sample):
            ctx = getattr(_local, "ctx", None)
            if not _mode["active"] or ctx is None:
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
                sink.emit(
                    {
                        "kind": "env_step",
                        "trajectory_id": ctx["trajectory_id"] if ctx else None,
                        "turn": (ctx["turn"] - 1) if ctx else None,
                        "start": t0,
                        "end": t1,
                        "duration_s": t1["monotonic"] - t0["monotonic"],
                        "done": done,
                        "tool_calls": n_calls,
                        "error": error,
                    }
                )

        env.step = step
        env._unirl_replay_wrapped = True

    @functools.wraps(original_agen)
    def agentic_generate(self, sample):
        if not _mode["active"]:
            return original_agen(self, sample)
        _wrap_env(self)
        trajectory_id = f"traj-{next(traj_counter):05d}"
        roots = sorted({_root(s) for s in sample.parts[-1].sample_ids})
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
                traj_of_result[id(result)] = (trajectory_id, result)
            last = result.parts[-1] if result is not None and result.parts else None
            sink.emit(
                {
                    "kind": "trajectory",
                    "trajectory_id": trajectory_id,
                    "thread": threading.current_thread().name,
                    "group": roots[0] if len(roots) == 1 else roots,
                    "turns": ctx["turn"],
                    "harness_status": getattr(last, "harness_status", None),
                    "slot_hold": {"start": t0, "end": t1},
                    "engine_object": f"AgenticRolloutEngine@{id(self):x}",
                }
            )

    AgenticRolloutEngine.generate = agentic_generate

    # --- RolloutManager ----------------------------------------------------------------------
    original_submit = RolloutManager.submit
    original_collect = RolloutManager.collect

    @functools.wraps(original_submit)
    def submit(self, tasks):
        if not _mode["active"]:
            return original_submit(self, tasks)
        tasks = list(tasks)
        sink.emit(
            {
                "kind": "submit",
                "submit_index": next(submit_counter),
                "tasks": len(tasks),
                "groups": sorted({_root(s) for t in tasks for s in t.parts[-1].sample_ids}),
                "at": _now(),
                "capacities": list(getattr(self._pool, "_capacities", [])),
            }
        )
        return original_submit(self, tasks)

    @functools.wraps(original_collect)
    def collect(self, n, *, current_version):
        if not _mode["active"]:
            return original_collect(self, n, current_version=current_version)
        index = next(batch_counter)
        t0 = _now()
        groups = original_collect(self, n, current_version=current_version)
        t1 = _now()
        sink.emit(
            {
                "kind": "collect",
                "batch_index": index,
                "n": int(n),
                "current_version": int(current_version),
                "enter": t0,
                "exit": t1,
                "groups": [
                    {
                        "roots": sorted({_root(s) for t in group for s in t.parts[0].sample_ids}),
                        "trajectory_ids": [traj_of_result.get(id(t), (None,))[0] for t in group],
                    }
                    for group in groups
                ],
            }
        )
        return groups

    RolloutManager.submit = submit
    RolloutManager.collect = collect
    return sink


def close() -> None:
    """Flush and close the driver sink (hooks stay installed but the process is about to finish)."""
    sink: Optional[_Sink] = _installed.get("sink")
    if sink is not None:
        sink.emit({"kind": "driver_capture_cost", "phase": "close",
                   "emit_s": {k: v[0] for k, v in _cost.items()}, "records": {k: v[1] for k, v in _cost.items()}})
        sink.close()


def mark(kind: str, **fields: Any) -> None:
    """Emit a driver-level record (e.g. GRPO batch boundaries) when the capture is installed."""
    sink: Optional[_Sink] = _installed.get("sink")
    if sink is not None:
        sink.emit({"kind": kind, "at": _now(), **fields})


__all__ = ["current_context", "close", "install", "mark", "set_active", "set_phase"]
