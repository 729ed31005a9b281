"""Typed tier of the fast JSONL decode: ``msgspec`` Structs generated from the descriptors.

For each message type this module declares, once, a tree of ``msgspec.Struct`` classes (fields in
field-number order, the order the profile's writers use) and a converter (generated Python
source, one statement per field) from a decoded Struct to constructor arguments. A line is
accepted only when all of these hold, else :func:`try_parse` returns None and the caller goes on
to the generic tier and then to the reference parser (``json_profile.parse_json``), which words
every error:

1. ``msgspec`` decodes it against the Structs in strict mode: valid UTF-8 JSON, no unknown key
   (so no camelCase key), every value of the field's JSON type (``true`` is not an integer,
   ``1.0`` is not an integer, ``"5"`` is not a 32-bit integer), 32-bit integers in range, enum
   names from the enum, 64-bit integers as JSON strings, ``NaN`` and numbers that overflow
   refused;
2. the Struct re-encodes to exactly the line's bytes (newline aside). This is the check that
   makes the tier safe against what a decoder keeps silently: the same key twice (the
   re-encoding has it once), ``null`` (left out), escapes (``"\\u0031"`` re-encodes as ``"1"``),
   whitespace, another key order, a number spelled otherwise (``1e2``, ``1.50``, a 70-digit
   literal), an explicit default written where the writers leave the key out;
3. at most one member of each ``oneof`` is present;
4. 64-bit integers are canonical decimal strings (``str(int(v)) == v``: no ``+``, space, ``_``,
   leading zero, ``-0`` or non-ASCII digit), repeated unsigned ones as described below;
5. the message constructor accepts the values (64-bit ranges: ``"9223372036854775808"`` in an
   ``int64`` raises ``ValueError``; a string with a lone surrogate raises ``UnicodeEncodeError``).

Repeated unsigned 64-bit fields (the prefix block hashes: ~80 per request, 80 % of a request
line) are kept as ``msgspec.Raw`` by the Struct decoder and turned into integers by one C call
(``msgspec`` with ``strict=False`` on a ``list[int]``) once the raw text is proven to be
``["<digits>","<digits>",...]`` with no leading zero: only digits, quotes and commas between the
brackets, two quotes per element (the decoder refuses leading zeros and ``""``). That is about
2x faster than ``int()`` per hash on the split text (``benchmarks/bench_jsonl_line.py``).

Message types with a field this tier does not handle (``bytes``, ``float``, maps, well-known
types, recursive types) have no plan: :func:`try_parse` returns None at once for them.
``tests/test_fast_typed.py`` compares every outcome with the reference on generated records
and on mutated / hostile lines.
"""

from __future__ import annotations

import keyword
from typing import Annotated, Any, Callable, Literal, Optional, TypeVar

import msgspec
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)

__all__ = ["try_parse", "plan_for"]

_T = FieldDescriptor
_I32 = Annotated[int, msgspec.Meta(ge=-2**31, le=2**31 - 1)]
_U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
# 64-bit integers: JSON strings, checked canonical by _int64 (a msgspec ``pattern`` costs 5x more)
_I64S = _U64S = str
_SCALAR = {
    _T.TYPE_INT32: _I32, _T.TYPE_SINT32: _I32, _T.TYPE_SFIXED32: _I32,
    _T.TYPE_UINT32: _U32, _T.TYPE_FIXED32: _U32,
    _T.TYPE_INT64: _I64S, _T.TYPE_SINT64: _I64S, _T.TYPE_SFIXED64: _I64S,
    _T.TYPE_UINT64: _U64S, _T.TYPE_FIXED64: _U64S,
    _T.TYPE_BOOL: bool, _T.TYPE_STRING: str, _T.TYPE_DOUBLE: float,
}
_STRINGS_OF_INT = {_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64, _T.TYPE_UINT64, _T.TYPE_FIXED64}
_UNSIGNED_64 = {_T.TYPE_UINT64, _T.TYPE_FIXED64}
_STRUCT_OPTS = dict(forbid_unknown_fields=True, omit_defaults=True)

