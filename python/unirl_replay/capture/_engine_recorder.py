"""Runtime-side recorder installed by the vLLM plugin (only when the capture is switched on).

Imported only from :mod:`unirl_replay.capture.vllm_plugin` after ``UNIRL_REPLAY_TRACE_DIR`` was
found set, in the process that owns ``vllm.LLM`` (UniRL's spawned runtime).

Writes this process's shard ``$UNIRL_REPLAY_TRACE_DIR/raw/engine-<host>-<pid>.jsonl``
(:mod:`shard`: bounded buffer, flushed on a timer and at exit): counts, finish reasons, vLLM's
per-request timestamps and salted prefix hashes (:mod:`hashing`). Never text or token ids.

Engine identity: ``engine_id = "vllm:<host>:<pid>"`` of this process (the one that owns
``vllm.LLM``); the driver side names the same engine by ``VLLMRolloutEngine._process.pid`` on the
same host, and the pair (engine id, UniRL pipe request id) joins a driver call to its vLLM
requests. The engine's own report (``engine_config``: vLLM's resolved config, the model's
``hf_config``, the installed versions in the shard header) is what the manifest is built from.

Clocks: vLLM's ``queued_ts`` / ``scheduled_ts`` / ``first_token_ts`` / ``last_token_ts`` are
``time.monotonic()`` in the EngineCore process (EngineCoreEvent / EngineCoreOutputs timestamps).
CLOCK_MONOTONIC is one host-wide clock on Linux, so they are directly comparable with the
driver's ``time.monotonic()``: the trace builder only subtracts the window start. ``arrival_time``
is wall clock (``time.time()`` in this process); it is kept raw for reference and never used for
a trace offset.

Reference probe (:mod:`probe`): a pipe message tagged ``unirl_replay_probe`` is recorded as a
``probe_generate`` record (counts and vLLM's timestamps, no prefix hashes), never as
``engine_generate``: probe requests never join a window. Its reply rows (UniRL's plain outputs, read by
the probe's role method only) also carry those requests' ``scheduled_ts`` / ``first_token_ts`` /
``last_token_ts`` under :data:`probe.REPLY_KEY`, so the driver judges a contended round by the same
timestamps ``capture finalize`` later does.

Plain mode (for paired overhead runs in the same engine process): while the file
``raw/PLAIN`` exists, ``LLM.generate`` calls straight through (one ``stat`` per call) and the
per-child hook does nothing.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from unirl_replay.capture import shard
from unirl_replay.capture.hashing import load_salt, prefix_block_hashes
from unirl_replay.capture.probe import REPLY_KEY as PROBE_REPLY_KEY
from unirl_replay.capture.probe import TAG_KEY as PROBE_TAG_KEY

PLAIN_SWITCH_FILE = "PLAIN"

_state: Dict[str, Any] = {"last_pipe_request_id": None, "config_emitted": False, "active": False}
_lock = threading.Lock()

_TS = ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: what a probe reply carries back to the probe's role method (the driver's round verdict, :mod:`probe`)
_PROBE_REPLY_TS = ("scheduled_ts", "first_token_ts", "last_token_ts")


def _metrics_dict(metrics: Any) -> Optional[Dict[str, Any]]:
    if metrics is None:
        return None
    out: Dict[str, Any] = {"type": type(metrics).__name__}
    for name in (*_TS, "num_generation_tokens"):
        if hasattr(metrics, name):
            value = getattr(metrics, name)
            out[name] = value if isinstance(value, (int, float, bool)) or value is None else str(value)
    return out


def _get(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def engine_config(llm: Any) -> Dict[str, Any]:
    """vLLM's actual config (after EngineCore start: ``num_gpu_blocks`` is reported back)."""
    vc = _get(llm, "llm_engine.vllm_config")
    fields = {
        "block_size": "cache_config.block_size",
        "num_gpu_blocks": "cache_config.num_gpu_blocks",
        "enable_prefix_caching": "cache_config.enable_prefix_caching",
        "cache_dtype": "cache_config.cache_dtype",
        "max_num_seqs": "scheduler_config.max_num_seqs",
        "max_num_batched_tokens": "scheduler_config.max_num_batched_tokens",
        "enable_chunked_prefill": "scheduler_config.enable_chunked_prefill",
        "max_model_len": "model_config.max_model_len",
        "dtype": "model_config.dtype",
        "tensor_parallel_size": "parallel_config.tensor_parallel_size",
        "distributed_executor_backend": "parallel_config.distributed_executor_backend",
        "enforce_eager": "model_config.enforce_eager",
        "device_type": "device_config.device_type",
    }
    out: Dict[str, Any] = {}
    for key, path in fields.items():
        v = _get(vc, path)
        out[key] = v if isinstance(v, (int, float, bool)) or v is None else str(v)
    return out


