"""Request-level support checks: engine, shape, prefix hashes, arrivals, dependencies, policy.

Two implementations of the same rules: :func:`scan_requests`, one pass reading each field once
(the fast path, which also records ``EnginePlan.facts``), and :func:`check_requests`, the rules
one at a time in their documented order. ``check_supported`` runs the scan and, on any doubt,
the rule-by-rule pass, which raises the first violation exactly as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping

from unirl_replay.contract.errors import TraceFormatError, UnsupportedWorkloadError
from unirl_replay.contract.workload_columns import MessageColumns, tuples_by_lengths
from unirl_replay.replay.workload import (
    WORKLOAD_FILE,
    EnginePlan,
    WorkloadIndex,
    expected_hash_count,
    play_id_of,
)
from unirl_replay.v1 import common_pb2, manifest_pb2, workload_pb2

#: the dependency enum numbers this contract version defines (a library caller's trace may not have passed the gate,
#: whose rule enum.unknown refuses any other: the converters look the trigger and relation up by number)
KNOWN_TRIGGERS = frozenset(common_pb2.DependencyTrigger.values()) - {common_pb2.DEPENDENCY_TRIGGER_UNSPECIFIED}
KNOWN_RELATIONS = frozenset(common_pb2.DependencyRelation.values())
KNOWN_ABSENCES = frozenset(common_pb2.DelayAbsence.values())


def _engine_of(req: workload_pb2.Request, engines: Mapping[str, manifest_pb2.EngineConfig]) -> str:
    if req.engine_id:
        if req.engine_id not in engines:
            raise TraceFormatError(f"engine_id {req.engine_id!r} is not in the manifest's engines "
                                   f"{sorted(engines)}", record_id=req.request_id,
                                   file=WORKLOAD_FILE, rule="request.unknown_engine")
        return req.engine_id
    if len(engines) == 1:
        return next(iter(engines))
    raise TraceFormatError("engine_id is empty and the manifest lists several engines",
                           record_id=req.request_id, file=WORKLOAD_FILE, rule="request.unknown_engine")


def _check_request_shape(r: workload_pb2.Request, block_size: int, prefix_caching: bool) -> None:
    rid = r.request_id
    if r.num_samples < 1 or len(r.output_tokens) != r.num_samples:
        raise TraceFormatError(f"num_samples={r.num_samples} but {len(r.output_tokens)} output_tokens "
                               "entries (need num_samples >= 1 and one entry per sample)",
                               record_id=rid, file=WORKLOAD_FILE, rule="request.num_samples")
    if r.input_tokens < 1:
        raise TraceFormatError("input_tokens must be >= 1", record_id=rid, file=WORKLOAD_FILE,
                               rule="request.input_tokens")
    kind = r.arrival.WhichOneof("kind")
    if kind is None:
        raise TraceFormatError("arrival is missing (never defaulted)", record_id=rid,
                               file=WORKLOAD_FILE, rule="arrival.missing")
    if kind == "after_dependencies" and not r.dependencies:
        raise TraceFormatError("arrival.after_dependencies without dependencies", record_id=rid,
                               file=WORKLOAD_FILE, rule="arrival.dependencies")
    if kind == "observed_offset_ns" and r.dependencies:
        raise TraceFormatError("dependencies on a request with an observed arrival", record_id=rid,
                               file=WORKLOAD_FILE, rule="arrival.dependencies")
    if r.HasField("prefix") and r.prefix.block_hashes:
        if r.prefix.block_size_tokens != block_size:
            raise UnsupportedWorkloadError(
                "prefix.block_size_mismatch",
                f"prefix hashes were computed with block size {r.prefix.block_size_tokens} tokens but "
                f"the simulated engine uses {block_size}; prefix reuse cannot be replayed exactly",
                [rid])
        want = expected_hash_count(r.input_tokens, block_size)
        if len(r.prefix.block_hashes) != want:
            raise TraceFormatError(f"{len(r.prefix.block_hashes)} prefix hashes for {r.input_tokens} "
                                   f"tokens at block size {block_size}; need ceil(...) = {want}",
                                   record_id=rid, file=WORKLOAD_FILE, rule="prefix.hash_count")
    elif prefix_caching:
        raise TraceFormatError("no prefix block hashes but the engine has prefix caching on",
                               record_id=rid, file=WORKLOAD_FILE, rule="prefix.missing")


def scan_requests(index: WorkloadIndex, engines: Mapping[str, manifest_pb2.EngineConfig],
                   window_policy_version: int | None, plans: dict[str, EnginePlan]) -> bool:
    """One pass over the requests that accepts exactly what :func:`check_requests` accepts and
    fills the plans the same way (plus ``first_arrival_ns``), reading each field once.

    Returns False (plans partly filled, to be discarded) as soon as a request may break a rule;
    the caller then runs :func:`check_requests`, which raises the error in its usual order.
    """
    by_id = index.by_id
    cfg = {eid: (e.block_size_tokens, e.enable_prefix_caching, plans[eid]) for eid, e in engines.items()}
    only = next(iter(engines)) if len(engines) == 1 else None
    no_absence = common_pb2.DELAY_ABSENCE_UNSPECIFIED
    by_construction = common_pb2.DELAY_ABSENCE_NONE_BY_CONSTRUCTION
    traj_engine: dict[str, str] = {}
    turns: dict[str, list[int]] = {}
    versions: set[int] = set()
    first: dict[str, int] = {}
    facts = {eid: {} for eid in engines}
    for r in index.requests:
        rid = r.request_id
        eid = r.engine_id or only
        c = cfg.get(eid)
        if c is None:
            return False
        bs, caching, plan = c
        n = r.num_samples
        outs = r.output_tokens
        if n < 1 or len(outs) != n:
            return False
        inp = r.input_tokens
        if inp < 1:
            return False
        arrival = r.arrival
        kind = arrival.WhichOneof("kind")
        deps = r.dependencies
        t = None
        if kind == "observed_offset_ns":
            if deps:
                return False
            t = arrival.observed_offset_ns
            if t < first.get(eid, t + 1):
                first[eid] = t
        elif kind is None or not deps:
            return False
        prefix = r.prefix
        hashes = prefix.block_hashes
        if hashes:
            if prefix.block_size_tokens != bs or len(hashes) != expected_hash_count(inp, bs):
                return False
        elif caching:
            return False
        else:
            hashes = None
        if r.HasField("policy_version"):
            versions.add(r.policy_version)
        tid = r.trajectory_id
        if tid:
            te = traj_engine.setdefault(tid, eid)
            if te != eid:
                return False
            if r.HasField("turn_index"):
                ts = turns.get(tid)
                if ts is None:
                    turns[tid] = [r.turn_index]
                else:
                    ts.append(r.turn_index)
        dl = [] if deps else ()
        for d in deps:
            pid = d.predecessor_request_id
            p = by_id.get(pid)
            trigger = d.trigger
            if p is None or not tid or p.trajectory_id != tid or trigger not in KNOWN_TRIGGERS or \
                    d.relation not in KNOWN_RELATIONS:
                return False
            absence = d.delay_absence
            delay = None
            if d.HasField("external_delay_ns"):
                delay = d.external_delay_ns
                if absence != no_absence or delay < 0:
                    return False
            elif absence == by_construction:
                plan.none_by_construction += 1
            else:  # not measured, no reason given, or a number DelayAbsence does not define
                return False
            dl.append((pid, p.num_samples, trigger, d.relation, delay))
        facts[eid][rid] = (n, inp, (outs[0],) if n == 1 else tuple(outs), t, tuple(dl) if dl else (), hashes)
        plan.requests.append(r)
        play = plan.plays.get(tid or rid)
        if play is None:
            plan.plays[tid or rid] = [rid]
        else:
            play.append(rid)
    return _scan_tail(versions, window_policy_version, index.trajectories, traj_engine, turns, first, facts, plans)


def check_requests(index: WorkloadIndex, engines: Mapping[str, manifest_pb2.EngineConfig],
                    window_policy_version: int | None, plans: dict[str, EnginePlan]) -> None:
    """The request-level rules, one at a time in their documented order (raises the first
    violation); fills each plan's requests and plays."""
    # -- policy versions (window-wide, then per trajectory: the latter is a cross-policy resume)
    by_traj: dict[str, list[workload_pb2.Request]] = {}
    for r in index.requests:
        if r.trajectory_id:
            by_traj.setdefault(r.trajectory_id, []).append(r)
    for tid, reqs in by_traj.items():
        versions = {r.policy_version for r in reqs if r.HasField("policy_version")}
        if len(versions) > 1:
            raise UnsupportedWorkloadError(
                "resume.cross_policy",
                f"trajectory {tid!r} was generated by policy versions {sorted(versions)} (resumed "
                "across a weight update); a replay serves one fixed policy",
                [r.request_id for r in reqs])
    versions: dict[int, str] = {}
    for r in index.requests:
        if r.HasField("policy_version"):
            versions.setdefault(r.policy_version, r.request_id)
    if window_policy_version is not None:
        versions.setdefault(window_policy_version, "manifest.policy")
    if len(versions) > 1:
        raise UnsupportedWorkloadError(
            "policy.mixed_versions",
            f"the window mixes policy versions {sorted(versions)}; replay one fixed-policy window at a time",
            list(versions.values()))

    # -- requests: engine, shape, dependencies
    for r in index.requests:
        eid = _engine_of(r, engines)
        cfg = engines[eid]
        _check_request_shape(r, cfg.block_size_tokens, cfg.enable_prefix_caching)
        plans[eid].requests.append(r)
        plans[eid].plays.setdefault(play_id_of(r), []).append(r.request_id)
        for k, d in enumerate(r.dependencies):
            for name, v, known in (("trigger", d.trigger, KNOWN_TRIGGERS | {0}), ("relation", d.relation, KNOWN_RELATIONS),
                                   ("delay_absence", d.delay_absence, KNOWN_ABSENCES)):
                if v not in known:
                    raise TraceFormatError(f"dependencies[{k}].{name} = {v}: no such value in unirl_replay.v1 (v1 "
                                           "readers reject unknown enum numbers)", record_id=r.request_id,
                                           file=WORKLOAD_FILE, rule="enum.unknown")
            p = index.by_id.get(d.predecessor_request_id)
            if p is None:
                raise TraceFormatError(f"predecessor {d.predecessor_request_id!r} is not in the trace",
                                       record_id=r.request_id, file=WORKLOAD_FILE, rule="dependency.unknown")
            if not r.trajectory_id or p.trajectory_id != r.trajectory_id:
                raise UnsupportedWorkloadError(
                    "dependency.cross_trajectory",
                    f"request {r.request_id!r} (trajectory {r.trajectory_id!r}) waits for "
                    f"{p.request_id!r} (trajectory {p.trajectory_id!r}); upstream dependencies stay "
                    "inside one play",
                    [r.request_id, p.request_id])
            if d.trigger == common_pb2.DEPENDENCY_TRIGGER_UNSPECIFIED:
                raise TraceFormatError("dependency trigger is unspecified", record_id=r.request_id,
                                       file=WORKLOAD_FILE, rule="dependency.trigger")
            if d.HasField("external_delay_ns"):
                if d.delay_absence != common_pb2.DELAY_ABSENCE_UNSPECIFIED:
                    raise TraceFormatError("external_delay_ns is present and delay_absence is set",
                                           record_id=r.request_id, file=WORKLOAD_FILE, rule="dependency.delay")
                if d.external_delay_ns < 0:
                    raise TraceFormatError(f"negative external_delay_ns {d.external_delay_ns}",
                                           record_id=r.request_id, file=WORKLOAD_FILE, rule="dependency.delay")
            elif d.delay_absence == common_pb2.DELAY_ABSENCE_NOT_MEASURED:
                raise UnsupportedWorkloadError(
                    "dependency.delay_not_measured",
                    f"the external wait before {r.request_id!r} (after {p.request_id!r}) happened but "
                    "was not measured; a missing wait is never replayed as 0 ms",
                    [r.request_id])
            elif d.delay_absence == common_pb2.DELAY_ABSENCE_UNSPECIFIED:
                raise TraceFormatError("external_delay_ns is absent and delay_absence gives no reason",
                                       record_id=r.request_id, file=WORKLOAD_FILE, rule="dependency.delay")

    for plan in plans.values():
        plan.none_by_construction = sum(1 for r in plan.requests for d in r.dependencies
                                        if not d.HasField("external_delay_ns")
                                        and d.delay_absence == common_pb2.DELAY_ABSENCE_NONE_BY_CONSTRUCTION)

    # -- trajectories: engine, completeness (partial resume)
    for tid, reqs in by_traj.items():
        engs = {_engine_of(r, engines) for r in reqs}
        traj = index.trajectories.get(tid)
        if traj is not None and traj.engine_id:
            engs.add(traj.engine_id)
        if len(engs) > 1:
            raise UnsupportedWorkloadError("trajectory.cross_engine",
                                           f"trajectory {tid!r} spans engines {sorted(engs)}",
                                           [r.request_id for r in reqs])
        turns = sorted(r.turn_index for r in reqs if r.HasField("turn_index"))
        if turns and (turns[0] != 0 or turns != list(range(len(turns)))):
            raise UnsupportedWorkloadError(
                "resume.partial",
                f"trajectory {tid!r} has turn indices {turns[:8]}; a trajectory resumed from (or "
                "started before) another window cannot be replayed from its middle",
                [r.request_id for r in reqs])


