"""Chrome trace JSON (Trace Event Format) of the real and the simulated timeline.

Opens in https://ui.perfetto.dev and chrome://tracing. Layout:

- one process per (side, engine): ``real <engine>`` and ``simulated <engine> [<honesty label>]``, sorted
  so the two sides of one engine sit next to each other;
- inside each, threads (tracks): ``requests k`` (requests as complete ``X`` slices, packed into
  non-overlapping lanes; a nested ``queue`` slice from submit/arrival to scheduled),
  ``trajectory slots k`` (slot holds), ``tool waits k`` (predecessor completion -> successor
  submit of a completion-triggered dependency), ``rollout batches k`` (first submit -> ready;
  batches overlap in agentic windows, so they are packed into lanes too) and ``groups`` (group
  completion as instant events). No track ever holds two overlapping slices (a request's
  ``queue`` slice nests inside it);
- times (``ts``, ``dur``) in microseconds from that engine's first submit (real: min measured
  ``submit_ns`` on the engine; simulated: min predicted ``arrival_ns``, i.e. 0), so the two sides
  line up at 0; where a slice of the engine begins before it (a real slot hold acquired before the
  trajectory's first submit), both sides of the engine start that much earlier, so no ``ts`` is
  negative and the first submits still line up. Missing boundaries produce no slice (never a guessed one).

The top-level ``metadata`` object carries the honesty label too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from unirl_replay.report import compare as C
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import workload_pb2 as wpb

NS_PER_US = 1000.0


class _Lanes:
    """Greedy interval packing: a slice goes to the first lane free at its start."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def place(self, start: float, end: float) -> int:
        for i, e in enumerate(self.ends):
            if e <= start:
                self.ends[i] = end
                return i
        self.ends.append(end)
        return len(self.ends) - 1


