"""Matched comparison of a replay with the real execution it came from -> ``ValidationReport``.

Pure functions over contract messages: nothing here reads a file. ``commands/compare.py`` opens the
trace (workload + manifest), the measured outcomes (``outcomes_io``) and the replay result and
hands the messages in. This module is the only consumer of measured outcomes besides validation.

Clocks
------
Measured times (``RequestOutcome`` etc.) are ns offsets from the capture window start on
``CLOCK_DOMAIN_CAPTURE_MONOTONIC``. Predicted times (``PredictedRequest`` etc.) are ns on
``CLOCK_DOMAIN_SIMULATED``, with 0 at the simulator's first real arrival *of that engine*. The two
clocks are never mixed: every compared value is a **duration** between two boundaries on one clock,
either of one record (request, trajectory) or from a **matched origin** (groups, batches).

Boundaries (the simulated arrival of a request is the simulated client submit: a closed-loop
successor arrives at its predecessor's simulated event plus the measured delay up to the
successor's *submit*, and an open-loop arrival is the observed submit):

======================  ==================================================  =====================================================
metric (level)          measured                                            predicted
======================  ==================================================  =====================================================
ttft (request)          first_token_ns - submit_ns                          first_token_ns - arrival_ns
e2e (request)           completion_ns - submit_ns                           completion_ns - arrival_ns
queueing_delay (req.)   scheduled_ns - submit_ns                            scheduled_ns - arrival_ns
engine_ttft (request)   first_token_ns - queued_ns                          first_token_ns - arrival_ns
engine_e2e (request)    completion_ns - queued_ns                           completion_ns - arrival_ns
trajectory_e2e (traj.)  max completion_ns - min submit_ns of its requests    max completion_ns - min arrival_ns of its requests
slot_hold (traj.)       slot_released_ns - slot_acquired_ns                 PredictedTrajectory.end_ns - start_ns
group_completion        GroupOutcome.completed_ns - O_m(batch, engine)      PredictedGroup.completed_ns - O_p(batch, engine)
batch_readiness         BatchOutcome.ready_ns - O_m(batch, engine)          PredictedBatch.ready_ns - O_p(batch, engine)
======================  ==================================================  =====================================================

``O_m(b, e)`` = min measured ``submit_ns`` over the workload requests of batch ``b`` on engine
``e``; ``O_p(b, e)`` = min predicted ``arrival_ns`` over the same requests (both: the batch's first
submit on that engine). A group or batch whose requests span several engines is not compared
(separate simulated engines have separate clock origins).

Request boundaries of a fanned-out request (n > 1) come from the parent's own fields when present;
otherwise from its ``samples`` when there is one ``SampleTiming`` per sample (first token = the
earliest sample's, completion = the last sample's), never from a partial set.

Whatever cannot be paired is a ``NotCompared`` with the reason (never approximated). Requests whose
outcome has an ``unavailable_reason`` are left out of every request-level metric and counted in
``ValidationReport.requests_unavailable``. A boundary pair out of order (end < start, e.g. vLLM's
re-set ``queued_ts``) is not compared either.

Aggregate-only replay results (``RESULT_GRANULARITY_AGGREGATE_ONLY``) are compared only on the
aggregate keys listed in :data:`AGGREGATE_KEYS`, at ``COMPARISON_LEVEL_AGGREGATE``; every
per-record metric is listed as not compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from unirl_replay import SCHEMA_VERSION
from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.report.metrics import NS_PER_MS, error_stats, repeat_spread
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb

L_REQ = vpb.COMPARISON_LEVEL_REQUEST
L_GROUP = vpb.COMPARISON_LEVEL_GROUP
L_TRAJ = vpb.COMPARISON_LEVEL_TRAJECTORY
L_BATCH = vpb.COMPARISON_LEVEL_ROLLOUT_BATCH
L_AGG = vpb.COMPARISON_LEVEL_AGGREGATE

#: (level, metric) keys in report order.
METRIC_KEYS: tuple[tuple[int, str], ...] = (
    (L_REQ, "ttft"),
    (L_REQ, "e2e"),
    (L_REQ, "queueing_delay"),
    (L_REQ, "engine_ttft"),
    (L_REQ, "engine_e2e"),
    (L_GROUP, "group_completion"),
    (L_TRAJ, "trajectory_e2e"),
    (L_TRAJ, "slot_hold"),
    (L_BATCH, "batch_readiness"),
)

#: Aggregate keys of an aggregate-only result that have a matched measured counterpart:
#: key -> (request metric it summarises, statistic). Values in ms. The statistic is computed over
#: every workload request, so it is compared only when every request has the measured value.
AGGREGATE_KEYS: dict[str, tuple[str, str]] = {
    "mean_ttft_ms": ("ttft", "mean"),
    "min_ttft_ms": ("ttft", "min"),
    "max_ttft_ms": ("ttft", "max"),
    "mean_e2e_latency_ms": ("e2e", "mean"),
    "min_e2e_latency_ms": ("e2e", "min"),
    "max_e2e_latency_ms": ("e2e", "max"),
    "duration_ms": ("makespan", "value"),
}

LEVEL_NAMES = {
    L_REQ: "request",
    L_GROUP: "group",
    L_TRAJ: "trajectory",
    L_BATCH: "rollout_batch",
    L_AGG: "aggregate",
}


class ComparisonError(UnirlReplayError):
    """The inputs cannot be compared honestly (other trace, other clock, contradictory labels)."""


class Pairs(NamedTuple):
    """Matched pairs of one (level, metric): ``ids[i]`` has ``measured_ns[i]`` and ``predicted_ns[i]``.

    Arrays are int64, shape (N,), in workload order. Durations in ns.
    """

    ids: tuple[str, ...]
    measured_ns: np.ndarray
    predicted_ns: np.ndarray


# A side's values for one metric: record id -> duration in ns, or the reason it has none.
SideValues = dict[str, "int | str"]


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


def _origin(idx: WorkloadIndex, bounds: dict[str, dict[str, int] | str], batch_id: str, engine: str,
            side: str) -> int | str:
    """Batch ``batch_id``'s first submit on ``engine`` from per-request boundaries, or a reason."""
    rids = [r for r in idx.requests_of_batch.get(batch_id, []) if idx.requests[r].engine_id == engine]
    if not rids:
        return f"batch {batch_id!r} has no requests on engine {engine!r} in the workload"
    submits = []
    for r in rids:
        b = bounds.get(r)
        if not isinstance(b, dict) or "submit" not in b:
            field = "submit_ns" if side == "measured" else "arrival_ns"
            return f"origin unknown: request {r!r} of batch {batch_id!r} has no {side} {field}"
        submits.append(b["submit"])
    return min(submits)


