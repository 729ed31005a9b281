"""The one JSON mapping of the contract's messages (see docs/json-profile.md).

Output (what every writer of this project produces):

- keys are the proto field names, ``snake_case`` (``preserving_proto_field_name``);
- enums are written by name (``"FINISH_REASON_STOP"``);
- ``int64`` / ``uint64`` (and ``fixed64`` ...) are decimal strings (``"1700000000000000000"``),
  as proto3 JSON requires; 32-bit integers are JSON numbers;
- a field without presence is omitted when it holds its zero value; a field declared ``optional``
  in the proto is written whenever it is set, including ``0``, so zero and absent stay distinct;
- a ``oneof`` appears as exactly one of its member keys;
- maps are JSON objects.

Input (:func:`parse_dict` and friends) is the proto3 JSON parser: it additionally accepts 64-bit
integers as JSON numbers, enum numbers (also as numeric strings, ``"1"``), and lowerCamelCase keys.
Unknown keys are rejected, and so is an enum given a bool or a number with a fraction.

Errors raise :class:`unirl_replay.contract.errors.TraceFormatError` with rule ``json.parse`` (not JSON) or
``json.profile`` (JSON, but not a valid message), naming the file and line when given.
"""

from __future__ import annotations

import copy
import functools
import decimal
import json
import math
import re
from typing import Any, Callable, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from unirl_replay.contract import json_guard
from unirl_replay.contract.errors import TraceFormatError

M = TypeVar("M", bound=Message)

__all__ = ["to_dict", "to_json", "to_json_line", "parse_dict", "parse_json", "parse_json_line", "loads",
           "off_profile_forms", "OFF_PROFILE_FORMS"]


def to_dict(msg: Message) -> dict[str, Any]:
    """Message -> JSON-ready dict in the profile (snake_case keys, enum names, 64-bit as strings)."""
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def to_json(msg: Message, *, indent: int | None = 2) -> str:
    """Message -> JSON text in the profile (pretty by default; for single-message files)."""
    return json.dumps(to_dict(msg), indent=indent, ensure_ascii=False, allow_nan=False) + ("\n" if indent else "")


