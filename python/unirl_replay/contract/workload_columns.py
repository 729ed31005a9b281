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
revision or opened to inspect unknown fields), it returns None and the caller
reads the trace the ordinary way, which raises the usual typed error or gives the messages. So
errors and their wording are always the message path's.

An ``arrow`` workload (:mod:`~unirl_replay.contract.columnar`) is read as columns directly, batch
by batch: the request struct's children become the same tuples, its ``block_hashes`` values are
copied once into the key array, and only the other records become messages (the trajectories, many
per trace, a :class:`MessageColumns`: each message built when first looked up, the fields readable
as columns without building any). Anything the message path would read differently (a row with zero or several record kinds, a null where the schema has
no nulls, a oneof with two members, values under an absent prefix / list) -> None, as above.

A ``jsonl`` workload is decoded straight to the same facts, without messages, by
:mod:`~unirl_replay.contract.jsonl_columns` (only lines of the canonical profile; anything else ->
None, as above).

(Measured and dropped: decoding the packed ``block_hashes`` varints from the binpb wire with numpy
through a wire view of the message. On this machine the vectorised decode cost ~180 ns per hash,
more than upb's per-element copy into numpy, ~125 ns.)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from unirl_replay.contract.errors import IncompleteTraceError, TraceFormatError
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD, ENCODING_ARROW, ENCODING_BINPB, ENCODING_JSONL
from unirl_replay.v1.workload_pb2 import WorkloadRecord

__all__ = ["WorkloadColumns", "GateFacts", "MessageColumns", "RequestArrays", "read_columns", "FIELDS"]

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
    key_source: list | None = None  # the arrow reader's read-only views of the mapped file, concatenated = keys
    facts: "GateFacts | None" = None  # read_columns(..., facts=True): what validate's rules need besides
    _ids: list | None = field(default=None, repr=False)
    _samples: list | None = field(default=None, repr=False)
    arrays: "RequestArrays | None" = field(default=None, repr=False)
    """(arrow) the numeric request fields as numpy arrays (:class:`RequestArrays`), read from the same
    columns as ``requests``: what the gate's fast pass and the support scan compute on instead of
    iterating the tuples; None: not read (another encoding), the tuples are the only form."""
    by_field: tuple | None = field(default=None, repr=False)
    """``tuple(zip(*requests))`` (one tuple per name of :data:`FIELDS`) when a reader made it already (the
    gate's fast pass): the next reader (the support scan) takes it instead of transposing again, and
    drops it (None)."""

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


@dataclass
class GateFacts:
    """The per-request fields ``validate``'s request rules read that :data:`FIELDS` does not hold
    (``read_columns(trace, facts=True)``; :mod:`unirl_replay.contract.validate.fast` reads them),
    workload order: ``group_ids[i]``, ``batch_ids[i]`` (``rollout_batch_id``), ``worker_ids[i]``,
    ``sample_ids[i]`` and ``finish_reasons[i]`` (tuples), ``max_output_tokens[i]`` (None when absent)."""

    group_ids: list = field(default_factory=list)
    batch_ids: list = field(default_factory=list)
    worker_ids: list = field(default_factory=list)
    sample_ids: list = field(default_factory=list)
    finish_reasons: list = field(default_factory=list)
    max_output_tokens: list = field(default_factory=list)
    #: (arrow) per batch, the request fields as lists in :data:`FIELDS` order and the dependencies'
    #: five fields as flat lists (the values the tuples were made of: no transposition needed)
    parts: list = field(default_factory=list)
    dep_parts: list = field(default_factory=list)
    #: (arrow) ``sample_ids`` / ``finish_reasons`` kept flat instead (``sample_ids`` and
    #: ``finish_reasons`` then stay empty): per batch, every request's values in order and the
    #: per-request counts (numpy)
    flat_lists: bool = False
    sample_flat: list = field(default_factory=list)
    sample_counts: list = field(default_factory=list)
    finish_flat: list = field(default_factory=list)
    finish_counts: list = field(default_factory=list)
    #: (arrow) every byte of the request id fields (request, trajectory, group, batch, engine, worker,
    #: sample and predecessor ids) is printable ASCII (0x20-0x7e), and the longest of them in bytes;
    #: None: not measured (the fast pass checks the strings themselves)
    ids_printable_ascii: bool | None = None
    ids_max_bytes: int = 0
    #: (arrow) the fields above not made Python values yet: name -> the batches' Arrow arrays (no nulls),
    #: made values on the first :meth:`values`; :meth:`count`, :meth:`any_nonempty` and :meth:`ints` read
    #: them as they are
    lazy: dict = field(default_factory=dict)

    def values(self, name: str) -> list:
        """The list field ``name`` (``group_ids``, ``sample_flat``, ...), made from the Arrow arrays the
        first time when the reader kept those."""
        got = getattr(self, name)
        for arr in self.lazy.pop(name, ()):
            got += arr.to_pylist()
        return got

    def count(self, name: str) -> int:
        """``len(self.values(name))``, without making the values."""
        if name in self.lazy:
            return len(getattr(self, name)) + sum(len(a) for a in self.lazy[name])
        return len(getattr(self, name))

    def any_nonempty(self, name: str) -> bool:
        """``any(self.values(name))`` of a string field, without making the values."""
        if name not in self.lazy:
            return any(getattr(self, name))
        for arr in self.lazy[name]:
            if len(arr):
                offs = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
                if offs[-1] > offs[0]:
                    return True
        return any(getattr(self, name))

    def ints(self, name: str) -> np.ndarray:
        """An integer field's values as one int64 array (``finish_flat``)."""
        parts = [np.asarray(getattr(self, name), np.int64)]
        parts += [_np_i64(a) for a in self.lazy.get(name, ())]
        return np.concatenate(parts)


@dataclass
class RequestArrays:
    """The arrow reader's per-request facts as numpy ``int64`` arrays (workload order; the same values
    as ``WorkloadColumns.requests``' tuples, nulls as a ``*_set`` mask with 0 under it), per
    dependency in request order (``WorkloadColumns.requests[i][10]`` flattened).

    ``traj_ord[i]``: request i's trajectory ordinal, 1, 2, ... in first-seen order of the non-empty
    trajectory ids (0: none), ``traj_names`` those ids in that order; ``out_flat``: every output
    length, ``out_counts`` per request; ``dep_pred``: each dependency's predecessor row (-1: no such
    request); ``request_ids``: the request ids as one Arrow string array."""

    num_samples: np.ndarray
    input_tokens: np.ndarray
    turn: np.ndarray
    turn_set: np.ndarray
    arrival_kinds: np.ndarray
    observed: np.ndarray
    block_sizes: np.ndarray
    out_counts: np.ndarray
    out_flat: np.ndarray
    max_output: np.ndarray
    max_output_set: np.ndarray
    dep_counts: np.ndarray
    dep_trigger: np.ndarray
    dep_relation: np.ndarray
    dep_absence: np.ndarray
    dep_delay: np.ndarray
    dep_delay_set: np.ndarray
    traj_ord: np.ndarray
    traj_names: list
    dep_pred: np.ndarray
    request_ids: object  # the request ids as one Arrow string array


class MessageColumns(Mapping):
    """id -> message of one record kind read as columns (the arrow reader's trajectories): the same
    mapping as the dict of messages the reader builds for the other kinds (keys in record order),
    each message built on first access (``cls(**fields)`` of its row, then kept). :meth:`column`
    reads one field of every record without building any (what the gate's fast pass and the support
    checks read). Only for a message type whose fields are strings, integers and repeated strings
    (:func:`_flat_kind`), from a table whose schema the reader validated: building never fails."""

    __slots__ = ("_cls", "_columns", "_index", "_built")

    def __init__(self, cls, columns: dict[str, list], key: str) -> None:
        self._cls, self._columns = cls, columns
        self._index = {k: i for i, k in enumerate(columns[key])}
        self._built: dict = {}

    def __getitem__(self, key):
        m = self._built.get(key)
        if m is None:
            i = self._index[key]
            m = self._built[key] = self._cls(**{f: col[i] for f, col in self._columns.items()})
        return m

    def __contains__(self, key) -> bool:
        return key in self._index

    def __iter__(self):
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def column(self, name: str) -> list:
        """Field ``name`` of every record, in key order (a list of values; a repeated field: lists; an
        absent ``optional`` field: None)."""
        return self._columns[name]

    def position(self, key) -> int | None:
        """The record's index in :meth:`column`'s lists, None when there is no such key."""
        return self._index.get(key)


@functools.cache
def _flat_kind(desc) -> bool:
    """The record kind's message has only string, integer and repeated string fields (no message,
    enum, bytes, oneof but proto3 ``optional``): :class:`MessageColumns` builds it from Arrow values."""
    from google.protobuf.descriptor import FieldDescriptor as F

    from unirl_replay.contract import columnar

    ints = {F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64}
    for f in desc.fields:
        rep = columnar._is_repeated(f)
        if not (f.type == F.TYPE_STRING or (f.type in ints and not rep)):
            return False
    return not columnar._real_oneofs(desc)


_KEY_CHUNK = 1 << 20  # hashes per buffer of the copy (then one concatenation)


class KeyBuffer:
    """The prefix block hashes of a workload copied request by request (the binpb and the JSONL column
    readers): uint64 chunks of :data:`_KEY_CHUNK` values, then :meth:`finish` sets ``cols.keys`` (one
    array) and ``cols.offsets`` (request ``i``'s hashes are ``keys[offsets[i]:offsets[i + 1]]``)."""

    __slots__ = ("parts", "buf", "used", "counts")

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.buf = np.empty(_KEY_CHUNK, np.uint64)
        self.used = 0
        self.counts: list[int] = []

    def add(self, hs, n: int) -> None:
        """Append the next request's ``n`` hashes ``hs`` (a sequence of ints; ``n`` = 0: none).

        Raises:
            OverflowError: a value outside uint64 (nothing of it counted)."""
        if n:
            used = self.used
            if used + n > len(self.buf):
                self.parts.append(self.buf[:used])
                self.buf = np.empty(max(_KEY_CHUNK, n), np.uint64)
                used = self.used = 0
            self.buf[used:used + n] = hs
            self.used = used + n
        self.counts.append(n)

    def finish(self, cols: "WorkloadColumns") -> None:
        """``cols.keys`` and ``cols.offsets`` from the hashes added."""
        parts = [*self.parts, self.buf[:self.used]]
        cols.keys = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        cols.offsets = np.zeros(len(self.counts) + 1, np.int64)
        np.cumsum(self.counts, out=cols.offsets[1:])


def _gate_records(trace):
    """The workload's records for :func:`read_columns` with ``facts``: the frames parsed as
    ``Trace.iter_workload`` parses them, in a trace opened to inspect unknown fields; a frame
    that does not parse, a record count other than the manifest's, or a record that carries an
    unknown field or is not written the canonical way (re-encoded without its unknown fields, it
    is not its frame's bytes) -> _Declined (the message path reports it)."""
    from google.protobuf.message import DecodeError

    from unirl_replay.contract.trace_io import iter_frames, open_regular

    a = trace.artifact(ARTIFACT_KIND_WORKLOAD)
    parse = WorkloadRecord.FromString
    n = 0
    with open_regular(trace.dir / a.path, a.path) as f:
        for n, payload in iter_frames(f, file=a.path):
            try:
                rec = parse(payload)
            except (DecodeError, RecursionError):
                raise _Declined from None
            # re-encoded without unknown fields, a record is its frame's bytes only when the frame held none
            # (the same size is not enough: compat.unknown_binpb_fields)
            rec.DiscardUnknownFields()
            if rec.SerializeToString() != payload:
                raise _Declined
            yield n, rec
    if n != a.record_count:
        raise _Declined


def _read_messages(trace, facts: bool = False) -> WorkloadColumns | None:
    cols = WorkloadColumns()
    add = cols.requests.append
    gf = cols.facts = GateFacts() if facts else None
    row = cols.row
    keys = KeyBuffer()
    add_keys = keys.add
    k = 0
    try:
        for _, rec in (_gate_records(trace) if facts else trace.iter_workload()):
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
            if gf is not None:
                gf.group_ids.append(r.group_id)
                gf.batch_ids.append(r.rollout_batch_id)
                gf.worker_ids.append(r.worker_id)
                gf.sample_ids.append(tuple(r.sample_ids))
                gf.finish_reasons.append(tuple(r.finish_reasons))
                gf.max_output_tokens.append(r.max_output_tokens if r.HasField("max_output_tokens") else None)
            hs = p.block_hashes
            add_keys(hs, len(hs))
    except (TraceFormatError, IncompleteTraceError, _Declined):
        return None
    keys.finish(cols)
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


def read_columns(trace, facts: bool = False) -> WorkloadColumns | None:
    """The workload of ``trace`` as :class:`WorkloadColumns`, or None when the ordinary message
    path must read it (see the module doc). Never raises for a bad record: the message path
    words every error.

    ``facts``: also keep :class:`GateFacts` (``cols.facts``) for the gate's fast pass
    (:mod:`unirl_replay.contract.validate.fast`), and take a trace opened with ``inspect``
    (as ``validate`` opens it): None also for a record with an unknown binpb field or an arrow
    schema with columns this reader does not know (``validate``'s ``binpb.unknown_fields``)."""
    if trace.compat.newer:
        return None  # unknown fields are noted / refused by the message path
    enc = trace.artifact(ARTIFACT_KIND_WORKLOAD).encoding
    if enc == ENCODING_JSONL:
        if facts:
            return None  # the gate's fast pass reads binpb and arrow only (its GateFacts)
        # the typed decode straight to the facts; it takes only lines of the canonical profile,
        # which hold no off-profile form and no unknown key, so `inspect` finds nothing in them
        from unirl_replay.contract.jsonl_columns import read_jsonl

        return read_jsonl(trace)
    if trace.inspect and not facts:
        return None  # unknown binpb fields / arrow schema fields are noted by the message path
    if enc == ENCODING_ARROW:
        return _read_arrow(trace, facts)
    if enc != ENCODING_BINPB:
        return None
    return _read_messages(trace, facts)


class _Declined(Exception):
    """The arrow columns cannot decide (the message path reads the trace)."""


def _read_arrow(trace, facts: bool = False) -> WorkloadColumns | None:
    from unirl_replay.contract import columnar

    a = trace.artifact(ARTIFACT_KIND_WORKLOAD)
    skipped: list[str] = []
    try:
        table = columnar.read_table(trace.dir / a.path, WorkloadRecord, a.path, skipped)
    except TraceFormatError:
        return None
    if table.num_rows != a.record_count or (facts and skipped):
        return None
    cols = WorkloadColumns(facts=GateFacts() if facts else None)
    key_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    lazy: dict[str, dict[str, list]] = {}  # record kind -> field -> values (MessageColumns)
    arr_parts: list[dict] = []  # per batch: RequestArrays' fields (and the id arrays they are keyed by)
    try:
        for batch in table.to_batches():
            _arrow_batch(batch, cols, key_parts, count_parts, lazy, arr_parts)
        for kind, columns in lazy.items():
            attr, key = _OTHER[kind]
            desc = WorkloadRecord.DESCRIPTOR.fields_by_name[kind].message_type
            m = MessageColumns(columnar.message_class(desc), columns, key)
            if len(m) != len(columns[key]) or getattr(cols, attr):
                raise _Declined  # a duplicate id: the message path raises it
            setattr(cols, attr, m)
    except _Declined:
        return None
    cols.keys = np.concatenate(key_parts) if key_parts else np.zeros(0, np.uint64)  # a writable copy
    cols.key_source = key_parts  # the views it was copied from (the mapped file): the converter's sort reads them
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.int64)
    cols.offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=cols.offsets[1:])
    if arr_parts is not None and len(arr_parts) == len(count_parts):
        cols.arrays = _request_arrays(arr_parts, len(cols.requests))
    return cols


