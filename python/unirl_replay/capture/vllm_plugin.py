"""vLLM general plugin: per-request capture inside UniRL's spawned vLLM runtime process.

Registered as the ``vllm.general_plugins`` entry point ``unirl_replay_capture``. vLLM calls
:func:`register` in every vLLM process (UniRL's runtime process, vLLM's engine-core process and
its workers), possibly more than once.

* ``UNIRL_REPLAY_TRACE_DIR`` unset: the capture does nothing at all (no import, no patch, no file).
* The CPU-only bridges are NOT here: they are a separate entry point
  (``unirl_replay_cpu_bridges`` -> ``cpu_bridges.install_vllm_process_bridges``), active only when
  ``UNIRL_REPLAY_CPU_BRIDGES=1``.
* ``UNIRL_REPLAY_TRACE_DIR`` set: in the process that owns ``vllm.LLM`` (UniRL's runtime,
  ``unirl.rollout.engine.vllm.runtime.engine_process_main``), ``LLM.generate`` is wrapped to
  record, per vLLM request: request id, n, prompt token count, per-sample output token counts,
  finish reasons, num_cached_tokens, ``RequestOutput.metrics`` timestamps, and salted hashes of
  the prompt's full token blocks at the engine block size. UniRL's pipe request id (the join key
  with the driver side) is read by wrapping the runtime module's ``_recv_request``.

No prompt, output or token ids are written. Records go to this process's shard
``$UNIRL_REPLAY_TRACE_DIR/raw/engine-<host>-<pid>.jsonl``; ``unirl-replay capture finalize``
(:mod:`unirl_replay.capture.finalize`) joins them with the UniRL-side shards into a trace.
"""

from __future__ import annotations

import os

TRACE_DIR_ENV = "UNIRL_REPLAY_TRACE_DIR"
SALT_ENV = "UNIRL_REPLAY_TRACE_SALT"

_installed = False


def register() -> None:
    """Entry point called by ``vllm.plugins.load_general_plugins``."""
    trace_dir = os.environ.get(TRACE_DIR_ENV)
    if not trace_dir:
        return
    _install_capture(trace_dir)


def _install_capture(trace_dir: str) -> None:
    global _installed
    if _installed:
        return
    import sys

    # Only the process that constructs vllm.LLM generates through it; in engine-core and worker
    # processes the entrypoint module is not loaded and nothing is patched.
    llm_module = sys.modules.get("vllm.entrypoints.llm")
    if llm_module is None:
        return
    _installed = True
    from unirl_replay.capture import _engine_recorder

    _engine_recorder.install(trace_dir, llm_module.LLM, sys.modules.get("unirl.rollout.engine.vllm.runtime"))


__all__ = ["register", "TRACE_DIR_ENV", "SALT_ENV"]