def _engine_of(idx: WorkloadIndex, rids: Sequence[str], what: str) -> str | None | tuple[str]:
    engines = _engines(idx, rids)
    if len(engines) == 1:
        return engines[0]
    if not engines:
        return (f"{what} has no requests in the workload",)
    return (f"{what} spans engines {', '.join(engines)}: separate simulated engines have separate "
            f"clock origins",)


def _group_batch_values(idx: WorkloadIndex, bounds: dict, events: dict[str, dict[str, int]],
                        side: str) -> tuple[SideValues, SideValues]:
    """group_completion and batch_readiness for one side, relative to O(batch, engine)."""
    groups: SideValues = {}
    for gid in _ids_at(idx, L_GROUP):
        rids = idx.requests_of_group.get(gid, [])
        eng = _engine_of(idx, rids, f"group {gid!r}")
        if isinstance(eng, tuple):
            groups[gid] = eng[0]
            continue
        batch = idx.groups[gid].rollout_batch_id if gid in idx.groups else idx.requests[rids[0]].rollout_batch_id
        if gid not in events["group"]:
            groups[gid] = f"no {side} group completion"
            continue
        o = _origin(idx, bounds, batch, eng, side)
        groups[gid] = o if isinstance(o, str) else _rel(events["group"][gid], o, "group completion")
    batches: SideValues = {}
    for bid in _ids_at(idx, L_BATCH):
        rids = idx.requests_of_batch.get(bid, [])
        eng = _engine_of(idx, rids, f"batch {bid!r}")
        if isinstance(eng, tuple):
            batches[bid] = eng[0]
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