_ints_lenient = msgspec.json.Decoder(list[int], strict=False).decode
_DIGITS = b'0123456789",'


class _Doubt(Exception):
    """This tier does not take the line."""


def _int64(v: str) -> int:
    """A canonical decimal string of a signed 64-bit integer -> int; _Doubt for any other spelling
    or a value out of range.

    ``int()`` also reads ``"+1"``, ``" 1"``, ``"1_0"``, ``"01"``, ``"-0"`` and non-ASCII digits
    (json_profile's ``int64_form``): for each of them ``str(int(v)) != v``. The range is checked
    here as well as by the constructor (``ValueError``), so that a caller that keeps the values
    without building the message (:mod:`~unirl_replay.contract.jsonl_columns`) refuses what the
    message path refuses.
    """
    n = int(v)
    if str(n) != v or not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        raise _Doubt
    return n


def _uint64(v: str) -> int:
    """The unsigned twin of :func:`_int64` (0 <= value < 2**64)."""
    n = int(v)
    if str(n) != v or not 0 <= n <= 0xFFFFFFFFFFFFFFFF:
        raise _Doubt
    return n


def _int64_list(v: list[str]) -> list[int]:
    return [_int64(x) for x in v]


def _u64_list(raw: msgspec.Raw) -> list[int]:
    """``["<digits>",...]`` (raw JSON text, already valid JSON) -> ints; _Doubt for any other form.

    Between the brackets only digits, quotes and commas (so no sign, ``.``, exponent, escape or
    whitespace), two quotes per element (no element written as a JSON number). The decoder itself
    refuses ``""`` and leading zeros (``"01"``, ``"00"``: JSON's number grammar, pinned by
    tests/test_fast_typed.py); values above 2^64-1 come back as ints the constructor refuses.
    """
    b = bytes(raw)
    if b.translate(None, _DIGITS) != b"[]":
        raise _Doubt
    out = _ints_lenient(b)
    if b.count(b'"') != 2 * len(out):
        raise _Doubt
    return out


class _Plan:
    __slots__ = ("decode", "encode", "convert", "cls")

    def __init__(self, struct: type, convert: Callable[[Any], dict], cls: type):
        self.decode = msgspec.json.Decoder(struct).decode
        self.encode = msgspec.json.Encoder().encode
        self.convert = convert
        self.cls = cls


class _Unsupported(Exception):
    pass


_PLANS: dict[Any, _Plan | None] = {}  # Descriptor -> plan (None: the type has no typed tier)


def _synthetic(fd: FieldDescriptor) -> bool:
    o = fd.containing_oneof
    return o is not None and len(o.fields) == 1 and o.name == "_" + fd.name