def scan_columns(cols, engines: Mapping[str, manifest_pb2.EngineConfig], window_policy_version: int | None,
                 plans: dict[str, EnginePlan]) -> bool:
    """:func:`scan_requests` over :class:`~unirl_replay.contract.workload_columns.WorkloadColumns`
    (the same rules in the same pass, reading columns instead of messages).

    Fills each plan's ``request_ids``, ``plays``, ``facts`` (with ``None`` for the hashes: the
    converter takes them from the columns, see ``EnginePlan.prompt_rows``), ``prompt_rows`` and
    ``first_arrival_ns``. Returns False as soon as a request may break a rule (the caller then
    reads the messages and runs :func:`check_requests`, which words the error).
    """
    from unirl_replay.contract.workload_columns import ARRIVAL_NONE, ARRIVAL_OBSERVED

    if VECTORISED and len(cols.requests) >= VECTORISED_MIN_REQUESTS:
        try:
            ok = _scan_columns_arrays(cols, engines, window_policy_version, plans)
        except (OverflowError, ValueError, TypeError):
            ok = None  # a value numpy does not hold as int64: the loop below decides
        if ok:
            return True
    row = cols.row
    counts = (cols.offsets[1:] - cols.offsets[:-1]).tolist()
    cfg = {eid: (e.block_size_tokens, e.enable_prefix_caching, plans[eid]) for eid, e in engines.items()}
    only = next(iter(engines)) if len(engines) == 1 else None
    no_absence = common_pb2.DELAY_ABSENCE_UNSPECIFIED
    by_construction = common_pb2.DELAY_ABSENCE_NONE_BY_CONSTRUCTION
    traj_engine: dict[str, str] = {}
    turns: dict[str, list[int]] = {}
    versions: set[int] = set()
    first: dict[str, int] = {}
    facts: dict[str, dict] = {eid: {} for eid in engines}
    rows: dict[str, list[int]] = {eid: [] for eid in engines}
    reqs = cols.requests
    for i, (rid, n, tid, turn, e, pv, inp, outs, kind, t, deps, pbs) in enumerate(reqs):
        eid = e or only
        c = cfg.get(eid)
        if c is None:
            return False
        bs, caching, plan = c
        if n < 1 or len(outs) != n or inp < 1:
            return False
        if kind == ARRIVAL_OBSERVED:
            if deps:
                return False
            if t < first.get(eid, t + 1):
                first[eid] = t
        elif kind == ARRIVAL_NONE or not deps:
            return False
        nh = counts[i]
        if nh:
            if pbs != bs or nh != expected_hash_count(inp, bs):
                return False
        elif caching:
            return False
        if pv is not None:
            versions.add(pv)
        if tid:
            te = traj_engine.setdefault(tid, eid)
            if te != eid:
                return False
            if turn is not None:
                ts = turns.get(tid)
                if ts is None:
                    turns[tid] = [turn]
                else:
                    ts.append(turn)
        dl = [] if deps else ()
        for pid, trigger, relation, delay, absence in deps:
            j = row.get(pid)
            if j is None or not tid or reqs[j][2] != tid or trigger not in KNOWN_TRIGGERS or \
                    relation not in KNOWN_RELATIONS:
                return False
            if delay is not None:
                if absence != no_absence or delay < 0:
                    return False
            elif absence == by_construction:
                plan.none_by_construction += 1
            else:  # not measured, no reason given, or a number DelayAbsence does not define
                return False
            dl.append((pid, reqs[j][1], trigger, relation, delay))
        facts[eid][rid] = (n, inp, outs, t, tuple(dl) if dl else (), None)
        rows[eid].append(i)
        play = plan.plays.get(tid or rid)
        if play is None:
            plan.plays[tid or rid] = [rid]
        else:
            play.append(rid)
    if not _scan_tail(versions, window_policy_version, cols.trajectories, traj_engine, turns, first, facts, plans):
        return False
    for eid in facts:
        plans[eid].request_ids = [reqs[i][0] for i in rows[eid]]
    return True