def measured_values(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord]
                    ) -> tuple[dict[tuple[int, str], SideValues], list[str]]:
    """Measured durations (ns) per (level, metric) and record id, or the reason there is none.

    Returns:
        ``(values, unavailable)``: ``unavailable`` lists the request ids whose outcome carries an
        ``unavailable_reason`` (left out of request-level metrics, in workload order).
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
            for m in REQUEST_SPANS:
                values[(L_REQ, m)][rid] = f"measured outcome unavailable: {out.unavailable_reason}"
            continue
        for m, (s, _, e) in REQUEST_SPANS.items():
            values[(L_REQ, m)][rid] = _span(b, s, e, True)

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

    g, bt = _group_batch_values(idx, bounds, events, "measured")
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


def predicted_values(idx: WorkloadIndex, replay: rpb.ReplayResult) -> dict[tuple[int, str], SideValues]:
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
    g, bt = _group_batch_values(idx, bounds, events, "predicted")
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
            if isinstance(m, str):
                reasons.append(f"measured: {m}")
            if isinstance(p, str):
                reasons.append(f"predicted: {p}")
            nc.append(vpb.NotCompared(level=level, metric=metric, record_id=rid, reason="; ".join(reasons)))
        pairs[key] = Pairs(tuple(ids), np.asarray(ms, dtype=np.int64), np.asarray(ps, dtype=np.int64))
    return pairs, nc


# ---------------------------------------------------------------------------------------------
# Statistics -> messages


def metric_comparison(level: int, metric: str, p: Pairs) -> vpb.MetricComparison:
    """MetricComparison of one metric from its pairs (ns in, ms / % out). Unset fields: undefined."""
    st = error_stats(p.predicted_ns / NS_PER_MS, p.measured_ns / NS_PER_MS)
    mc = vpb.MetricComparison(level=level, metric=metric, pairs=st["pairs"], zero_measured=st["zero_measured"])
    for field, key in (("mape_pct", "mape_pct"), ("median_ape_pct", "median_ape_pct"),
                       ("p90_ape_pct", "p90_ape_pct"), ("signed_bias_pct", "signed_bias_pct"),
                       ("measured_mean_ms", "measured_mean"), ("predicted_mean_ms", "predicted_mean"),
                       ("measured_p50_ms", "measured_p50"), ("measured_p90_ms", "measured_p90"),
                       ("measured_p99_ms", "measured_p99"), ("predicted_p50_ms", "predicted_p50"),
                       ("predicted_p90_ms", "predicted_p90"), ("predicted_p99_ms", "predicted_p99")):
        if st[key] is not None:
            setattr(mc, field, st[key])
    return mc


def _aggregate(idx: WorkloadIndex, measured: dict[tuple[int, str], SideValues],
               outcomes_bounds_makespan: int | str, replay: rpb.ReplayResult
               ) -> tuple[list[vpb.MetricComparison], list[vpb.NotCompared]]:
    mcs, nc = [], []
    for key in sorted(replay.aggregate):
        pred = replay.aggregate[key]
        if key not in AGGREGATE_KEYS:
            reason = ("upstream percentile definition not verified to match ours (numpy linear)"
                      if re.match(r"^(p\d+|median)_", key) else "no measured counterpart defined for this aggregate key")
            nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=reason))
            continue
        src, stat = AGGREGATE_KEYS[key]
        if src == "makespan":
            meas = outcomes_bounds_makespan
            if isinstance(meas, str):
                nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=f"measured: {meas}"))
                continue
            meas_ms = meas / NS_PER_MS
        else:
            vals = measured[(L_REQ, src)]
            missing = [r for r, v in vals.items() if not isinstance(v, int)]
            if missing or not vals:
                nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=(
                    f"measured {src} missing for {len(missing)} of {len(vals)} requests: the aggregate "
                    f"would summarise another request set than the simulator's")))
                continue
            arr = np.asarray(list(vals.values()), dtype=np.float64) / NS_PER_MS
            meas_ms = float({"mean": np.mean, "min": np.min, "max": np.max}[stat](arr))
        st = error_stats([pred], [meas_ms])
        mc = vpb.MetricComparison(level=L_AGG, metric=key, pairs=1, zero_measured=st["zero_measured"],
                                  measured_value=meas_ms, predicted_value=pred)
        for field in ("mape_pct", "median_ape_pct", "p90_ape_pct", "signed_bias_pct"):
            if st[field] is not None:
                setattr(mc, field, st[field])
        mcs.append(mc)
    return mcs, nc


def _measured_makespan(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord]) -> int | str:
    """Whole-window makespan (first submit to last completion), single-engine traces only."""
    engines = _engines(idx, list(idx.requests))
    if len(engines) != 1:
        return f"trace spans engines {', '.join(engines)}: no single simulated clock for a makespan"
    outs = {r.request.request_id: r.request for r in outcomes if r.WhichOneof("record") == "request"}
    starts, ends = [], []
    for rid, req in idx.requests.items():
        o = outs.get(rid)
        b = measured_request_boundaries(req, o) if o is not None else {}
        if "submit" not in b or "completion" not in b:
            return f"request {rid!r} lacks a measured submit or completion"
        starts.append(b["submit"])
        ends.append(b["completion"])
    return max(ends) - min(starts)


# ---------------------------------------------------------------------------------------------
# Labels


_ROLE_WORDS = {cpb.WORKLOAD_ROLE_CALIBRATION: "calibration", cpb.WORKLOAD_ROLE_HOLDOUT: "holdout",
               cpb.WORKLOAD_ROLE_UNLABELLED: "unlabelled"}


def timing_label(tm: rpb.TimingModel) -> str:
    """Readable timing model with its calibration status, e.g. ``"polynomial (UNCALIBRATED)"``.

    Raises:
        ComparisonError: the status is unspecified, or a polynomial / fixed model claims CALIBRATED
            (a generic or analytic model is never a calibrated prediction).
    """
    status = rpb.CalibrationStatus.Name(tm.calibration).removeprefix("CALIBRATION_STATUS_")
    if tm.calibration == rpb.CALIBRATION_STATUS_UNSPECIFIED:
        raise ComparisonError("replay result's timing model has no calibration status; refusing to label it")
    if tm.kind in (rpb.TIMING_MODEL_KIND_POLYNOMIAL, rpb.TIMING_MODEL_KIND_FIXED) and \
            tm.calibration == rpb.CALIBRATION_STATUS_CALIBRATED:
        raise ComparisonError(f"{rpb.TimingModelKind.Name(tm.kind)} timing model labelled CALIBRATED: "
                              "only a measured profile can be a calibrated prediction")
    if tm.kind == rpb.TIMING_MODEL_KIND_POLYNOMIAL:
        what = "polynomial default"
    elif tm.kind == rpb.TIMING_MODEL_KIND_FIXED:
        pre = f"{tm.prefill_ms:g}" if tm.HasField("prefill_ms") else "?"
        dec = f"{tm.decode_ms:g}" if tm.HasField("decode_ms") else "?"
        what = f"fixed prefill {pre} ms / decode {dec} ms"
    elif tm.kind == rpb.TIMING_MODEL_KIND_PROFILE:
        name = tm.profile_path.rsplit("/", 1)[-1] or "?"
        what = f"profile {name}"
    elif tm.kind == rpb.TIMING_MODEL_KIND_HARDWARE_DATABASE:
        # a GPU database prediction is never calibrated or validated: at most a labelled what-if
        if tm.calibration != rpb.CALIBRATION_STATUS_UNVALIDATED:
            raise ComparisonError("GPU-database timing model not labelled UNVALIDATED: no execution on that "
                                  "hardware was measured for this trace")
        model = tm.model.rstrip("/").rsplit("/", 1)[-1] or "?"
        return (f"WHAT-IF this window on {tm.hardware or '?'} (GPU database, model {model}; UNVALIDATED, "
                "functional_only; not a prediction of the measured run)")
    else:
        raise ComparisonError("replay result's timing model kind is unspecified")
    return f"{what} ({status})"


def honesty_label(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> str:
    """One-line label for every title: role + workload name | simulator | timing model (status)
    [| aggregate-only] [| IN-SAMPLE] [| UNMODELLED: <rules>]."""
    role = _ROLE_WORDS.get(manifest.role, "ROLE UNSPECIFIED")
    parts = [f"{role} workload {manifest.workload_name or manifest.trace_id}",
             f"{replay.simulator.name or 'simulator ?'} {replay.simulator.version}".strip(),
             timing_label(replay.timing_model)]
    if replay.granularity == rpb.RESULT_GRANULARITY_AGGREGATE_ONLY:
        parts.append("aggregate-only")
    if manifest.workload_name and manifest.workload_name in replay.timing_model.calibration_workloads:
        parts.append("IN-SAMPLE")
    if replay.unmodelled_constraints:
        parts.append("UNMODELLED: " + ", ".join(dict.fromkeys(c.rule for c in replay.unmodelled_constraints)))
    return " | ".join(parts)


def _check_inputs(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> None:
    if replay.trace_id and manifest.trace_id and replay.trace_id != manifest.trace_id:
        raise ComparisonError(f"replay result is of trace {replay.trace_id!r}, not {manifest.trace_id!r}")
    if manifest.window.clock_domain != cpb.CLOCK_DOMAIN_CAPTURE_MONOTONIC:
        raise ComparisonError("trace times are not on CLOCK_DOMAIN_CAPTURE_MONOTONIC "
                              f"({cpb.ClockDomain.Name(manifest.window.clock_domain)}): cannot pair boundaries")
    wl = [a.sha256 for a in manifest.artifacts if a.kind == mpb.ARTIFACT_KIND_WORKLOAD]
    if replay.workload_sha256 and wl and wl[0] and replay.workload_sha256 != wl[0]:
        raise ComparisonError(f"replay result replayed workload sha256 {replay.workload_sha256[:12]}..., "
                              f"the trace's workload is {wl[0][:12]}...")
    if replay.granularity == rpb.RESULT_GRANULARITY_UNSPECIFIED:
        raise ComparisonError("replay result granularity is unspecified")
    if manifest.role == cpb.WORKLOAD_ROLE_HOLDOUT and manifest.workload_name in replay.timing_model.calibration_workloads:
        raise ComparisonError(f"holdout workload {manifest.workload_name!r} is among the profile's calibration "
                              "workloads: calibration and holdout are never mixed")


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
    return _match(index_workload(workload), outcomes, replay)


def _match(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord], replay: rpb.ReplayResult) -> Matching:
    meas, unavailable = measured_values(idx, outcomes)
    pairs, nc = pair_values(idx, meas, predicted_values(idx, replay))
    return Matching(pairs, nc, unavailable, meas)


def compare(manifest: mpb.TraceManifest, workload: Iterable[wpb.WorkloadRecord],
            outcomes: Iterable[opb.OutcomeRecord], replay: rpb.ReplayResult,
            repeats: Sequence[tuple[mpb.TraceManifest, Iterable[wpb.WorkloadRecord], Iterable[opb.OutcomeRecord]]] = (),
            matching: Matching | None = None) -> vpb.ValidationReport:
    """Build the ``ValidationReport`` of ``replay`` against the trace it came from.

    Args:
        manifest: the trace's manifest (role, workload name, capture overhead, clock).
        workload, outcomes: the trace's records (materialised internally; iterate once).
        replay: the replay result.
        repeats: other measured runs of the same workload (manifest, workload, outcomes), for the
            run-to-run spread; the main trace is counted as one repeat.
        matching: :func:`match` of the same inputs when the caller already has it (for plots);
            computed here otherwise.
    Returns:
        The report (``artifacts`` empty: the command fills it).
    Raises:
        ComparisonError: other trace / workload, unusable clock, contradictory labels, or a repeat
            of another workload or role.
    """
    _check_inputs(manifest, replay)
    workload = list(workload)
    outcomes = list(outcomes)
    idx = index_workload(workload)
    report = vpb.ValidationReport(
        schema_version=SCHEMA_VERSION, trace_id=manifest.trace_id, role=manifest.role,
        workload_name=manifest.workload_name, simulator=replay.simulator, timing_model=replay.timing_model,
        granularity=replay.granularity, capture_overhead=manifest.capture_overhead,
        label=honesty_label(manifest, replay))
    per_request = replay.granularity != rpb.RESULT_GRANULARITY_AGGREGATE_ONLY
    if per_request and matching is None:
        matching = _match(idx, outcomes, replay)
    meas, unavailable = ((matching.measured, matching.unavailable) if per_request
                         else measured_values(idx, outcomes))
    report.requests_unavailable = len(unavailable)
    report.notes.append("durations only; groups and batches measured from the batch's first submit on "
                        "their engine (see docs/comparison.md)")
    if manifest.role == cpb.WORKLOAD_ROLE_CALIBRATION and replay.timing_model.calibration == rpb.CALIBRATION_STATUS_CALIBRATED:
        report.notes.append("calibration workload with a calibrated profile: in-sample prediction")
    if not manifest.capture_overhead.HasField("overhead_ratio"):
        report.notes.append("capture overhead not measured in this trace")

    if not per_request:
        report.notes.append("aggregate-only replay result: compared at the aggregate level only")
        for level, metric in METRIC_KEYS:
            report.not_compared.append(vpb.NotCompared(
                level=level, metric=metric, reason="replay result is aggregate-only: no per-record predictions"))
        for rid in unavailable:
            report.not_compared.append(vpb.NotCompared(
                level=L_REQ, metric="*", record_id=rid, reason="measured outcome unavailable (left out of aggregates' "
                "request set)"))
        mcs, nc = _aggregate(idx, meas, _measured_makespan(idx, outcomes), replay)
        report.metrics.extend(mcs)
        report.not_compared.extend(nc)
    else:
        for key in METRIC_KEYS:
            if len(matching.pairs[key].ids):
                report.metrics.append(metric_comparison(key[0], key[1], matching.pairs[key]))
            else:
                report.not_compared.append(vpb.NotCompared(level=key[0], metric=key[1],
                                                           reason="no matched pair at this level"))
        report.not_compared.extend(matching.not_compared)

    report.repeat_spread.extend(spread_over_repeats(manifest, meas, repeats))
    return report


def spread_over_repeats(manifest: mpb.TraceManifest, main_measured: dict[tuple[int, str], SideValues],
                        repeats: Sequence[tuple[mpb.TraceManifest, Iterable[wpb.WorkloadRecord], Iterable[opb.OutcomeRecord]]],
                        ) -> list[vpb.RepeatSpread]:
    """RepeatSpread per metric over the main run plus ``repeats`` (each repeat: its mean, in ns,
    over its own measured values). Metrics measured in fewer than two runs get no entry.

    Raises:
        ComparisonError: a repeat has another workload name or role.
    """
    if not repeats:
        return []
    runs = [main_measured]
    for m, wl, outs in repeats:
        if m.workload_name != manifest.workload_name or m.role != manifest.role:
            raise ComparisonError(f"repeat {m.trace_id!r} is workload {m.workload_name!r} "
                                  f"({_ROLE_WORDS.get(m.role, '?')}), not {manifest.workload_name!r} "
                                  f"({_ROLE_WORDS.get(manifest.role, '?')})")
        runs.append(measured_values(index_workload(wl), outs)[0])
    out = []
    for key in METRIC_KEYS:
        means = []
        for run in runs:
            vals = [v for v in run.get(key, {}).values() if isinstance(v, int)]
            if vals:
                means.append(float(np.mean(vals)))
        if len(means) < 2:
            continue
        cv, dev = repeat_spread(means)
        rs = vpb.RepeatSpread(level=key[0], metric=key[1], repeats=len(means))
        if cv is not None:
            rs.cv_pct, rs.max_dev_pct = cv, dev
        out.append(rs)
    return out