class _Builder:
    """Declares the Structs and writes the converters of one root type (and what it contains)."""

    def __init__(self):
        self.structs: dict[str, type] = {}
        self.ns: dict[str, Any] = {"_Doubt": _Doubt, "_u64_list": _u64_list, "_int64": _int64,
                                   "_uint64": _uint64, "_int64_list": _int64_list}
        self.src: list[str] = []
        self.active: set[str] = set()

    def message(self, desc: Descriptor) -> str:
        """Name of the Struct of ``desc`` (declared with its converter ``_c_<name>``)."""
        key = "S_" + desc.full_name.replace(".", "_")
        if key in self.structs:
            return key
        if key in self.active or desc.full_name.startswith("google.protobuf.") or desc.GetOptions().map_entry:
            raise _Unsupported(desc.full_name)
        self.active.add(key)
        annotations: dict[str, Any] = {}
        lines = [f"def _c_{key}(s):", "    d = {}"]
        oneofs: dict[str, list[str]] = {}
        for fd in sorted(desc.fields, key=lambda f: f.number):
            if keyword.iskeyword(fd.name) or not fd.name.isidentifier() or fd.name.startswith("_"):
                raise _Unsupported(fd.full_name)  # not an attribute name the generated code can use
            ann, conv = self.field(fd)
            # Raw (any JSON value, checked by the converter) cannot be in a Union with None
            annotations[fd.name] = ann if ann is msgspec.Raw else Optional[ann]
            lines.append(f"    v = s.{fd.name}")
            lines.append(f"    if v is not None: d[{fd.name!r}] = {conv}")
            o = fd.containing_oneof
            if o is not None and not _synthetic(fd):
                oneofs.setdefault(o.name, []).append(fd.name)
        for members in oneofs.values():
            present = " + ".join(f"(s.{m} is not None)" for m in members)
            lines.append(f"    if {present} > 1: raise _Doubt")
        lines.append("    return d")
        self.src.append("\n".join(lines))
        # every field defaults to None ("absent"), so omit_defaults leaves out exactly the absent keys
        struct = msgspec.defstruct(key, [(n, a, None) for n, a in annotations.items()], **_STRUCT_OPTS)
        self.structs[key] = struct
        self.ns[key] = struct
        self.active.discard(key)
        return key

    def field(self, fd: FieldDescriptor) -> tuple[Any, str]:
        """(Struct annotation, converter expression of ``v``) of one field."""
        t = fd.type
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            raise _Unsupported(fd.full_name)  # maps: the generic tier
        if t == _T.TYPE_MESSAGE:
            key = self.message(fd.message_type)
            ann: Any = self.structs[key]
            if fd.is_repeated:
                return list[ann], f"[_c_{key}(x) for x in v]"
            return ann, f"_c_{key}(v)"
        if t == _T.TYPE_ENUM:
            names = tuple(fd.enum_type.values_by_name)
            ann = Literal[names] if names else None
            if ann is None:
                raise _Unsupported(fd.full_name)
            # enum names go to the constructor as they are (it maps names to numbers)
            return (list[ann], "v") if fd.is_repeated else (ann, "v")
        if t not in _SCALAR:
            raise _Unsupported(fd.full_name)  # bytes (base64), float (rounding): the generic tier
        if fd.is_repeated:
            if t in _UNSIGNED_64:
                return msgspec.Raw, "_u64_list(v)"
            if t in _STRINGS_OF_INT:
                return list[_SCALAR[t]], "_int64_list(v)"
            return list[_SCALAR[t]], "v"
        if t in _STRINGS_OF_INT:
            return _SCALAR[t], ("_uint64(v)" if t in _UNSIGNED_64 else "_int64(v)")
        return _SCALAR[t], "v"


def plan_for(cls: type[Message]) -> _Plan | None:
    """The compiled plan of ``cls`` (None when its type has a field this tier leaves to the others)."""
    desc = cls.DESCRIPTOR
    try:
        return _PLANS[desc]  # by descriptor, not name: another pool may define the same name differently
    except KeyError:
        pass
    b = _Builder()
    try:
        root = b.message(desc)
    except _Unsupported:
        _PLANS[desc] = None
        return None
    exec(compile("\n\n".join(b.src), f"<fast_typed {desc.full_name}>", "exec"), b.ns)
    plan = _Plan(b.structs[root], b.ns[f"_c_{root}"], cls)
    _PLANS[desc] = plan
    return plan


def try_parse(raw: bytes, cls: type[M]) -> M | None:
    """The message of a canonical line (the profile writers' exact bytes), or None."""
    plan = _PLANS.get(cls.DESCRIPTOR, False)
    if plan is False:
        plan = plan_for(cls)
    if plan is None:
        return None
    body = raw[:-1] if raw[-1:] == b"\n" else raw
    try:
        s = plan.decode(body)
        if plan.encode(s) != body:
            return None
        return cls(**plan.convert(s))
    except (msgspec.DecodeError, msgspec.ValidationError, _Doubt, TypeError, ValueError, OverflowError,
            RecursionError):
        return None