def _request_arrays(parts: list[dict], n: int) -> "RequestArrays | None":
    """:class:`RequestArrays` from the batches' parts (None: the lengths do not add up)."""
    import pyarrow as pa

    from unirl_replay.contract.columnar import kernels

    pk = kernels()
    names = [f.name for f in dataclasses.fields(RequestArrays)
             if f.name not in ("traj_ord", "traj_names", "dep_pred", "request_ids")]
    got = {k: np.concatenate([p[k] for p in parts]) for k in names}
    if len(got["num_samples"]) != n:
        return None
    tid = pa.concat_arrays([p["tid"] for p in parts])
    enc = pk.dictionary_encode(tid)  # indices in first-seen order
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    dic = enc.dictionary.to_pylist()
    empty = dic.index("") if "" in dic else -1
    if empty >= 0:
        del dic[empty]
        codes = np.where(codes == empty, -1, np.where(codes > empty, codes - 1, codes))
    got["traj_ord"] = codes + 1
    got["traj_names"] = dic
    preds = [p["dpred"] for p in parts if p["dpred"] is not None]
    rid = got["request_ids"] = pa.concat_arrays([p["rid"] for p in parts])
    if preds:
        j = pk.index_in(pa.concat_arrays(preds), rid)
        got["dep_pred"] = pk.fill_null(j, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        got["dep_pred"] = np.zeros(0, np.int64)
    if len(got["dep_pred"]) != int(got["dep_counts"].sum()) or len(got["out_flat"]) != int(got["out_counts"].sum()):
        return None
    return RequestArrays(**got)


def _np_i64(arr) -> np.ndarray:
    """An integer Arrow array's values as int64 (0 under a null)."""
    from unirl_replay.contract.columnar import kernels

    if arr.null_count:
        arr = kernels().fill_null(arr, 0)
    return arr.to_numpy(zero_copy_only=False).astype(np.int64)


def _note_ids(gf: GateFacts, arr) -> None:
    """Fold one (non-null) id column into ``gf.ids_printable_ascii`` / ``gf.ids_max_bytes`` (from its
    offsets and data buffer: no strings made)."""
    import pyarrow as pa

    if gf.ids_printable_ascii is False or not len(arr):
        return
    if arr.type != pa.string():
        gf.ids_printable_ascii = False
        return
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], np.int32, len(arr) + 1, arr.offset * 4)
    gf.ids_max_bytes = max(gf.ids_max_bytes, int(np.diff(offs).max()))
    if bufs[2] is not None and offs[-1] > offs[0]:
        data = np.frombuffer(bufs[2], np.uint8)[int(offs[0]):int(offs[-1])]
        if not ((data >= 0x20) & (data <= 0x7E)).all():
            gf.ids_printable_ascii = False
            return
    if gf.ids_printable_ascii is None:
        gf.ids_printable_ascii = True


