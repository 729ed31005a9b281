"""JSON Schemas: fresh, strict, and they accept exactly what the JSON profile writes."""

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from google.protobuf.descriptor import FieldDescriptor as F

from tracebuild import agentic_trace, messages
from unirl_replay import SCHEMA_VERSION
from unirl_replay.contract import json_profile
from unirl_replay.contract import jsonschema_gen

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = {name: json.loads((ROOT / "schema" / name).read_text()) for name in jsonschema_gen.TOP_LEVEL}
VALIDATORS = {name: jsonschema.Draft202012Validator(s) for name, s in SCHEMAS.items()}
CLASSES = {name: __import__("google.protobuf.message_factory", fromlist=["x"]).GetMessageClass(d)
           for name, d in jsonschema_gen.TOP_LEVEL.items()}


def test_committed_schemas_are_fresh_and_valid_2020_12():
    assert jsonschema_gen.check(ROOT / "schema") == []
    for s in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(s)


def test_check_reports_a_stale_schema(tmp_path):
    jsonschema_gen.write(tmp_path)
    p = tmp_path / "workload_record.schema.json"
    p.write_text(p.read_text().replace('"additionalProperties": false', '"additionalProperties": true', 1))
    (tmp_path / "old.schema.json").write_text("{}")
    problems = jsonschema_gen.check(tmp_path)
    assert len(problems) == 2 and any("additionalProperties" in x for x in problems)
    assert jsonschema_gen.main(["--check", str(tmp_path)]) == 1


def conform(msg):
    """Fill what a conforming record cannot omit (jsonschema_gen.REQUIRED / FIELD_SCHEMA) into a random message."""
    desc = msg.DESCRIPTOR
    for name in jsonschema_gen.REQUIRED.get(desc.full_name, ()):
        f = desc.fields_by_name[name]
        if f.type == F.TYPE_MESSAGE and jsonschema_gen._is_repeated(f):
            if not getattr(msg, name):
                getattr(msg, name).add()
        elif f.type == F.TYPE_MESSAGE:
            getattr(msg, name).SetInParent()
        elif f.type == F.TYPE_STRING and not getattr(msg, name):
            setattr(msg, name, "x")
        elif f.type != F.TYPE_STRING and not getattr(msg, name):
            setattr(msg, name, 1)
    for on in jsonschema_gen.real_oneofs(desc):
        if msg.WhichOneof(on.name) is None:
            f = on.fields[0]
            getattr(msg, f.name).SetInParent() if f.type == F.TYPE_MESSAGE else setattr(msg, f.name, 0)
    for f in desc.fields:
        rule = jsonschema_gen.FIELD_SCHEMA.get(f.full_name)
        if rule and getattr(msg, f.name):
            setattr(msg, f.name, rule.get("const", "0" * 64))
        if f.type != F.TYPE_MESSAGE:
            continue
        if f.message_type.GetOptions().map_entry:
            if f.message_type.fields_by_name["value"].type == F.TYPE_MESSAGE:
                for v in getattr(msg, f.name).values():
                    conform(v)
        elif jsonschema_gen._is_repeated(f):
            for v in getattr(msg, f.name):
                conform(v)
        elif msg.HasField(f.name):
            conform(getattr(msg, f.name))
    return msg


@pytest.mark.parametrize("name", list(jsonschema_gen.TOP_LEVEL))
def test_random_messages_validate(name):
    @settings(max_examples=30, deadline=None)
    @given(messages(CLASSES[name]))
    def run(msg):
        VALIDATORS[name].validate(json_profile.to_dict(conform(msg)))
    run()


REQ = {"request_id": "r", "num_samples": 1, "arrival": {"after_dependencies": {}}}


@given(st.integers(-(2**63), 2**63 - 1))
def test_int64_as_string_or_number(n):
    v = VALIDATORS["workload_record.schema.json"]
    v.validate({"request": {**REQ, "policy_version": str(n)}})
    v.validate({"request": {**REQ, "policy_version": n}})


@given(st.one_of(st.integers(0, 2**64 - 1), st.integers(-(2**70), 2**70)))
def test_uint64_strings_exactly_in_range(n):
    v = VALIDATORS["workload_record.schema.json"]
    rec = {"request": {**REQ, "prefix": {"block_hashes": [str(n)]}}}
    assert v.is_valid(rec) == (0 <= n < 2**64)


def test_real_trace_records_validate():
    for rec in agentic_trace().workload:
        VALIDATORS["workload_record.schema.json"].validate(json_profile.to_dict(rec))
    for rec in agentic_trace().outcomes:
        VALIDATORS["outcome_record.schema.json"].validate(json_profile.to_dict(rec))


