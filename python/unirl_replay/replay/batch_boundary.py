"""Closed-loop rollout-batch boundaries (``RolloutBatch.after_batch``) as upstream dependencies.

A GRPO driver that calls ``rollout.generate`` batch after batch submits batch B only when the previous
batch P is ready. The capture records that as ``RolloutBatch.after_batch`` (``BatchBoundary``:
``previous_rollout_batch_id``, ``driver_gap_ns`` = the driver's measured time from P's ready event to
B's first submit). Replayed open loop (B's roots at their observed submits), a simulated P that runs
longer than the real one overlaps B, which the run never did, and a small level error on P becomes a
large readiness error (results/holdout-1engine/README.md). This module expresses the boundary with
what Dynamo Replay 1.6.1 already has, so upstream schedules it; nothing here simulates anything.

Encoding (upstream ``agentic_mooncake``: arrival = max over dependencies of (predecessor event +
``delay_ms``); dependencies stay inside one play; ``trigger: dispatch`` is the predecessor's arrival):

* the **anchor**, B's first root (earliest observed submit, workload order on ties; B's roots are those of its
  requests, :func:`batch_requests`: a request of B in no group is one too), gets one
  ``completion`` / ``join`` dependency on every sample of every request of P, ``delay_ms`` =
  ``driver_gap_ns`` / 1e6: it arrives at P's simulated completion (the last sequence's last token)
  plus the measured driver gap;
* every other root of B gets one ``dispatch`` / ``spawn`` dependency on the anchor's samples, delay =
  its observed submit minus the anchor's (the driver's own submit spacing, already in the workload);
* B's dependents are unchanged (they wait for their own predecessors);
* the plays of P's and B's requests become one play (the first one's id, at its place in the file), with every
  play lying between them in the file, so the file order (the tie-break of same-instant arrivals) stays the
  trace's: without trajectory lanes a play only scopes dependencies.

Linear in the two batches' sizes (|P| + |B| dependency entries per sample), not |P| x |B|. The gap
does not hold P's return path (last token -> the driver's ``rollout.generate`` return): it is client
path, unmodelled, as everywhere in the replay.

Expressible only where one upstream replay holds both batches without lanes and "ready" is "all done":
both batches on one engine (each engine is its own replay: a boundary across engines is a dependency
between replays), the engine not in lanes mode (a play there is a trajectory holding a lane), P's
readiness rule ``ALL_GROUPS`` (a join waits for all; ``FIRST_N_GROUPS`` is "any n of m"), the
``agentic_mooncake`` format (``mooncake`` replays observed arrivals only), both batches with requests, P with
group members its readiness waits for.
Anything else raises ``batch_boundary.unexpressible`` unless the user names the opt-in
``batch_boundary.open_loop``: B's roots then replay at their observed submits, recorded as an
``UnmodelledConstraint`` (reports label the comparison UNMODELLED).

Pure: reads the workload index and the plans (never outcomes) and edits only the plans' ``facts``,
``plays`` and ``play_order``; the three row writers of :mod:`~.convert.agentic_mooncake` read those.
"""

from __future__ import annotations

from collections.abc import Mapping

from unirl_replay.contract.errors import TraceFormatError, UnsupportedWorkloadError
from unirl_replay.replay.workload import WORKLOAD_FILE, EnginePlan, WorkloadIndex, plan_facts
from unirl_replay.v1 import common_pb2, replay_pb2, workload_pb2

RULE = "batch_boundary.unexpressible"
OPEN_LOOP = "batch_boundary.open_loop"

_JOIN = (common_pb2.DEPENDENCY_TRIGGER_COMPLETION, common_pb2.DEPENDENCY_RELATION_JOIN)
_SPACED = (common_pb2.DEPENDENCY_TRIGGER_DISPATCH, common_pb2.DEPENDENCY_RELATION_SPAWN)


def boundaries(index: WorkloadIndex) -> list[tuple[str, workload_pb2.BatchBoundary]]:
    """(batch id, its ``after_batch``) of every batch that records one, workload order."""
    return [(bid, b.after_batch) for bid, b in index.batches.items() if b.HasField("after_batch")]


