"""The one switch: ``UNIRL_REPLAY_TRACE_DIR`` set once for the run, plus :func:`install` in the driver.

What reaches which process (UniRL 0.2.0 on Ray, read from its code):

* UniRL never calls ``ray.init`` itself: the first Ray call (``DevicePool`` creating its placement
  groups) auto-initialises Ray through ``ray.init()``, or the recipe calls it. ``DevicePool``
  starts each ``Worker`` actor with ``runtime_env={"env_vars": {MASTER_ADDR, MASTER_PORT,
  WORLD_SIZE, RANK}}``; Ray merges an actor's ``env_vars`` with the job's ``runtime_env``, so
  variables in the job runtime env reach every Worker. The vLLM runtime that a Worker's
  ``VLLMRolloutEngine`` spawns inherits the Worker's environment, and vLLM's EngineCore and
  worker processes inherit the runtime's.
* :func:`install` (called once in the driver, before Ray starts) therefore wraps ``ray.init`` so
  the job's ``runtime_env`` carries ``env_vars`` {``UNIRL_REPLAY_TRACE_DIR``,
  ``UNIRL_REPLAY_TRACE_SALT``, ``UNIRL_REPLAY_RUN_ID``} and ``worker_process_setup_hook`` =
  :func:`ray_worker_setup` (Ray's documented per-worker-process setup hook; a hook the user
  already set is kept and called first). That hook calls :func:`install` in every Ray worker.
  A recipe that connects to an existing cluster can instead pass the same two runtime_env fields
  itself (:func:`runtime_env`).
* In every process :func:`install` registers post-import hooks: the UniRL hooks
  (:mod:`driver_capture`) go on when ``unirl.rollout.engine.vllm.engine`` /
  ``unirl.rollout.engine.agentic.engine`` / ``unirl.rollout.manager.rollout`` /
  ``unirl.distributed.group.worker`` / ``unirl.distributed.group.handle`` (the driver-side
  ``rollout.generate``: a GRPO batch's ready time) are imported (at once if they already are), so a Ray worker
  that never imports UniRL pays nothing. ``Worker.teardown`` closes the shard, because
  ``DevicePool.shutdown`` ``ray.kill``s its actors right after (no atexit runs there).
* The same post-import hooks give ``VLLMRolloutEngine`` / ``AgenticRolloutEngine`` the reference
  probe's role method (:mod:`probe`, ``unirl_replay_probe``): it runs only when a recipe calls
  :func:`unirl_replay.capture.probe.run`.
* Inside vLLM's processes the capture is the ``vllm.general_plugins`` entry point
  (:mod:`vllm_plugin`), which needs only the environment variable.

Why an installer and not only the environment variable: Ray starts worker processes from the
raylet, not from the driver, and nothing runs our code in them unless Ray is told to; the
``worker_process_setup_hook`` is Ray's own mechanism for exactly that and needs no UniRL edit.

Unset ``UNIRL_REPLAY_TRACE_DIR``: :func:`install` returns False and changes nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
from typing import Any, Dict, Optional

from unirl_replay.capture import shard
from unirl_replay.capture.hashing import SALT_ENV, load_salt

TRACE_DIR_ENV = shard.TRACE_DIR_ENV
RUN_ID_ENV = shard.RUN_ID_ENV
#: A worker_process_setup_hook the user had set (module path), called before ours.
USER_SETUP_HOOK_ENV = "UNIRL_REPLAY_USER_SETUP_HOOK"
SETUP_HOOK = "unirl_replay.capture.switch.ray_worker_setup"
UNIRL_MODULES = ("unirl.rollout.engine.vllm.engine", "unirl.rollout.engine.agentic.engine",
                 "unirl.rollout.manager.rollout", "unirl.distributed.group.worker",
                 "unirl.distributed.group.handle")

_state: Dict[str, Any] = {"installed": False, "ray_wrapped": False}
_lock = threading.RLock()


def enabled() -> bool:
    return bool(os.environ.get(TRACE_DIR_ENV))


def runtime_env(base: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``base`` (a Ray runtime_env) with the capture's env_vars and worker setup hook merged in."""
    env = dict(base or {})
    env_vars = dict(env.get("env_vars") or {})
    for key in (TRACE_DIR_ENV, SALT_ENV, RUN_ID_ENV):
        if os.environ.get(key):
            env_vars.setdefault(key, os.environ[key])
    hook = env.get("worker_process_setup_hook")
    if hook and hook != SETUP_HOOK:
        if not isinstance(hook, str):
            raise TypeError("unirl-replay capture can chain only a worker_process_setup_hook given as a module "
                            "path string (e.g. 'my_pkg.setup'), not a callable")
        env_vars[USER_SETUP_HOOK_ENV] = hook
    env["env_vars"] = env_vars
    env["worker_process_setup_hook"] = SETUP_HOOK
    return env


