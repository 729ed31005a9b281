"""Direct JSON writer of the contract's messages: the profile of :mod:`json_profile`, faster,
with map keys sorted.

:func:`json_profile.to_dict` (``json_format.MessageToDict``) is pure Python per field and writes
map entries in the order the protobuf runtime iterates them, which differs from run to run; a
``replay_result.json`` of 100k requests took seconds. This module walks ``Message.ListFields()``
(the set fields in field-number order, exactly the fields ``MessageToDict`` writes) with a
per-message-type table compiled once from the descriptor, writes every map with its keys sorted,
and encodes with ``msgspec`` (C).

What it writes is the profile value for value: the same keys in the same order (maps sorted),
64-bit integers as decimal strings, enums by name (the number when the name is unknown), doubles
as numbers (``"NaN"`` / ``"Infinity"`` / ``"-Infinity"`` spelled as ``json_format`` does), bytes
as base64, well-known types through ``json_format``. Text differs from ``json.dumps`` only in the
spelling of float exponents (``1e-07`` there, ``1e-7`` here: the same double). Checked by
``tests/test_json_write.py`` (hypothesis: equal dicts, equal messages after parsing back, sorted
map keys, byte identity for messages without maps or float exponents).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from operator import attrgetter, itemgetter
from typing import Any, Callable

import msgspec
import numpy as np
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.internal.type_checkers import ToShortestFloat
from google.protobuf.message import Message

from unirl_replay.contract.gc_pause import paused_gc

__all__ = ["to_dict", "to_json", "to_json_bytes", "to_json_line"]

_T = FieldDescriptor
_STR = {_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64, _T.TYPE_UINT64, _T.TYPE_FIXED64}
_SAME = {_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32, _T.TYPE_UINT32, _T.TYPE_FIXED32, _T.TYPE_BOOL,
         _T.TYPE_STRING}
_encode = msgspec.json.Encoder().encode


def _double(v):
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _float(v):
    return ToShortestFloat(v) if math.isfinite(v) else _double(v)


def _bytes(v):
    return base64.b64encode(v).decode("utf-8")


def _wkt(v):
    return json_format.MessageToDict(v, preserving_proto_field_name=True)


def _enum(fd: FieldDescriptor) -> Callable:
    names = {n: ev.name for n, ev in fd.enum_type.values_by_number.items()}
    return lambda v: names.get(v, v)


def _value(fd: FieldDescriptor) -> Callable | None:
    """Converter of one (non-repeated) value of ``fd``; None = the value itself."""
    t = fd.type
    if t in _SAME:
        return None
    if t in _STR:
        return str
    if t == _T.TYPE_DOUBLE:
        return _double
    if t == _T.TYPE_FLOAT:
        return _float
    if t == _T.TYPE_BYTES:
        return _bytes
    if t == _T.TYPE_ENUM:
        return _enum(fd)
    if fd.message_type.full_name.startswith("google.protobuf."):
        return _wkt
    return _table(fd.message_type)


def _map_key(fd: FieldDescriptor) -> Callable:
    if fd.type == _T.TYPE_BOOL:
        return lambda k: "true" if k else "false"
    return str


def _field(fd: FieldDescriptor) -> Callable:
    mt = fd.message_type
    if mt is not None and mt.GetOptions().map_entry:
        kc, vc = _map_key(mt.fields_by_name["key"]), _value(mt.fields_by_name["value"])
        if vc is None:
            return lambda m: {kc(k): m[k] for k in sorted(m)}
        return lambda m: {kc(k): vc(m[k]) for k in sorted(m)}
    vc = _value(fd)
    if fd.is_repeated:
        if vc is None:
            return list
        return lambda vs: list(map(vc, vs))
    return vc


_TABLES: dict[Any, Callable[[Message], dict]] = {}  # Descriptor -> converter
_FLAT_IMPLICIT = _SAME | _STR | {_T.TYPE_ENUM}  # implicit presence: set = truthy (0, "", False are unset)
_FLAT_EXPLICIT = _FLAT_IMPLICIT | {_T.TYPE_DOUBLE, _T.TYPE_FLOAT, _T.TYPE_BYTES}


def _flat(desc: Descriptor) -> Callable[[Message], dict] | None:
    """A straight-line converter for a message type whose fields are all singular scalars (no
    message, repeated or map field), or None. It writes what :func:`_general` writes (the
    ``ListFields`` walk) key for key: fields in number order, an explicit-presence field when
    ``HasField``, an implicit-presence one when its value is not the default (ints, bools,
    enums, strings only: the defaults ``ListFields`` skips are exactly the falsy values), each
    through the same value converter. Compiled once per type (``exec`` of generated source: a
    few attribute reads per message instead of ``ListFields`` and a loop; tested against
    :func:`_general`)."""
    import keyword

    lines, env = ["def convert(m):", "    d = {}"], {}
    for fd in sorted(desc.fields, key=lambda f: f.number):
        name = fd.name
        if fd.is_repeated or fd.message_type is not None or not name.isidentifier() or keyword.iskeyword(name):
            return None
        if fd.type not in (_FLAT_EXPLICIT if fd.has_presence else _FLAT_IMPLICIT):
            return None
        c = _value(fd)
        val = "v" if c is None else f"_c{fd.number}(v)"
        if c is not None:
            env[f"_c{fd.number}"] = c
        if fd.has_presence:
            lines += [f"    if m.HasField({name!r}):", f"        v = m.{name}", f"        d[{name!r}] = {val}"]
        else:
            lines += [f"    v = m.{name}", "    if v:", f"        d[{name!r}] = {val}"]
    lines.append("    return d")
    exec("\n".join(lines), env)  # noqa: S102 - source generated above from the descriptor
    return env["convert"]


def _table(desc: Descriptor) -> Callable[[Message], dict]:
    conv = _TABLES.get(desc)  # by descriptor, not name: another pool may define the same name differently
    if conv is not None:
        return conv
    conv = _flat(desc) or _general(desc)
    _TABLES[desc] = conv
    return conv


_GENERAL: dict[Any, Callable[[Message], dict]] = {}  # Descriptor -> the ListFields converter


def _general(desc: Descriptor) -> Callable[[Message], dict]:
    """The ``ListFields`` converter of ``desc`` (every message type; the reference of :func:`_flat`)."""
    conv = _GENERAL.get(desc)
    if conv is not None:
        return conv
    fields: dict[int, tuple[str, Callable | None]] = {}

    def convert(msg: Message) -> dict:
        out = {}
        for fd, v in msg.ListFields():
            name, c = fields[fd.number]
            out[name] = v if c is None else c(v)
        return out

    _GENERAL[desc] = convert  # before the fields: recursive message types
    if desc not in _TABLES:
        _TABLES[desc] = convert
    for fd in desc.fields:
        fields[fd.number] = (fd.name, _field(fd))
    return convert


# --- the same text, written column by column for long repeated fields of flat row types -------

_ROWS_MIN = 256  # a repeated message field at least this long is written by columns (when its type allows)
_COLUMNS: dict[Any, Callable[[list], bytes] | None] = {}  # Descriptor -> rows writer (None: not columnar)
_COLUMN_TYPES = _SAME | _STR | {_T.TYPE_ENUM}


def _rows_writer(desc: Descriptor) -> Callable[[list], bytes] | None:
    """For a flat row type (every field a singular string, integer, bool or enum: the result rows
    ``PredictedRequest`` / ``PredictedTrajectory`` / ``PredictedGroup`` / ``PredictedBatch``), a
    writer of a list of its messages as the compact JSON array ``_encode([to_dict(m) for m in
    rows])`` writes, byte for byte, built column by column: each field read once per row
    (``attrgetter``), strings / bools / enums turned into their JSON text (the encoder's own
    text for strings), then one ``%`` format per row with the template of the row's fields
    (``"name":"%d"`` for 64-bit integers, as ``str`` writes them). A field is absent from a
    row where ``to_dict`` leaves it out: its value is the default and (explicit presence)
    ``HasField`` is false. Rows are grouped by the set of fields they lack; the most common
    set's template formats every row, the others are formatted again with their own. None for
    any other type. Tested against the dict path (``tests/test_json_write.py``)."""
    if desc in _COLUMNS:
        return _COLUMNS[desc]
    fields = []
    ok = _flat(desc) is not None
    for fd in sorted(desc.fields, key=lambda f: f.number) if ok else ():
        if fd.type not in _COLUMN_TYPES:
            ok = False
            break
        key = _encode(fd.name) + b":"
        if fd.type == _T.TYPE_STRING or fd.type == _T.TYPE_BOOL:
            text = None
        elif fd.type == _T.TYPE_ENUM:
            text = {n: _encode(ev.name) for n, ev in fd.enum_type.values_by_number.items()}
        else:
            text = key + (b'"%d"' if fd.type in _STR else b"%d")
        fields.append((fd.name, fd.has_presence, fd.type, key + b"%s" if text is None or isinstance(text, dict)
                       else text, text))
    conv = _columns_writer(fields) if ok and len(fields) < 63 else None  # the bits of a row fit an int64
    _COLUMNS[desc] = conv
    return conv


def _columns_writer(fields: list) -> Callable[[list], bytes]:
    specs = [spec for _, _, _, spec, _ in fields]

    def template(mask: int) -> bytes:  # the fields whose bit is not in ``mask``
        return b"{" + b",".join(s for k, s in enumerate(specs) if not mask >> k & 1) + b"}"

    def text_of(k: int, vals: list) -> list:  # field k's values -> their JSON text (ints: the value)
        _name, _explicit, ftype, _spec, text = fields[k]
        if ftype == _T.TYPE_STRING:
            uniq = set(vals)
            if len(uniq) * 4 < len(vals):
                enc = {u: _encode(u) for u in uniq}
                return list(map(enc.__getitem__, vals))
            return list(map(_encode, vals))
        if ftype == _T.TYPE_BOOL:
            return [b"true" if v else b"false" for v in vals]
        if ftype == _T.TYPE_ENUM:
            return [text[v] if v in text else b"%d" % v for v in vals]
        return vals

    def write(rows: list) -> bytes:
        n = len(rows)
        cols, masks = [], None  # masks: per row, the bits of the fields it lacks (numpy; None: none lacks any)
        for k, (name, explicit, ftype, _spec, text) in enumerate(fields):
            vals = list(map(attrgetter(name), rows))
            if not all(vals):  # a default value: absent unless set
                idx = [i for i, v in enumerate(vals) if not v]
                if explicit:
                    idx = [i for i in idx if not rows[i].HasField(name)]
                if idx:
                    if masks is None:
                        masks = np.zeros(n, np.int64)
                    masks[idx] |= 1 << k
            cols.append(text_of(k, vals))
        return rows_text(n, cols, masks)

    def write_columns(given: list, n: int) -> bytes:
        """The same text from the ``n`` rows' values as columns, one list per field in
        field-number order: a message's value of that field, or None where an explicit-presence
        field is not set (an implicit-presence field is absent where its value is the default,
        as in a message)."""
        cols, masks = [], None
        for k, (name, explicit, ftype, _spec, text) in enumerate(fields):
            vals = given[k]
            if len(vals) != n:
                raise ValueError(f"column {name!r}: {len(vals)} values, not {n}")
            idx = None
            if explicit:
                if None in vals:
                    idx = [i for i, v in enumerate(vals) if v is None]
                    zero = False if ftype == _T.TYPE_BOOL else ("" if ftype == _T.TYPE_STRING else 0)
                    vals = [zero if v is None else v for v in vals]
            elif not all(vals):
                idx = [i for i, v in enumerate(vals) if not v]
            if idx:
                if masks is None:
                    masks = np.zeros(n, np.int64)
                masks[idx] |= 1 << k
            cols.append(text_of(k, vals))
        return rows_text(n, cols, masks)

    def rows_text(n: int, cols: list, masks) -> bytes:
        if masks is None:
            out = list(map(template(0).__mod__, zip(*cols))) if cols else [b"{}"] * n
            return b"[" + b",".join(out) + b"]"
        kinds, counts = np.unique(masks, return_counts=True)
        base = int(kinds[np.argmax(counts)])  # most rows lack these fields (any choice writes the same text)
        keep = [c for k, c in enumerate(cols) if not base >> k & 1]
        out = list(map(template(base).__mod__, zip(*keep))) if keep else [b"{}"] * n
        for m in kinds.tolist():
            if m == base:
                continue
            idx = np.flatnonzero(masks == m).tolist()
            own = [c for k, c in enumerate(cols) if not m >> k & 1]
            t = template(m)
            if own:
                if len(idx) == 1:
                    texts = [t % tuple(c[idx[0]] for c in own)]
                else:
                    pick = itemgetter(*idx)
                    texts = list(map(t.__mod__, zip(*[pick(c) for c in own])))
            else:
                texts = [t] * len(idx)
            for i, v in zip(idx, texts):
                out[i] = v
        return b"[" + b",".join(out) + b"]"
    write.columns = write_columns
    write.names = [name for name, *_ in fields]
    return write


_SPOT = 64  # rows of a repeated field compared with the columns given for it (and its last row)


def _given_columns(fd: FieldDescriptor, rows, given: Mapping[str, list], writer) -> list | None:
    """``given`` (field name -> column, see :func:`to_json_bytes`) as the writer's list of
    columns when it holds exactly the row type's fields, one value per row of ``rows``, and
    agrees with ``rows`` at every ``len // 64``-th row and the last (the dict ``to_dict``
    writes); None otherwise (the messages are read instead)."""
    names = writer.names
    if set(given) != set(names):
        return None
    cols = [given[k] for k in names]
    n = len(rows)
    if any(len(c) != n for c in cols):
        return None
    conv = {f.name: _value(f) for f in fd.message_type.fields}
    presence = {f.name: f.has_presence for f in fd.message_type.fields}
    for i in sorted({*range(0, n, max(1, n // _SPOT)), n - 1}):
        want = {}
        for k, c in zip(names, cols):
            v = c[i]
            if (v is None) if presence[k] else not v:
                continue
            want[k] = v if conv[k] is None else conv[k](v)
        if to_dict(rows[i]) != want:
            return None
    return cols


def _compact(msg: Message, columns: Mapping[str, Mapping[str, list]] | None = None) -> bytes:
    """``_encode(to_dict(msg))``, byte for byte, with the long repeated fields of flat row types
    written by :func:`_rows_writer` (the others as before, field by field in number order: the
    keys ``to_dict`` writes, in its order); such a field named in ``columns`` from its columns
    (:func:`to_json_bytes`)."""
    fields = msg.ListFields()
    if not any(fd.is_repeated and fd.message_type is not None and len(v) >= _ROWS_MIN for fd, v in fields):
        return _encode(to_dict(msg))
    parts = []
    for fd, v in fields:
        w = _rows_writer(fd.message_type) if fd.is_repeated and fd.message_type is not None \
            and not fd.message_type.GetOptions().map_entry and len(v) >= _ROWS_MIN else None
        given = columns.get(fd.name) if w is not None and columns else None
        cols = _given_columns(fd, v, given, w) if given is not None else None
        if cols is not None:
            text = w.columns(cols, len(v))
        elif w is not None:
            text = w(list(v))
        else:
            c = _field(fd)
            text = _encode(v if c is None else c(v))
        parts.append(_encode(fd.name) + b":" + text)
    return b"{" + b",".join(parts) + b"}"


def to_dict(msg: Message) -> dict[str, Any]:
    """Message -> JSON-ready dict in the profile (:func:`json_profile.to_dict`'s value, maps sorted)."""
    if msg.DESCRIPTOR.full_name.startswith("google.protobuf."):
        return _wkt(msg)
    return _table(msg.DESCRIPTOR)(msg)


@paused_gc()  # a large result is 100k+ new dicts: the collector would rescan them all, for nothing
def to_json_bytes(msg: Message, *, indent: int | None = 2,
                  columns: Mapping[str, Mapping[str, list]] | None = None) -> bytes:
    """Message -> UTF-8 JSON text (pretty with ``indent``; a final newline when pretty).

    ``columns``: for a long repeated field of a flat row type (``ReplayResult.requests``), its
    rows' values as columns -- field name -> ``{row field name: list}``, every field of the row
    type, a message's value or None where an explicit-presence field is unset -- that the rows
    were built from: the field's text is then written from them instead of reading the messages
    back (the same bytes; checked against the messages at 65 rows, and ignored, the messages
    read, on any difference)."""
    raw = _compact(msg, columns) if not msg.DESCRIPTOR.full_name.startswith("google.protobuf.") else _encode(to_dict(msg))
    if not indent:
        return raw
    return msgspec.json.format(raw, indent=indent) + b"\n"


def to_json(msg: Message, *, indent: int | None = 2) -> str:
    """Message -> JSON text in the profile (pretty by default; for single-message files)."""
    return to_json_bytes(msg, indent=indent).decode("utf-8")


def to_json_line(msg: Message) -> bytes:
    """Message -> one compact UTF-8 JSONL line, ending in ``\\n`` (no newline inside)."""
    return _encode(to_dict(msg)) + b"\n"
