"""Column reader of a trace's workload: per-request facts as columns, prefix hashes as one array.

:func:`read_columns` reads the workload of an opened :class:`~unirl_replay.contract.trace_io.Trace`
once and keeps, per ``Request``, only the facts the replay adapter reads (ids, sample count,
trajectory, turn, engine, policy version, lengths, arrival, dependencies, hash block size), in
workload order, and every request's prefix block hashes copied into one ``uint64`` array with
offsets. No ``Request`` message is kept (about 5 KiB each as parsed upb messages, arena
included); the other record kinds (trajectories, groups, batches, pools, clients, warm-ups: few)
stay messages.

The records are the ordinary parsed messages (``Trace.iter_workload``: the same parser, framing
checks and record count), so every fact is the message's by construction. It is a fast path with
an exact fallback: whenever the reader meets anything it does not take (a record that does not
parse, a framing or count problem, a duplicate id, an empty record, a trace from a newer contract
revision or opened to inspect unknown fields, a JSONL workload), it returns None and the caller
reads the trace the ordinary way, which raises the usual typed error or gives the messages. So
errors and their wording are always the message path's.

(Measured and dropped: decoding the packed ``block_hashes`` varints from the binpb wire with numpy
through a wire view of the message. On this machine the vectorised decode cost ~180 ns per hash,
more than upb's per-element copy into numpy, ~125 ns.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from unirl_replay.contract.errors import IncompleteTraceError, TraceFormatError
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD, ENCODING_BINPB

__all__ = ["WorkloadColumns", "read_columns", "FIELDS"]

ARRIVAL_NONE, ARRIVAL_OBSERVED, ARRIVAL_AFTER_DEPENDENCIES = 0, 1, 2
FIELDS = ("request_ids", "num_samples", "trajectory_ids", "turn_indices", "engine_ids", "policy_versions",
          "input_tokens", "output_tokens", "arrival_kinds", "observed_ns", "dependencies", "block_sizes")
"""The per-request fields of :class:`WorkloadColumns`, in the order of each request's tuple."""


@dataclass
class WorkloadColumns:
    """One trace's workload as columns (requests, workload order) plus the other records.

    ``requests[i]`` is request i's tuple, fields in :data:`FIELDS` order; each field also reads
    as a column (``request_ids``, ``num_samples``, ...). Per request ``i``: ``request_ids[i]``, ``num_samples[i]``, ``trajectory_ids[i]``,
    ``turn_indices[i]`` (None when absent), ``engine_ids[i]``, ``policy_versions[i]`` (None when
    absent), ``input_tokens[i]``, ``output_tokens[i]`` (tuple), ``arrival_kinds[i]``
    (``ARRIVAL_*``), ``observed_ns[i]`` (the observed offset, else None), ``dependencies[i]``
    (tuple of ``(predecessor_request_id, trigger, relation, external_delay_ns or None,
    delay_absence)``), ``block_sizes[i]`` (``prefix.block_size_tokens``), its prefix
    block hashes ``keys[offsets[i]:offsets[i + 1]]`` (none: no hashes). ``row`` maps a request id to ``i``.
    """

    requests: list[tuple] = field(default_factory=list)  # one tuple per request, fields in FIELDS order
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    row: dict[str, int] = field(default_factory=dict)
    trajectories: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    batches: dict = field(default_factory=dict)
    slot_pools: dict = field(default_factory=dict)
    engine_clients: dict = field(default_factory=dict)
    warmups: list = field(default_factory=list)
    _ids: list | None = field(default=None, repr=False)
    _samples: list | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.requests)

    def column(self, name: str) -> list:
        """One per-request field (a name of :data:`FIELDS`), workload order."""
        k = FIELDS.index(name)
        return [r[k] for r in self.requests]

    @property
    def request_ids(self) -> list[str]:
        if self._ids is None:
            self._ids = [r[0] for r in self.requests]
        return self._ids

    @property
    def num_samples(self) -> list[int]:
        if self._samples is None:
            self._samples = [r[1] for r in self.requests]
        return self._samples

    @property
    def trajectory_ids(self) -> list[str]:
        return [r[2] for r in self.requests]

    def __getattr__(self, name: str):
        if name in FIELDS:  # turn_indices, engine_ids, ...: built on use
            return self.column(name)
        raise AttributeError(name)