def _scan_tail(versions: set, window_policy_version: int | None, trajectories: Mapping, traj_engine: Mapping,
               turns: Mapping, first: Mapping, facts: Mapping, plans: dict[str, EnginePlan]) -> bool:
    """The window-wide end of a fast scan (messages or columns): one policy version, each trajectory on
    its own engine, turns 0..n-1; then the plans get their first arrival and facts. False = doubt (the
    caller runs the rule-by-rule checks, which word the violation)."""
    if window_policy_version is not None:
        versions.add(window_policy_version)
    if len(versions) > 1:
        return False
    if isinstance(trajectories, MessageColumns):  # the arrow reader's: the engine ids without the messages
        pos, engine = trajectories.position, trajectories.column("engine_id")
        for tid, eid in traj_engine.items():
            i = pos(tid)
            if i is not None and engine[i] and engine[i] != eid:
                return False
    else:
        for tid, eid in traj_engine.items():
            traj = trajectories.get(tid)
            if traj is not None and traj.engine_id and traj.engine_id != eid:
                return False
    for ts in turns.values():
        ts.sort()
        if ts[0] != 0 or ts[-1] != len(ts) - 1 or ts != list(range(len(ts))):
            return False
    for eid, t in first.items():
        plans[eid].first_arrival_ns = t
    for eid, f in facts.items():
        plans[eid].facts = f
    return True


