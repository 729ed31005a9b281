"""Run a real UniRL 0.2.0 rollout window on CPU (reference environment) and capture it as a trace.

    python -m unirl_replay.reference.rollout_driver grpo    --out DIR [options]
    python -m unirl_replay.reference.rollout_driver agentic --out DIR [options]
    python -m unirl_replay.reference.rollout_driver grpo    --out DIR --no-capture   # plain run, no trace

Normally started by ``unirl-replay capture`` (main environment), which runs this module with the
reference environment's interpreter (``.venv-ref``).

GRPO: UniRL's own ``VLLMRolloutEngine`` (direct vLLM text engine, spawned runtime, vLLM-CPU), a
request Sample built the way ``ARTrainer._build_request_sample`` builds it
(``prepare_input_sample`` + ``Sample.fork(samples_per_prompt)``), one ``engine.generate`` per
rollout batch (the sync trainer's barrier).

Agentic: UniRL's ``AgenticRolloutEngine`` (``ToolAgentHarness`` + ``ToolEnvironment`` with a
local calculator and a local lookup tool with real waits) over the same vLLM engine, dispatched by
UniRL's own ``RolloutManager`` / ``RolloutPool`` with ``capacities=[per_worker_inflight]`` exactly as
``AgenticTrainer`` wires it (``submit`` then ``collect(n)`` per batch); only the Ray slot launcher is
replaced by a local thread launcher.

Capture: ``UNIRL_REPLAY_TRACE_DIR=DIR`` switches the vLLM plugin on in UniRL's runtime process,
:func:`driver_capture.install` adds the driver hooks. After the window, ``--overhead-pairs`` paired
runs of one fixed rollout unit (a GRPO generate call / an agentic submit+collect) alternate
instrumented and plain (hooks in pass-through) in the same processes; then the raw records are
turned into the trace (:mod:`trace_builder`) and ``DIR/raw`` is removed (``--keep-raw`` keeps it).

The model is the tiny scripted Qwen2 model from :mod:`unirl_replay.reference.tiny_model`, built
once into a cache directory (``--model-dir``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from unirl_replay.reference.tiny_model import MODEL_NAME, ensure_model, weights_sha256
from unirl_replay.reference.environments import dist_version, hardware

DEFAULT_ENGINE_KWARGS: Dict[str, Any] = {
    "gpu_memory_utilization": 0.3,
    "disable_log_stats": False,  # vLLM fills RequestOutput.metrics only with stats on
    "max_model_len": 4096,
    "seed": 0,
}


def _range(text: str) -> Tuple[int, int]:
    lo, _, hi = text.partition(":")
    a, b = int(lo), int(hi or lo)
    if not 0 < a <= b:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX with 0 < MIN <= MAX, got {text!r}")
    return a, b


def _prepare_environment(out: Path, *, capture: bool, cpu: bool) -> None:
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    if cpu:
        from unirl_replay.reference import cpu_bridges

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
    return str(ensure_model(args.model_dir, args.model_seed))


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


def _lengths(rng: random.Random, n: int, bounds: Tuple[int, int]) -> List[int]:
    """Prompt lengths in words, log-uniform in [lo, hi] (varied prompt lengths)."""
    lo, hi = bounds
    return [int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))) for _ in range(n)]


class PromptLog:
    """The prompts a run used (``--dump-prompts``, for privacy tests only; written outside the trace)."""

    def __init__(self) -> None:
        self.texts: List[str] = []

    def add(self, texts: List[str]) -> List[str]:
        self.texts.extend(texts)
        return texts

    def write(self, path: str, model_dir: str) -> None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        data = {"texts": self.texts, "token_ids": [tok(t)["input_ids"] for t in self.texts]}
        Path(path).write_text(json.dumps(data))


PROMPTS = PromptLog()


def window_prompts(mode: str, seed: int, batches: int, prompts: int, prompt_words: Tuple[int, int]
                   ) -> List[List[str]]:
    """The prompt texts of each window batch, then of the overhead-pair unit (last list).

    Pure and light (no torch / UniRL import): the privacy tests regenerate a bundled trace's
    prompts from its manifest knobs with it.
    """
    from unirl_replay.reference.tiny_model import synthetic_text

    rng = random.Random(seed)
    base = seed * 100 + (50 if mode == "agentic" else 0)
    out = []
    for b in range(batches):
        lengths = _lengths(rng, prompts, prompt_words)
        out.append([synthetic_text((base + b) * 1000 + i, n) for i, n in enumerate(lengths)])
    pair_rng = random.Random(seed + 7919)
    lengths = _lengths(pair_rng, prompts, prompt_words)
    out.append([synthetic_text((seed * 100 + 99) * 1000 + i, n) for i, n in enumerate(lengths)])
    return out


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


class Capture:
    """Window marks and the instrumented / plain switch for the overhead pairs."""

    def __init__(self, out: Path, enabled: bool) -> None:
        self.out = out
        self.enabled = enabled
        self.window: Dict[str, float] = {}
        self.load: Dict[str, List[float]] = {}

    def start(self) -> None:
        self.load["start"] = list(os.getloadavg())
        self.window["start_wall"] = time.time()
        self.window["start_monotonic"] = time.monotonic()

    def end(self) -> None:
        self.window["end_monotonic"] = time.monotonic()
        self.load["end"] = list(os.getloadavg())

    def instrumented(self, on: bool) -> None:
        from unirl_replay.capture import driver_capture
        from unirl_replay.capture._engine_recorder import PLAIN_SWITCH_FILE

        switch = self.out / "raw" / PLAIN_SWITCH_FILE
        driver_capture.set_active(on)
        if on:
            switch.unlink(missing_ok=True)
        else:
            switch.parent.mkdir(parents=True, exist_ok=True)
            switch.touch()


def measure_pairs(cap: Capture, pairs: int, run_once, unit: str) -> Optional[Dict[str, Any]]:
    """``pairs`` paired runs of ``run_once`` (instrumented vs plain, order alternating)."""
    if not cap.enabled or pairs <= 0:
        return None
    from unirl_replay.capture import driver_capture

    driver_capture.set_phase("overhead")
    load0 = os.getloadavg()
    cap.instrumented(False)
    run_once()  # warm-up, not counted
    inst: List[float] = []
    plain: List[float] = []
    for i in range(pairs):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            cap.instrumented(on)
            t = time.perf_counter()
            run_once()
            (inst if on else plain).append(time.perf_counter() - t)
    cap.instrumented(True)
    driver_capture.set_phase("after")
    load1 = os.getloadavg()
    mi, mp = statistics.median(inst), statistics.median(plain)
    per_pair = [a / b - 1 for a, b in zip(inst, plain)]
    return {
        "pairs": pairs,
        "overhead_ratio": mi / mp - 1,
        "instrumented_wall_ns": int(mi * 1e9),
        "plain_wall_ns": int(mp * 1e9),
        "per_pair_ratio": per_pair,
        "instrumented_s": inst,
        "plain_s": plain,
        "loadavg_before": list(load0),
        "loadavg_after": list(load1),
        "method": (
            f"{pairs} pairs of one {unit}, same engine processes, after the window, order alternating, one plain "
            f"warm-up; plain = capture hooks in pass-through (driver flag, runtime stat of raw/PLAIN per generate). "
            f"ratio = median(instrumented)/median(plain) - 1; per-pair ratios min {min(per_pair):+.4f} median "
            f"{statistics.median(per_pair):+.4f} max {max(per_pair):+.4f}; loadavg(1m) {load0[0]:.2f}->{load1[0]:.2f} "
            f"on {os.cpu_count()} CPUs. Not included: vLLM stats logging (disable_log_stats=False), on in both."
        ),
    }


def run_grpo(args, cap: Capture, model: str) -> Dict[str, Any]:
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine
    from unirl.types.sampling import ARSamplingParams

    from unirl_replay.capture import driver_capture

    texts = window_prompts("grpo", args.seed, args.batches, args.prompts, args.prompt_words)
    timings: Dict[str, Any] = {}
    t0 = time.monotonic()
    engine = VLLMRolloutEngine(_engine_config(model, args))
    timings["engine_start_s"] = time.monotonic() - t0
    sampling = ARSamplingParams(
        samples_per_prompt=args.samples, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens
    )
    batches = []
    try:
        requests = []
        for b in range(args.batches):
            request = _request(PROMPTS.add(texts[b]), b, b * args.prompts)
            requests.append(request.fork(args.samples, sampling_params=sampling))
        cap.start()
        for b, request in enumerate(requests):
            driver_capture.mark("grpo_batch_start", rollout_batch=b)
            t = time.monotonic()
            result = engine.generate(request)
            dt = time.monotonic() - t
            driver_capture.mark("grpo_batch_end", rollout_batch=b)
            batches.append({"rollout_batch": b, "seconds": dt, "samples": len(result.parts[-1].sample_ids)})
        cap.end()
        # overhead pairs: one fixed generate call, output lengths pinned (ignore_eos) so both runs do equal work
        pair_req = _request(PROMPTS.add(texts[-1]), args.batches, 10_000).fork(args.samples, sampling_params=sampling)
        engine.cfg.ignore_eos = True
        try:
            timings["overhead"] = measure_pairs(cap, args.overhead_pairs, lambda: engine.generate(pair_req),
                                                f"GRPO generate call ({args.prompts} prompts x {args.samples} samples, "
                                                f"{args.max_new_tokens} tokens each via ignore_eos)")
        finally:
            engine.cfg.ignore_eos = False
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


def _make_lookup_tool(seed: int, wait_ms: Tuple[int, int] = (20, 150)):
    from unirl.rollout.env.tools.base import Tool

    class LookupTool(Tool):
        """A local tool with a real, seeded wait (stands in for a slow service)."""

        name = "lookup"

        def __init__(self) -> None:
            self._rng = random.Random(seed)
            self._lock = threading.Lock()
            self.fixed_wait_s: Optional[float] = None  # overhead pairs: equal work in both runs

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
                wait = self.fixed_wait_s
                if wait is None:
                    wait = self._rng.uniform(wait_ms[0] / 1e3, wait_ms[1] / 1e3)
            time.sleep(wait)
            return str(sum(map(ord, str(arguments.get("key", "")))) % 97)

    return LookupTool()


def run_agentic(args, cap: Capture, model: str) -> Dict[str, Any]:
    from unirl.rollout.engine.agentic.config import AgenticRolloutEngineConfig
    from unirl.rollout.engine.agentic.engine import AgenticRolloutEngine
    from unirl.rollout.env.tool_environment import ToolEnvironment
    from unirl.rollout.env.tools.calculator import CalculatorTool
    from unirl.rollout.manager import RolloutManager
    from unirl.types.sampling import ARSamplingParams


    texts = window_prompts("agentic", args.seed, args.batches, args.prompts, args.prompt_words)
    timings: Dict[str, Any] = {}
    lookup = _make_lookup_tool(args.seed, args.tool_wait_ms)
    env = ToolEnvironment(tools=[CalculatorTool(), lookup], max_turns=args.max_turns)
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
    control = {"ar": {"stop": ["</tool_call>"]}}

    def tasks_for(request):
        return [prompt for prompt in request.split() for _ in range(args.group_size)]

    batches = []
    try:
        requests = []
        for b in range(args.batches):
            requests.append(_request(PROMPTS.add(texts[b]), b, b * args.prompts, control=control))
        cap.start()
        for b, request in enumerate(requests):
            t = time.monotonic()
            manager.submit(tasks_for(request))
            groups = manager.collect(args.prompts, current_version=0)
            dt = time.monotonic() - t
            statuses: Dict[str, int] = {}
            for group in groups:
                for trajectory in group:
                    status = str(trajectory.parts[-1].harness_status)
                    statuses[status] = statuses.get(status, 0) + 1
            batches.append({"rollout_batch": b, "seconds": dt, "groups": len(groups),
                            "trajectories": sum(len(g) for g in groups), "harness_status": statuses})
        cap.end()
        pair_req = _request(PROMPTS.add(texts[-1]), args.batches, 10_000, control=control)

        def one_collect():
            manager.submit(tasks_for(pair_req))
            manager.collect(args.prompts, current_version=0)

        # Equal work in both runs of a pair: seeded vLLM sampling (the same turns and tool calls every
        # run) and a fixed tool wait (the midpoint of the range).
        harness = engine._harness
        window_sampling = harness.sampling
        harness.sampling = dataclasses.replace(window_sampling, seed=args.seed + 1)
        lookup.fixed_wait_s = sum(args.tool_wait_ms) / 2e3
        try:
            timings["overhead"] = measure_pairs(
                cap, args.overhead_pairs, one_collect,
                f"agentic submit+collect ({args.prompts} prompts x {args.group_size} trajectories, "
                f"{args.per_worker_inflight} slots; seeded sampling, fixed {sum(args.tool_wait_ms) / 2:g} ms tool "
                f"wait)")
        finally:
            harness.sampling = window_sampling
            lookup.fixed_wait_s = None
    finally:
        manager.close()
        executor.shutdown(wait=True)
        t = time.monotonic()
        engine.shutdown()
        timings["engine_shutdown_s"] = time.monotonic() - t
    timings["batches"] = batches
    return timings


# ---------------------------------------------------------------------------------------------
# manifest inputs


def provenance() -> Dict[str, Any]:
    import unirl
    import vllm

    return {
        "unirl": str(getattr(unirl, "__version__", "") or dist_version("unirl")),
        "vllm": str(vllm.__version__),
        "simulator": "1.6.1",  # ai-dynamo version the project pins for replay (pyproject extra `replay`)
        "packages": {
            "vllm-cpu": dist_version("vllm-cpu"),
            "torch": dist_version("torch"),
            "transformers": dist_version("transformers"),
            "tokenizers": dist_version("tokenizers"),
            "python": platform.python_version(),
            "unirl-replay": dist_version("unirl-replay"),
        },
    }


def model_identity(model_dir: str) -> Tuple[Dict[str, Any], str]:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    digest = weights_sha256(model_dir)
    ident = {
        "name": MODEL_NAME,
        "architecture": str(cfg.get("model_type", "")),
        "num_layers": int(cfg.get("num_hidden_layers", 0)),
        "hidden_size": int(cfg.get("hidden_size", 0)),
        "num_attention_heads": int(cfg.get("num_attention_heads", 0)),
        "num_kv_heads": int(cfg.get("num_key_value_heads", cfg.get("num_attention_heads", 0))),
        "vocab_size": int(cfg.get("vocab_size", 0)),
        "intermediate_size": int(cfg.get("intermediate_size", 0)),
        "weights_sha256": digest,
    }
    return ident, digest


def build_meta(args, cap: Capture, model_dir: str, timings: Dict[str, Any]) -> Dict[str, Any]:
    from unirl_replay.capture.hashing import HASH_ALGORITHM, load_salt, salt_id

    ident, digest = model_identity(model_dir)
    now = datetime.datetime.now(datetime.timezone.utc)
    knobs = {"seed": args.seed, "batches": args.batches, "prompts": args.prompts,
             "prompt_words": "%d:%d" % args.prompt_words, "max_new_tokens": args.max_new_tokens,
             "model_seed": args.model_seed}
    if args.mode == "grpo":
        knobs["samples"] = args.samples
    else:
        knobs.update(group_size=args.group_size, per_worker_inflight=args.per_worker_inflight,
                     max_turns=args.max_turns, tool_wait_ms="%d:%d" % args.tool_wait_ms)
    ov = timings.get("overhead")
    labels = {f"knob.{k}": str(v) for k, v in knobs.items()}
    labels["loadavg.window"] = "start %s, end %s" % tuple(
        "/".join(f"{x:.2f}" for x in cap.load[k]) for k in ("start", "end"))
    labels["engine_start_s"] = f"{timings.get('engine_start_s', 0):.1f}"
    if ov:
        labels["overhead.per_pair_ratio"] = ",".join(f"{r:+.4f}" for r in ov["per_pair_ratio"])
        labels["overhead.loadavg"] = "before %s, after %s" % tuple(
            "/".join(f"{x:.2f}" for x in ov[k]) for k in ("loadavg_before", "loadavg_after"))
    labels["capture"] = ("UNIRL_REPLAY_TRACE_DIR -> vllm.general_plugins unirl_replay_capture in UniRL's runtime "
                         "process + driver hooks (unirl_replay.capture.driver_capture); no UniRL file edited")
    labels["cpu_bridges"] = "UNIRL_REPLAY_CPU_BRIDGES=1 (sleep-mode, weight-sync capability, qwen2 manifest check)"
    return {
        "mode": args.mode,
        "trace_id": f"{args.workload_name}-{now.strftime('%Y%m%dT%H%M%SZ')}",
        "workload_name": args.workload_name,
        "role": args.role,
        "created_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "producer_version": dist_version("unirl-replay") or "0",
        "window": cap.window,
        "provenance": provenance(),
        "model": ident,
        "checkpoint": f"{MODEL_NAME} built by unirl_replay.reference.tiny_model (seed {args.model_seed}), "
                      f"weights sha256 {digest[:16]}",
        "hardware": hardware(),
        "salt_id": salt_id(load_salt()),
        "hash_algorithm": HASH_ALGORITHM,
        "overhead": ov,
        "samples": args.samples,
        "group_size": args.group_size,
        "per_worker_inflight": args.per_worker_inflight,
        "max_new_tokens": args.max_new_tokens,
        "engine_extra": {f"engine_kwargs.{k}": v for k, v in DEFAULT_ENGINE_KWARGS.items()},
        "labels": labels,
    }


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout_driver", description="Real UniRL rollout window on CPU.")
    parser.add_argument("mode", choices=["grpo", "agentic"])
    parser.add_argument("--out", required=True, help="trace directory to write (must not hold a trace)")
    parser.add_argument("--role", choices=["calibration", "holdout", "unlabelled"], default="unlabelled")
    parser.add_argument("--workload-name", default=None)
    parser.add_argument("--model-dir", default=None, help="tiny model directory (built there when missing)")
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--no-capture", action="store_true", help="plain run: no capture, no trace")
    parser.add_argument("--no-cpu-bridges", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (prompts, lengths, tool waits)")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=None, help="prompts (groups) per rollout batch")
    parser.add_argument("--samples", type=int, default=4, help="GRPO samples per prompt")
    parser.add_argument("--prompt-words", type=_range, default=None, help="prompt length range in words MIN:MAX")
    parser.add_argument("--group-size", type=int, default=4, help="agentic trajectories per prompt")
    parser.add_argument("--per-worker-inflight", type=int, default=4, help="agentic trajectory slots")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--tool-wait-ms", type=_range, default=(20, 150), help="lookup tool wait MIN:MAX ms")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--overhead-pairs", type=int, default=5)
    parser.add_argument("--keep-raw", action="store_true", help="keep DIR/raw (driver / engine raw records)")
    parser.add_argument("--dump-prompts", default=None, help="tests only: write the prompts (text, token ids) here")
    args = parser.parse_args(argv)
    if args.prompts is None:
        args.prompts = 8 if args.mode == "grpo" else 4
    if args.max_new_tokens is None:
        args.max_new_tokens = 64 if args.mode == "grpo" else 48
    if args.prompt_words is None:
        args.prompt_words = (4, 300) if args.mode == "grpo" else (6, 80)
    args.workload_name = args.workload_name or f"{args.mode}-s{args.seed}"
    out = Path(args.out)
    capture = not args.no_capture
    if capture and (out / "manifest.json").exists():
        parser.error(f"{out} already holds a trace")
    out.mkdir(parents=True, exist_ok=True)
    _prepare_environment(out, capture=capture, cpu=not args.no_cpu_bridges)
    model = _model_dir(args)
    cap = Capture(out, capture)
    t = time.monotonic()
    timings = run_grpo(args, cap, model) if args.mode == "grpo" else run_agentic(args, cap, model)
    timings["total_s"] = time.monotonic() - t
    summary: Dict[str, Any] = {"mode": args.mode, "timings": timings}
    if args.dump_prompts:
        PROMPTS.write(args.dump_prompts, model)
    if capture:
        from unirl_replay.capture import driver_capture
        from unirl_replay.capture.trace_builder import build_trace

        driver_capture.close()
        manifest = build_trace(out, out / "raw", build_meta(args, cap, model, timings))
        if not args.keep_raw:
            shutil.rmtree(out / "raw", ignore_errors=True)
        summary["trace"] = str(out)
        summary["records"] = {a.path: a.record_count for a in manifest.artifacts}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
