"""Runtime-side recorder installed by the vLLM plugin (only when the capture is switched on).

Imported only from :mod:`unirl_replay.capture.vllm_plugin` after ``UNIRL_REPLAY_TRACE_DIR`` was
found set, in the process that owns ``vllm.LLM``.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from unirl_replay.capture.hashing import block_hashes, load_salt

_state: Dict[str, Any] = {"last_pipe_request_id": None, "last_pipe_recv_wall": None, "generate_index": 0}
_lock = threading.Lock()


def _metrics_dict(metrics: Any) -> Optional[Dict[str, Any]]:
    if metrics is None:
        return None
    out: Dict[str, Any] = {"type": type(metrics).__name__}
    for name in (
        "arrival_time",
        "queued_ts",
        "scheduled_ts",
        "first_token_ts",
        "last_token_ts",
        "first_token_latency",
        "num_generation_tokens",
        "is_corrupted",
    ):
        if hasattr(metrics, name):
            value = getattr(metrics, name)
            out[name] = value if isinstance(value, (int, float, bool)) or value is None else str(value)
    out["clock"] = {
        "arrival_time": "wall (time.time, engine frontend = UniRL runtime process)",
        "queued_ts": "monotonic (time.monotonic, engine-core process; CLOCK_MONOTONIC is host-wide)",
        "scheduled_ts": "monotonic (engine-core)",
        "first_token_ts": "monotonic (engine-core)",
        "last_token_ts": "monotonic (engine-core)",
        "first_token_latency": "seconds (frontend)",
    }
    return out


def install(trace_dir: str, llm_cls: Any, runtime_module: Any) -> None:
    raw_dir = Path(trace_dir) / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    path = raw_dir / f"engine-{os.getpid()}.jsonl"
    salt = load_salt()
    sink = open(path, "a", buffering=1, encoding="utf-8")

    def emit(record: Dict[str, Any]) -> None:
        with _lock:
            sink.write(json.dumps(record, sort_keys=True) + "\n")

    emit(
        {
            "kind": "engine_process",
            "pid": os.getpid(),
            "clock_pair": {"wall": time.time(), "monotonic": time.monotonic(), "perf_counter": time.perf_counter()},
        }
    )

    if runtime_module is not None and hasattr(runtime_module, "_recv_request"):
        original_recv = runtime_module._recv_request

        @functools.wraps(original_recv)
        def _recv_request(connection, *, last_request_id):
            message = original_recv(connection, last_request_id=last_request_id)
            _state["last_pipe_request_id"] = message.get("request_id")
            _state["last_pipe_command"] = message.get("command")
            _state["last_pipe_recv_wall"] = time.time()
            _state["last_pipe_recv_mono"] = time.monotonic()
            return message

        runtime_module._recv_request = _recv_request

    _install_child_stats_hook()
    original_generate = llm_cls.generate

    @functools.wraps(original_generate)
    def generate(self, prompts, sampling_params=None, *args, **kwargs):
        wall0, mono0 = time.time(), time.monotonic()
        outputs = original_generate(self, prompts, sampling_params, *args, **kwargs)
        wall1, mono1 = time.time(), time.monotonic()
        try:
            _record_generate(self, emit, salt, outputs, (wall0, mono0, wall1, mono1))
        except Exception as exc:  # noqa: BLE001 - a capture must never break a rollout
            emit({"kind": "capture_error", "where": "engine.generate", "error": f"{type(exc).__name__}: {exc}"})
        return outputs

    llm_cls.generate = generate


_child_stats: Dict[str, Dict[int, Dict[str, Any]]] = {}


def _install_child_stats_hook() -> None:
    """Per-sample timestamps for n>1 requests.

    With ``n > 1`` vLLM fans one request out into child requests ``f"{index}_{parent_id}"`` and
    the aggregated ``RequestOutput.metrics`` is the ``RequestStateStats`` of the child that
    finished last only. ``RequestState.make_request_output`` (frontend output processor, in this
    process) sees each child finish with its own stats: snapshot them there.
    """
    from vllm.v1.engine import output_processor

    state_cls = output_processor.RequestState
    original = state_cls.make_request_output

    @functools.wraps(original)
    def make_request_output(self, new_token_ids, pooling_output, finish_reason, stop_reason, *args, **kwargs):
        result = original(self, new_token_ids, pooling_output, finish_reason, stop_reason, *args, **kwargs)
        try:
            parent = getattr(self, "parent_req", None)
            if finish_reason is not None and parent is not None:
                index = int(str(self.request_id).split("_", 1)[0])
                stats = _metrics_dict(getattr(self, "stats", None)) or {}
                stats.pop("clock", None)
                stats["finish_reason"] = str(finish_reason)
                _child_stats.setdefault(str(parent.external_req_id), {})[index] = stats
        except Exception:  # noqa: BLE001 - never break the engine
            pass
        return result

    state_cls.make_request_output = make_request_output


def _block_size(llm: Any) -> Optional[int]:
    engine = getattr(llm, "llm_engine", None)
    for path in ("vllm_config.cache_config.block_size", "cache_config.block_size"):
        obj: Any = engine
        for name in path.split("."):
            obj = getattr(obj, name, None)
        if isinstance(obj, int):
            return obj
    return None


def _record_generate(llm: Any, emit, salt: bytes, outputs: Sequence[Any], times) -> None:
    wall0, mono0, wall1, mono1 = times
    block_size = _block_size(llm)
    with _lock:
        index = _state["generate_index"]
        _state["generate_index"] += 1
    requests: List[Dict[str, Any]] = []
    for position, out in enumerate(outputs):
        prompt_ids = list(getattr(out, "prompt_token_ids", None) or [])
        completions = sorted(out.outputs, key=lambda c: int(c.index))
        requests.append(
            {
                "position": position,
                "vllm_request_id": str(out.request_id),
                "n": len(completions),
                "prompt_tokens": len(prompt_ids),
                "output_tokens": [len(c.token_ids) for c in completions],
                "finish_reasons": [str(c.finish_reason) if c.finish_reason is not None else None for c in completions],
                "stop_reason_kind": [type(c.stop_reason).__name__ for c in completions],
                "num_cached_tokens": getattr(out, "num_cached_tokens", None),
                "metrics": _metrics_dict(getattr(out, "metrics", None)),
                "per_sample_metrics": [
                    _child_stats.get(str(out.request_id), {}).get(int(c.index)) for c in completions
                ]
                if len(completions) > 1
                else None,
                "prompt_block_hashes": block_hashes(prompt_ids, block_size, salt) if block_size else [],
            }
        )
    for out in outputs:
        _child_stats.pop(str(out.request_id), None)
    emit(
        {
            "kind": "engine_generate",
            "pid": os.getpid(),
            "generate_index": index,
            "pipe_request_id": _state.get("last_pipe_request_id"),
            "pipe_recv_wall": _state.get("last_pipe_recv_wall"),
            "pipe_recv_monotonic": _state.get("last_pipe_recv_mono"),
            "block_size": block_size,
            "call_wall": [wall0, wall1],
            "call_monotonic": [mono0, mono1],
            "requests": requests,
        }
    )
