"""Hostile-input guard of every JSON reader: JSON text -> Python value, or a typed error.

:func:`loads` is ``json.loads`` with the checks a contract file needs and the standard library
leaves out. Each failure is a :class:`~unirl_replay.contract.errors.TraceFormatError` naming the
file, the line and the rule:

==================== ==========================================================================
``json.parse``       not JSON, or not UTF-8 (an object key holding an unpaired UTF-16 surrogate
                     escape, ``"\\ud800"``, included: no UTF-8 text spells it)
``json.duplicate_key`` an object has the same key twice (``{"schema_version": "v2", "schema_version":
                     "v1"}`` would silently read as v1): rejected, never "last one wins"
``json.nan``         the bare tokens ``NaN``, ``Infinity``, ``-Infinity`` (not JSON), and a number
                     that overflows to infinity (``1e999``)
``json.huge_number`` a number literal longer than :data:`MAX_NUMBER_CHARS` characters (no contract
                     field needs more than 20 digits; a 5,000-digit integer must not reach ``int``)
``json.depth``       nesting deeper than the interpreter's recursion limit (about 1,000 levels;
                     the contract nests at most ~8)
==================== ==========================================================================

Sizes are bounded by the callers (:data:`unirl_replay.contract.trace_io.MAX_LINE_BYTES` per
JSONL line, :data:`~unirl_replay.contract.trace_io.MAX_JSON_FILE_BYTES` per single-message file).
"""

from __future__ import annotations

import json
import math
from typing import Any

from unirl_replay.contract.errors import TraceFormatError

#: Longest number literal accepted (uint64 max has 20 digits; a double's repr has at most ~24).
MAX_NUMBER_CHARS = 64

__all__ = ["MAX_NUMBER_CHARS", "loads", "GuardError", "ExactFloat"]


class GuardError(ValueError):
    """Raised inside the decoder's hooks; turned into a TraceFormatError by :func:`loads`."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if not k.isascii() and not _encodable(k):
            raise GuardError("json.parse", f"key {k[:80]!r} holds an unpaired UTF-16 surrogate (a JSON escape such as "
                             "\\ud800 without its pair): not valid Unicode, so not UTF-8 text")
        if k in out:
            raise GuardError("json.duplicate_key", f"key {k[:80]!r} appears twice in one object (rejected, "
                             "never last-one-wins)")
        out[k] = v
    return out


def _encodable(k: str) -> bool:
    try:
        k.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _constant(name: str) -> Any:
    raise GuardError("json.nan", f"{name} is not JSON (a non-finite number is written as the string "
                     f"\"{name}\" in a double field, and never in a trace)")


def _int(s: str) -> int:
    if len(s) > MAX_NUMBER_CHARS:
        raise GuardError("json.huge_number", f"integer literal of {len(s)} digits (limit {MAX_NUMBER_CHARS})")
    return int(s)


def _float(s: str) -> float:
    if len(s) > MAX_NUMBER_CHARS:
        raise GuardError("json.huge_number", f"number literal of {len(s)} characters (limit {MAX_NUMBER_CHARS})")
    v = float(s)
    if not math.isfinite(v):
        raise GuardError("json.nan", f"number {s[:40]} overflows to infinity")
    return v


class ExactFloat(float):
    """A JSON number literal with a fraction or an exponent (``1e3``, ``40.0``), decoded as the
    float it rounds to but keeping its text (``literal``): an integer field given such a number
    is read from the text, exactly (``json_profile.parse_dict``), never from the rounded float
    (``1234567890123456789.0`` is not the float 1234567890123456768)."""

    literal: str

    def __new__(cls, literal: str) -> "ExactFloat":
        v = super().__new__(cls, _float(literal))
        v.literal = literal
        return v

    def __reduce__(self):
        return (ExactFloat, (self.literal,))


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int,
                            parse_float=_float)
_EXACT_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int,
                                  parse_float=ExactFloat)


def loads(text: str | bytes, *, file: str = "", line: int = 0, exact: bool = False) -> Any:
    """Decode one JSON document (or JSONL line) with the guards above.

    ``exact``: numbers with a fraction or an exponent come back as :class:`ExactFloat` (a float
    that keeps its literal), for the contract's message parser (``json_profile``).

    Raises:
        TraceFormatError: rule ``json.parse``, ``json.duplicate_key``, ``json.nan``,
            ``json.huge_number`` or ``json.depth``, naming ``file`` and ``line``.
    """
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8")
        if text.startswith("\ufeff"):
            raise GuardError("json.parse", "UTF-8 byte order mark before the JSON value")
        return (_EXACT_DECODER if exact else _DECODER).decode(text)
    except GuardError as e:
        raise TraceFormatError(str(e), file=file, line=line, rule=e.rule) from None
    except RecursionError:
        raise TraceFormatError("JSON nested too deeply (beyond the interpreter's recursion limit)", file=file,
                               line=line, rule="json.depth") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"not valid JSON: {e}", file=file, line=line, rule="json.parse") from None
    except ValueError as e:  # int() digit limits and the like: never a traceback
        raise TraceFormatError(f"not valid JSON: {e}", file=file, line=line, rule="json.parse") from None
