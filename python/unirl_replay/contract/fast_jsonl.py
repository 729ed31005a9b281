"""Fast decode of one contract JSON line: two ``msgspec`` tiers, then the reference parser.

The reference mapping is :func:`unirl_replay.contract.json_profile.parse_json` (``json_guard``
+ ``json_format.ParseDict``, pure Python). :func:`try_parse` tries, in order:

1. the typed tier (:mod:`unirl_replay.contract.fast_typed`): ``msgspec`` Structs generated from
   the descriptors, taking a line only when it is byte for byte the canonical encoding of what
   it decodes to (the profile writers' lines); the block hashes are decoded in one C call;
2. the generic tier (this module): ``msgspec.json.decode`` to Python objects and direct message
   construction from a per-message-type table compiled once from the descriptor, accepting the
   canonical profile in any key order or spacing: snake_case keys, enums by name, 64-bit
   integers as decimal strings, 32-bit integers as JSON integers, doubles as JSON numbers,
   nested objects, arrays, string-keyed maps, at most one member per ``oneof``.

Anything else -- an unknown or camelCase key, ``null``, an enum number, a bytes or float32 or
well-known-type field, a value of an unexpected JSON type, text ``msgspec`` rejects (NaN,
a BOM, UTF-16, invalid UTF-8), a value the message constructor refuses (out of range) -- is
handed, as the same raw line, to the reference parser, which returns its message or raises
its :class:`~unirl_replay.contract.errors.TraceFormatError` (same rule, file, line and text). So
the result is the reference's result on every line; only the fast path's speed differs. A line
either tier takes has no off-profile form (``json_profile.OFF_PROFILE_FORMS``), so the reader's
off-profile inspection, which runs on the other lines, misses nothing.
``tests/test_fast_jsonl.py`` and ``tests/test_fast_typed.py`` check message equality on
hypothesis-generated records and mutated / hostile lines, and the errors against the reference.
"""

from __future__ import annotations

import re
from typing import Any, Callable, TypeVar

import msgspec
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from unirl_replay.contract import fast_typed, json_profile

M = TypeVar("M", bound=Message)

__all__ = ["parse_json_line", "try_parse", "convert_dict"]

_decode = msgspec.json.decode
_LEADING_ZERO = re.compile(r",0[0-9]")
#: whitespace between a quote and a colon (see _try_generic: it would hide a duplicate key)
_SPACED_COLON = re.compile(r'"[ \t\r\n]+:')
_SPACED_COLON_B = re.compile(rb'"[ \t\r\n]+:')
#: keys of the objects converted by the current call (duplicate-key detection, see try_parse)
_KEYS = [0]
_T = FieldDescriptor
_INT32 = {_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32, _T.TYPE_UINT32, _T.TYPE_FIXED32}
_INT64 = {_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64}
_UINT64 = {_T.TYPE_UINT64, _T.TYPE_FIXED64}


class _Doubt(Exception):
    """The fast path does not handle this value: use the reference parser."""


def _int32(v):
    if type(v) is int:
        return v
    raise _Doubt


def _canonical_digits(d: str) -> bool:
    """Decimal digits without a leading zero (``"0"`` itself is canonical)."""
    return d.isascii() and d.isdigit() and (d[0] != "0" or d == "0")


def _int64(v):
    # only the profile's canonical form: a decimal string (a JSON number or "007" is off-profile:
    # the reference path parses it, and validate reports it)
    if type(v) is str and (_canonical_digits(v[1:]) and v != "-0" if v[:1] == "-" else _canonical_digits(v)):
        return int(v)
    raise _Doubt


def _uint64(v):
    if type(v) is str and _canonical_digits(v):
        return int(v)
    raise _Doubt


def _uint64_list(v):
    # the common bulk case: block hashes, all canonical decimal strings
    s = ",".join(v)  # TypeError (caught by the caller) when an element is not a string
    if (s.isascii() and s.replace(",", "").isdigit() and ",," not in s and s[:1] != "," and s[-1:] != ","
            and not (s[:1] == "0" and s[1:2] not in ("", ",")) and not _LEADING_ZERO.search(s)):
        return list(map(int, v))
    return [_uint64(x) for x in v]


def _double(v):
    t = type(v)
    if t is float or t is int:
        return v
    raise _Doubt


def _bool(v):
    if type(v) is bool:
        return v
    raise _Doubt


def _string(v):
    if type(v) is str:
        return v
    raise _Doubt


def _doubt(v):
    raise _Doubt


def _enum(fd: FieldDescriptor) -> Callable:
    numbers = {name: ev.number for name, ev in fd.enum_type.values_by_name.items()}

    def conv(v):
        if type(v) is str:
            n = numbers.get(v)
            if n is not None:
                return n
        raise _Doubt
    return conv


def _scalar(fd: FieldDescriptor) -> Callable:
    t = fd.type
    if t in _INT32:
        return _int32
    if t in _INT64:
        return _int64
    if t in _UINT64:
        return _uint64
    if t == _T.TYPE_DOUBLE:
        return _double
    if t == _T.TYPE_BOOL:
        return _bool
    if t == _T.TYPE_STRING:
        return _string
    if t == _T.TYPE_ENUM:
        return _enum(fd)
    return _doubt  # bytes (base64), float32 (range rules): the reference parser


_TABLES: dict[Any, Callable[[Any], dict]] = {}  # Descriptor -> converter