def engine_id_for(host: str, pid: int) -> str:
    """The engine id both sides compute: the vLLM runtime process on its host."""
    return f"vllm:{host}:{pid}"


def model_report(llm: Any) -> Dict[str, Any]:
    """The model as the engine loaded it (``model_config.hf_config``, the model path)."""
    mc = _get(llm, "llm_engine.vllm_config.model_config")
    hf = getattr(mc, "hf_config", None)
    out: Dict[str, Any] = {"path": str(getattr(mc, "model", "") or ""),
                           "served_name": str(getattr(mc, "served_model_name", "") or "")}
    for key in ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "vocab_size", "intermediate_size"):
        v = getattr(hf, key, None)
        out[key] = v if isinstance(v, (int, float, str)) or v is None else str(v)
    return out


def install(trace_dir: str, llm_cls: Any, runtime_module: Any) -> None:
    raw_dir = Path(trace_dir) / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    plain_switch = str(raw_dir / PLAIN_SWITCH_FILE)
    salt = load_salt(trace_dir)
    engine_id = engine_id_for(shard.host_name(), os.getpid())
    sink = shard.writer(trace_dir, "engine", engine_id=engine_id, unirl_rank=os.environ.get("RANK"))
    emit = sink.emit

    if runtime_module is not None and hasattr(runtime_module, "_recv_request"):
        original_recv = runtime_module._recv_request

        @functools.wraps(original_recv)
        def _recv_request(connection, *, last_request_id):
            message = original_recv(connection, last_request_id=last_request_id)
            _state["last_pipe_request_id"] = message.get("request_id")
            _state["last_pipe_recv_mono"] = time.monotonic()
            _state["probe"] = message.get(PROBE_TAG_KEY) if isinstance(message, dict) else None
            return message

        runtime_module._recv_request = _recv_request

    if runtime_module is not None and hasattr(runtime_module, "_plain_outputs"):
        original_plain = runtime_module._plain_outputs

        @functools.wraps(original_plain)
        def _plain_outputs(outputs):
            rows = original_plain(outputs)
            ts = _state.pop("probe_reply", None)
            if ts is not None and isinstance(rows, list) and len(rows) == len(ts):
                for row, t in zip(rows, ts):  # the probe's own rows only: its role method reads them, nobody else
                    if isinstance(row, dict):
                        row[PROBE_REPLY_KEY] = t
            return rows

        runtime_module._plain_outputs = _plain_outputs

    _install_child_stats_hook()
    original_generate = llm_cls.generate

    @functools.wraps(original_generate)
    def generate(self, prompts, sampling_params=None, *args, **kwargs):
        _state["probe_reply"] = None  # set below for a probe's call only: its reply rows get its timestamps
        if os.path.exists(plain_switch):
            _state["active"] = False
            return original_generate(self, prompts, sampling_params, *args, **kwargs)
        _state["active"] = True
        mono0 = time.monotonic()
        outputs = original_generate(self, prompts, sampling_params, *args, **kwargs)
        mono1 = time.monotonic()
        try:
            if not _state["config_emitted"]:
                _state["config_emitted"] = True
                import vllm

                emit({"kind": "engine_config", "engine_id": engine_id, "config": engine_config(self),
                      "model": model_report(self), "vllm_version": str(getattr(vllm, "__version__", ""))})
            probe = _state.get("probe")
            if probe:  # the reference probe (capture.probe): its own record kind, never a window request
                _state["probe"] = None
                reqs = [{"prompt_tokens": len(getattr(o, "prompt_token_ids", None) or []),
                         "output_tokens": [len(c.token_ids) for c in o.outputs],
                         "metrics": _metrics_dict(getattr(o, "metrics", None))} for o in outputs]
                emit({"kind": "probe_generate", "engine_id": engine_id, "probe": probe,
                      "pipe_request_id": _state.get("last_pipe_request_id"), "call_monotonic": [mono0, mono1],
                      "requests": reqs})
                if all(len(r["output_tokens"]) == 1 for r in reqs):  # one reply row per request (n=1)
                    _state["probe_reply"] = [{k: v for k, v in (r["metrics"] or {}).items() if k in _PROBE_REPLY_TS}
                                             for r in reqs]
                return outputs
            _record_generate(self, emit, salt, outputs, (mono0, mono1), engine_id, sampling_params)
            emit({"kind": "engine_capture_cost", "engine_id": engine_id,
                  "pipe_request_id": _state.get("last_pipe_request_id"), "self_s": time.monotonic() - mono1})
        except Exception as exc:  # noqa: BLE001 - a capture must never break a rollout
            emit({"kind": "capture_error", "where": "engine.generate", "engine_id": engine_id,
                  "error": f"{type(exc).__name__}: {exc}"})
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
        if finish_reason is not None and _state["active"]:
            try:
                parent = getattr(self, "parent_req", None)
                if parent is not None:
                    index = int(str(self.request_id).split("_", 1)[0])
                    stats = _metrics_dict(getattr(self, "stats", None)) or {}
                    _child_stats.setdefault(str(parent.external_req_id), {})[index] = stats
            except Exception:  # noqa: BLE001 - never break the engine
                pass
        return result

    state_cls.make_request_output = make_request_output


