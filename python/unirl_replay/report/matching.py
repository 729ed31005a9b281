"""Matching: one value per (level, metric) and record on each side, paired by record id.

Measured values come from the outcomes (capture clock), predicted values from the replay result
(simulated clock); every value is a duration between two boundaries on one clock (see
:mod:`unirl_replay.report.compare` for the table of boundaries). Whatever cannot be paired keeps
the reason, and becomes a ``NotCompared``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from unirl_replay.report.keys import L_BATCH, L_GROUP, L_REQ, L_TRAJ, METRIC_KEYS, Pairs, SideValues
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb


# ---------------------------------------------------------------------------------------------
# Workload index


class WorkloadIndex(NamedTuple):
    """Workload records by id (insertion = workload order). Values are the contract messages."""

    requests: dict[str, wpb.Request]
    trajectories: dict[str, wpb.Trajectory]
    groups: dict[str, wpb.Group]
    batches: dict[str, wpb.RolloutBatch]
    # derived memberships (request ids in workload order)
    requests_of_group: dict[str, list[str]]
    requests_of_batch: dict[str, list[str]]
    requests_of_trajectory: dict[str, list[str]]


def index_workload(records: Iterable[wpb.WorkloadRecord]) -> WorkloadIndex:
    """Index workload records by id. Ids of groups / batches / trajectories referenced only by
    requests are indexed too (with no record), so they can still be listed."""
    idx = WorkloadIndex({}, {}, {}, {}, {}, {}, {})
    for rec in records:
        kind = rec.WhichOneof("record")
        if kind == "request":
            r = rec.request
            idx.requests[r.request_id] = r
            if r.group_id:
                idx.requests_of_group.setdefault(r.group_id, []).append(r.request_id)
            if r.rollout_batch_id:
                idx.requests_of_batch.setdefault(r.rollout_batch_id, []).append(r.request_id)
            if r.trajectory_id:
                idx.requests_of_trajectory.setdefault(r.trajectory_id, []).append(r.request_id)
        elif kind == "trajectory":
            idx.trajectories[rec.trajectory.trajectory_id] = rec.trajectory
        elif kind == "group":
            idx.groups[rec.group.group_id] = rec.group
        elif kind == "rollout_batch":
            idx.batches[rec.rollout_batch.rollout_batch_id] = rec.rollout_batch
    return idx


def _ids_at(idx: WorkloadIndex, level: int) -> list[str]:
    """Record ids of a level in workload order (records first, then ids known only from requests)."""
    if level == L_REQ:
        return list(idx.requests)
    src = {L_GROUP: (idx.groups, idx.requests_of_group), L_TRAJ: (idx.trajectories, idx.requests_of_trajectory),
           L_BATCH: (idx.batches, idx.requests_of_batch)}[level]
    return list(dict.fromkeys([*src[0], *src[1]]))


def _engines(idx: WorkloadIndex, request_ids: Sequence[str]) -> list[str]:
    return sorted({idx.requests[r].engine_id for r in request_ids})


# ---------------------------------------------------------------------------------------------
# Request boundaries


def measured_request_boundaries(req: wpb.Request, out: opb.RequestOutcome) -> dict[str, int]:
    """Measured boundaries of one request (ns from the window start), only those known.

    Keys: ``submit``, ``queued``, ``scheduled``, ``first_token``, ``completion``. For n > 1 a missing
    parent ``first_token`` / ``completion`` is taken from ``out.samples`` only when there is exactly
    one sample timing per sample (``req.num_samples``) and every one has the field.
    """
    b: dict[str, int] = {}
    for key in ("submit", "queued", "scheduled", "first_token", "completion"):
        if out.HasField(f"{key}_ns"):
            b[key] = getattr(out, f"{key}_ns")
    n = max(req.num_samples, 1)
    if out.samples and len(out.samples) == n:
        if "first_token" not in b and all(s.HasField("first_token_ns") for s in out.samples):
            b["first_token"] = min(s.first_token_ns for s in out.samples)
        if "completion" not in b and all(s.HasField("completion_ns") for s in out.samples):
            b["completion"] = max(s.completion_ns for s in out.samples)
    return b


def predicted_request_boundaries(row: rpb.PredictedRequest) -> dict[str, int]:
    """Predicted boundaries of one request (ns, simulated clock of its engine), only those present.

    Keys: ``submit`` (the simulated arrival), ``scheduled``, ``first_token``, ``completion``.
    """
    b: dict[str, int] = {}
    for key, field in (("submit", "arrival_ns"), ("scheduled", "scheduled_ns"),
                       ("first_token", "first_token_ns"), ("completion", "completion_ns")):
        if row.HasField(field):
            b[key] = getattr(row, field)
    return b


#: request metric -> (measured start, predicted start, end boundary). The ``engine_*`` metrics
#: start the measured side at the engine's own queue entry (vLLM ``queued_ts``), i.e. after
#: UniRL's client lock and the driver -> runtime pipe; they isolate the simulator's engine model
#: from client-side time it does not model (the plain metrics, from the client submit, are what a
#: trainer waits on).
REQUEST_SPANS = {"ttft": ("submit", "submit", "first_token"), "e2e": ("submit", "submit", "completion"),
                 "queueing_delay": ("submit", "submit", "scheduled"),
                 "engine_ttft": ("queued", "submit", "first_token"),
                 "engine_e2e": ("queued", "submit", "completion")}

_BOUNDARY_FIELD = {
    True: {"submit": "submit_ns", "queued": "queued_ns", "scheduled": "scheduled_ns", "first_token": "first_token_ns",
           "completion": "completion_ns"},
    False: {"submit": "arrival_ns", "scheduled": "scheduled_ns", "first_token": "first_token_ns",
            "completion": "completion_ns"},
}


def _span(b: dict[str, int], start: str, end: str, measured: bool) -> int | str:
    f = _BOUNDARY_FIELD[measured]
    missing = [f[k] for k in (start, end) if k not in b]
    if missing:
        what = "not reported by the engine" if measured else "absent from the replay result"
        return f"{' and '.join(missing)} {what}"
    if b[end] < b[start]:
        return f"boundaries out of order: {f[end]} {b[end]} < {f[start]} {b[start]}"
    return b[end] - b[start]


# ---------------------------------------------------------------------------------------------
# One side's values


def _origin(idx: WorkloadIndex, bounds: dict[str, dict[str, int] | str], batch_id: str, engines: Sequence[str],
            side: str) -> int | str:
    """Batch ``batch_id``'s first submit on ``engines`` from per-request boundaries, or a reason."""
    on = set(engines)
    rids = [r for r in idx.requests_of_batch.get(batch_id, []) if idx.requests[r].engine_id in on]
    if not rids:
        return f"batch {batch_id!r} has no requests on engine {', '.join(sorted(on))!r} in the workload"
    submits = []
    for r in rids:
        b = bounds.get(r)
        if not isinstance(b, dict) or "submit" not in b:
            field = "submit_ns" if side == "measured" else "arrival_ns"
            return f"origin unknown: request {r!r} of batch {batch_id!r} has no {side} {field}"
        submits.append(b["submit"])
    return min(submits)


