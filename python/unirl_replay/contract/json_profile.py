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
integers as JSON numbers, enum numbers, and lowerCamelCase keys. Unknown keys are rejected.

Errors raise :class:`unirl_replay.contract.errors.TraceFormatError` with rule ``json.parse`` (not JSON) or
``json.profile`` (JSON, but not a valid message), naming the file and line when given.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from unirl_replay.contract.errors import TraceFormatError

M = TypeVar("M", bound=Message)

__all__ = ["to_dict", "to_json", "to_json_line", "parse_dict", "parse_json", "parse_json_line"]


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
    return msg


def loads(text: str | bytes, *, file: str = "", line: int = 0) -> Any:
    """Decode JSON text. Raises TraceFormatError (``json.parse``) when it is not JSON."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"not valid JSON: {e}", file=file, line=line, rule="json.parse") from None


def parse_json(text: str | bytes, cls: type[M], *, file: str = "", line: int = 0,
               on_unknown: Callable[[list[str]], None] | None = None) -> M:
    """JSON text -> message. Raises TraceFormatError (``json.parse`` / ``json.profile``); see :func:`parse_dict`."""
    return parse_dict(loads(text, file=file, line=line), cls, file=file, line=line, on_unknown=on_unknown)


# One JSONL line is parsed exactly like a whole JSON document.
parse_json_line = parse_json