def _max_tokens(sampling_params: Any, position: int) -> Optional[int]:
    """The request's ``SamplingParams.max_tokens`` (one for all prompts, or one per prompt), when known."""
    sp = sampling_params
    if isinstance(sp, (list, tuple)):
        sp = sp[position] if position < len(sp) else None
    value = getattr(sp, "max_tokens", None)
    return int(value) if isinstance(value, int) else None


def _record_generate(llm: Any, emit, salt: bytes, outputs: Sequence[Any], times, engine_id: str,
                     sampling_params: Any = None) -> None:
    mono0, mono1 = times
    block_size = _get(llm, "llm_engine.vllm_config.cache_config.block_size")
    requests: List[Dict[str, Any]] = []
    for position, out in enumerate(outputs):
        prompt_ids = getattr(out, "prompt_token_ids", None) or []
        completions = sorted(out.outputs, key=lambda c: int(c.index))
        rid = str(out.request_id)
        children = _child_stats.pop(rid, {})
        requests.append(
            {
                "position": position,
                "vllm_request_id": rid,
                "n": len(completions),
                "prompt_tokens": len(prompt_ids),
                "output_tokens": [len(c.token_ids) for c in completions],
                "finish_reasons": [str(c.finish_reason) if c.finish_reason is not None else None for c in completions],
                "num_cached_tokens": getattr(out, "num_cached_tokens", None),
                "max_tokens": _max_tokens(sampling_params, position),
                "metrics": _metrics_dict(getattr(out, "metrics", None)),
                "per_sample_metrics": [children.get(int(c.index)) for c in completions] if len(completions) > 1 else None,
                "prefix_hashes": prefix_block_hashes(prompt_ids, int(block_size), salt) if block_size else None,
            }
        )
    emit(
        {
            "kind": "engine_generate",
            "engine_id": engine_id,
            "pipe_request_id": _state.get("last_pipe_request_id"),
            "pipe_recv_monotonic": _state.get("last_pipe_recv_mono"),
            "block_size": block_size,
            "call_monotonic": [mono0, mono1],
            "requests": requests,
        }
    )
