"""The predictor's view of a trace's workload: records indexed by kind, and per-engine plans.

Pure data over the generated messages (``unirl_replay.v1.workload_pb2``): :class:`WorkloadIndex`
groups the workload records of one trace by kind (the messages themselves, no copies or parallel
record classes); :class:`EnginePlan` is what one single-engine replay contains, filled by
:func:`unirl_replay.replay.support.check_supported`. Nothing here reads measured outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.v1 import manifest_pb2, replay_pb2, workload_pb2

WORKLOAD_FILE = "workload"


@dataclass
class WorkloadIndex:
    """The workload records of one trace grouped by kind, in workload order.

    Holds the generated messages themselves (``workload_pb2.*``); it is an index, not a record
    type. ``requests`` keeps workload order, which is the order of every per-request output.
    """

    requests: list[workload_pb2.Request] = field(default_factory=list)
    by_id: dict[str, workload_pb2.Request] = field(default_factory=dict)
    trajectories: dict[str, workload_pb2.Trajectory] = field(default_factory=dict)
    groups: dict[str, workload_pb2.Group] = field(default_factory=dict)
    batches: dict[str, workload_pb2.RolloutBatch] = field(default_factory=dict)
    slot_pools: dict[str, workload_pb2.SlotPool] = field(default_factory=dict)
    engine_clients: dict[str, workload_pb2.EngineClient] = field(default_factory=dict)
    warmups: list[workload_pb2.CacheWarmup] = field(default_factory=list)

    @classmethod
    def from_records(cls, records: Iterable[workload_pb2.WorkloadRecord]) -> "WorkloadIndex":
        """Group ``WorkloadRecord`` messages by kind.

        Raises:
            TraceFormatError: duplicate ids (rule ``<kind>.duplicate_id``) or an empty record.
        """
        idx = cls()
        by_id, append = idx.by_id, idx.requests.append
        for rec in records:
            kind = rec.WhichOneof("record")
            if kind == "request":
                r = rec.request
                rid = r.request_id
                if rid in by_id:
                    raise TraceFormatError("duplicate request_id", record_id=rid,
                                           file=WORKLOAD_FILE, rule="request.duplicate_id")
                by_id[rid] = r
                append(r)
            elif kind == "trajectory":
                _put(idx.trajectories, rec.trajectory.trajectory_id, rec.trajectory, "trajectory")
            elif kind == "group":
                _put(idx.groups, rec.group.group_id, rec.group, "group")
            elif kind == "rollout_batch":
                _put(idx.batches, rec.rollout_batch.rollout_batch_id, rec.rollout_batch, "rollout_batch")
            elif kind == "slot_pool":
                _put(idx.slot_pools, rec.slot_pool.pool_id, rec.slot_pool, "slot_pool")
            elif kind == "engine_client":
                _put(idx.engine_clients, rec.engine_client.engine_id, rec.engine_client, "engine_client")
            elif kind == "cache_warmup":
                idx.warmups.append(rec.cache_warmup)
            else:
                raise TraceFormatError("empty WorkloadRecord (no record kind set)",
                                       file=WORKLOAD_FILE, rule="record.empty")
        return idx


def _put(d: dict, key: str, msg, kind: str) -> None:
    if key in d:
        raise TraceFormatError(f"duplicate {kind} id", record_id=key, file=WORKLOAD_FILE,
                               rule=f"{kind}.duplicate_id")
    d[key] = msg


@dataclass
class EnginePlan:
    """What one single-engine replay contains.

    Attributes:
        engine: the engine's settings (from the manifest).
        requests: its requests, workload order.
        plays: play id -> request ids in workload order. A play is a trajectory, or one
            open-loop request (play id = request id).
        play_order: play ids in upstream file order (``Trajectory.start_order`` in lanes mode,
            else order of first appearance in the workload).
        lanes: ``SlotPool.trajectory_slots`` of the engine's pool, or None (unlimited).
        warmups: its ``CacheWarmup`` records.
        unmodelled: constraints of this engine explicitly dropped (``unmodelled=`` opt-in).
        none_by_construction: its dependencies with DELAY_ABSENCE_NONE_BY_CONSTRUCTION (replayed
            with 0 ms).
        first_arrival_ns: earliest observed arrival of its requests when the checks saw it (the
            converters' time origin); None means compute it (``common.origin_of``).
        facts: request id -> what the converters read of it, read once by the checks:
            ``(num_samples, input_tokens, output_tokens tuple, observed_offset_ns or None,
            dependencies, block_hashes or None)`` with ``dependencies`` a tuple of
            ``(predecessor_request_id, predecessor num_samples, trigger, relation,
            external_delay_ns or None)``. None when the checks took the rule-by-rule path (the
            converters then read the messages).
    """

    engine: manifest_pb2.EngineConfig
    requests: list[workload_pb2.Request] = field(default_factory=list)
    plays: dict[str, list[str]] = field(default_factory=dict)
    play_order: list[str] = field(default_factory=list)
    lanes: int | None = None
    warmups: list[workload_pb2.CacheWarmup] = field(default_factory=list)
    unmodelled: list[replay_pb2.UnmodelledConstraint] = field(default_factory=list)
    none_by_construction: int = 0
    first_arrival_ns: int | None = None
    facts: dict[str, tuple] | None = None


def play_id_of(req: workload_pb2.Request) -> str:
    """Upstream play id: the trajectory id, or the request id for open-loop work."""
    return req.trajectory_id or req.request_id


def expected_hash_count(input_tokens: int, block_size: int) -> int:
    """ceil(input_tokens / block_size): the number of prefix hashes a prompt must carry."""
    return math.ceil(input_tokens / block_size) if block_size > 0 else 0


def request_facts(r: workload_pb2.Request) -> tuple:
    """The ``EnginePlan.facts`` entry of one (checked) request, read from the message (the
    converters' fallback when the checks did not record facts)."""
    deps = tuple((d.predecessor_request_id, 0, d.trigger, d.relation,
                  d.external_delay_ns if d.HasField("external_delay_ns") else None) for d in r.dependencies)
    t = r.arrival.observed_offset_ns if r.arrival.WhichOneof("kind") == "observed_offset_ns" else None
    return (r.num_samples, r.input_tokens, tuple(r.output_tokens), t, deps, r.prefix.block_hashes or None)


def plan_facts(plan: EnginePlan, by_id: Mapping[str, workload_pb2.Request]) -> dict[str, tuple]:
    """``plan.facts``, or the same read from the messages when the checks did not record them."""
    if plan.facts is not None:
        return plan.facts
    out = {}
    for r in plan.requests:
        f = request_facts(r)
        deps = tuple((d[0], by_id[d[0]].num_samples, *d[2:]) for d in f[4])
        out[r.request_id] = (*f[:4], deps, f[5])
    return out