class CrossEngine(NamedTuple):
    """What decides whether a group or batch spanning engines is compared (workload + replay only).

    Each engine is replayed alone and its simulated 0 is placed at its first observed arrival's offset
    (``replay.runner``), so every engine's predictions sit on the trace's one clock. Work whose start on
    an engine is anchored to that clock (a root at its observed arrival, or the engine's first plays)
    can be combined across engines exactly: no dependency crosses engines in a replayable workload
    (``trajectory.cross_engine`` and ``dependency.cross_trajectory`` are rejected), so a group's
    completion is the max over its members on every engine. In lanes mode (trajectory slots, or the
    client limit replayed as lanes) root arrivals are not used: a later batch starts on each engine
    when that engine's lanes free, while in the run it waited for the driver's batch boundary that all
    engines share. That is a dependency across engines the separate replays do not carry: such a
    batch (and its groups) stays not compared when it spans engines.
    """

    lanes: frozenset[str]  # engines replayed in lanes mode
    first_batch: dict[str, str]  # lanes engine -> the batch of its first play (lanes are granted in start order)


def cross_engine_plan(idx: WorkloadIndex, replay: rpb.ReplayResult | None = None) -> CrossEngine:
    """The :class:`CrossEngine` facts of a workload (and of the replay's lanes opt-in, when given)."""
    lanes: set[str] = set()
    order: dict[str, tuple[int, int, str]] = {}  # engine -> (start order, workload position, batch) of its first play
    position = {rid: i for i, rid in enumerate(idx.requests)}
    traj_of = {rid: tid for tid, rids in idx.requests_of_trajectory.items() for rid in rids}
    for rid, r in idx.requests.items():
        t = idx.trajectories.get(traj_of.get(rid, ""))
        if t is not None and t.slot_pool_id:
            lanes.add(r.engine_id)
        key = (t.start_order if t is not None and t.HasField("start_order") else len(position), position[rid],
               r.rollout_batch_id)
        if r.engine_id not in order or key < order[r.engine_id]:
            order[r.engine_id] = key
    if replay is not None:
        for c in replay.unmodelled_constraints:
            if "lanes = the client limit" in c.reason:  # engine_client.inflight_limit.as_lanes
                lanes.update(c.record_ids)
    return CrossEngine(frozenset(lanes), {e: order[e][2] for e in lanes if e in order})


