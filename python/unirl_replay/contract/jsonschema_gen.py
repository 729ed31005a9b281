"""JSON Schema (draft 2020-12) for every JSON record type, generated from the protobuf descriptors.

One schema file per top-level type, each self-contained (every reachable message in ``$defs``):

===========================================  ======================  ==============================
file                                         message                 where it appears
===========================================  ======================  ==============================
``workload_record.schema.json``              WorkloadRecord          each line of workload.jsonl
``outcome_record.schema.json``               OutcomeRecord           each line of outcomes.jsonl
``trace_manifest.schema.json``               TraceManifest           manifest.json
``replay_result.schema.json``                ReplayResult            replay_result.json
``validation_report.schema.json``            ValidationReport        validation report JSON
``trace_check.schema.json``                  TraceCheck              ``validate --json`` output
``reference_probe_artifact.schema.json``     ReferenceProbeArtifact  ``probes/<engine>-<when>.json``
===========================================  ======================  ==============================

The schemas describe the JSON profile (docs/json-profile.md) strictly: snake_case keys only,
``additionalProperties: false``, enums by name, a oneof as exactly one of its keys, 32-bit integers
as JSON integers in range, 64-bit integers as decimal strings in range without leading zeros (or JSON
integers, which readers also accept), doubles as numbers or ``"NaN"`` / ``"Infinity"`` /
``"-Infinity"``, the fields a conforming record cannot omit as ``required`` (:data:`REQUIRED`),
``schema_version`` as the constant ``"unirl_replay.v1"`` and digests as lowercase hex sha256
(:data:`FIELD_SCHEMA`). They compile under ajv's strict mode (tests/test_schema_ajv.py).

Usage::

    python -m unirl_replay.contract.jsonschema_gen --write schema   # (re)generate
    python -m unirl_replay.contract.jsonschema_gen --check schema   # exit 1 with a diff when stale
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from unirl_replay import SCHEMA_VERSION
from unirl_replay.v1 import manifest_pb2, outcomes_pb2, replay_pb2, report_pb2, workload_pb2

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://unirl-replay.invalid/schema/v1/"

#: file name -> message descriptor
TOP_LEVEL: dict[str, Descriptor] = {
    "workload_record.schema.json": workload_pb2.WorkloadRecord.DESCRIPTOR,
    "outcome_record.schema.json": outcomes_pb2.OutcomeRecord.DESCRIPTOR,
    "trace_manifest.schema.json": manifest_pb2.TraceManifest.DESCRIPTOR,
    "replay_result.schema.json": replay_pb2.ReplayResult.DESCRIPTOR,
    "validation_report.schema.json": report_pb2.ValidationReport.DESCRIPTOR,
    "trace_check.schema.json": report_pb2.TraceCheck.DESCRIPTOR,
    "reference_probe_artifact.schema.json": manifest_pb2.ReferenceProbeArtifact.DESCRIPTOR,
}

_F = FieldDescriptor
_RANGES = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1), _F.TYPE_SINT32: (-(2**31), 2**31 - 1), _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _F.TYPE_UINT32: (0, 2**32 - 1), _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1), _F.TYPE_SINT64: (-(2**63), 2**63 - 1), _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1), _F.TYPE_FIXED64: (0, 2**64 - 1),
}
_64BIT = {_F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64, _F.TYPE_UINT64, _F.TYPE_FIXED64}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "lowercase hex sha256"}

#: Fields a conforming record cannot omit (message full name -> field names): each is a field that
#: ``unirl-replay validate`` (or the trace reader) rejects when it is absent, i.e. at its zero value
#: (ids, the schema version, the capture window, the artifact list, enums whose _UNSPECIFIED is invalid).
REQUIRED: dict[str, tuple[str, ...]] = {
    "unirl_replay.v1.TraceManifest": ("schema_version", "window", "artifacts"),
    "unirl_replay.v1.CaptureWindow": ("duration_ns", "clock_domain"),
    "unirl_replay.v1.EngineConfig": ("engine_id", "block_size_tokens"),
    "unirl_replay.v1.ArtifactDigest": ("kind", "path", "encoding", "sha256"),
    "unirl_replay.v1.Request": ("request_id", "num_samples", "arrival"),
    "unirl_replay.v1.Dependency": ("predecessor_request_id", "trigger", "relation"),
    "unirl_replay.v1.Trajectory": ("trajectory_id",),
    "unirl_replay.v1.Group": ("group_id", "unit"),
    "unirl_replay.v1.RolloutBatch": ("rollout_batch_id", "readiness_rule"),
    "unirl_replay.v1.SlotPool": ("pool_id", "trajectory_slots"),
    "unirl_replay.v1.EngineClient": ("engine_id",),
    "unirl_replay.v1.CacheWarmup": ("warmup_id",),
    "unirl_replay.v1.RequestOutcome": ("request_id",),
    "unirl_replay.v1.TrajectoryOutcome": ("trajectory_id",),
    "unirl_replay.v1.GroupOutcome": ("group_id",),
    "unirl_replay.v1.BatchOutcome": ("rollout_batch_id",),
    "unirl_replay.v1.ReplayResult": ("schema_version",),
    "unirl_replay.v1.ValidationReport": ("schema_version",),
    "unirl_replay.v1.TraceCheck": ("status",),
    "unirl_replay.v1.ReferenceProbeArtifact": ("schema", "engine_id", "when"),
}

#: Per-field constraints beyond the type (field full name -> schema replacing the type's).
FIELD_SCHEMA: dict[str, dict[str, Any]] = {
    "unirl_replay.v1.TraceManifest.schema_version": {"const": SCHEMA_VERSION},
    "unirl_replay.v1.ReplayResult.schema_version": {"const": SCHEMA_VERSION},
    "unirl_replay.v1.ValidationReport.schema_version": {"const": SCHEMA_VERSION},
    "unirl_replay.v1.ReferenceProbeArtifact.schema": {"const": "unirl-replay.reference-probe/2"},
    "unirl_replay.v1.ArtifactDigest.sha256": _SHA256,
    "unirl_replay.v1.ModelIdentity.weights_sha256": _SHA256,
}


def _le_pattern(limit: int, *, zero: bool = True) -> str:
    """Regex (a non-capturing group) matching exactly the decimals 0..limit (1..limit without
    ``zero``), no leading zeros. ``limit`` >= 10."""
    s = str(limit)
    k = len(s)
    alts = (["0"] if zero else []) + ["[1-9]" + (f"[0-9]{{0,{k - 2}}}" if k > 2 else "")]  # fewer digits
    for i, ch in enumerate(s):  # k digits: equal to s up to i, smaller at i, anything after
        d, lo = int(ch), (1 if i == 0 else 0)
        if d > lo:
            alts.append(s[:i] + (f"[{lo}-{d - 1}]" if d - 1 > lo else str(lo)) + (f"[0-9]{{{k - i - 1}}}" if k - i > 1 else ""))
    alts.append(s)
    return "(?:" + "|".join(alts) + ")"


def _int64_pattern(lo: int, hi: int) -> str:
    """Anchored regex of the decimal strings of exactly the integers in [lo, hi] (lo is 0 or -(hi+1))."""
    if lo == 0:
        return f"^{_le_pattern(hi)}$"
    return f"^(?:{_le_pattern(hi)}|-{_le_pattern(-lo, zero=False)})$"


def _is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)
    return bool(rep) if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def real_oneofs(desc: Descriptor) -> list:
    """The message's oneofs, without the synthetic ones protoc makes for proto3 ``optional`` fields."""
    out = []
    for o in desc.oneofs:
        synthetic = getattr(o, "is_synthetic", None)
        if synthetic is None:
            synthetic = len(o.fields) == 1 and o.name == "_" + o.fields[0].name
        if not synthetic:
            out.append(o)
    return out