_KEY_CHUNK = 1 << 20  # hashes per buffer of the copy (then one concatenation)


def _read_messages(trace) -> WorkloadColumns | None:
    cols = WorkloadColumns()
    add = cols.requests.append
    row = cols.row
    parts: list[np.ndarray] = []
    counts: list[int] = []
    count = counts.append
    buf = np.empty(_KEY_CHUNK, np.uint64)
    used = k = 0
    try:
        for _, rec in trace.iter_workload():
            kind = rec.WhichOneof("record")
            if kind != "request":
                if kind is None or not _put_other(cols, kind, getattr(rec, kind)):
                    return None
                continue
            r = rec.request
            rid = r.request_id
            if rid in row:
                return None
            row[rid] = k
            k += 1
            turn = r.turn_index
            if not turn and not r.HasField("turn_index"):
                turn = None
            pv = r.policy_version
            if not pv and not r.HasField("policy_version"):
                pv = None
            ot = r.output_tokens
            a = r.arrival
            ak = a.WhichOneof("kind")
            if ak == "observed_offset_ns":
                ak, t = ARRIVAL_OBSERVED, a.observed_offset_ns
            else:
                ak, t = ARRIVAL_NONE if ak is None else ARRIVAL_AFTER_DEPENDENCIES, None
            ds = r.dependencies
            p = r.prefix
            add((rid, r.num_samples, r.trajectory_id, turn, r.engine_id, pv, r.input_tokens,
                 (ot[0],) if len(ot) == 1 else tuple(ot), ak, t,
                 tuple([(d.predecessor_request_id, d.trigger, d.relation,
                         d.external_delay_ns if d.HasField("external_delay_ns") else None,
                         d.delay_absence) for d in ds]) if ds else (),
                 p.block_size_tokens))
            hs = p.block_hashes
            n = len(hs)
            count(n)
            if n:
                if used + n > len(buf):
                    parts.append(buf[:used])
                    buf = np.empty(max(_KEY_CHUNK, n), np.uint64)
                    used = 0
                buf[used:used + n] = hs
                used += n
    except (TraceFormatError, IncompleteTraceError):
        return None
    parts.append(buf[:used])
    cols.keys = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
    cols.offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=cols.offsets[1:])
    return cols


_OTHER = {"trajectory": ("trajectories", "trajectory_id"), "group": ("groups", "group_id"),
          "rollout_batch": ("batches", "rollout_batch_id"), "slot_pool": ("slot_pools", "pool_id"),
          "engine_client": ("engine_clients", "engine_id")}


def _put_other(cols: WorkloadColumns, kind: str, msg) -> bool:
    if kind == "cache_warmup":
        cols.warmups.append(msg)
        return True
    attr, key = _OTHER[kind]
    d = getattr(cols, attr)
    k = getattr(msg, key)
    if k in d:
        return False  # duplicate id: the message path raises it
    d[k] = msg
    return True


def read_columns(trace) -> WorkloadColumns | None:
    """The workload of ``trace`` as :class:`WorkloadColumns`, or None when the ordinary message
    path must read it (see the module doc). Never raises for a bad record: the message path
    words every error."""
    if trace.compat.newer or trace.inspect:
        return None  # unknown fields are noted / refused by the message path
    if trace.artifact(ARTIFACT_KIND_WORKLOAD).encoding != ENCODING_BINPB:
        return None  # JSONL: the JSON decode dominates; measured no faster as columns
    return _read_messages(trace)
