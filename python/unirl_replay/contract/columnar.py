"""The ``arrow`` encoding (``ENCODING_ARROW``): a record stream as one Apache Arrow IPC file.

A third encoding of the same contract, beside ``jsonl`` and ``binpb``: the same records, the same
manifest (sha256 of the file's bytes, record count, byte size), the same typed errors. One Arrow
row per record, in record order, in the IPC *file* format (Feather v2; uncompressed record
batches of :data:`BATCH_ROWS` rows), so a reader maps the columns without decoding each record.

The Arrow schema is derived from the record message's descriptor (:func:`arrow_schema`), never
written by hand per field:

* the record message (``WorkloadRecord`` / ``OutcomeRecord``) -> one column per field (its
  ``record`` oneof members), each a nullable struct; exactly one is non-null in a row;
* a message field -> a nullable ``struct`` of its fields (null = not set; an empty message is an
  empty struct);
* ``repeated T`` -> a non-nullable ``list<T>`` with non-nullable items;
* scalars: ``string`` -> ``utf8``, ``bytes`` -> ``binary``, ``bool``, ``int32`` / ``sint32`` /
  ``sfixed32`` -> ``int32``, ``uint32`` / ``fixed32`` -> ``uint32``, the 64-bit kinds likewise,
  ``double`` -> ``float64``, ``float`` -> ``float32``; an enum -> ``int32`` (its number; an
  unknown number is kept, as in binpb);
* a field with presence (``optional``, a oneof member, a message) is nullable (null = absent);
  a field without presence is not nullable (a null there reads as the default, like an omitted
  JSON key).

Each Arrow field carries its protobuf field number as metadata (``proto.number``); the schema
names the message (``unirl_replay.message``). A reader accepts a file whose schema equals the
derived one (names, types, nullability; metadata not compared), or -- a newer revision of the same
message (docs/versioning.md) -- a *superset* of it: every derived field present, matched by its
field number (``proto.number``) with the same name, type and nullability (struct children
recursively, list items included), plus top-level columns or struct children this reader does not
know. Those are skipped (:func:`read_table` projects the table onto the derived schema and
returns their paths, as binpb skips unknown fields). Anything else -- a known field missing, of
another type or name, a column without a field number, another message -- is ``arrow.schema``.

Errors (all :class:`~unirl_replay.contract.errors.TraceFormatError`, naming the file): not an
Arrow IPC file, truncated or corrupt (offsets, UTF-8: the file is validated in full before any
value is read), or a batch whose body is compressed (found in the messages' flatbuffers before any
batch is decoded: a compressed body is decompressed into memory whatever size it claims) -> ``arrow.corrupt``; another schema -> ``arrow.schema``; a row with two record
kinds, or two members of a nested oneof -> ``arrow.oneof`` (line = the 1-based row); a value a
message cannot hold -> ``arrow.decode``. Without ``pyarrow`` (the optional ``columnar`` extra)
reading or writing this encoding raises :class:`~unirl_replay.contract.errors.MissingEnvironmentError`.

Limits: unknown fields a binpb message carries are not written (a copy through this encoding drops
them; the writer's schema is this reader's). :func:`read_table` (the column readers) keeps the whole file mapped;
the record stream (``trace_io.iter_records``: validate, replay's messages) holds one record batch at
a time (:func:`read_batches`), like the ``binpb`` / ``jsonl`` readers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from unirl_replay import SCHEMA_VERSION
from unirl_replay.contract.errors import MissingEnvironmentError, TraceFormatError

__all__ = ["BATCH_ROWS", "arrow_schema", "require_pyarrow", "ArrowRecordWriter", "read_table", "iter_messages", "to_row",
           "message_class", "two_set", "conflicts",
           "messages_of", "read_batches", "messages_of_batches", "MESSAGE_ROWS", "kernels"]

BATCH_ROWS = 1 << 14
"""Rows per record batch the writer makes (bounds the writer's memory; readers take any batching)."""
MESSAGE_ROWS = 1 << 12
"""Rows a streaming reader (:func:`messages_of_batches`) turns into Python values at a time (bounds its memory)."""

_F = FieldDescriptor
_SCALAR = {  # FieldDescriptor.TYPE_* -> pyarrow type factory name
    _F.TYPE_DOUBLE: "float64", _F.TYPE_FLOAT: "float32",
    _F.TYPE_INT64: "int64", _F.TYPE_SINT64: "int64", _F.TYPE_SFIXED64: "int64",
    _F.TYPE_UINT64: "uint64", _F.TYPE_FIXED64: "uint64",
    _F.TYPE_INT32: "int32", _F.TYPE_SINT32: "int32", _F.TYPE_SFIXED32: "int32",
    _F.TYPE_UINT32: "uint32", _F.TYPE_FIXED32: "uint32",
    _F.TYPE_BOOL: "bool_", _F.TYPE_STRING: "string", _F.TYPE_BYTES: "binary", _F.TYPE_ENUM: "int32",
}


def require_pyarrow():
    """The ``pyarrow`` module, or :class:`MissingEnvironmentError` saying how to install it."""
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        raise MissingEnvironmentError("the arrow trace encoding needs pyarrow, which is not installed: "
                                      "pip install 'unirl-replay[columnar]' (or uv sync --extra columnar), "
                                      "or use the jsonl / binpb encoding") from None
    return pyarrow


class _Kernels:
    """The ``pyarrow.compute`` kernels this project's column readers and row writer call, each with
    the options ``pyarrow.compute``'s wrapper passes for the same call (its defaults), through
    ``pyarrow._compute.call_function``: the same kernels, without importing ``pyarrow.compute``, whose
    module body wraps and documents every registered kernel (~0.08 s of CPU per process, measured
    on the 100k convert; docs/benchmarks-convert.md). Array methods such as ``take`` /
    ``fill_null`` / ``is_valid`` import ``pyarrow.compute`` on first use: call these instead."""

    __slots__ = ("_call", "_cast", "_take", "_match", "_pad")

    def __init__(self, call, cast_options, take_options, match_options, pad_options) -> None:
        self._call, self._cast, self._take = call, cast_options, take_options
        self._match, self._pad = match_options, pad_options

    def cast(self, arr, target_type):  # pc.cast(arr, target_type): a safe cast
        return self._call("cast", [arr], self._cast.safe(target_type))

    def take(self, data, indices):  # pc.take / Array.take: bounds checked
        return self._call("take", [data, indices], self._take(boundscheck=True))

    def fill_null(self, values, fill_value):  # pc.fill_null / Array.fill_null with a Python scalar
        import pyarrow

        return self._call("coalesce", [values, pyarrow.scalar(fill_value, type=values.type)])

    def is_valid(self, values):
        return self._call("is_valid", [values])

    def all(self, values):  # its default options: skip nulls, min_count 1
        return self._call("all", [values])

    def match_substring(self, strings, pattern):
        return self._call("match_substring", [strings], self._match(pattern))

    def match_substring_regex(self, strings, pattern):
        return self._call("match_substring_regex", [strings], self._match(pattern))

    def if_else(self, cond, left, right):
        return self._call("if_else", [cond, left, right])

    def replace_with_mask(self, values, mask, replacements):
        return self._call("replace_with_mask", [values, mask, replacements])

    def utf8_lpad(self, strings, width, padding):
        return self._call("utf8_lpad", [strings], self._pad(width=width, padding=padding))

    def binary_join(self, lists, separator):
        return self._call("binary_join", [lists, separator])

    def binary_join_element_wise(self, *strings):  # the last one is the separator; nulls emit null
        return self._call("binary_join_element_wise", list(strings))

    def list_parent_indices(self, lists):
        return self._call("list_parent_indices", [lists])

    def dictionary_encode(self, values):  # pc.dictionary_encode: indices in first-seen order, nulls kept null
        return self._call("dictionary_encode", [values])

    def index_in(self, values, value_set):  # pc.index_in(values, value_set=...): first match, else null
        from pyarrow._compute import SetLookupOptions

        return self._call("index_in", [values], SetLookupOptions(value_set=value_set))


@functools.cache
def kernels() -> _Kernels:
    """The :class:`_Kernels` (pyarrow must be installed: :func:`require_pyarrow`)."""
    try:
        from pyarrow._compute import CastOptions, MatchSubstringOptions, PadOptions, TakeOptions, call_function
    except ImportError:  # another pyarrow layout: its public names (the same objects)
        from pyarrow.compute import CastOptions, MatchSubstringOptions, PadOptions, TakeOptions, call_function
    return _Kernels(call_function, CastOptions, TakeOptions, MatchSubstringOptions, PadOptions)


def _is_repeated(fd: FieldDescriptor) -> bool:
    return fd.is_repeated


def _arrow_type(pa, fd: FieldDescriptor, depth: int):
    if fd.type == _F.TYPE_MESSAGE:
        m = fd.message_type
        if m.GetOptions().map_entry:
            raise TypeError(f"{fd.full_name}: map fields have no arrow mapping yet")
        if depth > 32:
            raise TypeError(f"{fd.full_name}: messages nested deeper than 32 (recursive?) have no arrow mapping")
        return pa.struct([_arrow_field(pa, c, depth + 1) for c in m.fields])
    if fd.type not in _SCALAR:
        raise TypeError(f"{fd.full_name}: field type {fd.type} has no arrow mapping")
    return getattr(pa, _SCALAR[fd.type])()


def _arrow_field(pa, fd: FieldDescriptor, depth: int = 0):
    t = _arrow_type(pa, fd, depth)
    meta = {"proto.number": str(fd.number)}
    if _is_repeated(fd):
        return pa.field(fd.name, pa.list_(pa.field("item", t, nullable=False)), nullable=False, metadata=meta)
    return pa.field(fd.name, t, nullable=bool(fd.has_presence), metadata=meta)


@functools.cache
def arrow_schema(descriptor: Descriptor):
    """The Arrow schema of a record stream of ``descriptor``'s messages (module doc: the rules)."""
    pa = require_pyarrow()
    return pa.schema([_arrow_field(pa, f) for f in descriptor.fields],
                     metadata={"unirl_replay.message": descriptor.full_name,
                               "unirl_replay.schema_version": SCHEMA_VERSION})


# ---------------------------------------------------------------------------------------------
# message <-> row (a dict of the Arrow struct's fields; None = absent)

_SCALAR_K, _PRESENCE_K, _MESSAGE_K, _REP_SCALAR_K, _REP_MESSAGE_K = range(5)


@functools.cache
def _plan(descriptor: Descriptor) -> tuple:
    out = []
    for fd in descriptor.fields:
        if _is_repeated(fd):
            kind = _REP_MESSAGE_K if fd.type == _F.TYPE_MESSAGE else _REP_SCALAR_K
        elif fd.type == _F.TYPE_MESSAGE:
            kind = _MESSAGE_K
        else:
            kind = _PRESENCE_K if fd.has_presence else _SCALAR_K
        out.append((fd.name, kind, fd.message_type if fd.type == _F.TYPE_MESSAGE else None))
    return tuple(out)


def to_row(msg) -> dict:
    """``msg`` as an Arrow row (nested dicts and lists; None for an absent field)."""
    row = {}
    for name, kind, sub in _plan(msg.DESCRIPTOR):
        if kind == _SCALAR_K:
            row[name] = getattr(msg, name)
        elif kind == _PRESENCE_K:
            row[name] = getattr(msg, name) if msg.HasField(name) else None
        elif kind == _MESSAGE_K:
            row[name] = to_row(getattr(msg, name)) if msg.HasField(name) else None
        elif kind == _REP_SCALAR_K:
            row[name] = list(getattr(msg, name))
        else:
            row[name] = [to_row(m) for m in getattr(msg, name)]
    return row


def _real_oneofs(descriptor: Descriptor) -> tuple:
    """Member names of each oneof that is not the synthetic one of a proto3 ``optional`` field."""
    return tuple(tuple(f.name for f in o.fields) for o in descriptor.oneofs
                 if not (len(o.fields) == 1 and o.name == "_" + o.fields[0].name))


@functools.cache
def _oneofs(descriptor: Descriptor) -> tuple:
    """(this message's real oneofs, its message fields whose type (transitively) has one)."""
    nested = tuple((f.name, f.message_type, _is_repeated(f)) for f in descriptor.fields
                   if f.type == _F.TYPE_MESSAGE and _has_oneof(f.message_type))
    return _real_oneofs(descriptor), nested


@functools.cache
def _has_oneof(descriptor: Descriptor, depth: int = 0) -> bool:
    if _real_oneofs(descriptor):
        return True
    return depth < 32 and any(_has_oneof(f.message_type, depth + 1) for f in descriptor.fields
                              if f.type == _F.TYPE_MESSAGE)


def null_item(descriptor: Descriptor, row: dict, prefix: str = "") -> str | None:
    """Where ``row`` (a row of ``descriptor``'s struct) holds a null list item -- the one value no message holds
    (the schema's items are not nullable, but an IPC file may carry a validity bitmap for them) -- worded for
    an error naming the field (``request.sample_ids[0] is null ...``); None when it holds none."""
    for name, kind, sub in _plan(descriptor):
        v = row.get(name)
        if v is None:
            continue
        if kind in (_REP_SCALAR_K, _REP_MESSAGE_K):
            for i, item in enumerate(v):
                if item is None:
                    return f"{prefix}{name}[{i}] is null (a list item is never null: the schema's items are not nullable)"
                if kind == _REP_MESSAGE_K and (why := null_item(sub, item, f"{prefix}{name}[{i}].")):
                    return why
        elif kind == _MESSAGE_K and (why := null_item(sub, v, f"{prefix}{name}.")):
            return why
    return None


def message_class(descriptor: Descriptor):
    """The generated message class of ``descriptor``."""
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def two_set(descriptor: Descriptor, row: dict) -> str | None:
    """The path of a oneof with two members set in ``row`` (and its nested rows), else None."""
    real, nested = _oneofs(descriptor)
    for members in real:
        if sum(row.get(m) is not None for m in members) > 1:
            return "/".join(m for m in members if row.get(m) is not None)
    for name, sub, rep in nested:
        v = row.get(name)
        if v is None:
            continue
        for item in (v if rep else (v,)):
            if item is not None and (bad := two_set(sub, item)) is not None:
                return f"{name}.{bad}"
    return None


def conflicts(arr, descriptor: Descriptor, mask, depth: int = 0) -> dict:
    """Rows (indices into ``arr``) where a oneof of ``descriptor`` (or of a message nested in it)
    has two members set, -> the oneof's path; vectorised over a struct array of ``descriptor``'s
    rows (``mask``: the rows whose message is present). Same answer as :func:`two_set` per row."""
    import numpy as np

    real, nested = _oneofs(descriptor)
    out: dict = {}
    if not real and not nested:
        return out

    def valid(x):
        return np.ones(len(x), np.bool_) if x.null_count == 0 else kernels().is_valid(x).to_numpy(zero_copy_only=False)

    mask = mask & valid(arr)  # a null item of a list holds no message
    for members in real:
        vs = [valid(arr.field(m)) & mask for m in members]
        for i in np.flatnonzero(np.sum(vs, axis=0) > 1).tolist():
            out.setdefault(i, "/".join(m for m, v in zip(members, vs) if v[i]))
    for name, sub, rep in nested:
        child = arr.field(name)
        cmask = valid(child) & mask
        if rep:
            flat = child.flatten()  # the items of the present lists, in order
            parents = kernels().list_parent_indices(child).to_numpy(zero_copy_only=False)
            for i, path in conflicts(flat, sub, cmask[parents], depth + 1).items():
                out.setdefault(int(parents[i]), f"{name}.{path}")
        else:
            for i, path in conflicts(child, sub, cmask, depth + 1).items():
                out.setdefault(i, f"{name}.{path}")
    return out


def messages_of(table, cls, file: str, first_line: int = 1, on_error=None) -> Iterator[tuple[int, object]]:
    """``(line, message)`` for every row of ``table`` (a validated table or record batch of ``cls``'s schema);
    ``line`` counts rows from ``first_line``. A row no message can hold raises (or is passed to
    ``on_error``, then skipped) :class:`TraceFormatError` ``arrow.oneof`` / ``arrow.decode``."""
    desc = cls.DESCRIPTOR
    n = first_line - 1
    batches = table.to_batches(max_chunksize=BATCH_ROWS) if hasattr(table, "to_batches") else (table,)
    import numpy as np

    for batch in batches:
        bad_rows = conflicts(batch.to_struct_array(), desc, np.ones(batch.num_rows, np.bool_))
        for k, row in enumerate(batch.to_pylist()):
            n += 1
            bad = bad_rows.get(k) if bad_rows else None
            if bad is not None:
                err = TraceFormatError(f"row sets several members of one oneof ({bad}); a "
                                       f"{desc.full_name} holds one", file=file, line=n, rule="arrow.oneof")
            else:
                try:
                    yield n, cls(**row)
                    continue
                except (TypeError, ValueError, OverflowError) as e:
                    err = TraceFormatError(f"not a valid {desc.full_name}: {null_item(desc, row) or e}", file=file,
                                           line=n, rule="arrow.decode")
            if on_error is None:
                raise err
            on_error(err)


# ---------------------------------------------------------------------------------------------
# reading


def read_table(source: str | Path | BinaryIO, cls, file: str, skipped: list[str] | None = None):
    """The validated Arrow table of one record file (``source``: a path, memory-mapped, or an open
    binary file), in the schema this reader derives (a newer revision's superset schema projected
    onto it; the paths of the skipped fields, e.g. ``request.reasoning_tokens``, are appended to
    ``skipped``). Raises :class:`TraceFormatError` ``arrow.corrupt`` / ``arrow.schema``."""
    pa, reader, want, extra = _open_checked(source, cls, file)
    try:
        table = reader.read_all()
        table.validate(full=True)  # offsets, lengths, UTF-8: before any value is read
        if extra:
            table = _project_table(pa, table, want)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceFormatError(f"corrupt Arrow IPC file ({_short(e)})", file=file, rule="arrow.corrupt") from None
    if skipped is not None:
        skipped.extend(extra)
    return table


def read_batches(source: str | Path | BinaryIO, cls, file: str, skipped: list[str] | None = None):
    """What :func:`read_table` checks and returns, as an iterator over the file's record batches
    (each projected like the table) that holds one batch in memory at a time, not the file: every
    batch is read and validated in full first (the same checks, raised here, before any value is
    read; a batch that fails them hands over to :func:`read_table`, which words the error), then read
    again as the iterator goes. For a streaming reader (validate's passes); ``skipped`` as in :func:`read_table`."""
    pa, reader, want, extra = _open_checked(source, cls, file)
    n = reader.num_record_batches
    try:
        for i in range(n):
            reader.get_batch(i).validate(full=True)  # offsets, lengths, UTF-8: before any value is read
    except (pa.ArrowException, OSError, ValueError):
        # a batch that does not read or validate: the whole-table path words the error as it always has
        # (the table's own message, "In chunk k"), or, should it take the file, hands over its batches
        return iter(read_table(source, cls, file, skipped).to_batches())
    if skipped is not None:
        skipped.extend(extra)

    def batches():
        for i in range(n):
            try:
                b = reader.get_batch(i)
            except (pa.ArrowException, OSError, ValueError) as e:  # the file changed under the reader
                raise TraceFormatError(f"corrupt Arrow IPC file ({_short(e)})", file=file,
                                       rule="arrow.corrupt") from None
            yield _project_table(pa, pa.Table.from_batches([b]), want) if extra else b
    return batches()


def _open_checked(source, cls, file: str):
    """``(pyarrow, the IPC file reader, the derived schema, the skipped paths)`` of one record file,
    its footer, batch compression and schema checked (see :func:`read_table`)."""
    pa = require_pyarrow()
    want = arrow_schema(cls.DESCRIPTOR)
    try:
        src = pa.memory_map(str(source)) if isinstance(source, (str, Path)) else source
        reader = pa.ipc.open_file(src)
        schema = reader.schema
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceFormatError(f"not a readable Arrow IPC file ({_short(e)}); an arrow trace's record files are "
                               "Arrow IPC files (Feather v2) written by TraceWriter(encoding='arrow')",
                               file=file, rule="arrow.corrupt") from None
    why = _compressed_batch(src)
    if why:
        raise TraceFormatError(f"{why}: an arrow trace's record batches are uncompressed (a compressed body is "
                               "decompressed into memory whatever its size: a few hundred KiB can claim tens of GiB)"
                               if why.endswith(" is compressed") else f"corrupt Arrow IPC file ({why})",
                               file=file, rule="arrow.corrupt")
    bad = _undecodable(schema)
    if bad:
        raise TraceFormatError(f"corrupt Arrow IPC file: {bad} is not UTF-8", file=file,
                               rule="arrow.corrupt")
    extra: list[str] = []
    if not schema.equals(want):
        try:
            _superset(schema, want, cls.DESCRIPTOR.full_name, extra)
        except _Mismatch as e:
            raise TraceFormatError(f"Arrow schema differs from the {cls.DESCRIPTOR.full_name} schema this reader "
                                   f"derives from the contract ({e}; {_schema_diff(schema, want)}); a file of "
                                   "another message or another tool (a newer contract revision may only add "
                                   "fields)", file=file, rule="arrow.schema") from None
    return pa, reader, want, extra


def _undecodable(schema) -> str | None:
    """Which field name of ``schema`` (at any depth) is not UTF-8, or None. pyarrow decodes a name only when
    it is read (``Field.name``, ``Schema.names``: a ``UnicodeDecodeError`` wherever that happens later; its
    ``to_string`` replaces the bytes instead), so a corrupt file's names are decoded once here, each, before
    any is read. Metadata values are bytes, decoded leniently where they are read."""
    def children(t):
        if hasattr(t, "value_field"):  # list, large list, fixed-size list
            return [t.value_field]
        if hasattr(t, "key_field"):  # map
            return [t.key_field, t.item_field]
        return [t.field(i) for i in range(t.num_fields)] if t.num_fields and hasattr(t, "field") else []

    def walk(fields, path):
        for i, f in enumerate(fields):
            try:
                name = f.name
            except UnicodeDecodeError as e:
                return f"the name of field {i} of {path[:-1] or 'the schema'} ({e.reason})"
            why = walk(children(f.type), f"{path}{name}.")
            if why:
                return why
        return None

    return walk([schema.field(i) for i in range(len(schema))], "")


def _compressed_batch(src) -> str | None:
    """Which record / dictionary batch of the IPC file ``src`` (a pyarrow file or a Python binary file, its footer
    already verified by ``open_file``) declares a compressed body (``RecordBatch.compression``, Arrow's
    format/Message.fbs), read from the flatbuffers without decoding a batch; None when none does; a batch whose
    message cannot be walked is reported too (never decoded on trust)."""
    import struct

    def read_at(offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > size:
            raise ValueError(f"{n} bytes at {offset} are outside the file's {size}")
        src.seek(offset)
        b = src.read(n)
        if len(b) != n:
            raise ValueError("beyond the end of the file")
        return b

    def unpack(fmt: str, b: bytes, at: int):
        if at < 0:  # struct counts a negative offset from the end
            raise ValueError("negative offset")
        return struct.unpack_from(fmt, b, at)[0]

    def u32(b: bytes, at: int) -> int:
        return unpack("<I", b, at)

    def field(b: bytes, table: int, index: int) -> int | None:
        """Position of field ``index`` of the flatbuffer table at ``table`` (None when absent)."""
        vt = table - unpack("<i", b, table)
        vt_len = unpack("<H", b, vt)
        if 4 + 2 * index + 2 > vt_len:
            return None
        off = unpack("<H", b, vt + 4 + 2 * index)
        return table + off if off else None

    def ref(b: bytes, at: int) -> int:
        return at + u32(b, at)

    pos = src.tell()
    size = src.seek(0, 2)
    try:
        tail = read_at(size - 10, 10)
        flen = unpack("<i", tail, 0)
        footer = read_at(size - 10 - flen, flen)
        root = u32(footer, 0)
        blocks: list[tuple[str, int]] = []
        for index, kind in ((2, "dictionary"), (3, "record")):  # Footer.dictionaries, Footer.recordBatches
            at = field(footer, root, index)
            if at is None:
                continue
            vec = ref(footer, at)
            for k in range(u32(footer, vec)):
                blocks.append((f"{kind} batch {k}", unpack("<q", footer, vec + 4 + 24 * k)))
    except (struct.error, ValueError, OSError) as e:
        return f"its footer cannot be walked ({e})"
    for name, offset in blocks:
        try:
            head = read_at(offset, 8)
            mlen, start = (u32(head, 4), offset + 8) if u32(head, 0) == 0xFFFFFFFF else (u32(head, 0), offset + 4)
            msg = read_at(start, mlen)
            mroot = u32(msg, 0)
            at = field(msg, mroot, 2)  # Message.header
            if at is None:
                continue
            header = ref(msg, at)
            kind_at = field(msg, mroot, 1)  # Message.header_type: 2 DictionaryBatch, 3 RecordBatch
            kind = unpack("<B", msg, kind_at) if kind_at is not None else 0
            if kind == 2:
                data = field(msg, header, 1)  # DictionaryBatch.data
                if data is None:
                    continue
                header = ref(msg, data)
            elif kind != 3:
                continue
            if field(msg, header, 3) is not None:  # RecordBatch.compression
                return f"{name} is compressed"
        except (struct.error, ValueError, OSError) as e:
            return f"{name}'s message cannot be walked ({e})"
    src.seek(pos)
    return None


class _Mismatch(Exception):
    """Why a file's schema is not a superset of the derived one."""


def _number(f) -> bytes | None:
    return (f.metadata or {}).get(b"proto.number")


def _superset(got, want, message: str, extra: list[str]) -> None:
    """Raise :class:`_Mismatch` unless schema ``got`` is ``want`` plus fields this reader does not
    know (a newer revision of ``message``); append those fields' paths to ``extra``."""
    name = (got.metadata or {}).get(b"unirl_replay.message")
    if name != message.encode():
        raise _Mismatch(f"the file's schema names message {name.decode(errors='replace') if name else None!r}")
    _match_fields(list(got), list(want), "", extra)


def _match_fields(got: list, want: list, path: str, extra: list[str]) -> None:
    by_number = {}
    for g in got:
        num = _number(g)
        if num is None:
            raise _Mismatch(f"column {path}{g.name} carries no field number (proto.number)")
        if num in by_number:
            raise _Mismatch(f"field number {num.decode(errors='replace')} appears twice ({path}{by_number[num].name}, {path}{g.name})")
        by_number[num] = g
    known = {w.name for w in want}
    for w in want:
        num = _number(w)
        g = by_number.pop(num, None)
        if g is None:
            raise _Mismatch(f"field {path}{w.name} (#{num.decode()}) is missing")
        if g.name != w.name:
            raise _Mismatch(f"field #{num.decode()} is {path}{g.name}, expected {path}{w.name}")
        if g.nullable != w.nullable:
            raise _Mismatch(f"field {path}{w.name} differs in nullability")
        _match_type(g.type, w.type, path + w.name, extra)
    for g in by_number.values():
        if g.name in known:
            raise _Mismatch(f"field {path}{g.name} has number {_number(g).decode(errors='replace')}, not this reader's")
        extra.append(path + g.name)


def _match_type(got, want, path: str, extra: list[str]) -> None:
    import pyarrow as pa

    if pa.types.is_struct(want) and pa.types.is_struct(got):
        _match_fields([got.field(i) for i in range(got.num_fields)],
                      [want.field(i) for i in range(want.num_fields)], path + ".", extra)
    elif pa.types.is_list(want) and pa.types.is_list(got):
        if got.value_field.nullable != want.value_field.nullable:
            raise _Mismatch(f"the items of {path} differ in nullability")
        _match_type(got.value_type, want.value_type, path + "[]", extra)
    elif not got.equals(want):
        raise _Mismatch(f"field {path} is {got}, expected {want}")


def _project_table(pa, table, want):
    """``table`` (a superset schema checked by :func:`_superset`) with only ``want``'s fields."""
    cols = []
    for w in want:
        col = table.column(w.name)
        cols.append(col if col.type.equals(w.type) else
                    pa.chunked_array([_project(pa, c, w.type) for c in col.chunks], type=w.type))
    return pa.Table.from_arrays(cols, schema=want)


def _project(pa, arr, want):
    if arr.type.equals(want):
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(want) and want.num_fields == 0:  # an empty message a newer revision filled
        return pa.Array.from_buffers(want, len(arr), [arr.buffers()[0]], null_count=arr.null_count,
                                     offset=arr.offset, children=[])
    if pa.types.is_struct(want):
        fields = [want.field(i) for i in range(want.num_fields)]
        return pa.StructArray.from_arrays([_project(pa, arr.field(f.name), f.type) for f in fields],
                                          fields=fields, mask=mask)
    # a list (_match_type: only structs and lists differ)
    return pa.ListArray.from_arrays(arr.offsets, _project(pa, arr.values, want.value_type), type=want, mask=mask)


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def _schema_diff(got, want) -> str:
    gn, wn = got.names, want.names
    if gn != wn:
        return f"columns {gn[:8]} where {wn[:8]} are expected"
    for g, w in zip(got, want):
        if not g.equals(w):
            return f"column {w.name!r} is {g.type}{'' if g.nullable == w.nullable else ' (nullability)'}, expected {w.type}"
    return "metadata"


def iter_messages(f: BinaryIO, cls, file: str, on_error=None) -> Iterator[tuple[int, object]]:
    """``(1-based row, message)`` of one open record file (see :func:`read_table`), one record batch
    in memory at a time (:func:`read_batches`)."""
    yield from messages_of_batches(read_batches(f, cls, file), cls, file, on_error=on_error)


def messages_of_batches(batches, cls, file: str, on_error=None) -> Iterator[tuple[int, object]]:
    """:func:`messages_of` over record batches (:func:`read_batches`), rows numbered across them,
    at most :data:`MESSAGE_ROWS` rows turned into Python values at a time."""
    n = 0
    for b in batches:
        for off in range(0, b.num_rows, MESSAGE_ROWS):
            part = b.slice(off, MESSAGE_ROWS)
            yield from messages_of(part, cls, file, first_line=n + 1, on_error=on_error)
            n += part.num_rows


# ---------------------------------------------------------------------------------------------
# writing


class ArrowRecordWriter:
    """Writes messages of one type (``descriptor``'s) as an Arrow IPC file to ``sink`` (a path,
    a pyarrow NativeFile or a Python file object).

    Rows are buffered and written as record batches of :data:`BATCH_ROWS`; :meth:`close` writes
    the last batch and the footer. The bytes depend only on the records (no timestamps).
    """

    def __init__(self, sink, descriptor: Descriptor) -> None:
        pa = require_pyarrow()
        self._pa = pa
        self.schema = arrow_schema(descriptor)
        self._w = pa.ipc.new_file(sink, self.schema)
        self._rows: list[dict] = []
        self.count = 0

    def write(self, msg) -> None:
        self._rows.append(to_row(msg))
        self.count += 1
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._w.write_batch(self._pa.RecordBatch.from_pylist(self._rows, schema=self.schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._w.close()