def _valid(arr) -> np.ndarray:
    """Validity of an Arrow array as a numpy bool array (its validity bitmap unpacked; = ``is_valid()``)."""
    if arr.null_count == 0:
        return np.ones(len(arr), np.bool_)
    buf = arr.buffers()[0]
    if buf is None or buf.size * 8 < arr.offset + len(arr):
        from unirl_replay.contract.columnar import kernels

        return kernels().is_valid(arr).to_numpy(zero_copy_only=False)
    bits = np.unpackbits(np.frombuffer(buf, np.uint8), count=arr.offset + len(arr), bitorder="little")
    return bits[arr.offset:].view(np.bool_)


def _no_nulls(*arrs) -> None:
    for x in arrs:
        if x.null_count:
            raise _Declined


def tuples_by_lengths(flat: list, lens: np.ndarray) -> list:
    """``flat`` cut into one tuple per row: row i holds the next ``lens[i]`` items (``()`` for 0).
    ``lens``: int array, one per row, summing to ``len(flat)``. At most one item per row (chains of
    dependencies): each item's 1-tuple placed by position, no slicing."""
    if len(lens) and lens.max() == 1:
        out = [()] * len(lens)
        for i, one in zip(np.flatnonzero(lens).tolist(), zip(flat)):
            out[i] = one
        return out
    ends = np.cumsum(lens).tolist()
    return [tuple(flat[e - c:e]) if c else () for e, c in zip(ends, lens.tolist())]