def install() -> bool:
    """Switch the capture on in this process (and, from the driver, in every Ray worker). Idempotent.

    Returns False (and does nothing) when ``UNIRL_REPLAY_TRACE_DIR`` is not set.
    """
    trace_dir = os.environ.get(TRACE_DIR_ENV)
    if not trace_dir:
        return False
    with _lock:
        if _state["installed"]:
            return True
        _state["installed"] = True
        trace_dir = os.path.abspath(trace_dir)
        os.environ[TRACE_DIR_ENV] = trace_dir
        os.environ.setdefault(RUN_ID_ENV, shard.new_id())
        load_salt(trace_dir)  # the run's salt, shared through the environment from here on
        _wrap_ray_init()
        _register_import_hooks(trace_dir)
        from unirl_replay.capture.driver_capture import process_role

        if process_role() == "driver":  # one line where the user looks; Ray workers and vLLM stay quiet
            print(f"unirl-replay capture on (run {os.environ[RUN_ID_ENV]}): every process of the run writes its "
                  f"shard to {os.path.join(trace_dir, 'raw')}; afterwards: unirl-replay capture finalize "
                  f"{os.path.join(trace_dir, 'raw')} --out TRACE_DIR", file=sys.stderr, flush=True)
    return True


def ray_worker_setup() -> None:
    """Ray ``worker_process_setup_hook``: the user's hook (if any), then :func:`install`."""
    user = os.environ.get(USER_SETUP_HOOK_ENV)
    if user:
        module, _, name = user.rpartition(".")
        getattr(importlib.import_module(module), name)()
    install()


# --- Ray ---------------------------------------------------------------------------------------

def _wrap_ray_init() -> None:
    if "ray" in sys.modules:
        _patch_ray(sys.modules["ray"])
    else:
        _after_import("ray", _patch_ray)


def _patch_ray(ray: Any) -> None:
    with _lock:
        if _state["ray_wrapped"] or not hasattr(ray, "init"):
            return
        _state["ray_wrapped"] = True
    from unirl_replay.capture.driver_capture import process_role

    if process_role() == "worker":  # a Ray worker: the job's runtime env already brought the switch here
        return
    try:
        if ray.is_initialized():
            # The job's runtime env is fixed: a local cluster started from this process inherited its
            # environment, an external one did not. Record it; finalize reports missing worker shards.
            shard.writer(os.environ[TRACE_DIR_ENV], "driver").emit(
                {"kind": "capture_warning", "what": "ray was initialized before unirl_replay.capture.install(); "
                 "Ray workers get the switch only if the cluster's environment had UNIRL_REPLAY_TRACE_DIR"})
            return
    except Exception:  # noqa: BLE001
        pass
    original = ray.init
    if getattr(original, "_unirl_replay_wrapped", False):
        return

    def init(*args, **kwargs):
        if os.environ.get(TRACE_DIR_ENV):
            kwargs["runtime_env"] = runtime_env(kwargs.get("runtime_env"))
        return original(*args, **kwargs)

    init._unirl_replay_wrapped = True  # type: ignore[attr-defined]
    init.__wrapped__ = original  # type: ignore[attr-defined]
    init.__doc__ = original.__doc__
    ray.init = init


# --- post-import hooks -------------------------------------------------------------------------

_pending: Dict[str, list] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a watched module finished executing (then steps aside)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            for callback in _pending.pop(fullname, []):
                callback(module)

        loader.exec_module = exec_module
        return spec


_finder = _Finder()


def _after_import(name: str, callback) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _pending.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def _register_import_hooks(trace_dir: str) -> None:
    def on_import(module) -> None:
        from unirl_replay.capture import driver_capture

        try:
            driver_capture.install_for_module(module, trace_dir)
        except Exception as exc:  # noqa: BLE001 - a UniRL without these classes: say so, never break the run
            shard.writer(trace_dir, driver_capture.process_role()).emit(
                {"kind": "capture_error", "where": f"install {module.__name__}",
                 "error": f"{type(exc).__name__}: {exc}"})

    for name in UNIRL_MODULES:
        _after_import(name, on_import)

    def add_probe(module) -> None:  # the reference probe's role method (capture.probe; runs only when called)
        from unirl_replay.capture import probe

        probe.add_role_method_for_module(module)

    for name in UNIRL_MODULES[:2]:
        _after_import(name, add_probe)


__all__ = ["install", "ray_worker_setup", "runtime_env", "enabled", "TRACE_DIR_ENV"]
