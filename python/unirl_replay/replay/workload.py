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
    columns: object | None = None

    @classmethod
    def from_columns(cls, cols) -> "WorkloadIndex":
        """The index of a trace read as columns
        (:class:`~unirl_replay.contract.workload_columns.WorkloadColumns`): the non-request
        records are the messages; ``requests`` and ``by_id`` stay EMPTY (no Request message is
        kept) and the per-request facts are read through :meth:`request_ids`,
        :meth:`num_samples`, :meth:`has_request` and ``columns``."""
        return cls(trajectories=cols.trajectories, groups=cols.groups, batches=cols.batches,
                   slot_pools=cols.slot_pools, engine_clients=cols.engine_clients, warmups=cols.warmups,
                   columns=cols)

    def request_ids(self) -> list[str]:
        """Every request id, workload order."""
        if self.columns is not None:
            return self.columns.request_ids
        return [r.request_id for r in self.requests]

    def num_samples(self) -> Mapping[str, int]:
        """request id -> ``num_samples`` (a mapping: ``get``, ``[]``, ``in``)."""
        if self.columns is not None:
            return _Column(self.columns.row, self.columns.num_samples)
        return _Column(self.by_id, None)

    def trajectory_of(self) -> list[str]:
        """``Request.trajectory_id`` of every request, workload order."""
        if self.columns is not None:
            return self.columns.trajectory_ids
        return [r.trajectory_id for r in self.requests]

    def has_request(self, request_id: str) -> bool:
        return request_id in (self.columns.row if self.columns is not None else self.by_id)

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


class _Column(Mapping):
    """request id -> one per-request value: ``values[rows[id]]`` (columns), or
    ``rows[id].num_samples`` when ``values`` is None (messages)."""

    __slots__ = ("_rows", "_values")

    def __init__(self, rows: Mapping, values: list | None) -> None:
        self._rows, self._values = rows, values

    def __getitem__(self, key: str):
        r = self._rows[key]
        return r.num_samples if self._values is None else self._values[r]

    def get(self, key: str, default=None):
        r = self._rows.get(key)
        if r is None:
            return default
        return r.num_samples if self._values is None else self._values[r]

    def __contains__(self, key) -> bool:
        return key in self._rows

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


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
            converters then read the messages). Made from columns, ``block_hashes`` is None and
            the hashes are in ``columns``.
        request_ids: made from columns (``requests`` then stays empty): its request ids in
            workload order; else None.
        columns: the :class:`~unirl_replay.contract.workload_columns.WorkloadColumns` the plan
            was made from (its hash keys), or None.
        array_facts: the ``facts`` dict the support scan made from ``columns.arrays`` (the arrow
            reader's :class:`~unirl_replay.contract.workload_columns.RequestArrays`), or None. While
            ``facts`` is this very dict (nothing replaced it), the row writer reads the same values
            from the arrays.
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
    request_ids: list[str] | None = None
    columns: object | None = None
    array_facts: dict | None = None

    def ids(self) -> list[str]:
        """Its request ids, workload order (``request_ids`` when the plan was made from
        columns, else those of ``requests``)."""
        return self.request_ids if self.request_ids is not None else [r.request_id for r in self.requests]


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