VECTORISED = True
"""False: :func:`scan_columns` always runs its per-request loop (tests compare the two)."""
VECTORISED_MIN_REQUESTS = 256
"""Below this many requests the loop is cheaper than the arrays' set-up."""
_EXACT_FLOAT_INT = 1 << 53  # input_tokens / block_size as Python's float division gives it, for ints below


def _scan_columns_arrays(cols, engines: Mapping[str, manifest_pb2.EngineConfig], window_policy_version: int | None,
                         plans: dict[str, EnginePlan]) -> bool | None:
    """:func:`scan_columns`'s per-request loop as array operations, for the workloads whose requests
    all go to one engine: True (the plans filled exactly as the loop fills them: ``facts``,
    ``request_ids``, ``plays``, ``none_by_construction``, ``first_arrival_ns``), or None when it is
    not sure (nothing in the plans touched; the loop then decides and words nothing itself)."""
    import operator
    from itertools import chain, repeat

    import numpy as np

    from unirl_replay.contract.workload_columns import ARRIVAL_AFTER_DEPENDENCIES, ARRIVAL_OBSERVED

    reqs = cols.requests
    n = len(reqs)
    by_field, cols.by_field = cols.by_field, None  # the gate's fast pass transposed them already
    if by_field is None or len(by_field) != 12 or len(by_field[0]) != n:
        by_field = tuple(zip(*reqs))
    rid, ns, tid, turn, eids, pv, inp, outs, kind, t, deps, pbs = by_field
    used = set(eids)
    only = next(iter(engines)) if len(engines) == 1 else None
    if "" in used:
        if only is None:
            return None
        used.discard("")
        used.add(only)
    if len(used) != 1:
        return None  # several engines (or none known): the loop splits them
    eid = next(iter(used))
    cfg = engines.get(eid)
    if cfg is None:
        return None
    bs, caching = cfg.block_size_tokens, cfg.enable_prefix_caching
    ra = cols.arrays  # the arrow reader's arrays of the same values (None: made here from the tuples)
    if ra is not None and len(ra.num_samples) != n:
        ra = None
    if ra is not None:
        ns_a, inp_a, dlen, kind_a, out_n = ra.num_samples, ra.input_tokens, ra.dep_counts, ra.arrival_kinds, ra.out_counts
    else:
        ns_a = np.fromiter(ns, np.int64, n)
        inp_a = np.fromiter(inp, np.int64, n)
        dlen = np.fromiter(map(len, deps), np.int64, n)
        kind_a = np.fromiter(kind, np.int64, n)
        out_n = np.fromiter(map(len, outs), np.int64, n)
    # n >= 1, one output length per sample, input_tokens >= 1
    if ns_a.min() < 1 or inp_a.min() < 1 or not np.array_equal(out_n, ns_a):
        return None
    # an observed arrival without dependencies, or after dependencies with some (never none)
    observed = kind_a == ARRIVAL_OBSERVED
    if not ((observed & (dlen == 0)) | ((kind_a == ARRIVAL_AFTER_DEPENDENCIES) & (dlen > 0))).all():
        return None
    # prefix hashes: the engine's block size and ceil(input / block size) of them; none only without caching
    counts = np.diff(cols.offsets)
    if len(counts) != n:
        return None
    has = counts > 0
    if has.any():
        if bs <= 0 or inp_a.max() >= _EXACT_FLOAT_INT:
            return None
        if not ((ra.block_sizes if ra is not None else np.fromiter(pbs, np.int64, n))[has] == bs).all():
            return None
        if not np.array_equal(np.ceil(inp_a[has] / float(bs)), counts[has].astype(np.float64)):
            return None  # = expected_hash_count (math.ceil of the float quotient; exact below 2^53)
    if caching and not has.all():
        return None
    versions = set(pv)
    versions.discard(None)
    # trajectories: one engine (here: the only one); turn indices 0..k-1 per trajectory
    if ra is not None:
        tmap = {"": 0, **dict(zip(ra.traj_names, range(1, len(ra.traj_names) + 1)))}
        to = ra.traj_ord
        has_turn = ra.turn_set & (to > 0)
    else:
        tmap: dict[str, int] = {"": 0}
        tsd = tmap.setdefault
        to = np.fromiter([tsd(x, len(tmap)) for x in tid], np.int64, n)  # 0: no trajectory
        has_turn = np.fromiter(map(operator.is_not, turn, repeat(None)), np.bool_, n) & (to > 0)
    if has_turn.any():
        tt = ra.turn[has_turn] if ra is not None else np.fromiter([u for u, h in zip(turn, has_turn.tolist()) if h],
                                                                np.int64)
        tr = to[has_turn]
        order = np.lexsort((tt, tr))
        tr, tt = tr[order], tt[order]
        start = np.flatnonzero(np.concatenate(([True], tr[1:] != tr[:-1])))
        pos = np.arange(len(tr)) - np.repeat(start, np.diff(np.append(start, len(tr))))
        if not np.array_equal(tt, pos):
            return None
    del tmap[""]
    # dependencies: on a request of the same (non-empty) trajectory; a trigger; a measured delay >= 0
    # with no absence reason, or none by construction (counted), never absent unexplained
    flat = list(chain.from_iterable(deps))
    nbc = 0
    if flat:
        preds, trig, rel, delay, absence = zip(*flat)
        nd = len(flat)
        if ra is not None and len(ra.dep_pred) != nd:
            return None
        if ra is not None:
            j = ra.dep_pred
        else:
            row = cols.row
            j = np.fromiter(map(row.get, preds, repeat(-1)), np.int64, nd)
        if (j < 0).any():
            return None
        owner = np.repeat(np.arange(n), dlen)
        if not ((to[owner] > 0).all() and np.array_equal(to[j], to[owner])):
            return None
        if not (ra.dep_trigger if ra is not None else np.fromiter(trig, np.int64, nd)).all():  # UNSPECIFIED = 0
            return None
        if ra is not None:
            measured, ab = ra.dep_delay_set, ra.dep_absence
        else:
            measured = np.fromiter(map(operator.is_not, delay, repeat(None)), np.bool_, nd)
            ab = np.fromiter(absence, np.int64, nd)
        if measured.any():
            dv = (ra.dep_delay[measured] if ra is not None else
                  np.fromiter([d for d, m in zip(delay, measured.tolist()) if m], np.int64))
            if (dv < 0).any() or (ab[measured] != common_pb2.DELAY_ABSENCE_UNSPECIFIED).any():
                return None
        ua = ab[~measured]
        if (ua != common_pb2.DELAY_ABSENCE_NONE_BY_CONSTRUCTION).any():  # not measured, no reason, or unknown
            return None
        if not (np.isin(np.fromiter(trig, np.int64, nd), list(KNOWN_TRIGGERS)).all()
                and np.isin(np.fromiter(rel, np.int64, nd), list(KNOWN_RELATIONS)).all()):
            return None  # a number the enums do not define: the loop decides (check_requests words it)
        nbc = int((ua == common_pb2.DELAY_ABSENCE_NONE_BY_CONSTRUCTION).sum())
        fdeps = tuples_by_lengths(list(zip(preds, ns_a[j].tolist() if ra is not None else map(ns.__getitem__, j.tolist()),
                                           trig, rel, delay)), dlen)
    else:
        fdeps = deps
    if not observed.any():
        first = {}
    elif ra is not None:
        first = {eid: int(ra.observed[observed].min())}
    else:
        first = {eid: min([x for x, o in zip(t, observed.tolist()) if o])}
    facts = {e: {} for e in engines}
    facts[eid] = dict(zip(rid, zip(ns, inp, outs, t, fdeps, repeat(None))))
    if len(facts[eid]) != n:
        return None  # a duplicate id (the column reader declines those): the loop decides
    if not _scan_tail(versions, window_policy_version, cols.trajectories, dict.fromkeys(tmap, eid), {}, first, facts,
                      plans):
        return None
    plan = plans[eid]
    plays = plan.plays
    if not plays and (to > 0).all():  # every request in a trajectory: plays = trajectories, first-seen order
        order = np.argsort(to, kind="stable")  # grouped by trajectory ordinal (1, 2, ...), workload order within
        ids = list(map(rid.__getitem__, order.tolist()))
        ends = np.cumsum(np.bincount(to, minlength=len(tmap) + 1)[1:]).tolist()
        plays.update(zip(tmap, (ids[a:b] for a, b in zip([0, *ends[:-1]], ends))))
    else:
        sd = plays.setdefault
        for p, r in zip([a or b for a, b in zip(tid, rid)], rid):
            sd(p, []).append(r)
    plan.none_by_construction += nbc
    for e in facts:
        plans[e].request_ids = list(rid) if e == eid else []
    if ra is not None:
        plan.array_facts = plan.facts  # made from the arrays: the row writer may read them instead
    return True