def _engines_of(idx: WorkloadIndex, rids: Sequence[str], what: str, batch: str, cross: CrossEngine
                ) -> list[str] | str:
    """The engines of a group's / batch's requests, or why it is not compared."""
    engines = _engines(idx, rids)
    if not engines:
        return f"{what} has no requests in the workload"
    if len(engines) == 1:
        return engines
    late = [e for e in engines if e in cross.lanes and cross.first_batch.get(e) != batch]
    if late:
        return (f"{what} spans engines {', '.join(engines)} and on {', '.join(late)} it ran after "
                f"{', '.join(sorted({repr(cross.first_batch[e]) for e in late}))}: replayed in lanes mode, it starts "
                "there when that engine's own lanes free, while in the run it waited for the batch boundary all "
                "engines share (a dependency across engines the separate per-engine replays do not carry)")
    return engines


def _group_batch_values(idx: WorkloadIndex, bounds: dict, events: dict[str, dict[str, int]],
                        side: str, cross: CrossEngine | None = None) -> tuple[SideValues, SideValues]:
    """group_completion and batch_readiness for one side, relative to O(batch, engines)."""
    cross = cross if cross is not None else cross_engine_plan(idx)
    groups: SideValues = {}
    for gid in _ids_at(idx, L_GROUP):
        rids = idx.requests_of_group.get(gid, [])
        batch = idx.groups[gid].rollout_batch_id if gid in idx.groups else (
            idx.requests[rids[0]].rollout_batch_id if rids else "")
        eng = _engines_of(idx, rids, f"group {gid!r}", batch, cross)
        if isinstance(eng, str):
            groups[gid] = eng
            continue
        if gid not in events["group"]:
            groups[gid] = f"no {side} group completion"
            continue
        o = _origin(idx, bounds, batch, eng, side)
        groups[gid] = o if isinstance(o, str) else _rel(events["group"][gid], o, "group completion")
    batches: SideValues = {}
    for bid in _ids_at(idx, L_BATCH):
        rids = idx.requests_of_batch.get(bid, [])
        eng = _engines_of(idx, rids, f"batch {bid!r}", bid, cross)
        if isinstance(eng, str):
            batches[bid] = eng
            continue
        if bid not in events["batch"]:
            batches[bid] = f"no {side} batch ready time"
            continue
        o = _origin(idx, bounds, bid, eng, side)
        batches[bid] = o if isinstance(o, str) else _rel(events["batch"][bid], o, "batch ready time")
    return groups, batches


def _rel(t: int, origin: int, what: str) -> int | str:
    if t < origin:
        return f"{what} {t} precedes the batch's first submit {origin}"
    return t - origin