#: (record, what is wrong with it): every one is valid except for that (see test_bad_records_differ_by_one_thing)
BAD_WORKLOAD = [
    ({"request": {**REQ, "unknown_key": 1}}, "unknown key"),
    ({"request": {**REQ, "requestId": "r2"}}, "camelCase key"),
    ({"request": {**REQ, "finish_reasons": ["FINISH_REASON_NOPE"]}}, "wrong enum name"),
    ({"request": {**REQ, "finish_reasons": [1]}}, "enum as number"),
    ({"request": REQ, "group": {"group_id": "g", "unit": "GROUP_UNIT_SAMPLES"}}, "two oneof members"),
    ({}, "no oneof member"),
    ({"request": {**REQ, "arrival": {}}}, "arrival kind missing"),
    ({"request": {**REQ, "arrival": {"observed_offset_ns": "1", "after_dependencies": {}}}}, "two arrival kinds"),
    ({"request": {**REQ, "num_samples": -1}}, "uint32 below range"),
    ({"request": {**REQ, "num_samples": 2**32}}, "uint32 above range"),
    ({"request": {**REQ, "num_samples": "1"}}, "32-bit integer as a string"),
    ({"request": {**REQ, "policy_version": "1.5"}}, "int64 not integral"),
    ({"request": {**REQ, "policy_version": "9223372036854775808"}}, "int64 string above range"),
    ({"request": {**REQ, "policy_version": "007"}}, "leading zeros"),
    ({"request": {**REQ, "policy_version": "-0"}}, "minus zero"),
    ({"request": {**REQ, "prefix": {"block_hashes": ["18446744073709551616"]}}}, "uint64 string above range"),
    ({"request": {**REQ, "prefix": {"block_hashes": ["-1"]}}}, "uint64 negative"),
    ({"request": {**REQ, "turn_index": None}}, "null"),
    ({"request": {k: v for k, v in REQ.items() if k != "request_id"}}, "required request_id missing"),
    ({"request": {k: v for k, v in REQ.items() if k != "arrival"}}, "required arrival missing"),
    ({"group": {"group_id": "g"}}, "required enum (unit) missing"),
]


def test_bad_records_differ_by_one_thing():
    v = VALIDATORS["workload_record.schema.json"]
    v.validate({"request": REQ})
    v.validate({"group": {"group_id": "g", "unit": "GROUP_UNIT_SAMPLES"}})


@pytest.mark.parametrize("bad", [b for b, _ in BAD_WORKLOAD], ids=[why for _, why in BAD_WORKLOAD])
def test_schema_rejects(bad):
    with pytest.raises(jsonschema.ValidationError):
        VALIDATORS["workload_record.schema.json"].validate(bad)


def test_manifest_schema_version_and_sha256():
    v = VALIDATORS["trace_manifest.schema.json"]
    good = json_profile.to_dict(conform(CLASSES["trace_manifest.schema.json"]()))
    v.validate(good)
    assert good["schema_version"] == SCHEMA_VERSION
    for path, value in ((("schema_version",), "unirl_replay.v2"), (("artifacts", 0, "sha256"), "AB" * 32),
                        (("artifacts", 0, "sha256"), "0" * 63), (("model", "weights_sha256"), "xyz")):
        bad = json.loads(json.dumps(good))
        node = bad
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(k, str) else node[k]
        node[path[-1]] = value
        assert not v.is_valid(bad), path


def test_manifest_schema_rejects_unknown_key_deep():
    bad = {"schema_version": "unirl_replay.v1", "window": {"duration_ns": "1", "clock": "x"}}
    with pytest.raises(jsonschema.ValidationError):
        VALIDATORS["trace_manifest.schema.json"].validate(bad)


def test_every_proto_field_is_in_the_schema():
    """A proto field added without regenerating schema/ fails here (and in check_gen)."""
    defs = SCHEMAS["trace_manifest.schema.json"]["$defs"]
    for name, desc in jsonschema_gen.TOP_LEVEL.items():
        d = SCHEMAS[name]["$defs"][desc.full_name]
        assert set(d["properties"]) == {f.name for f in desc.fields}
    assert "severity" in SCHEMAS["trace_check.schema.json"]["$defs"]["unirl_replay.v1.Violation"]["properties"]
    assert defs["unirl_replay.v1.ArtifactKind"]["enum"][0] == "ARTIFACT_KIND_UNSPECIFIED"