def _value_conv(fd: FieldDescriptor) -> Callable:
    if fd.type == _T.TYPE_MESSAGE:
        mt = fd.message_type
        if mt.full_name.startswith("google.protobuf."):
            return _doubt  # well-known types have their own JSON mapping
        return _message_conv(mt)
    return _scalar(fd)


def _field_conv(fd: FieldDescriptor) -> Callable:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        kf, vf = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        if kf.type != _T.TYPE_STRING:
            return _doubt
        vc = _value_conv(vf)

        def conv_map(v):
            if type(v) is not dict:
                raise _Doubt
            _KEYS[0] += len(v)
            return {k: vc(x) for k, x in v.items()}
        return conv_map
    vc = _value_conv(fd)
    if fd.is_repeated:
        if vc is _uint64:
            def conv_u64s(v):
                if type(v) is not list:
                    raise _Doubt
                return _uint64_list(v)
            return conv_u64s

        def conv_list(v):
            if type(v) is not list:
                raise _Doubt
            return [vc(x) for x in v]
        return conv_list
    return vc


def _message_conv(desc: Descriptor) -> Callable[[Any], dict]:
    """dict (decoded JSON object) -> constructor kwargs of ``desc``'s message; raises _Doubt."""
    conv = _TABLES.get(desc)  # by descriptor, not name: another pool may define the same name differently
    if conv is not None:
        return conv
    fields: dict[str, Callable] = {}
    oneof_of: dict[str, str] = {}

    def convert(obj):
        if type(obj) is not dict:
            raise _Doubt
        out = {}
        seen = None
        _KEYS[0] += len(obj)
        for k, v in obj.items():
            c = fields.get(k)
            if c is None or v is None:
                raise _Doubt
            o = oneof_of.get(k)
            if o is not None:
                if seen is None:
                    seen = {o}
                elif o in seen:
                    raise _Doubt  # two members of one oneof: the reference words the error
                else:
                    seen.add(o)
            out[k] = c(v)
        return out

    _TABLES[desc] = convert  # before the fields: recursive message types
    for fd in desc.fields:
        fields[fd.name] = _field_conv(fd)
        if fd.containing_oneof is not None and not _synthetic(fd):
            oneof_of[fd.name] = fd.containing_oneof.name
    return convert


def _synthetic(fd: FieldDescriptor) -> bool:
    """A proto3 ``optional`` field's implicit one-member oneof."""
    o = fd.containing_oneof
    return len(o.fields) == 1 and o.name == "_" + fd.name


def convert_dict(data: Any, cls: type[M]) -> M | None:
    """Decoded JSON -> message by direct construction, or None when the fast path has any doubt."""
    conv = _message_conv(cls.DESCRIPTOR)  # compiled once per type (outside the try: no bug is hidden)
    try:
        return cls(**conv(data))
    except (_Doubt, TypeError, ValueError, OverflowError):  # a value the fast path or the constructor refuses
        return None


def _try_generic(raw: bytes | str, cls: type[M]) -> M | None:
    """The generic tier: ``msgspec`` to Python objects + the per-type table; None when in doubt.

    A message comes back only when every key is a field name, every value has the profile's form
    (so the line has none of json_profile.OFF_PROFILE_FORMS) and no object has a key twice: the
    line must have no whitespace between a closing quote and a colon, and then the number of
    ``":`` in it must equal the number of keys decoded. With no such whitespace every key of the
    text adds one ``":`` (an escaped quote inside a string may add more), and a duplicate key,
    which msgspec keeps silently, adds a key to the text but not to the decoded count, so any
    duplicate makes the numbers differ. (Whitespace before a colon would remove a ``":`` and
    could hide a duplicate: ``{"a" :{"k":"0","k":"0"}}``; such lines go to the reference.)
    """
    try:
        data = _decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, TypeError, ValueError, RecursionError):
        return None
    if type(data) is not dict:
        return None
    _KEYS[0] = 0
    msg = convert_dict(data, cls)
    if msg is None:
        return None
    if isinstance(raw, (bytes, bytearray)):
        if _SPACED_COLON_B.search(raw):
            return None
        colons = raw.count(b'":')
    else:
        if _SPACED_COLON.search(raw):
            return None
        colons = raw.count('":')
    return msg if colons == _KEYS[0] else None


def try_parse(raw: bytes | str, cls: type[M]) -> M | None:
    """The fast path alone: the message when the line is in the canonical profile, else None.

    First the typed tier (:mod:`unirl_replay.contract.fast_typed`: the line must be byte for byte
    the canonical encoding of what it decodes to), then the generic tier (:func:`_try_generic`:
    canonical values in any key order or spacing). A line neither accepts is the reference
    parser's (:func:`parse_json_line`).
    """
    if type(raw) is bytes:
        msg = fast_typed.try_parse(raw, cls)
        if msg is not None:
            return msg
    return _try_generic(raw, cls)


def parse_json_line(raw: bytes | str, cls: type[M], *, file: str = "", line: int = 0) -> M:
    """One JSON line -> message; equal to :func:`json_profile.parse_json` on every input.

    Raises:
        TraceFormatError: exactly what the reference raises for the line (``json.parse`` /
            ``json.profile`` or a hostile-input rule of ``json_guard``), since every line the fast
            path does not accept goes to it.
    """
    msg = try_parse(raw, cls)
    return msg if msg is not None else json_profile.parse_json(raw, cls, file=file, line=line)