def _def_name(desc) -> str:
    return desc.full_name


def _scalar_schema(f: FieldDescriptor, defs: dict[str, Any]) -> dict[str, Any]:
    t = f.type
    if t == _F.TYPE_MESSAGE:
        _add_message(f.message_type, defs)
        return {"$ref": f"#/$defs/{_def_name(f.message_type)}"}
    if t == _F.TYPE_ENUM:
        e = f.enum_type
        name = _def_name(e)
        if name not in defs:
            defs[name] = {"title": e.full_name, "type": "string", "enum": [v.name for v in e.values]}
        return {"$ref": f"#/$defs/{name}"}
    if t == _F.TYPE_STRING:
        return {"type": "string"}
    if t == _F.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    if t == _F.TYPE_BOOL:
        return {"type": "boolean"}
    if t in (_F.TYPE_DOUBLE, _F.TYPE_FLOAT):
        return {"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]}
    lo, hi = _RANGES[t]
    if t in _64BIT:
        return {"anyOf": [{"type": "string", "pattern": _int64_pattern(lo, hi)},
                          {"type": "integer", "minimum": lo, "maximum": hi}],
                "description": f"{'u' if lo == 0 else ''}int64 in [{lo}, {hi}] as a decimal string, no leading zeros "
                               "(a JSON integer is accepted on input)"}
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _field_schema(f: FieldDescriptor, defs: dict[str, Any]) -> dict[str, Any]:
    if f.full_name in FIELD_SCHEMA:
        return dict(FIELD_SCHEMA[f.full_name])
    if f.type == _F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
        value = f.message_type.fields_by_name["value"]
        key = f.message_type.fields_by_name["key"]
        s: dict[str, Any] = {"type": "object", "additionalProperties": _scalar_schema(value, defs)}
        if key.type != _F.TYPE_STRING:
            s["propertyNames"] = {"type": "string",
                                  "pattern": "^-?[0-9]+$" if key.type != _F.TYPE_BOOL else "^(true|false)$"}
        return s
    if _is_repeated(f):
        return {"type": "array", "items": _scalar_schema(f, defs)}
    return _scalar_schema(f, defs)


def _add_message(desc: Descriptor, defs: dict[str, Any]) -> None:
    name = _def_name(desc)
    if name in defs:
        return
    defs[name] = {}  # reserve (recursion guard)
    props = {f.name: _field_schema(f, defs) for f in desc.fields}
    s: dict[str, Any] = {"title": desc.full_name, "type": "object", "properties": props, "additionalProperties": False}
    required = REQUIRED.get(desc.full_name, ())
    assert all(r in props for r in required), (desc.full_name, required)
    if required:
        s["required"] = list(required)
    oneofs = real_oneofs(desc)
    # each branch names its member under `properties` too, so that ajv's strict mode (strictRequired) compiles it
    branch = [[{"properties": {f.name: True}, "required": [f.name]} for f in o.fields] for o in oneofs]
    if len(oneofs) == 1:
        s["oneOf"] = branch[0]
    elif oneofs:
        s["allOf"] = [{"oneOf": b} for b in branch]
    defs[name] = s


def schema_for(desc: Descriptor, file_name: str) -> dict[str, Any]:
    """The self-contained JSON Schema of one top-level message (root = that message)."""
    defs: dict[str, Any] = {}
    _add_message(desc, defs)
    root = defs[_def_name(desc)]
    out: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": ID_BASE + file_name,
        "$comment": "GENERATED by `python -m unirl_replay.contract.jsonschema_gen --write schema` from the "
                    "proto descriptors of unirl_replay.v1; do not edit. See docs/json-profile.md.",
        "$ref": f"#/$defs/{_def_name(desc)}",
        "title": root["title"],
        "$defs": dict(sorted(defs.items())),
    }
    return out


