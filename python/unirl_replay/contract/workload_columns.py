"""Column reader of a trace's workload: per-request facts as columns, prefix hashes as one array.

:func:`read_columns` reads the workload of an opened :class:`~unirl_replay.contract.trace_io.Trace`
once and keeps, per ``Request``, only the facts the replay adapter reads (ids, sample count,
trajectory, turn, engine, policy version, lengths, arrival, dependencies, hash block size), in
workload order, and every request's prefix block hashes concatenated into one ``uint64`` array
with offsets. No ``Request`` message is kept (about 5 KiB each as parsed upb messages); the other
record kinds (trajectories, groups, batches, pools, clients, warm-ups: few) stay messages.

It is a fast path with an exact fallback: whenever the reader meets anything it does not take
(a record that does not parse, a framing or count problem, a duplicate id, an empty record, a
trace from a newer contract revision, a prefix whose wire form it does not decode exactly), it
returns None and the caller reads the trace the ordinary way (``Trace.iter_workload``), which
raises the usual typed error or gives the messages. So errors and their wording are always the
message path's.

binpb: each frame is parsed with a *wire view* of ``WorkloadRecord``, a message class built at
import time from the generated descriptors in which ``PrefixBlocks.block_hashes`` (``repeated
uint64``, packed on the wire: one length-delimited run of varints) is declared ``bytes``. The
packed run then arrives as one bytes object instead of 80 Python ints, and all runs are decoded
together with numpy (:func:`packed_keys`). The keys are not the hash values but a fixed bit
permutation of them (a bijection of uint64, so equal keys <=> equal hashes): all the adapter does
with hashes is compare them (dense first-seen ids). A frame is taken only when the view is
provably lossless: its re-encoded size equals the frame's size (no field given twice, nothing
dropped) and the prefix carries no unknown field (an unpacked ``block_hashes`` would be one).
JSONL: records are the ordinary parsed messages; their hash values get the same keys (:func:`value_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError

from unirl_replay.contract import trace_io
from unirl_replay.contract.errors import IncompleteTraceError, TraceFormatError
from unirl_replay.v1 import workload_pb2
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD, ENCODING_BINPB

__all__ = ["WorkloadColumns", "read_columns", "packed_keys", "value_keys", "WIRE_VIEW"]

ARRIVAL_NONE, ARRIVAL_OBSERVED, ARRIVAL_AFTER_DEPENDENCIES = 0, 1, 2
_CHUNK_REQUESTS = 4096  # requests whose packed hashes are decoded together
FIELDS = ("request_ids", "num_samples", "trajectory_ids", "turn_indices", "engine_ids", "policy_versions",
          "input_tokens", "output_tokens", "arrival_kinds", "observed_ns", "dependencies", "block_sizes")
"""The per-request fields of :class:`WorkloadColumns`, in the order of each request's tuple."""


def _wire_view():
    """``WorkloadRecord`` with ``PrefixBlocks.block_hashes`` declared ``bytes`` (same field
    number, same wire type as the packed encoding), in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    done: set[str] = set()

    def add(fd) -> None:
        for dep in fd.dependencies:
            if dep.name not in done:
                add(dep)
        p = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(p)
        for m in p.message_type:
            if m.name == "PrefixBlocks" and p.package == "unirl_replay.v1":
                for f in m.field:
                    if f.name == "block_hashes":
                        f.type = f.TYPE_BYTES
                        f.label = f.LABEL_OPTIONAL
                        f.ClearField("options")
        pool.Add(p)
        done.add(fd.name)

    add(workload_pb2.DESCRIPTOR)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("unirl_replay.v1.WorkloadRecord"))


WIRE_VIEW = _wire_view()


@dataclass
class WorkloadColumns:
    """One trace's workload as columns (requests, workload order) plus the other records.

    ``requests[i]`` is request i's tuple, fields in :data:`FIELDS` order; each field also reads
    as a column (``request_ids``, ``num_samples``, ...). Per request ``i``: ``request_ids[i]``, ``num_samples[i]``, ``trajectory_ids[i]``,
    ``turn_indices[i]`` (None when absent), ``engine_ids[i]``, ``policy_versions[i]`` (None when
    absent), ``input_tokens[i]``, ``output_tokens[i]`` (tuple), ``arrival_kinds[i]``
    (``ARRIVAL_*``), ``observed_ns[i]`` (the observed offset, else None), ``dependencies[i]``
    (tuple of ``(predecessor_request_id, trigger, relation, external_delay_ns or None,
    delay_absence)``), ``block_sizes[i]`` (``prefix.block_size_tokens``), its hash keys
    ``keys[offsets[i]:offsets[i + 1]]`` (none: no hashes). ``row`` maps a request id to ``i``.
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