def apply(index: WorkloadIndex, plans: Mapping[str, EnginePlan], *, trace_format: str,
          allow: frozenset[str]) -> list[str]:
    """Express every ``RolloutBatch.after_batch`` of ``index`` in ``plans`` (module docstring).

    ``index`` may be read as columns (its batches and groups are messages either way). Edits ``plans`` in place
    (their ``facts`` become their own copies); returns readable notes, one per boundary.

    Raises:
        TraceFormatError: ``batch.boundary_unknown`` (the previous batch is not in the trace),
            ``batch.boundary_self`` or ``batch.boundary_cycle`` (``validate`` refuses these first; reachable on
            an ungated trace).
        UnsupportedWorkloadError: ``batch_boundary.unexpressible`` for a boundary upstream cannot hold,
            unless ``allow`` names ``batch_boundary.open_loop``.
    """
    found = boundaries(index)
    if not found:
        return []
    for bid, ab in found:
        prev = ab.previous_rollout_batch_id
        if prev == bid:
            raise TraceFormatError(f"rollout batch {bid!r} names itself as the batch it waited for",
                                   record_id=bid, file=WORKLOAD_FILE, rule="batch.boundary_self")
        if prev not in index.batches:
            raise TraceFormatError(f"after_batch names rollout batch {prev!r}, which the trace does not hold",
                                   record_id=bid, file=WORKLOAD_FILE, rule="batch.boundary_unknown")
    _check_acyclic(found)
    engine_of = {rid: eid for eid, p in plans.items() for rid in p.ids()}
    facts: dict[str, tuple] = {}
    for p in plans.values():
        p.facts = dict(plan_facts(p, index.by_id))
        facts.update(p.facts)
    members = batch_requests(index, {b for bid, ab in found for b in (bid, ab.previous_rollout_batch_id)}, facts)
    notes: list[str] = []
    edits: dict[str, list[tuple[str, str, int]]] = {}  # engine -> (batch, previous batch, gap ns)
    for bid, ab in found:
        prev = ab.previous_rollout_batch_id
        why, eid = _unexpressible(bid, prev, index, plans, members, engine_of, trace_format)
        if why is None:
            edits.setdefault(eid, []).append((bid, prev, ab.driver_gap_ns))
            continue
        what = f"rollout batch {bid!r} waited for {prev!r} in the run (RolloutBatch.after_batch), but {why}"
        if OPEN_LOOP not in allow:
            raise UnsupportedWorkloadError(
                RULE, f"{what}. To replay it anyway OPEN LOOP (its roots at their observed submits, whatever the "
                f"simulated {prev!r} does), pass --allow-unmodelled {OPEN_LOOP} (replay_workload(..., unmodelled=("
                f"{OPEN_LOOP!r},))): the result records the dropped boundary and reports label it UNMODELLED",
                [bid, prev])
        first = min((engine_of[q] for q in members[bid][1] if q in engine_of), default=next(iter(plans), None))
        if first is not None:
            how = ("its trajectories start when the engine's lanes free (lanes mode does not use root arrivals)"
                   if plans[first].lanes is not None else "its roots arrive at their observed submits")
            plans[first].unmodelled.append(replay_pb2.UnmodelledConstraint(
                rule=RULE, record_ids=[bid],
                reason=f"{what}; replayed OPEN LOOP (explicit opt-in {OPEN_LOOP}): {how}, so the simulated "
                f"{prev!r} may overlap it where the run kept them apart"))
        notes.append(f"UNMODELLED {RULE}: rollout batch {bid!r} replayed open loop after {prev!r} ({why})")
    for eid, todo in edits.items():
        notes.extend(_express(plans[eid], members, todo))
    return notes