def render_all() -> dict[str, str]:
    """file name -> JSON text of every schema (stable, sorted $defs, trailing newline)."""
    return {name: json.dumps(schema_for(d, name), indent=2, ensure_ascii=False) + "\n" for name, d in TOP_LEVEL.items()}


def write(out_dir: Path) -> list[Path]:
    """Write every schema to ``out_dir`` and remove stale ``*.schema.json`` files there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rendered = render_all()
    for p in out_dir.glob("*.schema.json"):
        if p.name not in rendered:
            p.unlink()
    paths = []
    for name, text in rendered.items():
        p = out_dir / name
        p.write_text(text)
        paths.append(p)
    return paths


def check(out_dir: Path) -> list[str]:
    """Differences between ``out_dir`` and freshly generated schemas (empty list when fresh)."""
    problems: list[str] = []
    rendered = render_all()
    existing = {p.name for p in out_dir.glob("*.schema.json")} if out_dir.is_dir() else set()
    for name in sorted(existing - rendered.keys()):
        problems.append(f"{out_dir / name}: not generated any more (remove it)")
    for name, text in rendered.items():
        p = out_dir / name
        if not p.is_file():
            problems.append(f"{p}: missing")
            continue
        old = p.read_text()
        if old != text:
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(p), f"{p} (generated)", lineterm="", n=2)
            problems.append("\n".join(list(diff)[:60]))
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m unirl_replay.contract.jsonschema_gen", description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="DIR", type=Path, help="write the schemas to DIR")
    g.add_argument("--check", metavar="DIR", type=Path, help="exit 1 with a diff when DIR is stale")
    args = ap.parse_args(argv)
    if args.write:
        for p in write(args.write):
            print(p)
        return 0
    problems = check(args.check)
    if problems:
        print(f"jsonschema_gen: {args.check}/ is stale; run 'make gen' and commit:", file=sys.stderr)
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