def _list_parts(lst, keep: np.ndarray) -> tuple[np.ndarray, object]:
    """(per-row lengths, the values of every row, contiguous) of a list array, where every row
    outside ``keep`` (and every null slot) must hold no values (its length is then 0)."""
    offs = lst.offsets.to_numpy()
    lens = np.diff(offs)
    if lst.null_count:
        keep = keep & _valid(lst)
    if lens[~keep].any():
        raise _Declined  # values the message path would not see (or a different list layout)
    vals = lst.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    _no_nulls(vals)
    return lens, vals


#: record kinds the arrow reader keeps as :class:`MessageColumns` (many per trace; flat messages)
LAZY_KINDS = ("trajectory",)


def _arrow_batch(batch, cols: WorkloadColumns, key_parts: list, count_parts: list, lazy: dict | None = None,
                 arr_parts: list | None = None) -> None:
    import pyarrow as pa

    from unirl_replay.contract.columnar import kernels

    pk = kernels()

    names = batch.schema.names
    valid = [_valid(batch.column(k)) for k in range(len(names))]
    kinds = np.sum(valid, axis=0) if valid else np.zeros(batch.num_rows, np.int64)
    if batch.num_rows and (kinds != 1).any():
        raise _Declined  # an empty record or two kinds: the message path words it
    rmask = valid[names.index("request")]
    ridx = np.flatnonzero(rmask)
    if len(ridx) < batch.num_rows:  # the other records, as messages (few), kind by kind (order kept per kind)
        for k, kind in enumerate(names):
            if kind != "request" and valid[k].any():
                rows = pk.take(batch.column(k), pa.array(np.flatnonzero(valid[k])))
                if lazy is not None and kind in LAZY_KINDS and _flat_kind(rows_desc := _desc_of(kind)):
                    got = lazy.setdefault(kind, {f.name: [] for f in rows_desc.fields})
                    for name, values in got.items():
                        values += rows.field(name).to_pylist()
                    continue
                for msg in _other_messages(kind, rows):
                    if not _put_other(cols, kind, msg):
                        raise _Declined
    if not len(ridx):
        return
    req = batch.column(names.index("request"))
    take = pa.array(ridx)

    gf = cols.facts
    taken: dict = {}  # field name -> the requests' Arrow array

    def field(name, nullable=False, ids=False, lazy=None):
        x = taken[name] = pk.take(req.field(name), take)
        if not nullable:
            _no_nulls(x)
        if ids and gf is not None:
            _note_ids(gf, x)
        if lazy is not None:  # kept as Arrow (GateFacts.lazy): Python values only where a rule reads them
            gf.lazy.setdefault(lazy, []).append(x)
            return None
        return x.to_pylist()

    rid = field("request_id", ids=True)
    ns, tid, eid, inp = (field("num_samples"), field("trajectory_id", ids=True), field("engine_id", ids=True),
                         field("input_tokens"))
    turn, pv = field("turn_index", True), field("policy_version", True)
    # arrival: observed offset / after dependencies / none (a null arrival = unset)
    arr = pk.take(req.field("arrival"), take)
    av = _valid(arr)
    obs, after = arr.field("observed_offset_ns"), arr.field("after_dependencies")
    ov, adv = _valid(obs) & av, _valid(after) & av
    if (ov & adv).any():
        raise _Declined
    kind_a = np.where(ov, ARRIVAL_OBSERVED, np.where(adv, ARRIVAL_AFTER_DEPENDENCIES, ARRIVAL_NONE)).astype(np.int64)
    kind = kind_a.tolist()
    t = obs.to_pylist()
    if not ov.all():
        t = [x if k == ARRIVAL_OBSERVED else None for x, k in zip(t, kind)]
    # prefix: block size and the hashes (an absent prefix: size 0, no hashes). The lists are read
    # over all rows of the batch (no copy): rows that are not requests hold no values.
    pre = req.field("prefix")
    pvalid = _valid(pre) & rmask
    bsz = pre.field("block_size_tokens")
    if (pvalid & ~_valid(bsz)).any():
        raise _Declined
    bs_a = np.where(pvalid, pk.fill_null(bsz, 0).to_numpy(zero_copy_only=False), 0)[ridx].astype(np.int64)
    bs = bs_a.tolist()
    hlens, hvals = _list_parts(pre.field("block_hashes"), pvalid)
    key_parts.append(hvals.to_numpy(zero_copy_only=False))  # a view: one copy when concatenated
    count_parts.append(hlens[ridx].astype(np.int64))
    # output tokens
    olens, ovals = _list_parts(req.field("output_tokens"), rmask)
    olens = olens[ridx]
    ov_l = ovals.to_pylist()
    if (olens == 1).all():
        outs = list(zip(ov_l))  # one 1-tuple each
    else:
        ends = np.cumsum(olens).tolist()
        outs = [tuple(ov_l[e - c:e]) for e, c in zip(ends, olens.tolist())]
    # dependencies
    dlens, dvals = _list_parts(req.field("dependencies"), rmask)
    dlens = dlens[ridx]
    if len(dvals):
        dpred, dtrig, drel, dabs = (dvals.field(k) for k in ("predecessor_request_id", "trigger", "relation",
                                                             "delay_absence"))
        _no_nulls(dpred, dtrig, drel, dabs)
        if cols.facts is not None:
            _note_ids(cols.facts, dpred)
        dcols = (dpred.to_pylist(), dtrig.to_pylist(), drel.to_pylist(), dvals.field("external_delay_ns").to_pylist(),
                 dabs.to_pylist())
        deps = tuples_by_lengths(list(zip(*dcols)), dlens)
    else:
        dcols = ((),) * 5
        deps = [()] * len(ridx)
    if gf is not None:
        gf.parts.append((rid, ns, tid, turn, eid, pv, inp, outs, kind, t, deps, bs))
        gf.dep_parts.append(dcols)
        field("group_id", ids=True, lazy="group_ids")
        field("rollout_batch_id", ids=True, lazy="batch_ids")
        field("worker_id", ids=True, lazy="worker_ids")
        field("max_output_tokens", True, lazy="max_output_tokens")
        gf.flat_lists = True
        for name, flat, counts in (("sample_ids", "sample_flat", gf.sample_counts),
                                   ("finish_reasons", "finish_flat", gf.finish_counts)):
            lens, vals = _list_parts(req.field(name), rmask)
            if name == "sample_ids":
                _note_ids(gf, vals)
            gf.lazy.setdefault(flat, []).append(vals)
            counts.append(lens[ridx].astype(np.int64))
    if arr_parts is not None:
        ap = {"num_samples": _np_i64(taken["num_samples"]), "input_tokens": _np_i64(taken["input_tokens"]),
              "turn": _np_i64(taken["turn_index"]), "turn_set": _valid(taken["turn_index"]),
              "arrival_kinds": kind_a, "observed": np.where(ov, _np_i64(obs), 0),
              "block_sizes": bs_a, "out_counts": olens.astype(np.int64), "out_flat": _np_i64(ovals),
              "dep_counts": dlens.astype(np.int64), "rid": taken["request_id"], "tid": taken["trajectory_id"]}
        if len(dvals):
            dd = dvals.field("external_delay_ns")
            ap.update(dep_trigger=_np_i64(dtrig), dep_relation=_np_i64(drel), dep_absence=_np_i64(dabs),
                      dep_delay=_np_i64(dd), dep_delay_set=_valid(dd), dpred=dpred)
        else:
            e = np.zeros(0, np.int64)
            ap.update(dep_trigger=e, dep_relation=e, dep_absence=e, dep_delay=e, dep_delay_set=np.zeros(0, np.bool_),
                      dpred=None)
        mo = taken.get("max_output_tokens")
        ap.update(max_output=_np_i64(mo), max_output_set=_valid(mo)) if mo is not None else ap.update(
            max_output=np.zeros(len(ridx), np.int64), max_output_set=np.zeros(len(ridx), np.bool_))
        arr_parts.append(ap)
    row = cols.row
    k = len(cols.requests)
    row.update(zip(rid, range(k, k + len(rid))))
    if len(row) != k + len(rid):
        raise _Declined  # a duplicate id: the message path raises it
    cols.requests.extend(zip(rid, ns, tid, turn, eid, pv, inp, outs, kind, t, deps, bs))


def _desc_of(kind: str):
    return WorkloadRecord.DESCRIPTOR.fields_by_name[kind].message_type


def _other_messages(kind: str, rows):
    """The ``kind`` messages of a struct array of that record kind's rows (anything a message
    cannot hold -> _Declined)."""
    from unirl_replay.contract import columnar

    desc = WorkloadRecord.DESCRIPTOR.fields_by_name[kind].message_type
    cls = columnar.message_class(desc)
    if columnar.conflicts(rows, desc, np.ones(len(rows), np.bool_)):
        raise _Declined
    for row in rows.to_pylist():
        try:
            yield cls(**row)
        except (TypeError, ValueError, OverflowError):
            raise _Declined from None