def batch_requests(index: WorkloadIndex, batch_ids, facts: Mapping[str, tuple]) -> dict[str, tuple[list[str], list[str]]]:
    """batch id -> (the requests its readiness waits for, every request of it), each in workload order.

    Readiness is what :mod:`~unirl_replay.replay.derive` derives it from: the members of the batch's groups
    (request ids of a GROUP_UNIT_SAMPLES group; every request of a GROUP_UNIT_TRAJECTORIES member trajectory).
    Every request of the batch: those, the requests whose ``rollout_batch_id`` is the batch but which are in no
    group (readiness does not wait for them, but the driver submitted them in the batch: ``outcome.batch_boundary``
    holds every request of a batch with ``after_batch`` to the previous one's ready), and, through ``facts``
    (``EnginePlan.facts``), every request they wait for (the intermediate requests of a multi-level lineage, which
    are no group's members). Ids the workload does not hold are left out (``validate`` names them).

    Raises:
        ColumnsDeclined: ``index`` is read as columns without the requests' batch ids (``GateFacts``) and some
            request is in no group: the caller reads the messages (the batch of such a request decides)."""
    pos = {rid: k for k, rid in enumerate(index.request_ids())}
    by_traj: dict[str, list[str]] | None = None
    grouped = _ungrouped_by_batch(index, set(batch_ids))
    out = {}
    for bid in batch_ids:
        ready: set[str] = set()
        for gid in index.batches[bid].group_ids:
            g = index.groups.get(gid)
            if g is None:
                continue
            if g.unit == workload_pb2.GROUP_UNIT_TRAJECTORIES:
                if by_traj is None:
                    by_traj = {}
                    for rid, tid in zip(index.request_ids(), index.trajectory_of()):
                        if tid:
                            by_traj.setdefault(tid, []).append(rid)
                for tid in g.member_ids:
                    ready.update(by_traj.get(tid, ()))
            else:
                ready.update(m for m in g.member_ids if m in pos)
        every = ready.union(grouped.get(bid, ()))
        stack = list(every)
        while stack:
            for d in facts[stack.pop()][4]:
                if d[0] not in every and d[0] in facts:
                    every.add(d[0])
                    stack.append(d[0])
        out[bid] = (sorted(ready, key=pos.__getitem__), sorted(every, key=pos.__getitem__))
    return out


def _ungrouped_by_batch(index: WorkloadIndex, batch_ids: set[str]) -> dict[str, list[str]]:
    """batch id (of ``batch_ids``) -> the requests with that ``rollout_batch_id`` (every one: the group members among
    them are the batch's readiness anyway), workload order."""
    if index.columns is None:
        out: dict[str, list[str]] = {}
        for r in index.requests:
            if r.rollout_batch_id in batch_ids:
                out.setdefault(r.rollout_batch_id, []).append(r.request_id)
        return out
    ids = index.request_ids()
    gf = getattr(index.columns, "facts", None)
    if gf is not None and gf.count("batch_ids") == len(ids):
        out = {}
        for rid, b in zip(ids, gf.values("batch_ids")):
            if b in batch_ids:
                out.setdefault(b, []).append(rid)
        return out
    # no batch id per request: enough when every request is in a group (a group's members are in its batch)
    members: set[str] = set()
    by_traj: set[str] = set()
    for g in index.groups.values():
        (by_traj if g.unit == workload_pb2.GROUP_UNIT_TRAJECTORIES else members).update(g.member_ids)
    if any(rid not in members and tid not in by_traj for rid, tid in zip(ids, index.trajectory_of())):
        from unirl_replay.replay.support import ColumnsDeclined  # support imports this module

        raise ColumnsDeclined("rollout_batch_id")
    return {}


def _check_acyclic(found: list[tuple[str, workload_pb2.BatchBoundary]]) -> None:
    """Raise ``batch.boundary_cycle`` when following ``after_batch`` links comes back to a batch."""
    after = {bid: ab.previous_rollout_batch_id for bid, ab in found}
    done: set[str] = set()
    for start in after:
        seen, b = [], start
        while b in after and b not in done:
            if b in seen:
                loop = seen[seen.index(b):]
                raise TraceFormatError(f"after_batch links form a cycle: {' -> '.join([*loop, b])} (each batch waits "
                                       "for the next)", record_id=b, file=WORKLOAD_FILE, rule="batch.boundary_cycle")
            seen.append(b)
            b = after[b]
        done.update(seen)


