"""Checks on parsed messages that neither the JSON nor the binary decoder makes.

- **Unknown enum numbers.** proto3 enums are open: the JSON parser accepts any enum *number* and
  the binary decoder keeps a number it does not know. The v1 readers' decision: a number that is
  not a value of the enum in this contract version is **rejected** (``validate`` rule
  ``enum.unknown``, an error, so the gate refuses the trace and no later stage ever sees it; a
  replay result with one is refused by ``compare``). A newer producer that adds an enum value
  must bump what readers accept, not rely on readers passing the number through.
- **Ids.** An id holds no control characters (C0, DEL, C1: they corrupt the one-line messages,
  tables and file names derived from ids; nor the Unicode bidirectional controls U+061C, U+200E,
  U+200F, U+202A-U+202E, U+2066-U+2069: an override in a workload name or id reorders the rest of
  the line it is printed on, the honesty label after it in a table row or plot title read backwards,
  ``)DEXIF(``) and is at most :data:`MAX_ID_CHARS` characters.

:func:`unknown_enums` visits only the fields that can hold an enum (precomputed per message type),
so the cost per record is a few attribute reads.
"""

from __future__ import annotations

import re
from functools import lru_cache

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

#: Longest id accepted (request, trajectory, group, batch, engine, sample ids).
MAX_ID_CHARS = 1024
#: C0, DEL, C1 and the bidirectional controls (ALM, LRM, RLM, LRE-RLO, LRI-PDI)
CONTROL_CHARS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # a regex character class's body
_CONTROL = re.compile(f"[{CONTROL_CHARS}]")

__all__ = ["MAX_ID_CHARS", "unknown_enums", "id_problem"]


@lru_cache(maxsize=None)
def _plan(desc: Descriptor) -> tuple[tuple[FieldDescriptor, frozenset[int]], ...] | tuple:
    """Per message type: (enum fields with their known numbers, message fields that contain enums)."""
    return _build(desc, frozenset())


def _build(desc: Descriptor, stack: frozenset) -> tuple:
    enums, subs = [], []
    for f in desc.fields:
        if f.type == FieldDescriptor.TYPE_ENUM:
            enums.append((f, frozenset(f.enum_type.values_by_number)))
        elif f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.full_name not in stack:
            if f.message_type.GetOptions().map_entry:
                vf = f.message_type.fields_by_name["value"]
                if vf.type == FieldDescriptor.TYPE_ENUM or (vf.type == FieldDescriptor.TYPE_MESSAGE and
                                                            _has_enum(vf.message_type, stack | {desc.full_name})):
                    subs.append(f)
            elif _has_enum(f.message_type, stack | {desc.full_name}):
                subs.append(f)
    return tuple(enums), tuple(subs)


def _has_enum(desc: Descriptor, stack: frozenset) -> bool:
    enums, subs = _build(desc, stack)
    return bool(enums or subs)


def _is_repeated(f: FieldDescriptor) -> bool:
    return f.is_repeated


def unknown_enums(msg: Message, prefix: str = "") -> list[str]:
    """``"field.path = N"`` for every enum field of ``msg`` (recursively) holding a number that is
    not a value of its enum in this contract version."""
    out: list[str] = []
    enums, subs = _plan(msg.DESCRIPTOR)
    for f, known in enums:
        if _is_repeated(f):
            for i, v in enumerate(getattr(msg, f.name)):
                if v not in known:
                    out.append(f"{prefix}{f.name}[{i}] = {v}")
        else:
            v = getattr(msg, f.name)
            if v not in known:
                out.append(f"{prefix}{f.name} = {v}")
    for f in subs:
        if f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            for k, v in getattr(msg, f.name).items():
                if vf.type == FieldDescriptor.TYPE_ENUM:
                    if v not in frozenset(vf.enum_type.values_by_number):
                        out.append(f"{prefix}{f.name}[{k!r}] = {v}")
                else:
                    out.extend(unknown_enums(v, f"{prefix}{f.name}[{k!r}]."))
        elif _is_repeated(f):
            for i, sub in enumerate(getattr(msg, f.name)):
                out.extend(unknown_enums(sub, f"{prefix}{f.name}[{i}]."))
        elif msg.HasField(f.name):
            out.extend(unknown_enums(getattr(msg, f.name), f"{prefix}{f.name}."))
    return out


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (control characters, too long), or None when it can."""
    if len(value) > MAX_ID_CHARS:
        return f"id of {len(value)} characters (limit {MAX_ID_CHARS})"
    m = _CONTROL.search(value)
    if m:
        kind = "control" if ord(m.group()) < 0x100 else "bidirectional control"
        return f"id holds the {kind} character U+{ord(m.group()):04X} at position {m.start()}"
    return None


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a workload name (manifest.workload_name; a profile's calibration workload): what
    :func:`id_problem` refuses, worded of a name, or None when it can be one. An empty name is the caller's to refuse."""
    why = id_problem(value)
    return why.removeprefix("id ") if why else None


@lru_cache(maxsize=None)
def _id_plan(desc: Descriptor, depth: int = 0) -> tuple[tuple[FieldDescriptor, ...], tuple[FieldDescriptor, ...]]:
    """Per message type: its id fields (strings named ``*_id`` / ``*_ids``) and sub-messages holding any."""
    ids = tuple(f for f in desc.fields if f.type == FieldDescriptor.TYPE_STRING and f.name.endswith(("_id", "_ids")))
    subs = []
    if depth < 8:
        for f in desc.fields:
            if f.type == FieldDescriptor.TYPE_MESSAGE and not f.message_type.GetOptions().map_entry:
                a, b = _id_plan(f.message_type, depth + 1)
                if a or b:
                    subs.append(f)
    return ids, tuple(subs)


def bad_ids(msg: Message, prefix: str = "") -> list[str]:
    """``"field.path: problem"`` for every id field of ``msg`` (recursively) that cannot be an id."""
    out: list[str] = []
    ids, subs = _id_plan(msg.DESCRIPTOR)
    for f in ids:
        vals = getattr(msg, f.name)
        for i, v in enumerate(vals) if f.is_repeated else ((None, vals),):
            why = id_problem(v) if v else None
            if why:
                out.append(f"{prefix}{f.name}{'' if i is None else f'[{i}]'}: {why}")
    for f in subs:
        if f.is_repeated:
            for i, sub in enumerate(getattr(msg, f.name)):
                out.extend(bad_ids(sub, f"{prefix}{f.name}[{i}]."))
        elif msg.HasField(f.name):
            out.extend(bad_ids(getattr(msg, f.name), f"{prefix}{f.name}."))
    return out
