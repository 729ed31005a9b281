"""Our breaking check, on top of ``buf breaking`` (WIRE_JSON), against the committed v1 baseline.

WIRE_JSON lets through changes that keep the bytes and the JSON parseable but break what the
contract guarantees: a ``uint32`` that becomes ``int32`` (or ``sint32``, ``fixed32``: same bits, other
numbers, other ranges in the schemas), a field that loses ``optional`` (zero and absent become the
same value: a measured 0 ns delay reads as "not measured"), a field that moves into or out of a
oneof. This check compares every field, enum value, message and enum of the baseline image
(``compat/unirl_replay_v1.binpb``, a buf image: a FileDescriptorSet on the wire) with the current
descriptors (``buf build -o``) and fails on:

- ``field.type``: any change of a field's type or of its message / enum type (signedness named);
- ``field.presence``: a field that had presence (proto3 ``optional``) and lost it;
- ``field.label``: singular <-> repeated;
- ``field.oneof``: a field moved into, out of, or between oneofs;
- ``field.name``: a renamed field (its JSON key changes);
- ``field.deleted`` / ``enum_value.deleted`` / ``enum_value.renumbered`` / ``message.deleted`` /
  ``enum.deleted``: something of the baseline is gone.

Additions (fields, messages, enum values, gaining ``optional``) are fine: v1 only grows.

Usage (``scripts/check_gen.sh``, so ``make test``)::

    buf build -o current.binpb
    python -m unirl_replay.contract.breaking --against compat/unirl_replay_v1.binpb current.binpb
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

_F = descriptor_pb2.FieldDescriptorProto
_SIGNED = {_F.TYPE_INT32: "int32", _F.TYPE_SINT32: "sint32", _F.TYPE_SFIXED32: "sfixed32", _F.TYPE_INT64: "int64",
           _F.TYPE_SINT64: "sint64", _F.TYPE_SFIXED64: "sfixed64"}
_UNSIGNED = {_F.TYPE_UINT32: "uint32", _F.TYPE_FIXED32: "fixed32", _F.TYPE_UINT64: "uint64", _F.TYPE_FIXED64: "fixed64"}

__all__ = ["load_image", "compare", "main"]


def load_image(path: str | Path) -> descriptor_pb2.FileDescriptorSet:
    """A buf image or a FileDescriptorSet (the same message on the wire; buf's extras are kept as unknown fields)."""
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(Path(path).read_bytes())
    return fds


def _type_name(f: descriptor_pb2.FieldDescriptorProto) -> str:
    if f.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM):
        return f.type_name.lstrip(".")
    return _F.Type.Name(f.type).removeprefix("TYPE_").lower()


def _index(fds: descriptor_pb2.FileDescriptorSet) -> tuple[dict, dict]:
    """full name -> DescriptorProto and full name -> EnumDescriptorProto, nested ones included."""
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}

    def walk(prefix: str, msgs, ens) -> None:
        for e in ens:
            enums[f"{prefix}{e.name}"] = e
        for m in msgs:
            name = f"{prefix}{m.name}"
            messages[name] = m
            walk(name + ".", m.nested_type, m.enum_type)

    for f in fds.file:
        walk(f"{f.package}." if f.package else "", f.message_type, f.enum_type)
    return messages, enums


def _oneof_of(m: descriptor_pb2.DescriptorProto, f: descriptor_pb2.FieldDescriptorProto) -> str:
    """The real oneof a field belongs to ('' for none; proto3 optional's synthetic oneof is not one)."""
    if not f.HasField("oneof_index") or f.proto3_optional:
        return ""
    return m.oneof_decl[f.oneof_index].name


def _has_presence(f: descriptor_pb2.FieldDescriptorProto) -> bool:
    return f.proto3_optional or (f.label != _F.LABEL_REPEATED and f.type == _F.TYPE_MESSAGE) or f.HasField("oneof_index")


def compare(baseline: descriptor_pb2.FileDescriptorSet, current: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """Every guarantee of ``baseline`` that ``current`` breaks, as ``rule: where: what`` lines (empty: compatible)."""
    old_m, old_e = _index(baseline)
    new_m, new_e = _index(current)
    out: list[str] = []
    for name, om in old_m.items():
        nm = new_m.get(name)
        if nm is None:
            out.append(f"message.deleted: {name}: the message is gone")
            continue
        fields = {f.number: f for f in nm.field}
        for of in om.field:
            where = f"{name}.{of.name} (field {of.number})"
            nf = fields.get(of.number)
            if nf is None:
                reserved = any(r.start <= of.number < r.end for r in nm.reserved_range)
                out.append(f"field.deleted: {where}: the field is gone" + ("" if reserved else
                           "; keep it (deprecate it), a v1 field is never removed"))
                continue
            ot, nt = _type_name(of), _type_name(nf)
            if ot != nt:
                kind = ""
                if (of.type in _SIGNED and nf.type in _UNSIGNED) or (of.type in _UNSIGNED and nf.type in _SIGNED):
                    kind = " (signedness: the same bits read as other numbers; the schemas' ranges change)"
                out.append(f"field.type: {where}: {ot} -> {nt}{kind}")
            if (of.label == _F.LABEL_REPEATED) != (nf.label == _F.LABEL_REPEATED):
                out.append(f"field.label: {where}: {'repeated' if of.label == _F.LABEL_REPEATED else 'singular'} -> "
                           f"{'repeated' if nf.label == _F.LABEL_REPEATED else 'singular'}")
            if _has_presence(of) and not _has_presence(nf):
                out.append(f"field.presence: {where}: lost presence (`optional` dropped): a set 0 and an absent value "
                           "become the same")
            oo, no = _oneof_of(om, of), _oneof_of(nm, nf)
            if oo != no:
                out.append(f"field.oneof: {where}: oneof {oo or '(none)'} -> {no or '(none)'}")
            if of.name != nf.name:
                out.append(f"field.name: {where}: renamed to {nf.name} (its JSON key changes)")
    for name, oe in old_e.items():
        ne = new_e.get(name)
        if ne is None:
            out.append(f"enum.deleted: {name}: the enum is gone")
            continue
        by_name = {v.name: v.number for v in ne.value}
        for v in oe.value:
            if v.name not in by_name:
                out.append(f"enum_value.deleted: {name}.{v.name} ({v.number}): the value is gone (JSON writes names)")
            elif by_name[v.name] != v.number:
                out.append(f"enum_value.renumbered: {name}.{v.name}: {v.number} -> {by_name[v.name]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m unirl_replay.contract.breaking", description=__doc__.split("\n")[0])
    ap.add_argument("current", type=Path, help="image of the current proto/ (buf build -o FILE)")
    ap.add_argument("--against", type=Path, required=True, help="baseline image (compat/unirl_replay_v1.binpb)")
    args = ap.parse_args(argv)
    problems = compare(load_image(args.against), load_image(args.current))
    if problems:
        print(f"breaking: {len(problems)} change(s) break the v1 contract against {args.against} "
              "(a breaking change goes to a new package, unirl_replay.v2):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"breaking: compatible with {args.against} (types, signedness, presence, labels, oneofs, names, enums)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