def _unexpressible(bid: str, prev: str, index: WorkloadIndex, plans: Mapping[str, EnginePlan],
                   members: Mapping[str, tuple[list[str], list[str]]], engine_of: Mapping[str, str],
                   trace_format: str) -> tuple[str | None, str]:
    """(why upstream cannot hold the boundary ``prev`` -> ``bid``, or None; the engine when it can)."""
    if trace_format != "agentic_mooncake":
        return f"the {trace_format} format replays observed arrivals only (use agentic_mooncake)", ""
    mine, theirs = members[bid][1], members[prev][1]
    if not mine or not theirs:
        empty = bid if not mine else prev
        return f"rollout batch {empty!r} has no requests in the window", ""
    if not members[prev][0]:  # ALL_GROUPS over no group's member: derive gives the batch no ready event
        return (f"rollout batch {prev!r} has no group member requests its readiness waits for (no group, or groups "
                "without requests), so it has no simulated ready event for a join to wait for"), ""
    engines = sorted({engine_of[q] for q in (*mine, *theirs) if q in engine_of})
    if len(engines) != 1:
        return (f"the two batches run on engines {', '.join(engines)}: each engine is its own single-engine replay "
                "and an upstream dependency cannot cross replays"), ""
    eid = engines[0]
    if plans[eid].lanes is not None:
        return (f"engine {eid!r} replays trajectory lanes (agentic_lanes={plans[eid].lanes}): a play is a "
                "trajectory holding a lane, and an upstream dependency cannot cross plays"), ""
    rule = index.batches[prev].readiness_rule
    if rule != workload_pb2.BATCH_READINESS_RULE_ALL_GROUPS:
        return (f"{prev!r} is ready by {workload_pb2.BatchReadinessRule.Name(rule)}, and an upstream join waits "
                "for all of its predecessors (ALL_GROUPS only)"), ""
    return None, eid


def _express(plan: EnginePlan, members: Mapping[str, tuple[list[str], list[str]]],
             todo: list[tuple[str, str, int]]) -> list[str]:
    """Rewrite ``plan`` for its boundaries ``todo`` ((batch, previous batch, gap ns)); the notes."""
    facts = plan.facts
    play_of = {rid: play for play, rids in plan.plays.items() for rid in rids}
    parent: dict[str, str] = {}  # union-find over play ids

    def find(p: str) -> str:
        while parent.get(p, p) != p:
            p = parent[p]
        return p

    notes = []
    for bid, prev, gap_ns in todo:
        roots = sorted((facts[q][3], k, q) for k, q in enumerate(members[bid][1])
                       if not facts[q][4] and facts[q][3] is not None)
        before = members[prev][0]  # what its readiness waits for
        for q in (*members[prev][1], *members[bid][1]):
            a, b = find(play_of[q]), find(play_of[before[0]])
            if a != b:
                parent[a] = b
        if not roots:  # every request waits for another of its own batch: nothing arrives on its own
            notes.append(f"rollout batch {bid!r}: no request of it arrives on its own, so its boundary after "
                         f"{prev!r} binds nothing")
            continue
        t0, _, anchor = roots[0]
        f = facts[anchor]
        facts[anchor] = (*f[:4], tuple((p, facts[p][0], *_JOIN, gap_ns) for p in before), f[5])
        n0 = f[0]
        for t, _, q in roots[1:]:
            g = facts[q]
            facts[q] = (*g[:4], ((anchor, n0, *_SPACED, t - t0),), g[5])
        notes.append(f"engine {plan.engine.engine_id!r}: rollout batch {bid!r} replayed CLOSED LOOP after {prev!r} "
                     f"(RolloutBatch.after_batch): its first request {anchor!r} arrives {gap_ns / 1e6:.3f} ms (the "
                     f"measured driver gap) after the simulated completion of {prev!r}'s {len(before)} requests, "
                     f"its other {len(roots) - 1} roots at their observed spacing after it")
    # A merged play spans every play from its first member to its last in file order, so the file order (which
    # breaks ties between same-instant arrivals, docs/replay-mapping.md) stays the trace's; without lanes a play
    # only scopes dependencies, so taking the plays in between changes nothing else.
    pos = {play: k for k, play in enumerate(plan.play_order)}
    last: dict[str, int] = {}
    for play in plan.play_order:
        h = find(play)
        last[h] = max(last.get(h, -1), pos[play])
    plays: dict[str, list[str]] = {}
    order: list[str] = []
    end = -1
    for k, play in enumerate(plan.play_order):
        if k > end:  # a new play: this one, up to the last member of every merged play it reaches
            order.append(play)  # the merged play keeps its first member's id and place
            plays[play] = []
        end = max(end, last[find(play)])
        plays[order[-1]].extend(plan.plays[play])
    plan.plays, plan.play_order = plays, order
    return notes
