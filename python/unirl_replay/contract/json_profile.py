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

import json
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from unirl_replay.contract import json_guard
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


def parse_dict(data: Any, cls: type[M], *, file: str = "", line: int = 0) -> M:
    """JSON value (already decoded) -> message of type ``cls``.

    Raises:
        TraceFormatError: rule ``json.profile`` when ``data`` is not an object, has an unknown key,
            a wrong type, an unknown enum name, or an out-of-range integer.
    """
    if not isinstance(data, dict):
        raise TraceFormatError(f"expected a JSON object for {cls.DESCRIPTOR.full_name}, got {type(data).__name__}",
                               file=file, line=line, rule="json.profile")
    msg = cls()
    try:
        json_format.ParseDict(data, msg)
    except json_format.ParseError as e:
        raise TraceFormatError(f"not a valid {cls.DESCRIPTOR.full_name}: {e}", file=file, line=line,
                               rule="json.profile") from None
    except RecursionError:  # hostile input: nesting the parser cannot follow
        raise TraceFormatError(f"JSON nested too deeply for a {cls.DESCRIPTOR.full_name}", file=file, line=line,
                               rule="json.depth") from None
    return msg


def parse_json(text: str | bytes, cls: type[M], *, file: str = "", line: int = 0) -> M:
    """JSON text -> message. Raises TraceFormatError (``json.parse`` / ``json.profile``, or a
    hostile-input rule of :mod:`unirl_replay.contract.json_guard`: ``json.duplicate_key``,
    ``json.nan``, ``json.huge_number``, ``json.depth``)."""
    return parse_dict(json_guard.loads(text, file=file, line=line), cls, file=file, line=line)


# One JSONL line is parsed exactly like a whole JSON document.
parse_json_line = parse_json