def to_json_line(msg: Message) -> bytes:
    """Message -> one compact UTF-8 JSONL line, ending in ``\\n`` (no newline inside)."""
    return (json.dumps(to_dict(msg), separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n").encode()


def parse_dict(data: Any, cls: type[M], *, file: str = "", line: int = 0,
               on_unknown: Callable[[list[str]], None] | None = None) -> M:
    """JSON value (already decoded) -> message of type ``cls``.

    Args:
        on_unknown: when given (a reader of a trace from a newer contract revision, see
            :mod:`unirl_replay.contract.compat`), keys ``cls`` does not know are skipped instead of
            rejected, and ``on_unknown`` is called once with their dotted paths. Every other
            problem is still an error.

    Raises:
        TraceFormatError: rule ``json.profile`` when ``data`` is not an object, has an unknown key
            (and ``on_unknown`` is None), a wrong type, an unknown enum name, or an out-of-range integer.
    """
    if not isinstance(data, dict):
        raise TraceFormatError(f"expected a JSON object for {cls.DESCRIPTOR.full_name}, got {type(data).__name__}",
                               file=file, line=line, rule="json.profile")
    msg = cls()
    try:
        data = _exact_integers(data, cls.DESCRIPTOR, "")
    except _NotAnInteger as e:
        raise TraceFormatError(f"not a valid {cls.DESCRIPTOR.full_name}: {e}", file=file, line=line,
                               rule="json.profile") from None
    except _TwoNames as e:
        raise TraceFormatError(f"{cls.DESCRIPTOR.full_name}: {e}", file=file, line=line,
                               rule="json.duplicate_key") from None
    try:
        json_format.ParseDict(data, msg)
    except json_format.ParseError as e:
        if on_unknown is not None:
            from unirl_replay.contract.compat import strip_unknown_json_keys

            stripped = copy.deepcopy(data)
            unknown = strip_unknown_json_keys(stripped, cls.DESCRIPTOR)
            if unknown:
                msg = parse_dict(stripped, cls, file=file, line=line)
                on_unknown(unknown)
                return msg
        raise TraceFormatError(f"not a valid {cls.DESCRIPTOR.full_name}: {e}", file=file, line=line,
                               rule="json.profile") from None
    except (SystemError, UnicodeError):
        # a key holding a lone UTF-16 surrogate (JSON text "\ud800"): upb's field lookup by name fails to
        # encode it and surfaces a SystemError (a value with one is a ParseError "Unpaired surrogate" above)
        raise TraceFormatError(f"not a valid {cls.DESCRIPTOR.full_name}: a key is not valid Unicode (it holds an "
                               "unpaired UTF-16 surrogate, such as the JSON escape \\ud800)", file=file, line=line,
                               rule="json.profile") from None
    except RecursionError:  # hostile input: nesting the parser cannot follow
        raise TraceFormatError(f"JSON nested too deeply for a {cls.DESCRIPTOR.full_name}", file=file, line=line,
                               rule="json.depth") from None
    return msg


def loads(text: str | bytes, *, file: str = "", line: int = 0) -> Any:
    """Decode JSON text through the hostile-input guard. Raises TraceFormatError (``json.parse``
    when it is not JSON, or a rule of :mod:`unirl_replay.contract.json_guard`:
    ``json.duplicate_key``, ``json.nan``, ``json.huge_number``, ``json.depth``)."""
    return json_guard.loads(text, file=file, line=line, exact=True)


def parse_json(text: str | bytes, cls: type[M], *, file: str = "", line: int = 0,
               on_unknown: Callable[[list[str]], None] | None = None) -> M:
    """JSON text -> message. Raises TraceFormatError (``json.parse`` / ``json.profile``, or a
    hostile-input rule of :func:`loads`); see :func:`parse_dict`."""
    return parse_dict(loads(text, file=file, line=line), cls, file=file, line=line, on_unknown=on_unknown)


# One JSONL line is parsed exactly like a whole JSON document.
parse_json_line = parse_json


# ---------------------------------------------------------------------------------------------
# integers from number literals with a fraction or an exponent, exactly

class _NotAnInteger(ValueError):
    """An integer field holds a number (or numeric string) whose value is not an integer, or a number field a
    string that spells its number in a way only Python reads (:func:`_decimal_spelling`, :func:`_float_spelling`)."""


class _TwoNames(ValueError):
    """One object names a field twice: under its proto name and its lowerCamelCase JSON name (proto3 JSON
    parsers accept either; ``json_format`` keeps one of the two values, Go, Java and C++ refuse the object)."""


#: a decimal exponent beyond this is out of every integer type's range: left to the parser's range check
_MAX_EXPONENT = 25


def _exact_int(v: Any, path: str) -> Any:
    """The exact integer an integer field's JSON value spells, when the proto3 JSON parser would
    read it through a float (``1e3``, ``40.0``, ``"1234567890123456789e0"``); ``v`` itself otherwise.

    The parser (``json_format``) takes such a value as the float it rounds to: above 2**53 that is
    another integer (``1234567890123456789.0`` -> 1234567890123456768), and a literal that is no
    integer but rounds to one (``40.000000000000001``) is taken as that integer. Here the value
    comes from the literal's text instead.

    Raises:
        _NotAnInteger: the literal's value has a fractional part, or a string spells its number in a way only
            Python reads (:func:`_decimal_spelling`).
    """
    if isinstance(v, json_guard.ExactFloat):
        text = v.literal
    elif isinstance(v, str) and " " not in v:  # a space: the parser's own error
        _decimal_spelling(v, path)
        try:
            int(v)
            return v  # the parser reads it exactly
        except ValueError:
            text = v
    else:
        return v
    try:
        d = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return v  # not a number: the parser words the error
    if not d.is_finite() or d.adjusted() > _MAX_EXPONENT:
        return v  # NaN / Infinity (the parser's error) or out of every range (the parser's range check)
    if d != d.to_integral_value():
        raise _NotAnInteger(f"{path}: {text[:40]} is not an integer")
    return int(d)


#: the characters of a number string proto3 JSON parsers read (decimal digits, sign, fraction, exponent)
_DECIMAL_CHARS = frozenset("0123456789+-.eE")


def _decimal_spelling(v: str, path: str, extra: str = "") -> None:
    """Raise :class:`_NotAnInteger` when the string ``v`` reads as a number only to Python: ``int()`` and
    ``decimal.Decimal`` (the parser's and this reader's) also take digit-group underscores (``"2_25"``), any
    Unicode decimal digit (fullwidth ``"\uff12"``, Arabic-Indic) and surrounding tabs, newlines or other Unicode
    whitespace, which no other language's proto3 JSON parser reads. ``extra``: further characters allowed."""
    if _DECIMAL_CHARS.issuperset(v) or (extra and _DECIMAL_CHARS.union(extra).issuperset(v)):
        return
    try:
        int(v)
    except ValueError:
        try:
            if not decimal.Decimal(v).is_finite():
                return  # "NaN", "Infinity": the parser's own error
        except decimal.InvalidOperation:
            return  # no number at all: the parser's own error
    raise _NotAnInteger(f"{path}: {v[:40]!r} is not a decimal number (ASCII digits, an optional sign, fraction "
                        "and exponent: no digit-group underscores, other digits or whitespace)")


#: the non-finite doubles' strings (proto3 JSON)
_NON_FINITE = frozenset(("NaN", "Infinity", "-Infinity"))


def _float_spelling(v: str, path: str) -> None:
    """Raise :class:`_NotAnInteger` when the string ``v`` in a double / float field reads as a number only to
    Python: proto3 JSON spells a double as a number, a numeric string, or "NaN" / "Infinity" / "-Infinity";
    ``json_format`` reads any other string with ``float()``, which also takes "inf", "nan", "-nan", "infinity",
    "+Infinity", digit-group underscores, non-ASCII digits and surrounding whitespace."""
    if v in _NON_FINITE or _DECIMAL_CHARS.issuperset(v):
        return
    try:
        float(v)
    except ValueError:
        return  # no number at all: the parser's own error
    raise _NotAnInteger(f"{path}: {v[:40]!r} is not a number proto3 JSON spells (ASCII decimal digits with an "
                        "optional sign, fraction and exponent, or \"NaN\", \"Infinity\", \"-Infinity\")")


def _exact_enum(v: Any, path: str) -> Any:
    """An enum field's JSON value as the parser should read it: ``json_format`` takes any value
    ``int()`` takes as the number (``true`` as 1, ``1.5`` as 1); here a bool, or a number whose
    value is not an integer, is an error, as for an integer field, and so is a number string only
    Python reads (:func:`_decimal_spelling`: ``"1_0"``, ``"\uff11"``, ``"\t1"``). Names, other strings and
    integers are the parser's (a numeric string, ``"1"``, is off-profile: :func:`off_profile_forms`).

    Raises:
        _NotAnInteger: ``v`` is a bool, a number with a fractional part or a number string no decimal spells."""
    if isinstance(v, bool):
        raise _NotAnInteger(f"{path}: {json.dumps(v)} is not an enum value (its name, or its number)")
    if isinstance(v, str):
        if not v.isidentifier():  # not a name: a number string (the parser's int(v)), spaces allowed (docs)
            _decimal_spelling(v, path, extra=" ")
        return v
    if isinstance(v, json_guard.ExactFloat):
        return _exact_int(v, path)
    if isinstance(v, float) and math.isfinite(v) and not v.is_integer():
        raise _NotAnInteger(f"{path}: {v!r} is not an integer")
    return v


def _exact_value(f: FieldDescriptor, v: Any, path: str) -> Any:
    if f.type == _F.TYPE_MESSAGE:
        if f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            if not isinstance(v, dict):
                return v
            out = {mk: _exact_value(vf, mv, f"{path}[{mk!r}]") for mk, mv in v.items()}
            return v if all(out[k] is v[k] for k in v) else out
        if isinstance(v, list):
            items = [_exact_integers(x, f.message_type, f"{path}[{i}].") for i, x in enumerate(v)]
            return v if all(a is b for a, b in zip(items, v)) else items
        return _exact_integers(v, f.message_type, path + ".")
    if f.type == _F.TYPE_ENUM:
        if isinstance(v, list):
            items = [_exact_enum(x, f"{path}[{i}]") for i, x in enumerate(v)]
            return v if all(a is b for a, b in zip(items, v)) else items
        return _exact_enum(v, path)
    if f.type in _FLOATS:
        for i, x in enumerate(v) if isinstance(v, list) else ((None, v),):
            if isinstance(x, str):
                _float_spelling(x, path if i is None else f"{path}[{i}]")
        return v
    if f.type not in _INTS:
        return v
    if isinstance(v, list):
        items = [_exact_int(x, f"{path}[{i}]") for i, x in enumerate(v)]
        return v if all(a is b for a, b in zip(items, v)) else items
    return _exact_int(v, path)


def _exact_integers(data: Any, desc: Descriptor, prefix: str) -> Any:
    """``data`` with every integer field's fraction / exponent literal replaced by its exact integer
    (:func:`_exact_int`); ``data`` itself when there is none (copy on write: the caller's value,
    which validate inspects for off-profile forms, is never changed)."""
    if not isinstance(data, dict):
        return data
    out = None
    checked = False
    for key, v in data.items():
        f = _field_of(desc, key)
        if f is None:
            continue  # unknown: the parser's (json.profile) or the compat log's business
        if key != f.name and not checked:  # a JSON name: no other key of this object may name the same field
            _one_key_per_field(data, desc, prefix)
            checked = True
        nv = _exact_value(f, v, prefix + f.name)
        if nv is not v:
            if out is None:
                out = dict(data)
            out[key] = nv
    return data if out is None else out


def _one_key_per_field(data: dict, desc: Descriptor, prefix: str) -> None:
    """Raise :class:`_TwoNames` when two keys of ``data`` name one field of ``desc`` (its proto name and its
    JSON name; the same key twice is the JSON guard's ``json.duplicate_key``)."""
    named: dict[int, str] = {}
    for key in data:
        f = _field_of(desc, key)
        if f is not None and (other := named.setdefault(f.number, key)) != key:
            raise _TwoNames(f"field {prefix}{f.name} appears twice in one object, as {other!r} and {key!r} (its "
                            "proto name and its JSON name name one field: rejected, never last-one-wins)")


# ---------------------------------------------------------------------------------------------
# off-profile forms: what the reader accepts but the profile's writers never write

#: form -> what it is (``validate`` reports each as rule ``json.<form>``: a warning, an error under --strict)
OFF_PROFILE_FORMS: dict[str, str] = {
    "camel_case_key": "a lowerCamelCase key (`requestId`) instead of the proto field name (`request_id`)",
    "enum_number": "an enum written as its number (`1`, or a numeric string `\"1\"`) instead of its name",
    "int32_string": "a 32-bit integer written as a string (`\"5\"`) instead of a JSON number",
    "int64_number": "a 64-bit integer written as a JSON number instead of a decimal string (precision is lost "
                    "above 2^53 in most parsers)",
    "int64_form": "a 64-bit decimal string that is not canonical (leading zeros `\"007\"`, `\"-0\"`, `\"+1\"`, spaces)",
    "null": "`null` instead of leaving the key out",
}
# The same key twice in one object is not an off-profile form: it is rejected by every reader
# (``json.duplicate_key``, :mod:`unirl_replay.contract.json_guard`), since parsers keep one of the
# values and which one varies.

_F = FieldDescriptor
_INT32 = {_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32, _F.TYPE_UINT32, _F.TYPE_FIXED32}
_INT64 = {_F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64, _F.TYPE_UINT64, _F.TYPE_FIXED64}
_INTS = _INT32 | _INT64
_FLOATS = {_F.TYPE_DOUBLE, _F.TYPE_FLOAT}
_CANONICAL_INT = re.compile(r"-?(0|[1-9][0-9]*)")


def _is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)
    return bool(rep) if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def _scalar(f: FieldDescriptor, v: Any, path: str, out: list[tuple[str, str]]) -> None:
    if v is None:
        out.append(("null", path))
    elif f.type == _F.TYPE_MESSAGE and isinstance(v, dict):
        _walk(v, f.message_type, path + ".", out)
    elif f.type == _F.TYPE_ENUM and not isinstance(v, bool) and (
            isinstance(v, (int, float)) or (isinstance(v, str) and _numeric_enum_string(f, v))):
        out.append(("enum_number", path))
    elif f.type in _INT32 and isinstance(v, str):
        out.append(("int32_string", path))
    elif f.type in _INT64:
        if isinstance(v, (int, float)) and not isinstance(v, bool):  # 1000, 1e3, 1000.0: all JSON numbers
            out.append(("int64_number", path))
        elif isinstance(v, str) and (not _CANONICAL_INT.fullmatch(v) or v == "-0"):
            out.append(("int64_form", path))


def _numeric_enum_string(f: FieldDescriptor, v: str) -> bool:
    """A string in an enum field that is no name of the enum but that the parser reads as a number
    (``json_format`` falls back to ``int(v)``: ``"1"``, ``" 1"``, ``"01"``, ``"+1"``): an enum number."""
    if v in f.enum_type.values_by_name:
        return False
    try:
        int(v)
    except ValueError:
        return False  # no name, no number: the parser's error (json.profile)
    return True


def _field_of(desc: Descriptor, key: str) -> FieldDescriptor | None:
    """The field a JSON key names: its proto name, else its lowerCamelCase JSON name; None: no field of ``desc``."""
    f = desc.fields_by_name.get(key)
    return f if f is not None else _json_names(desc).get(key)


@functools.lru_cache(maxsize=None)
def _json_names(desc: Descriptor) -> dict[str, FieldDescriptor]:
    return {x.json_name: x for x in desc.fields}


def _walk(data: dict, desc: Descriptor, prefix: str, out: list[tuple[str, str]]) -> None:
    for key, v in data.items():
        f = _field_of(desc, key)
        if f is None:
            continue  # unknown keys are the parser's (json.profile) or the compat log's business
        if f.name != key:
            out.append(("camel_case_key", prefix + key))
        path = prefix + f.name
        if f.type == _F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            if v is None:
                out.append(("null", path))
            elif isinstance(v, dict):
                vf = f.message_type.fields_by_name["value"]
                for mk, mv in v.items():
                    _scalar(vf, mv, f"{path}[{mk!r}]", out)
        elif _is_repeated(f):
            if v is None:
                out.append(("null", path))
            elif isinstance(v, list):
                for i, item in enumerate(v):
                    _scalar(f, item, f"{path}[{i}]", out)
        else:
            _scalar(f, v, path, out)


def off_profile_forms(data: Any, desc: Descriptor) -> list[tuple[str, str]]:
    """``(form, dotted path)`` of every off-profile form (:data:`OFF_PROFILE_FORMS`) in decoded JSON of ``desc``.

    The forms are accepted
    by :func:`parse_dict` (proto3 JSON allows them); the profile's writers never produce them.
    """
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        _walk(data, desc, "", out)
    return out