def measured_values(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord], cross: CrossEngine | None = None
                    ) -> tuple[dict[tuple[int, str], SideValues], list[str]]:
    """Measured durations (ns) per (level, metric) and record id, or the reason there is none.

    Returns:
        ``(values, unavailable)``: ``unavailable`` lists the request ids whose outcome carries an
        ``unavailable_reason``, in workload order. Such a request is left out of exactly the
        metrics whose boundaries are missing; the metrics whose boundaries it has are compared.
    """
    req_out: dict[str, opb.RequestOutcome] = {}
    traj_out: dict[str, opb.TrajectoryOutcome] = {}
    events: dict[str, dict[str, int]] = {"group": {}, "batch": {}}
    for rec in outcomes:
        kind = rec.WhichOneof("record")
        if kind == "request":
            req_out[rec.request.request_id] = rec.request
        elif kind == "trajectory":
            traj_out[rec.trajectory.trajectory_id] = rec.trajectory
        elif kind == "group" and rec.group.HasField("completed_ns"):
            events["group"][rec.group.group_id] = rec.group.completed_ns
        elif kind == "rollout_batch" and rec.rollout_batch.HasField("ready_ns"):
            events["batch"][rec.rollout_batch.rollout_batch_id] = rec.rollout_batch.ready_ns

    values: dict[tuple[int, str], SideValues] = {k: {} for k in METRIC_KEYS}
    bounds: dict[str, dict[str, int] | str] = {}
    unavailable: list[str] = []
    for rid, req in idx.requests.items():
        out = req_out.get(rid)
        if out is None:
            bounds[rid] = "no RequestOutcome for this request"
            for m in REQUEST_SPANS:
                values[(L_REQ, m)][rid] = bounds[rid]
            continue
        b = measured_request_boundaries(req, out)
        bounds[rid] = b
        if out.unavailable_reason:
            unavailable.append(rid)
        for m, (s, _, e) in REQUEST_SPANS.items():
            v = _span(b, s, e, True)
            if isinstance(v, str) and out.unavailable_reason and s in b and e in b:
                pass  # boundaries present but out of order: that reason stands
            elif isinstance(v, str) and out.unavailable_reason:
                # exactly the metrics whose boundaries are unavailable are left out (a turn with
                # 0 output tokens loses its TTFT, not its E2E)
                v = f"measured outcome unavailable: {out.unavailable_reason} ({v})"
            values[(L_REQ, m)][rid] = v

    for tid in _ids_at(idx, L_TRAJ):
        values[(L_TRAJ, "trajectory_e2e")][tid] = _traj_e2e(idx, bounds, tid, "measured")
        t = traj_out.get(tid)
        if t is None:
            values[(L_TRAJ, "slot_hold")][tid] = "no TrajectoryOutcome for this trajectory"
        elif not (t.HasField("slot_acquired_ns") and t.HasField("slot_released_ns")):
            values[(L_TRAJ, "slot_hold")][tid] = "slot_acquired_ns or slot_released_ns not measured"
        elif t.slot_released_ns < t.slot_acquired_ns:
            values[(L_TRAJ, "slot_hold")][tid] = "boundaries out of order: slot released before acquired"
        else:
            values[(L_TRAJ, "slot_hold")][tid] = t.slot_released_ns - t.slot_acquired_ns

    g, bt = _group_batch_values(idx, bounds, events, "measured", cross)
    values[(L_GROUP, "group_completion")] = g
    values[(L_BATCH, "batch_readiness")] = bt
    return values, unavailable


def _traj_e2e(idx: WorkloadIndex, bounds: dict, tid: str, side: str) -> int | str:
    rids = idx.requests_of_trajectory.get(tid) or list(idx.trajectories[tid].request_ids)
    if not rids:
        return "trajectory has no requests in the workload"
    starts, ends = [], []
    for r in rids:
        b = bounds.get(r)
        if not isinstance(b, dict) or "submit" not in b or "completion" not in b:
            return f"request {r!r} lacks a {side} submit or completion"
        starts.append(b["submit"])
        ends.append(b["completion"])
    if max(ends) < min(starts):
        return "boundaries out of order: last completion before first submit"
    return max(ends) - min(starts)


