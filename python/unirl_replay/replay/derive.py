"""Pure derivation of trajectory, group and batch timelines from per-request predictions.

Inputs are contract messages only: ``PredictedRequest`` rows (ns, simulated clock) and the
workload's ``Trajectory`` / ``Group`` / ``RolloutBatch`` / ``Request`` records. Nothing is
reconstructed from aggregates: a value whose inputs are missing stays absent.

* trajectory: start = earliest member arrival, end = latest member completion (slot hold).
* group: completes when its last member completes -- members are request ids
  (GROUP_UNIT_SAMPLES, counting ``num_samples``) or trajectory ids (GROUP_UNIT_TRAJECTORIES);
  a group with fewer members in the window than ``expected_size`` never completes (absent).
* batch: ALL_GROUPS -> latest group completion; FIRST_N_GROUPS -> the ``required_groups``-th
  earliest group completion (absent when fewer groups completed). Group completion is NOT
  batch readiness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import repeat

import numpy as np

from unirl_replay.v1 import replay_pb2, workload_pb2


def derive_trajectories(predicted: Mapping[str, replay_pb2.PredictedRequest],
                        trajectories: Iterable[workload_pb2.Trajectory],
                        requests_by_traj: Mapping[str, list[str]]) -> list[replay_pb2.PredictedTrajectory]:
    """One PredictedTrajectory per trajectory (in the given order).

    ``requests_by_traj`` maps trajectory id -> its request ids (from ``Request.trajectory_id``;
    ``Trajectory.request_ids`` is used when the map has no entry).
    """
    out = []
    for t in trajectories:
        rows = [predicted.get(q) for q in requests_by_traj.get(t.trajectory_id, t.request_ids)]
        pt = replay_pb2.PredictedTrajectory(trajectory_id=t.trajectory_id)
        if rows and all(r is not None and r.HasField("arrival_ns") and r.HasField("completion_ns") for r in rows):
            pt.start_ns = min(r.arrival_ns for r in rows)
            pt.end_ns = max(r.completion_ns for r in rows)
        out.append(pt)
    return out


def derive_groups(groups: Iterable[workload_pb2.Group],
                  predicted: Mapping[str, replay_pb2.PredictedRequest],
                  trajectories: Mapping[str, replay_pb2.PredictedTrajectory],
                  requests: Mapping[str, workload_pb2.Request] | Mapping[str, int]) -> list[replay_pb2.PredictedGroup]:
    """One PredictedGroup per group: completion of its last member, if all expected members ran.

    ``requests``: request id -> its ``Request`` or its ``num_samples``."""
    out = []
    for g in groups:
        pg = replay_pb2.PredictedGroup(group_id=g.group_id)
        ends: list[int] | None = []
        count = 0
        for m in g.member_ids:
            if g.unit == workload_pb2.GROUP_UNIT_TRAJECTORIES:
                t = trajectories.get(m)
                end = t.end_ns if t is not None and t.HasField("end_ns") else None
                count += 1
            else:
                r = predicted.get(m)
                end = r.completion_ns if r is not None and r.HasField("completion_ns") else None
                n = requests.get(m)
                count += 1 if n is None else n if isinstance(n, int) else n.num_samples
            if end is None:
                ends = None
                break
            ends.append(end)
        if ends and count >= g.expected_size:
            pg.completed_ns = max(ends)
        out.append(pg)
    return out


def derive_trajectories_values(values: Mapping[str, tuple | None], trajectories: Iterable[workload_pb2.Trajectory],
                               requests_by_traj: Mapping[str, list[str]], out) -> dict[str, int | None]:
    """:func:`derive_trajectories` from prediction values (``mapback.predicted_values``: request
    id -> ``(arrival_ns, scheduled_ns, first_token_ns, completion_ns, cached_tokens)`` or None),
    appending each PredictedTrajectory to the repeated field ``out`` (its twin, tested).

    Returns trajectory id -> its end_ns (None when absent), what :func:`derive_groups_values` reads."""
    ends: dict[str, int | None] = {}
    add, get, members = out.add, values.get, requests_by_traj.get
    for t in trajectories:
        tid = t.trajectory_id
        ends[tid] = _add_from_values(add, tid, [get(q) for q in members(tid, t.request_ids)])
    return ends


def _add_from_values(add, tid: str, vs: list) -> int | None:
    """Append trajectory ``tid`` from its members' values ``vs`` (each a values tuple or None) with ``add``
    (the repeated field's ``add``): start = min arrival, end = max completion, both absent when a member has no
    values or no completion (or there are no members); returns the end."""
    try:  # list comprehensions (inlined) instead of generators: a member without values raises
        last = [v[3] for v in vs]
    except TypeError:
        last = None
    if last and None not in last:
        end = max(last)
        add(trajectory_id=tid, start_ns=min([v[0] for v in vs]), end_ns=end)
        return end
    add(trajectory_id=tid)
    return None


def derive_trajectories_columns(trajectories: Mapping[str, workload_pb2.Trajectory], trajectory_of: list[str],
                                arrival: list[int], completion: list, values: Callable[[], Mapping[str, tuple | None]],
                                out) -> dict[str, int | None]:
    """:func:`derive_trajectories_values` (the same messages appended to ``out``, the same
    returned ends; its twin, tested) for requests whose values are columns: request ``i``
    (workload order) has ``trajectory_of[i]`` (``Request.trajectory_id``), ``arrival[i]`` (an
    int) and ``completion[i]`` (an int or None), every request predicted. A trajectory's
    members are the requests naming it (``requests_by_traj`` in the twin), its start the min of
    their arrivals and its end the max of their completions, absent when one has none: computed
    per trajectory in numpy (``ufunc.at``). A trajectory no request names takes its
    ``request_ids`` through the twin's code with ``values()`` (the values as a mapping, built
    only then); ``trajectories``: id -> message, in output order (a dict or the reader's
    ``MessageColumns``: no message is built for a trajectory requests name)."""
    tids = list(trajectories)
    pos = {tid: k for k, tid in enumerate(tids)}
    pos.pop("", None)  # a request without a trajectory id is no trajectory's member
    n, t = len(trajectory_of), len(tids)
    codes = np.fromiter(map(pos.get, trajectory_of, repeat(-1)), np.int64, n)
    member = codes >= 0
    c = codes[member]
    counts = np.bincount(c, minlength=t)
    arr = np.fromiter(arrival, np.int64, n)[member]  # ints within int64 (mapback's bulk columns)
    start = np.full(t, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(start, c, arr)
    if None in completion:
        missing = np.fromiter((e is None for e in completion), bool, n)[member]
        bad = np.bincount(c, weights=missing, minlength=t) > 0
        comp = np.array([0 if e is None else e for e in completion], np.int64)[member]
    else:
        bad = np.zeros(t, bool)
        comp = np.fromiter(completion, np.int64, n)[member]
    end = np.full(t, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(end, c, comp)
    ends: dict[str, int | None] = {}
    add = out.add
    got = None
    for tid, k, s, e, b in zip(tids, counts.tolist(), start.tolist(), end.tolist(), bad.tolist()):
        if k == 0:  # no request names it: its own request_ids (the twin's code)
            if got is None:
                got = values().get
            ends[tid] = _add_from_values(add, tid, [got(q) for q in trajectories[tid].request_ids])
        elif b:
            add(trajectory_id=tid)
            ends[tid] = None
        else:
            add(trajectory_id=tid, start_ns=s, end_ns=e)
            ends[tid] = e
    return ends


def derive_groups_values(groups: Iterable[workload_pb2.Group], values: Mapping[str, tuple | None],
                         trajectory_ends: Mapping[str, int | None], samples: Mapping[str, int],
                         out) -> dict[str, replay_pb2.PredictedGroup]:
    """:func:`derive_groups` from prediction values and trajectory ends (see
    :func:`derive_trajectories_values`), appending to ``out``; returns group id -> its message."""
    res: dict[str, replay_pb2.PredictedGroup] = {}
    for g in groups:
        ends: list[int] | None = []
        count = 0
        for m in g.member_ids:
            if g.unit == workload_pb2.GROUP_UNIT_TRAJECTORIES:
                end = trajectory_ends.get(m)
                count += 1
            else:
                v = values.get(m)
                end = None if v is None else v[3]
                n = samples.get(m)
                count += 1 if n is None else n
            if end is None:
                ends = None
                break
            ends.append(end)
        pg = out.add(group_id=g.group_id, completed_ns=max(ends)) if ends and count >= g.expected_size \
            else out.add(group_id=g.group_id)
        res[g.group_id] = pg
    return res


def derive_batches(batches: Iterable[workload_pb2.RolloutBatch],
                   groups: Mapping[str, replay_pb2.PredictedGroup]) -> list[replay_pb2.PredictedBatch]:
    """One PredictedBatch per batch, by its readiness rule (see module doc)."""
    out = []
    for b in batches:
        pb = replay_pb2.PredictedBatch(rollout_batch_id=b.rollout_batch_id)
        done = sorted(groups[g].completed_ns for g in b.group_ids
                      if g in groups and groups[g].HasField("completed_ns"))
        if b.readiness_rule == workload_pb2.BATCH_READINESS_RULE_ALL_GROUPS:
            if b.group_ids and len(done) == len(b.group_ids):
                pb.ready_ns = done[-1]
        elif b.readiness_rule == workload_pb2.BATCH_READINESS_RULE_FIRST_N_GROUPS:
            n = b.required_groups
            if 1 <= n <= len(done):
                pb.ready_ns = done[n - 1]
        out.append(pb)
    return out
