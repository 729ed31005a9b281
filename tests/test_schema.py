"""JSON Schemas: fresh, strict, and they accept exactly what the JSON profile writes."""

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebuild import agentic_trace, messages
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


@pytest.mark.parametrize("name", list(jsonschema_gen.TOP_LEVEL))
def test_random_messages_validate(name):
    @settings(max_examples=30, deadline=None)
    @given(messages(CLASSES[name]))
    def run(msg):
        VALIDATORS[name].validate(json_profile.to_dict(msg))
    run()


@given(st.integers(-(2**63), 2**63 - 1))
def test_int64_as_string_or_number(n):
    v = VALIDATORS["workload_record.schema.json"]
    v.validate({"request": {"policy_version": str(n)}})
    v.validate({"request": {"policy_version": n}})


def test_real_trace_records_validate():
    for rec in agentic_trace().workload:
        VALIDATORS["workload_record.schema.json"].validate(json_profile.to_dict(rec))
    for rec in agentic_trace().outcomes:
        VALIDATORS["outcome_record.schema.json"].validate(json_profile.to_dict(rec))


@pytest.mark.parametrize("bad", [
    {"request": {"request_id": "r", "unknown_key": 1}},                       # unknown key
    {"request": {"requestId": "r"}},                                          # camelCase key
    {"request": {"finish_reasons": ["FINISH_REASON_NOPE"]}},                  # wrong enum name
    {"request": {"finish_reasons": [1]}},                                     # enum as number
    {"request": {}, "group": {}},                                             # two oneof members
    {},                                                                       # no oneof member
    {"request": {"arrival": {}}},                                             # arrival kind missing
    {"request": {"arrival": {"observed_offset_ns": "1", "after_dependencies": {}}}},
    {"request": {"num_samples": -1}},                                         # uint32 range
    {"request": {"num_samples": 2**32}},
    {"request": {"policy_version": "1.5"}},                                   # int64 not integral
    {"request": {"policy_version": "99999999999999999999999"}},
    {"request": {"prefix": {"block_hashes": ["-1"]}}},                        # uint64 negative
    {"request": {"turn_index": None}},                                        # null
])
def test_schema_rejects(bad):
    with pytest.raises(jsonschema.ValidationError):
        VALIDATORS["workload_record.schema.json"].validate(bad)


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
