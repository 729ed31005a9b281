"""The reference probe: a few fixed points run in the capture's own engines right before and after a window.

Standard library only (it runs inside a user's processes); nothing runs unless called.

Points (:data:`PROBE_POINTS`, :data:`PROBE_REPEATS` repeats each, in this order, per repeat):

* decode, batch 1 and batch 32: B requests of :data:`DECODE_PROMPT_TOKENS` unique random token ids
  (prefix caching can never hit), :data:`PROBE_DECODE_STEPS` output tokens each (``ignore_eos``),
  so the mean context over the decode is 112 + 32/2 = 128 tokens (the calibration sweep's
  ``ctx = L + OSL/2``). One repeat's step time = the median over its requests of
  ``(last_token_ts - first_token_ts) / (output tokens - 1)`` (vLLM's EngineCore timestamps);
* prefill: one request of 512 unique random token ids, 1 output token, alone in the engine; the step
  time is ``first_token_ts - scheduled_ts`` (the calibration sweep's prefill measure);
* batched prefill (``batch_size`` rows, ``prefill_tokens`` new tokens in all): a window's prefill passes
  hold many rows (a GRPO call's 12 rows, 1.5-2.1 k tokens), and such a pass ran 1.24x the levelled model
  where the isolated 512-token prompt ran at ~1.0x (results/holdout-quiet). ``batch_size + 1`` requests
  of ``prefill_tokens / batch_size`` unique random token ids, 1 output token each, in one ``generate``
  call: vLLM's EngineCore starts its first pass as soon as the first request reaches it (the B=32
  decode point's rows go 1 + 31), so the first row is a lead row that runs alone and the other rows,
  delivered meanwhile, share the next pass. One repeat's step time (:func:`batched_prefill_pass`) is
  that of the pass holding the most rows: the rows sharing one ``first_token_ts`` (one EngineCore
  step), ``first_token_ts - scheduled_ts`` (their common schedule time). Which rows reach the first
  step is a race (in the holdout-probe2 captures the measured pass held 5-9 rows, 8 in 97 of 120
  repeats), so every usable repeat is kept with its own pass size (``repeat_step_ms``, ``repeat_pass_tokens``, ``repeat_pass_rows``;
  the point's ``batch_size`` / ``prefill_tokens`` are their median-low, an observed size) and the
  levelling divides each repeat by the model at its own size; it never claims a pass that did not
  run. Every engine of the tested configurations has ``max_num_batched_tokens`` 4096 >= 2048 + 256.

Every request does the rollout's sampling work (temperature 1, top_p 1, the sampled tokens'
logprobs), as the calibration sweep's do. Point value = median and quartiles over the repeats.

How it runs: :func:`run` (driver side, with UniRL's rollout ``Handle``) launches the role method
:data:`ROLE_METHOD` on every engine slot at once (the engines then run their probes concurrently,
as they run a window) and waits. The method (added to UniRL's ``VLLMRolloutEngine`` and
``AgenticRolloutEngine`` by the capture switch, :func:`add_role_method`, only when the capture is
on) calls :func:`run_in_engine`, which sends the probe straight to the engine's vLLM runtime
through UniRL's own pipe (``VLLMRolloutEngine._request("generate", ...)``), each message tagged
``unirl_replay_probe`` (:data:`TAG_KEY`; UniRL's runtime ignores unknown keys). The engine
recorder sees the tag and writes those requests as ``probe_generate`` records, never as
``engine_generate``: probe requests never enter a window's requests or outcomes. The driver
marks ``probe_start`` / ``probe_end`` with host and engine-process counters (:mod:`procfs`).
``capture finalize`` turns them into the trace's ``ReferenceProbe`` entries (:func:`probe_points`)
and their calibration-role artifacts.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

#: (phase, batch size, context tokens, prefill tokens) of the fixed reference probe
#: (the batched prefill point: 8 rows of 256 tokens, after a lead row; see the module docstring)
PROBE_POINTS = (("decode", 1, 128, 0), ("decode", 32, 128, 0), ("prefill", 0, 0, 512), ("prefill", 8, 0, 2048))
PROBE_REPEATS = 5
#: ``run(repeats=N)`` / ``capture --probe-repeats N``: at most this many (the default is :data:`PROBE_REPEATS`)
MAX_PROBE_REPEATS = 50
PROBE_DECODE_STEPS = 32
#: decode prompts: 112 tokens + 32 output tokens = a mean context of 128 tokens over the decode
DECODE_PROMPT_TOKENS = 128 - PROBE_DECODE_STEPS // 2
#: the contended part (``run(contended_repeats=N)``, ``capture --probe-contended N``): each point measured on one
#: engine while every other engine decodes :data:`LOAD_ROWS` rows (a GRPO window's rows per engine: 3 prompts x 4
#: samples) of :data:`DECODE_PROMPT_TOKENS`-token unique random prompts; the driver starts the load, waits
#: :data:`LOAD_LEAD_S` (the load's prefill, ~1.3 k tokens), then starts the target's points
LOAD_ROWS = 12
LOAD_LEAD_S = 2.0
#: the load's length covers the target's points (their isolated wall time x this margin) plus the lead. 1.6 until
#: 2026-12-01: in a real 2-engine capture 3 of 8 rounds then ended 0.5-1.1 s past their load (the points under the
#: load ran ~1.75x their isolated wall), each costing a retry
LOAD_MARGIN = 2.0
#: at most this many load output tokens (max_model_len 4096 of the tested engines, minus the prompt)
MAX_LOAD_TOKENS = 3000
#: a round is run again (a new round id ``<repeat>:<engine>:<attempt>``), up to this many attempts in all, when the
#: role methods' own call times (host monotonic clock) show the target's points did not run inside every load's
#: call: started less than half the lead after a load's call began, or ended less than :data:`LOAD_TAIL_S` before a
#: load's call returned. The retried load is sized to the span the target really took (its start delay included):
#: how long a point waits to reach the engine is the shared host's, not the probe's (a 10 s stall was seen in CI).
#: Which repeats are used stays the vLLM-timestamp verdict of :func:`contended_points`, for every round.
ROUND_ATTEMPTS = 3
LOAD_TAIL_S = 0.5
TAG_KEY = "unirl_replay_probe"
#: a probe reply row's key holding its request's vLLM timestamps (``scheduled_ts``, ``first_token_ts``,
#: ``last_token_ts``; added by the engine recorder to the probe's own replies, which only its role method reads), so
#: the driver judges a round by what ``capture finalize`` judges it by (:func:`repeat_miss`)
REPLY_KEY = "unirl_replay_probe_ts"
#: a retried round's lead: the longest time a load took from its call to its steady decode, x this margin
LEAD_MARGIN = 1.5
MAX_LEAD_S = 30.0
ROLE_METHOD = "unirl_replay_probe"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "ignore_eos": True}


def point_key(point: Sequence[Any]) -> str:
    phase, b, ctx, pre = point
    if phase == "decode":
        return f"decode:b{b}:ctx{ctx}"
    return f"prefill:b{b}:{pre}" if b > 1 else f"prefill:{pre}"


def _vocab(engine: Any) -> int:
    path = getattr(getattr(engine, "cfg", None), "pretrained_model_ckpt_path", None)
    try:
        return int(json.loads((Path(str(path)) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1000


def payloads(point: Sequence[Any], rng: random.Random, vocab: int) -> List[Dict[str, Any]]:
    """UniRL runtime ``generate`` payloads of one repeat of ``point`` (unique random prompts)."""
    phase, b, _ctx, pre = point
    if phase == "decode":
        n, length, out = b, DECODE_PROMPT_TOKENS, PROBE_DECODE_STEPS
    elif b > 1:  # batched prefill: a lead row (runs alone) + b rows that share the next pass
        n, length, out = b + 1, pre // b, 1
    else:
        n, length, out = 1, pre, 1
    return [{"input_ids": [rng.randrange(vocab) for _ in range(length)], "return_logprob": True,
             "sampling_params": {**SAMPLING, "max_new_tokens": out, "n": 1}} for _ in range(n)]


def reply_requests(result: Any) -> Optional[List[Dict[str, Any]]]:
    """A probe reply's rows (UniRL's ``generate`` result) as ``[{"metrics": {...}}]``, the records' shape; None when
    a row lacks :data:`REPLY_KEY` (an engine without the recorder's reply hook)."""
    if not isinstance(result, list) or not result:
        return None
    out = []
    for row in result:
        ts = row.get(REPLY_KEY) if isinstance(row, dict) else None
        if not isinstance(ts, dict):
            return None
        out.append({"metrics": ts})
    return out


def _vllm_engine(engine: Any) -> Any:
    seen = 0
    while not hasattr(engine, "_request") and hasattr(engine, "_inner") and seen < 4:
        engine, seen = engine._inner, seen + 1  # AgenticRolloutEngine -> its VLLMRolloutEngine
    if not hasattr(engine, "_request"):
        raise TypeError(f"{type(engine).__name__} is not a UniRL vLLM engine (no _request): the reference probe "
                        "runs on VLLMRolloutEngine / AgenticRolloutEngine")
    return engine


def run_in_engine(engine: Any, when: str, *, probe_id: str = "", seed: int = 0,
                  points: Sequence[Sequence[Any]] = PROBE_POINTS, repeats: int = PROBE_REPEATS,
                  condition: str = "isolated", round_id: str = "", first_repeat: int = 0) -> Dict[str, Any]:
    """Run the probe in this process's engine (a UniRL ``VLLMRolloutEngine`` or a wrapper of one).

    Returns a small summary (wall time per point); the measurement itself is what the engine
    recorder writes (``probe_generate`` records, vLLM's own timestamps). ``condition="contended"``
    (with the driver's ``round_id``) tags the records as the contended part's target.
    """
    eng = _vllm_engine(engine)
    rng = random.Random(f"{seed}:{when}:{probe_id}:{condition}:{round_id}:{id(eng)}:{time.monotonic_ns()}")
    vocab = _vocab(eng)
    wall: Dict[str, List[float]] = {}
    intervals: Dict[str, List[Optional[List[float]]]] = {}
    replied = True
    t0_mono = time.monotonic()
    for rep in range(int(first_repeat), int(first_repeat) + int(repeats)):
        for point in points:
            tag = {"probe_id": probe_id, "when": when, "point": point_key(point), "repeat": rep,
                   "phase": point[0], "batch_size": int(point[1]), "context_tokens": int(point[2]),
                   "prefill_tokens": int(point[3])}
            if condition != "isolated":
                tag.update(condition=condition, round=round_id)
            t = time.monotonic()
            res = eng._request("generate", payloads=payloads(point, rng, vocab), record_id="batch", **{TAG_KEY: tag})
            wall.setdefault(point_key(point), []).append(time.monotonic() - t)
            rows = reply_requests(res)
            replied = replied and rows is not None
            iv = _interval(tag, rows) if rows is not None else None
            intervals.setdefault(point_key(point), []).append(list(iv) if iv else None)
    out = {"when": when, "probe_id": probe_id, "repeats": int(repeats), "wall_s": wall,
           "t0_mono": t0_mono, "t1_mono": time.monotonic()}
    if replied:  # what each repeat measured, on vLLM's clock: the driver's round verdict (round_miss)
        out["intervals"] = intervals
    return out


def run_load_in_engine(engine: Any, when: str, *, probe_id: str, seed: int, round_id: str, repeat: int,
                       max_new_tokens: int) -> Dict[str, Any]:
    """The contended part's load in this engine: one ``generate`` of :data:`LOAD_ROWS` rows decoding
    ``max_new_tokens`` tokens each (``ignore_eos``), tagged ``condition: load`` (a ``probe_generate``
    record, never a window request); its timestamps say when it decoded steadily."""
    eng = _vllm_engine(engine)
    rng = random.Random(f"{seed}:{when}:{probe_id}:load:{round_id}:{id(eng)}:{time.monotonic_ns()}")
    vocab = _vocab(eng)
    n = max(2, min(int(max_new_tokens), MAX_LOAD_TOKENS))
    rows = [{"input_ids": [rng.randrange(vocab) for _ in range(DECODE_PROMPT_TOKENS)], "return_logprob": True,
             "sampling_params": {**SAMPLING, "max_new_tokens": n, "n": 1}} for _ in range(LOAD_ROWS)]
    tag = {"probe_id": probe_id, "when": when, "point": f"load:b{LOAD_ROWS}", "repeat": int(repeat),
           "phase": "load", "batch_size": LOAD_ROWS, "context_tokens": 0, "prefill_tokens": 0,
           "condition": "load", "round": round_id}
    t = time.monotonic()
    res = eng._request("generate", payloads=rows, record_id="batch", **{TAG_KEY: tag})
    end = time.monotonic()
    out = {"when": when, "probe_id": probe_id, "round": round_id, "load_tokens": n, "wall_s": end - t,
           "t0_mono": t, "t1_mono": end}
    got = reply_requests(res)
    if got is not None:  # when it decoded steadily, on vLLM's clock (None: never)
        steady = load_steady(got)
        out["steady"] = list(steady) if steady else None
    return out


def add_role_method(cls: Any) -> None:
    """Give UniRL's engine role class the probe method (so ``Slot.launch(ROLE_METHOD, when)`` reaches it)."""
    if getattr(cls, ROLE_METHOD, None) is not None:
        return

    def unirl_replay_probe(self, when: str, probe_id: str = "", seed: int = 0, mode: str = "isolated",
                           round_id: str = "", repeat: int = 0, load_tokens: int = 0,
                           repeats: int = PROBE_REPEATS) -> Dict[str, Any]:
        if mode == "load":
            return run_load_in_engine(self, when, probe_id=probe_id, seed=seed, round_id=round_id, repeat=repeat,
                                      max_new_tokens=load_tokens)
        if mode == "contended":
            return run_in_engine(self, when, probe_id=probe_id, seed=seed, repeats=1, condition="contended",
                                 round_id=round_id, first_repeat=repeat)
        return run_in_engine(self, when, probe_id=probe_id, seed=seed, repeats=repeats)

    unirl_replay_probe.__doc__ = "unirl-replay reference probe (added by the capture switch; see unirl_replay.capture.probe)"
    setattr(cls, ROLE_METHOD, unirl_replay_probe)


def add_role_method_for_module(module: Any) -> None:
    for name in ("VLLMRolloutEngine", "AgenticRolloutEngine"):
        cls = getattr(module, name, None)
        if cls is not None:
            add_role_method(cls)


def load_tokens_for(target_wall_s: float, load_wall_s: float, load_tokens: int, lead_s: float = LOAD_LEAD_S) -> int:
    """Load output tokens to cover ``lead_s`` (default :data:`LOAD_LEAD_S`) + the target's points (``target_wall_s``, their isolated
    wall time) x :data:`LOAD_MARGIN`, at the load engine's rate (``load_wall_s`` seconds for
    ``load_tokens`` tokens: its last load, or its isolated B=32 decode point's wall over 2 x its steps)."""
    rate = load_wall_s / max(int(load_tokens), 1)
    need = lead_s + LOAD_MARGIN * target_wall_s
    return max(PROBE_DECODE_STEPS, min(MAX_LOAD_TOKENS, int(need / max(rate, 1e-3)) + 1))


def first_load_rate(wall_b1_s: float, wall_b32_s: float) -> tuple[float, int]:
    """The first load's rate guess, ``(seconds, tokens)`` for :func:`load_tokens_for`, from the load engine's isolated
    decode points' wall times: a B=1 step ~ its wall / 32 (its 112-token prefill is small), a B=32 step ~ half its
    wall / 32 (the other half: its 3.6 k-token prefill), a :data:`LOAD_ROWS`-row step interpolated linearly in B.
    Every later load uses the rate its engine's last load measured."""
    s1 = wall_b1_s / PROBE_DECODE_STEPS
    s32 = max(s1, 0.5 * wall_b32_s / PROBE_DECODE_STEPS)
    step = s1 + (LOAD_ROWS - 1) / 31 * (s32 - s1)
    return step * 1000, 1000


def round_miss(target: Dict[str, Any], loads: Sequence[Dict[str, Any]],
               names: Optional[Sequence[str]] = None) -> Optional[Dict[str, Any]]:
    """Whether one contended round must run again.

    When the role methods' results carry vLLM's timestamps (the target's ``intervals``, every load's ``steady``:
    :data:`REPLY_KEY`), the verdict is :func:`repeat_miss` on each repeat, the one ``capture finalize`` gives: None
    when every repeat is usable, else ``{"reason", "span_s", "steady_lead_s"}`` (the longest a load took from its
    call to its steady decode: what the next round's lead must cover). ``names``: the loads' engines, for the words.
    Otherwise, from the role methods' own call times (``t0_mono`` / ``t1_mono``, host monotonic seconds;
    :func:`run_in_engine`, :func:`run_load_in_engine`), as follows.

    None: the target's points ran inside every load's call (started at least half of :data:`LOAD_LEAD_S` after
    it began, ended at least :data:`LOAD_TAIL_S` before it returned), or a time is missing (nothing to judge by).
    Else ``{"reason": str, "span_s": float}``: why, and the seconds from the earliest load call's start to the
    target's end (what the next round's load must cover). A necessary condition only: the verdict on each repeat
    is :func:`contended_points`' on vLLM's timestamps."""
    def num(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    a, b = target.get("t0_mono"), target.get("t1_mono")
    spans = [(ld.get("t0_mono"), ld.get("t1_mono")) for ld in loads]
    timed = bool(loads) and all(num(x) for x in (a, b, *[v for sp in spans for v in sp]))
    ivs = target.get("intervals")
    if loads and isinstance(ivs, dict) and ivs and all("steady" in ld for ld in loads):
        names = [str(x) for x in names] if names is not None and len(names) == len(loads) else \
            [str(k) for k in range(len(loads))]
        steady = {n: (tuple(ld["steady"]) if ld["steady"] else None) for n, ld in zip(names, loads)}
        whys = []
        for key, reps in ivs.items():
            for iv in reps or [None]:
                why = repeat_miss(tuple(iv) if iv else None, steady, str(target.get("round", "")))
                if why:
                    whys.append(f"{key}: {why}")
        if not whys:
            return None
        leads = [s[0] - ld["t0_mono"] for ld, s in zip(loads, steady.values()) if s and num(ld.get("t0_mono"))]
        return {"reason": "; ".join(whys), "span_s": (b - min(s0 for s0, _ in spans)) if timed else 0.0,
                "steady_lead_s": max(leads) if leads else None}
    if not timed:
        return None
    why = []
    for s0, s1 in spans:
        if a - s0 < LOAD_LEAD_S / 2:
            why.append(f"the target's points started {a - s0:.2f} s after a load's call began (its prefill needs "
                       f"~{LOAD_LEAD_S:g} s)")
        if b > s1 - LOAD_TAIL_S:
            why.append(f"the target's points ended {b - s1:+.2f} s from a load's return (need <= -{LOAD_TAIL_S:g} s)")
    if not why:
        return None
    return {"reason": "; ".join(why), "span_s": b - min(s0 for s0, _ in spans)}


def _contended(slots: List[Any], results: List[Dict[str, Any]], when: str, probe_id: str, seed: int,
               repeats: int) -> List[Dict[str, Any]]:
    """The contended part: per repeat and target engine, the load on every other engine, then the target's points;
    a round that :func:`round_miss` says missed its load runs again (:data:`ROUND_ATTEMPTS` in all), the load
    resized to the span the target took."""
    def med(res: Dict[str, Any], key: str) -> float:
        xs = (res.get("wall_s") or {}).get(key) or [0.0]
        return float(statistics.median(xs))

    target_wall = [sum(med(r, point_key(p)) for p in PROBE_POINTS) for r in results]
    rate = [first_load_rate(med(r, point_key(("decode", 1, 128, 0))), med(r, point_key(("decode", 32, 128, 0))))
            for r in results]
    out = []
    lead_s = LOAD_LEAD_S  # grows (and stays grown) when a load took longer than the lead to decode steadily
    for rep in range(int(repeats)):
        for t, slot in enumerate(slots):
            cover_s = target_wall[t]
            for attempt in range(ROUND_ATTEMPTS):
                rid = f"{rep}:{t}" if attempt == 0 else f"{rep}:{t}:{attempt}"
                loads = {o: slots[o].launch(ROLE_METHOD, when, probe_id, seed, "load", rid, rep,
                                            load_tokens_for(cover_s, *rate[o], lead_s=lead_s))
                         for o in range(len(slots)) if o != t}
                time.sleep(lead_s)
                got = slot.launch(ROLE_METHOD, when, probe_id, seed, "contended", rid, rep, 0).result()
                done = []
                for o, pending in loads.items():
                    res = pending.result()
                    rate[o] = (float(res["wall_s"]), int(res["load_tokens"]))
                    done.append(res)
                miss = round_miss({**got, "round": rid}, done, names=[f"slot {o}" for o in loads])
                got = {**got, "lead_s": lead_s}
                if miss is not None:
                    got = {**got, "round_miss": miss["reason"]}
                    if miss.get("steady_lead_s") is not None:
                        lead_s = min(MAX_LEAD_S, max(lead_s, LEAD_MARGIN * float(miss["steady_lead_s"])))
                out.extend(done)
                out.append(got)
                if miss is None:
                    break
                cover_s = max(cover_s, float(miss["span_s"]))
    return out


def run(rollout: Any, when: str, *, probe_id: str = "", seed: int = 0, contended_repeats: int = 0,
        repeats: int = PROBE_REPEATS) -> List[Dict[str, Any]]:
    """Driver side: run the probe in every engine of UniRL's rollout ``Handle`` at once, and wait.

    ``when`` is ``"before"`` or ``"after"`` (the window it brackets). ``repeats``: of each point (default
    :data:`PROBE_REPEATS`; 1..:data:`MAX_PROBE_REPEATS`, else ValueError). Marks ``probe_start`` /
    ``probe_end`` (with host and engine-process counters) in the driver's shard. Call it outside
    a window, with no rollout in flight. Needs the capture on (:func:`unirl_replay.capture.install`).

    ``contended_repeats`` > 0 (and two or more engines): after the points above, the contended part
    (``ReferenceProbe.contended_points``): that many repeats of each point on each engine in turn,
    one engine at a time, while every other engine runs the load (:func:`run_load_in_engine`),
    started :data:`LOAD_LEAD_S` before the target's points and sized to outlast them.
    """
    import os

    from unirl_replay.capture import driver_capture, shard

    if not 1 <= int(repeats) <= MAX_PROBE_REPEATS:
        raise ValueError(f"repeats {repeats!r}: the probe runs 1..{MAX_PROBE_REPEATS} repeats of each point")
    if not os.environ.get(shard.TRACE_DIR_ENV):
        raise RuntimeError("the reference probe records through the capture: set UNIRL_REPLAY_TRACE_DIR and call "
                           "unirl_replay.capture.install() before Ray starts")
    probe_id = probe_id or shard.new_id()
    slots = list(rollout.engine_slots)
    driver_capture.mark("probe_start", when=when, probe_id=probe_id, engines=len(slots))
    pending = [slot.launch(ROLE_METHOD, when, probe_id, seed, "isolated", "", 0, 0, int(repeats)) for slot in slots]
    results = [p.result() for p in pending]
    if contended_repeats > 0 and len(slots) >= 2:
        results += _contended(slots, results, when, probe_id, seed, contended_repeats)
    driver_capture.mark("probe_end", when=when, probe_id=probe_id, engines=len(slots),
                        contended_repeats=int(contended_repeats) if len(slots) >= 2 else 0)
    return results


# --- finalize side (pure) ------------------------------------------------------------------------

def _quartiles(xs: List[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


#: rows of one EngineCore step share their timestamps exactly; this tolerance (s) only absorbs float rounding
SAME_STEP_S = 1e-6


def batched_prefill_pass(requests: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The pass of a batched prefill repeat that held the most rows: ``{"rows", "tokens", "ms"}``, or None.

    Rows of one pass share one ``first_token_ts`` (an EngineCore step) and one ``scheduled_ts``; its
    step time is ``first_token_ts - scheduled_ts``. None when a row lacks a timestamp, the largest pass
    holds one row (no batched pass ran), two passes tie for the most rows, or its rows were not
    scheduled together (the pass would then also hold a chunk scheduled earlier).
    """
    rows = []
    for r in requests:
        m = r.get("metrics") or {}
        a, b = m.get("scheduled_ts"), m.get("first_token_ts")
        n = r.get("prompt_tokens")
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a and isinstance(n, int) and n > 0):
            return None
        rows.append((float(b), float(a), n))
    passes: List[List[tuple]] = []
    for row in sorted(rows):
        if passes and row[0] - passes[-1][0][0] <= SAME_STEP_S:
            passes[-1].append(row)
        else:
            passes.append([row])
    sizes = sorted((len(p) for p in passes), reverse=True)
    if not sizes or sizes[0] < 2 or (len(sizes) > 1 and sizes[1] == sizes[0]):
        return None
    big = next(p for p in passes if len(p) == sizes[0])
    sched = [r[1] for r in big]
    if max(sched) - min(sched) > SAME_STEP_S:
        return None
    return {"rows": len(big), "tokens": sum(r[2] for r in big), "ms": 1e3 * (big[0][0] - min(sched))}


def repeat_step_ms(tag: Dict[str, Any], requests: List[Dict[str, Any]]) -> Optional[float]:
    """One repeat's step time (ms) from the engine recorder's per-request records, or None."""
    if tag.get("phase") == "prefill" and int(tag.get("batch_size") or 0) > 1:
        got = batched_prefill_pass(requests)
        return None if got is None else got["ms"]
    if tag.get("phase") == "prefill":
        m = (requests[0].get("metrics") or {}) if requests else {}
        a, b = m.get("scheduled_ts"), m.get("first_token_ts")
        return 1e3 * (b - a) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a else None
    per = []
    for r in requests:
        m = r.get("metrics") or {}
        a, b = m.get("first_token_ts"), m.get("last_token_ts")
        n = (r.get("output_tokens") or [0])[0]
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and n > 1 and b > a:
            per.append(1e3 * (b - a) / (n - 1))
    if len(per) != len(requests) or not per:
        return None
    return statistics.median(per)


def probe_points(records: List[Dict[str, Any]], keep_key: bool = False) -> List[Dict[str, Any]]:
    """``ProbePoint`` fields per point from one engine's ``probe_generate`` records of one probe
    (``keep_key``: each keeps its :func:`point_key` as ``"key"``)."""
    by: Dict[str, Dict[str, Any]] = {}
    for r in records:
        tag = r.get("probe") or {}
        entry = by.setdefault(tag.get("point", "?"), {"tag": tag, "ms": [], "bad": 0, "passes": []})
        if tag.get("phase") == "prefill" and int(tag.get("batch_size") or 0) > 1:
            got = batched_prefill_pass(r.get("requests") or [])
            entry["passes"].append(got)  # None: unusable; the rows / tokens are settled below
            continue
        ms = repeat_step_ms(tag, r.get("requests") or [])
        if ms is None:
            entry["bad"] += 1
        else:
            entry["ms"].append(ms)
    out = []
    for key, e in by.items():
        tag = e["tag"]
        pt = {"phase": tag.get("phase", ""), "batch_size": int(tag.get("batch_size") or 0),
              "context_tokens": int(tag.get("context_tokens") or 0), "prefill_tokens": int(tag.get("prefill_tokens") or 0)}
        if e["passes"]:  # batched prefill: every usable repeat with its own pass size (rows, tokens)
            got = [g for g in e["passes"] if g is not None]
            if got:
                pt["batch_size"] = int(statistics.median_low(g["rows"] for g in got))
                pt["prefill_tokens"] = int(statistics.median_low(g["tokens"] for g in got))
                pt["repeat_step_ms"] = [round(g["ms"], 4) for g in got]
                pt["repeat_pass_tokens"] = [g["tokens"] for g in got]
                pt["repeat_pass_rows"] = [g["rows"] for g in got]
            e["ms"] = [g["ms"] for g in got]
            e["bad"] = len(e["passes"]) - len(got)
            pt["passes"] = [None if g is None else [g["rows"], g["tokens"], round(g["ms"], 4)] for g in e["passes"]]
        pt.update({"repeats": len(e["ms"]), "unusable_repeats": e["bad"], "step_ms": [round(x, 4) for x in e["ms"]]})
        if e["ms"]:
            pt["p25_ms"], pt["median_ms"], pt["p75_ms"] = _quartiles(e["ms"])
        pt["key"] = key
        out.append(pt)
    order = {point_key(p): i for i, p in enumerate(PROBE_POINTS)}
    out.sort(key=lambda p: order.get(p["key"] if keep_key else p.pop("key"), 99))
    return out


def _interval(tag: Dict[str, Any], requests: List[Dict[str, Any]]) -> Optional[tuple]:
    """(t0, t1) monotonic s of what one repeat measured: decode from the first row's first token to the last
    row's last token; prefill from the first row's schedule to the last row's first token (for a batched
    repeat that includes the lead row: stricter than its measured pass). None when a timestamp is missing."""
    keys = ("first_token_ts", "last_token_ts") if tag.get("phase") == "decode" else ("scheduled_ts", "first_token_ts")
    a, b = [], []
    for r in requests:
        m = r.get("metrics") or {}
        x, y = m.get(keys[0]), m.get(keys[1])
        if not (isinstance(x, (int, float)) and isinstance(y, (int, float))):
            return None
        a.append(float(x))
        b.append(float(y))
    return (min(a), max(b)) if a else None


def load_steady(requests: List[Dict[str, Any]]) -> Optional[tuple]:
    """(t0, t1) during which a load decoded steadily: every row past its first token, none finished
    (the latest first token .. the earliest last token); None when a timestamp is missing or it never did."""
    firsts, lasts = [], []
    for r in requests:
        m = r.get("metrics") or {}
        a, b = m.get("first_token_ts"), m.get("last_token_ts")
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return None
        firsts.append(float(a))
        lasts.append(float(b))
    if not firsts or max(firsts) >= min(lasts):
        return None
    return max(firsts), min(lasts)


def repeat_miss(iv: Optional[tuple], steady: Dict[str, Any], round_id: str) -> Optional[str]:
    """Why one contended repeat is unusable, None when it is usable: ``iv`` is what it measured (:func:`_interval`,
    None: a timestamp missing), ``steady`` per other engine its load's steady decode of round ``round_id``
    (:func:`load_steady`; None: never steady; ``"absent"``: no load record). The rule of :func:`contended_points`
    and of the driver's retry (:func:`round_miss`)."""
    if iv is None:
        return "a timestamp of the measured rows is missing"
    for eid in sorted(steady):
        s = steady[eid]
        if isinstance(s, str):
            return f"engine {eid} has no load record for round {round_id}"
        if s is None:
            return f"engine {eid}'s load of round {round_id} never decoded steadily (or lacks a timestamp)"
        if not (s[0] <= iv[0] and iv[1] <= s[1]):
            return (f"engine {eid}'s load decoded steadily {s[0]:.3f}..{s[1]:.3f} s, the repeat measured "
                    f"{iv[0]:.3f}..{iv[1]:.3f} s (not inside)")
    return None


def contended_points(records: List[Dict[str, Any]], loads: Dict[str, List[Dict[str, Any]]]
                     ) -> tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """``ProbePoint`` fields of one engine's contended part, and one verdict per repeat.

    ``records``: this engine's ``probe_generate`` records tagged ``condition: contended``; ``loads``:
    per OTHER engine of the run, its ``condition: load`` records of the same probe. A repeat is used
    only when, for every other engine, the load of its round decoded steadily (:func:`load_steady`)
    over the whole interval the repeat measured (:func:`_interval`); else it counts in the point's
    ``unusable_repeats`` and its verdict says why. No other engine: nothing is contended (empty).
    """
    if not loads:
        return [], []
    steady: Dict[tuple, Optional[tuple]] = {}
    for eid, recs in loads.items():
        for r in recs:
            steady[(eid, str((r.get("probe") or {}).get("round")))] = load_steady(r.get("requests") or [])
    used, verdicts = [], []
    excluded: Dict[str, int] = {}
    for r in records:
        tag = r.get("probe") or {}
        rid = str(tag.get("round"))
        iv = _interval(tag, r.get("requests") or [])
        why = repeat_miss(iv, {eid: steady.get((eid, rid), "absent") for eid in loads}, rid)
        verdicts.append({"point": tag.get("point"), "repeat": tag.get("repeat"), "round": rid,
                         "used": why is None, **({"reason": why} if why else {}),
                         **({"interval": [round(iv[0], 6), round(iv[1], 6)]} if iv else {})})
        if why is None:
            used.append(r)
        else:
            excluded[str(tag.get("point"))] = excluded.get(str(tag.get("point")), 0) + 1
    pts = probe_points(used, keep_key=True)
    have = {p["key"] for p in pts}
    for point in PROBE_POINTS:  # a point none of whose repeats was usable: kept with its count, no median
        key = point_key(point)
        if key in excluded and key not in have:
            pts.append({"phase": point[0], "batch_size": int(point[1]), "context_tokens": int(point[2]),
                        "prefill_tokens": int(point[3]), "repeats": 0, "unusable_repeats": 0, "step_ms": [],
                        "key": key})
    order = {point_key(p): i for i, p in enumerate(PROBE_POINTS)}
    pts.sort(key=lambda p: order.get(p["key"], 99))
    for p in pts:
        p["unusable_repeats"] += excluded.pop(p["key"], 0)
        p.pop("key")
    return pts, verdicts


def contended_load_words() -> str:
    return (f"every other engine decoding {LOAD_ROWS} rows of {DECODE_PROMPT_TOKENS}-token unique random prompts "
            f"(ignore_eos, sampling as the probe's), started {LOAD_LEAD_S:g} s (or {LEAD_MARGIN:g} x the longest a load "
            f"took to decode steadily) before this engine's points and sized to outlast them ({LOAD_MARGIN:g} x their "
            "isolated wall time); one repeat per point per round; a round with a repeat outside a load's steady decode "
            f"is run again with a longer lead and load (at most {ROUND_ATTEMPTS} attempts)")


def method_words(repeats: int = PROBE_REPEATS) -> str:
    """The probe's method text with its repeat count (the capture's ``--probe-repeats``, default 5)."""
    return METHOD.replace(f"{PROBE_REPEATS} repeats of:", f"{int(repeats)} repeats of:", 1)


METHOD = (f"{PROBE_REPEATS} repeats of: decode B=1 and B=32 ({DECODE_PROMPT_TOKENS}-token unique random prompts, "
          f"{PROBE_DECODE_STEPS} output tokens, ignore_eos: mean context 128), step = median over the requests of "
          "(last_token_ts - first_token_ts) / (tokens - 1); prefill of 512 unique random tokens alone, step = "
          "first_token_ts - scheduled_ts (vLLM EngineCore timestamps); batched prefill: a lead row + 8 rows of 256 "
          "unique random tokens in one generate call, step = first_token_ts - scheduled_ts of the pass holding the "
          "most rows (rows sharing one EngineCore step), each repeat kept with that pass's rows / tokens; sampling temperature 1, top_p 1, logprobs; "
          "point = median and quartiles over the repeats; every engine of the run at once, through UniRL's runtime "
          "pipe (unirl_replay.capture.probe)")

__all__ = ["PROBE_POINTS", "PROBE_REPEATS", "PROBE_DECODE_STEPS", "run", "run_in_engine", "add_role_method",
           "probe_points", "batched_prefill_pass", "ROLE_METHOD", "TAG_KEY", "METHOD", "run_load_in_engine",
           "contended_points", "load_steady", "load_tokens_for", "LOAD_ROWS", "LOAD_LEAD_S", "CONTENDED_METHOD",
           "round_miss", "ROUND_ATTEMPTS", "method_words", "MAX_PROBE_REPEATS", "REPLY_KEY", "reply_requests",
           "repeat_miss"]

CONTENDED_METHOD = ("contended part (ReferenceProbe.contended_points): per repeat and engine in turn, the driver starts "
                    f"a load on every other engine ({LOAD_ROWS} rows of {DECODE_PROMPT_TOKENS}-token unique random "
                    f"prompts decoding, ignore_eos), waits {LOAD_LEAD_S:g} s (longer once a load took longer to decode "
                    f"steadily: {LEAD_MARGIN:g} x that), then runs one repeat of each point above on this engine; a "
                    "round with a repeat that did not run inside every load's steady decode (the rule below, on the "
                    "timestamps the probe's replies carry back; the role methods' own call times where they carry "
                    f"none) runs again as round <repeat>:<engine>:<attempt>, at most {ROUND_ATTEMPTS} attempts, its "
                    "load sized to the span the points took; in every round, a repeat is used only when its measured "
                    "interval lies inside every other engine's steady decode of that round (vLLM timestamps, host "
                    "monotonic clock)")
