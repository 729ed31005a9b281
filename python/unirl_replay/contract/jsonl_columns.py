"""A JSONL workload read as columns: the typed ``msgspec`` decode straight to the request facts.

:func:`read_jsonl` is :func:`~unirl_replay.contract.workload_columns.read_columns` for a JSONL
workload. Each request line is decoded against the typed tier's Structs
(:mod:`~unirl_replay.contract.fast_typed`) and the facts of
:data:`~unirl_replay.contract.workload_columns.FIELDS` are taken from the decoded values; its
block hashes go from the lenient ``list[int]`` decode straight into the ``uint64`` key buffer. No
``Request`` message is built: the message constructor (with ~80 hashes, ~3x binpb's whole
``FromString`` of the same record) is what keeps a JSONL read of messages far above binpb's,
and the readers that take columns need only these facts. The other record kinds (few) become
messages, as in the binpb column reader.

Exactness: a request line is taken only when the typed tier itself would take it and the message
constructor would accept what it decodes to (then the message path returns exactly the message
whose facts these are):

* the typed tier's checks: strict typed decode, the Struct re-encodes to exactly the line's bytes,
  at most one member per ``oneof``, canonical 64-bit strings in range (``fast_typed._int64`` /
  ``_uint64``), the hash text's form;
* what the constructor alone would still refuse: a hash above 2**64-1 (the ``uint64`` buffer
  raises ``OverflowError``) and a string holding a lone surrogate, which valid UTF-8 cannot carry
  (``msgspec`` refuses it) and only a ``\\u`` escape can: a line with a backslash is checked by
  building its message (rare: ids with quotes, backslashes, control or non-ASCII characters).

On anything else -- a line the typed tier does not take, a framing problem (long line, no final
newline, an empty line), a record count other than the manifest's, an empty record, a duplicate
id -- the whole read returns None and the caller reads the trace the ordinary way, which gives
the messages or raises the usual typed error with its wording. ``tests/test_jsonl_columns.py``
compares the columns with the message path's facts on generated workloads and mutated lines.
"""

from __future__ import annotations

import msgspec

from unirl_replay.contract import fast_typed, trace_io
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.contract.gc_pause import paused_gc
from unirl_replay.contract.workload_columns import (ARRIVAL_AFTER_DEPENDENCIES, ARRIVAL_NONE, ARRIVAL_OBSERVED,
                                                    KeyBuffer, WorkloadColumns, _put_other)
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD
from unirl_replay.v1.workload_pb2 import Dependency, WorkloadRecord

__all__ = ["read_jsonl"]

_ENUMS = {name: {n: v.number for n, v in Dependency.DESCRIPTOR.fields_by_name[name].enum_type.values_by_name.items()}
          for name in ("trigger", "relation", "delay_absence")}
_REFUSED = (msgspec.DecodeError, msgspec.ValidationError, fast_typed._Doubt, TypeError, ValueError, OverflowError,
            RecursionError, KeyError)


def _dependency(d: dict, trig=_ENUMS["trigger"], rel=_ENUMS["relation"], absn=_ENUMS["delay_absence"]) -> tuple:
    return (d.get("predecessor_request_id", ""), trig[d["trigger"]] if "trigger" in d else 0,
            rel[d["relation"]] if "relation" in d else 0, d.get("external_delay_ns"),
            absn[d["delay_absence"]] if "delay_absence" in d else 0)


@paused_gc()  # 100k+ fact tuples stay alive: the collector would rescan them all, for nothing
def read_jsonl(trace) -> WorkloadColumns | None:
    """The JSONL workload of an opened trace as columns, or None (see the module doc)."""
    plan = fast_typed.plan_for(WorkloadRecord)
    if plan is None:
        return None
    a = trace.artifact(ARTIFACT_KIND_WORKLOAD)
    try:
        with trace_io.open_regular(trace.dir / a.path, a.path) as f:
            cols = _read(f, plan)
    except (TraceFormatError, OSError):
        return None
    if cols is None or cols[1] != a.record_count:
        return None
    return cols[0]


def _read(f, plan) -> tuple[WorkloadColumns, int] | None:
    decode, encode, convert = plan.decode, plan.encode, plan.convert
    limit = trace_io.MAX_LINE_BYTES
    cols = WorkloadColumns()
    add = cols.requests.append
    row = cols.row
    keys = KeyBuffer()
    add_keys = keys.add
    k = n = 0
    while raw := f.readline(limit + 1):
        n += 1
        if len(raw) > limit or raw[-1:] != b"\n":
            return None
        body = raw[:-1]
        try:
            s = decode(body)
            if encode(s) != body:
                return None
            rec = convert(s)
        except _REFUSED:
            return None  # the typed tier does not take the line (or it is empty / blank)
        r = rec.get("request")
        if r is None:
            if len(rec) != 1:
                return None  # an empty record: the message path reports it
            try:
                msg = WorkloadRecord(**rec)
            except (TypeError, ValueError, OverflowError):
                return None
            kind = next(iter(rec))
            if not _put_other(cols, kind, getattr(msg, kind)):
                return None
            continue
        if b"\\" in body:  # an escape can hold a lone surrogate: the constructor's check, on these lines only
            try:
                WorkloadRecord(**rec)
            except (TypeError, ValueError, OverflowError):
                return None
        rid = r.get("request_id", "")
        if rid in row:
            return None
        row[rid] = k
        k += 1
        ar = r.get("arrival")
        t = None
        if ar is None or not ar:
            ak = ARRIVAL_NONE
        elif "observed_offset_ns" in ar:
            ak, t = ARRIVAL_OBSERVED, ar["observed_offset_ns"]
        else:
            ak = ARRIVAL_AFTER_DEPENDENCIES
        ds = r.get("dependencies")
        p = r.get("prefix")
        deps = tuple([_dependency(d) for d in ds]) if ds else ()  # names from the typed decode's Literal
        add((rid, r.get("num_samples", 0), r.get("trajectory_id", ""), r.get("turn_index"), r.get("engine_id", ""),
             r.get("policy_version"), r.get("input_tokens", 0), tuple(r.get("output_tokens", ())), ak, t, deps,
             p.get("block_size_tokens", 0) if p else 0))
        hs = p.get("block_hashes") if p else None
        try:
            add_keys(hs, len(hs) if hs else 0)
        except OverflowError:
            return None  # above 2**64-1: the constructor refuses it
    keys.finish(cols)
    return cols, n