def chrome_trace(workload: Sequence[wpb.WorkloadRecord], outcomes: Iterable[opb.OutcomeRecord],
                 replay: rpb.ReplayResult, label: str) -> dict:
    """Build the trace object (``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``)."""
    idx = C.index_workload(workload)
    outs = list(outcomes)
    req_out = {o.request.request_id: o.request for o in outs if o.WhichOneof("record") == "request"}
    traj_out = {o.trajectory.trajectory_id: o.trajectory for o in outs if o.WhichOneof("record") == "trajectory"}
    real_groups = {o.group.group_id: o.group.completed_ns for o in outs
                   if o.WhichOneof("record") == "group" and o.group.HasField("completed_ns")}
    real_batches = {o.rollout_batch.rollout_batch_id: o.rollout_batch.ready_ns for o in outs
                    if o.WhichOneof("record") == "rollout_batch" and o.rollout_batch.HasField("ready_ns")}
    rows = {r.request_id: r for r in replay.requests}
    sim_trajs = {t.trajectory_id: (t.start_ns, t.end_ns) for t in replay.trajectories
                 if t.HasField("start_ns") and t.HasField("end_ns")}
    sim_groups = {g.group_id: g.completed_ns for g in replay.groups if g.HasField("completed_ns")}
    sim_batches = {b.rollout_batch_id: b.ready_ns for b in replay.rollout_batches if b.HasField("ready_ns")}

    bounds = {
        "real": {r: C.measured_request_boundaries(idx.requests[r], o) for r, o in req_out.items() if r in idx.requests},
        "simulated": {r: C.predicted_request_boundaries(row) for r, row in rows.items() if r in idx.requests},
    }
    real_slots = {t: (o.slot_acquired_ns, o.slot_released_ns) for t, o in traj_out.items()
                  if o.HasField("slot_acquired_ns") and o.HasField("slot_released_ns")}
    slots = {"real": real_slots, "simulated": sim_trajs}
    group_t = {"real": real_groups, "simulated": sim_groups}
    batch_t = {"real": real_batches, "simulated": sim_batches}

    engines = sorted({r.engine_id for r in idx.requests.values()})
    events: list[dict] = []
    pid = 0
    for eng in engines:
        eng_reqs = [r for r, q in idx.requests.items() if q.engine_id == eng]
        eng_trajs = [tj for tj, rs in idx.requests_of_trajectory.items() if rs and idx.requests[rs[0]].engine_id == eng]
        eng_groups = [g for g, rs in idx.requests_of_group.items()
                      if rs and all(idx.requests[r].engine_id == eng for r in rs)]
        first: dict[str, int] = {}
        lead = 0  # ns before the first submit where a slice begins (a real slot is acquired before its first submit)
        for side in ("real", "simulated"):
            b = bounds[side]
            submits = [b[r]["submit"] for r in eng_reqs if r in b and "submit" in b[r]]
            if submits:
                first[side] = min(submits)
                early = [slots[side][tj][0] for tj in eng_trajs if tj in slots[side] and slots[side][tj][1] >= slots[side][tj][0]]
                early += [group_t[side][g] for g in eng_groups if g in group_t[side]]
                lead = max(lead, first[side] - min(early, default=first[side]))
        for side in ("real", "simulated"):
            pid += 1
            b = bounds[side]
            if side not in first:
                continue
            origin = first[side] - lead  # the same lead on both sides: their first submits still line up

            def us(t: int) -> float:
                return (t - origin) / NS_PER_US

            # the simulated side's name carries the honesty label: Perfetto's timeline shows process names, while
            # the top-level metadata is at most on its info page (older UIs skip it), so a FIXED or UNCALIBRATED
            # timeline would otherwise look like any other
            name = f"{side} {eng} [{label}]" if side == "simulated" and label else f"{side} {eng}"
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            tids: dict[str, int] = {}

            def tid(track: str) -> int:
                if track not in tids:
                    tids[track] = len(tids) + 1
                    events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[track],
                                   "args": {"name": track}})
                    events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[track],
                                   "args": {"sort_index": tids[track]}})
                return tids[track]

            lanes = {"requests": _Lanes(), "trajectory slots": _Lanes(), "tool waits": _Lanes(),
                     "rollout batches": _Lanes()}

            def slice_(track: str, name: str, start: int, end: int, args: dict, cat: str) -> int:
                lane = lanes[track].place(start, end)  # integer ns: no float rounding decides a lane
                t = tid(f"{track} {lane}")
                events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": t, "ts": us(start),
                               "dur": max(end - start, 0) / NS_PER_US, "args": args})
                return t

            for r in sorted(eng_reqs, key=lambda r: (b.get(r, {}).get("submit", 1 << 62), r)):
                rb = b.get(r, {})
                if "submit" not in rb or "completion" not in rb:
                    continue
                q = idx.requests[r]
                args = {k + "_ms": (v - rb["submit"]) / 1e6 for k, v in rb.items() if k != "submit"}
                args.update({"group": q.group_id, "trajectory": q.trajectory_id, "batch": q.rollout_batch_id})
                name = (f"{q.trajectory_id} turn {q.turn_index} ({r})" if q.trajectory_id and q.HasField("turn_index")
                        else r + (f" (n={q.num_samples})" if q.num_samples > 1 else ""))
                t = slice_("requests", name, rb["submit"], rb["completion"], args, "request")
                if "scheduled" in rb and rb["submit"] <= rb["scheduled"] <= rb["completion"]:
                    events.append({"ph": "X", "name": "queue", "cat": "queue", "pid": pid, "tid": t,
                                   "ts": us(rb["submit"]), "dur": (rb["scheduled"] - rb["submit"]) / NS_PER_US})
                for dep in q.dependencies:
                    pb = b.get(dep.predecessor_request_id, {})
                    if dep.trigger == cpb.DEPENDENCY_TRIGGER_COMPLETION and "completion" in pb \
                            and pb["completion"] <= rb["submit"]:
                        slice_("tool waits", f"tool wait {q.trajectory_id} before turn {q.turn_index} "
                               f"({dep.predecessor_request_id} -> {r})", pb["completion"],
                               rb["submit"], {"trajectory": q.trajectory_id}, "tool_wait")
            for tj, (s, e) in sorted(slots[side].items()):
                if tj in idx.requests_of_trajectory and idx.requests[idx.requests_of_trajectory[tj][0]].engine_id == eng \
                        and e >= s:
                    slice_("trajectory slots", tj, s, e, {}, "slot_hold")
            for bid, ready in batch_t[side].items():
                brs = [r for r in idx.requests_of_batch.get(bid, []) if idx.requests[r].engine_id == eng]
                st = [b[r]["submit"] for r in brs if r in b and "submit" in b[r]]
                if brs and len(st) == len(brs) and ready >= min(st):
                    slice_("rollout batches", f"batch {bid}", min(st), ready, {}, "batch")
            for gid, t_done in group_t[side].items():
                grs = idx.requests_of_group.get(gid, [])
                if grs and all(idx.requests[r].engine_id == eng for r in grs):
                    events.append({"ph": "i", "s": "t", "name": f"group {gid} complete", "cat": "group",
                                   "pid": pid, "tid": tid("groups"), "ts": us(t_done)})
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": {"label": label}}


def write_chrome_trace(path: str | Path, trace: dict) -> Path:
    """Write the trace object as JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(trace, separators=(",", ":")))
    return path