# bit permutation of the 8 payload bits of bytes 9-10 into the 8 continuation-bit slots
_SPREAD = np.array([sum(((t >> k) & 1) << (8 * k + 7) for k in range(8)) for t in range(256)], np.uint64)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_LEN_MASK = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [2**64 - 1] * 3, np.uint64)


def packed_keys(buf: bytes, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Keys of the varints of consecutive packed runs.

    ``buf`` is the runs concatenated; ``lengths[i]`` the byte length of run i. Returns (keys,
    counts): every varint's key (a bijection of its uint64 value: the 7-bit groups of bytes 1-8
    in place, bytes 9-10's payload bits in the continuation-bit slots), and the varint count of
    each run. None when a run is not an exact sequence of valid uint64 varints (a run ending
    inside a varint, a varint longer than 10 bytes, a 10-byte varint beyond 64 bits): the
    ordinary parser decides those.
    """
    n = len(buf)
    counts = np.zeros(len(lengths), np.int64)
    if n == 0:
        return np.zeros(0, np.uint64), counts
    pad = np.zeros(n + 16, np.uint8)
    pad[:n] = np.frombuffer(buf, np.uint8)
    b = pad[:n]
    ends = np.flatnonzero(b < 0x80)
    run_end = np.cumsum(lengths)
    nz = lengths > 0
    if len(ends) == 0 or ends[-1] != n - 1 or (pad[run_end[nz] - 1] >= 0x80).any():
        return None  # some run ends inside a varint
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    ln = ends - starts + 1
    if ln.max() > 10:
        return None
    win = np.ndarray((n,), dtype="<u8", buffer=pad, offset=0, strides=(1,))
    k = win[starts]
    k &= _LOW7
    k &= _LEN_MASK[ln]
    long = np.flatnonzero(ln > 8)
    if len(long):
        s = starts[long]
        b9 = pad[s + 8]
        b10 = np.where(ln[long] > 9, pad[s + 9], 0)
        if (b10 > 1).any():
            return None  # beyond 64 bits
        k[long] |= _SPREAD[(b9 & 0x7F) | (b10 << 7)]
    c = np.searchsorted(ends, run_end - 1, side="right")
    counts[0] = c[0]
    counts[1:] = np.diff(c)
    return k, counts


def value_keys(values: np.ndarray) -> np.ndarray:
    """The :func:`packed_keys` key of each uint64 value (the same bit permutation)."""
    v = values.astype(np.uint64, copy=False)
    out = np.zeros(len(v), np.uint64)
    for j in range(8):  # 7-bit group j -> byte j's low 7 bits
        out |= ((v >> np.uint64(7 * j)) & np.uint64(0x7F)) << np.uint64(8 * j)
    tail = ((v >> np.uint64(56)) & np.uint64(0x7F)) | (((v >> np.uint64(63)) & np.uint64(1)) << np.uint64(7))
    out |= _SPREAD[tail.astype(np.intp)]
    return out


def _read_binpb(trace, path, expected: int) -> WorkloadColumns | None:
    cols = WorkloadColumns()
    add = cols.requests.append
    row = cols.row
    view = WIRE_VIEW.FromString
    real = workload_pb2.WorkloadRecord.FromString
    ufs = unknown_fields.UnknownFieldSet
    blobs: list[bytes] = []
    key_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []

    def flush() -> bool:
        got = packed_keys(b"".join(blobs), np.fromiter(map(len, blobs), np.int64, len(blobs)))
        if got is None:
            return False
        key_parts.append(got[0])
        count_parts.append(got[1])
        blobs.clear()
        return True

    n = k = 0
    try:
        with trace_io.open_regular(path, path.name) as f:
            for n, payload in trace_io.iter_frames(f, file=path.name):
                try:
                    rec = view(payload)
                except (DecodeError, RecursionError):
                    return None
                kind = rec.WhichOneof("record")
                if kind != "request":
                    if kind is None or not _put_other(cols, kind, getattr(real(payload), kind)):
                        return None
                    continue
                if rec.ByteSize() != len(payload):
                    return None  # a field given twice, or a non-canonical form: not provably lossless
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
                if len(ufs(p)):
                    return None  # e.g. block_hashes written unpacked: the view did not take it
                add((rid, r.num_samples, r.trajectory_id, turn, r.engine_id, pv, r.input_tokens,
                     (ot[0],) if len(ot) == 1 else tuple(ot), ak, t,
                     tuple([(d.predecessor_request_id, d.trigger, d.relation,
                             d.external_delay_ns if d.HasField("external_delay_ns") else None,
                             d.delay_absence) for d in ds]) if ds else (),
                     p.block_size_tokens))
                blobs.append(p.block_hashes)
                if len(blobs) == _CHUNK_REQUESTS and not flush():
                    return None
    except (TraceFormatError, IncompleteTraceError):
        return None
    if n != expected:
        return None
    if blobs and not flush():
        return None
    _finish(cols, key_parts, count_parts)
    return cols


def _read_messages(trace) -> WorkloadColumns | None:
    cols = WorkloadColumns()
    row = cols.row
    key_parts: list[np.ndarray] = []
    count_parts: list[int] = []
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
            row[rid] = len(cols.requests)
            a = r.arrival
            ak = a.WhichOneof("kind")
            cols.requests.append((
                rid, r.num_samples, r.trajectory_id, r.turn_index if r.HasField("turn_index") else None,
                r.engine_id, r.policy_version if r.HasField("policy_version") else None, r.input_tokens,
                tuple(r.output_tokens),
                ARRIVAL_OBSERVED if ak == "observed_offset_ns" else ARRIVAL_NONE if ak is None
                else ARRIVAL_AFTER_DEPENDENCIES,
                a.observed_offset_ns if ak == "observed_offset_ns" else None,
                tuple((d.predecessor_request_id, d.trigger, d.relation,
                       d.external_delay_ns if d.HasField("external_delay_ns") else None, d.delay_absence)
                      for d in r.dependencies),
                r.prefix.block_size_tokens))
            hs = r.prefix.block_hashes
            k = np.empty(len(hs), np.uint64)
            k[:] = hs
            key_parts.append(k)
            count_parts.append(len(hs))
    except (TraceFormatError, IncompleteTraceError):
        return None
    _finish(cols, key_parts, [np.array(count_parts, np.int64)], values=True)
    return cols


def _finish(cols: WorkloadColumns, key_parts: list, count_parts: list, values: bool = False) -> None:
    cols.keys = np.concatenate(key_parts) if len(key_parts) != 1 else key_parts[0]
    if not len(key_parts):
        cols.keys = np.zeros(0, np.uint64)
    elif values:
        cols.keys = value_keys(cols.keys)
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.int64)
    cols.offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=cols.offsets[1:])


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
    a = trace.artifact(ARTIFACT_KIND_WORKLOAD)
    if a.encoding == ENCODING_BINPB:
        return _read_binpb(trace, trace.dir / a.path, a.record_count)
    return _read_messages(trace)