def predicted_values(idx: WorkloadIndex, replay: rpb.ReplayResult, cross: CrossEngine | None = None
                     ) -> dict[tuple[int, str], SideValues]:
    """Predicted durations (ns) per (level, metric) and record id, or the reason there is none."""
    rows = {r.request_id: r for r in replay.requests}
    values: dict[tuple[int, str], SideValues] = {k: {} for k in METRIC_KEYS}
    bounds: dict[str, dict[str, int] | str] = {}
    for rid in idx.requests:
        row = rows.get(rid)
        if row is None:
            bounds[rid] = "no PredictedRequest row for this request"
            for m in REQUEST_SPANS:
                values[(L_REQ, m)][rid] = bounds[rid]
            continue
        b = predicted_request_boundaries(row)
        bounds[rid] = b
        for m, (_, s, e) in REQUEST_SPANS.items():
            values[(L_REQ, m)][rid] = _span(b, s, e, False)

    trajs = {t.trajectory_id: t for t in replay.trajectories}
    for tid in _ids_at(idx, L_TRAJ):
        values[(L_TRAJ, "trajectory_e2e")][tid] = _traj_e2e(idx, bounds, tid, "predicted")
        t = trajs.get(tid)
        if t is None:
            values[(L_TRAJ, "slot_hold")][tid] = "no PredictedTrajectory row"
        elif not (t.HasField("start_ns") and t.HasField("end_ns")):
            values[(L_TRAJ, "slot_hold")][tid] = "start_ns or end_ns absent from the replay result"
        elif t.end_ns < t.start_ns:
            values[(L_TRAJ, "slot_hold")][tid] = "boundaries out of order: end before start"
        else:
            values[(L_TRAJ, "slot_hold")][tid] = t.end_ns - t.start_ns
    events = {"group": {g.group_id: g.completed_ns for g in replay.groups if g.HasField("completed_ns")},
              "batch": {b.rollout_batch_id: b.ready_ns for b in replay.rollout_batches if b.HasField("ready_ns")}}
    g, bt = _group_batch_values(idx, bounds, events, "predicted",
                                cross if cross is not None else cross_engine_plan(idx, replay))
    values[(L_GROUP, "group_completion")] = g
    values[(L_BATCH, "batch_readiness")] = bt
    return values


def pair_values(idx: WorkloadIndex, measured: dict[tuple[int, str], SideValues],
                predicted: dict[tuple[int, str], SideValues]
                ) -> tuple[dict[tuple[int, str], Pairs], list[vpb.NotCompared]]:
    """Pair the two sides by record id, in workload order; everything unpaired becomes NotCompared."""
    pairs: dict[tuple[int, str], Pairs] = {}
    nc: list[vpb.NotCompared] = []
    for key in METRIC_KEYS:
        level, metric = key
        ids, ms, ps = [], [], []
        for rid in _ids_at(idx, level):
            m = measured.get(key, {}).get(rid, "no measured value")
            p = predicted.get(key, {}).get(rid, "no predicted value")
            if isinstance(m, int) and isinstance(p, int):
                ids.append(rid)
                ms.append(m)
                ps.append(p)
                continue
            reasons = []
            if isinstance(m, str) and m == p:  # a reason of the workload itself (e.g. spans engines): once
                reasons.append(f"both sides: {m}")
            else:
                if isinstance(m, str):
                    reasons.append(f"measured: {m}")
                if isinstance(p, str):
                    reasons.append(f"predicted: {p}")
            nc.append(vpb.NotCompared(level=level, metric=metric, record_id=rid, reason="; ".join(reasons)))
        pairs[key] = Pairs(tuple(ids), np.asarray(ms, dtype=np.int64), np.asarray(ps, dtype=np.int64))
    return pairs, nc


# ---------------------------------------------------------------------------------------------
# Entry points


class Matching(NamedTuple):
    """Everything ``compare`` computes before the report: pairs (for plots) and the not-compared list."""

    pairs: dict[tuple[int, str], Pairs]
    not_compared: list[vpb.NotCompared]
    unavailable: list[str]
    measured: dict[tuple[int, str], SideValues]


def match(workload: Iterable[wpb.WorkloadRecord], outcomes: Iterable[opb.OutcomeRecord],
          replay: rpb.ReplayResult) -> Matching:
    """Pair measured and predicted values of every per-record metric (per-request results only).

    Args:
        workload: the trace's workload records (any order; workload order defines report order).
        outcomes: its measured outcome records.
        replay: a PER_REQUEST replay result of that trace.
    """
    return match_indexed(index_workload(workload), outcomes, replay)


def match_indexed(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord], replay: rpb.ReplayResult) -> Matching:
    """:func:`match` over an already indexed workload."""
    cross = cross_engine_plan(idx, replay)
    meas, unavailable = measured_values(idx, outcomes, cross)
    pairs, nc = pair_values(idx, meas, predicted_values(idx, replay, cross))
    return Matching(pairs, nc, unavailable, meas)
