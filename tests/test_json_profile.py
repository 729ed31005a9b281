"""JSON profile: zero vs absent, 64-bit integers, enum names, key case, errors."""

import json

import pytest

from unirl_replay.contract import json_profile
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import workload_pb2 as w


def test_zero_is_kept_for_optional_and_absent_stays_absent():
    d = w.Dependency(predecessor_request_id="a", trigger=c.DEPENDENCY_TRIGGER_COMPLETION,
                     relation=c.DEPENDENCY_RELATION_SEQUENCE, external_delay_ns=0)
    out = json_profile.to_dict(d)
    assert out["external_delay_ns"] == "0"
    d.ClearField("external_delay_ns")
    assert "external_delay_ns" not in json_profile.to_dict(d)
    back = json_profile.parse_dict({"predecessor_request_id": "a", "external_delay_ns": "0"}, w.Dependency)
    assert back.HasField("external_delay_ns") and back.external_delay_ns == 0
    assert not json_profile.parse_dict({"predecessor_request_id": "a"}, w.Dependency).HasField("external_delay_ns")


def test_int64_written_as_string_and_numbers_accepted():
    big = 2**63 - 1
    r = w.Request(request_id="r", policy_version=big, turn_index=0)
    d = json_profile.to_dict(r)
    assert d["policy_version"] == str(big) and d["turn_index"] == 0  # uint32 stays a number
    assert json_profile.parse_dict({"policy_version": big}, w.Request).policy_version == big
    assert json_profile.parse_dict({"policy_version": str(big)}, w.Request).policy_version == big
    blocks = json_profile.to_dict(c.PrefixBlocks(block_size_tokens=16, block_hashes=[2**64 - 1]))
    assert blocks["block_hashes"] == [str(2**64 - 1)]


def test_enum_names_and_snake_case_keys():
    r = w.Request(request_id="r", finish_reasons=[c.FINISH_REASON_LENGTH], num_samples=1)
    line = json_profile.to_json_line(w.WorkloadRecord(request=r))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    data = json.loads(line)
    assert data == {"request": {"request_id": "r", "num_samples": 1, "finish_reasons": ["FINISH_REASON_LENGTH"]}}


def test_oneof_empty_message_member_is_kept():
    r = w.Request(request_id="r")
    r.arrival.after_dependencies.SetInParent()
    d = json_profile.to_dict(r)
    assert d["arrival"] == {"after_dependencies": {}}
    assert json_profile.parse_dict(d, w.Request).arrival.WhichOneof("kind") == "after_dependencies"


@pytest.mark.parametrize("text,rule", [
    (b"{not json", "json.parse"),
    (b'{"request": {"bogus_key": 1}}', "json.profile"),
    (b'{"request": {"finish_reasons": ["FINISH_REASON_NOPE"]}}', "json.profile"),
    (b'{"request": {"num_samples": -1}}', "json.profile"),
    (b"[1, 2]", "json.profile"),
])
def test_errors_name_file_line_and_rule(text, rule):
    with pytest.raises(TraceFormatError) as ei:
        json_profile.parse_json(text, w.WorkloadRecord, file="workload.jsonl", line=7)
    assert ei.value.rule == rule and ei.value.line == 7 and ei.value.file == "workload.jsonl"
    assert "workload.jsonl:7" in str(ei.value)


# proto3 JSON accepts an integer field's value as a number with a fraction or an exponent
# (``1e3``, ``1000.0``) or as such a numeric string; the value is the literal's, exactly.
@pytest.mark.parametrize("text,field,value", [
    (b'{"request": {"policy_version": 1234567890123456789.0}}', "policy_version", 1234567890123456789),
    (b'{"request": {"policy_version": "1234567890123456789e0"}}', "policy_version", 1234567890123456789),
    (b'{"request": {"policy_version": -9.223372036854775808e18}}', "policy_version", -2**63),
    (b'{"request": {"input_tokens": 4e1}}', "input_tokens", 40),
    (b'{"request": {"arrival": {"observed_offset_ns": 1e3}}}', "arrival.observed_offset_ns", 1000),
])
def test_integer_from_fraction_or_exponent_literal_is_exact(text, field, value):
    r = json_profile.parse_json(text, w.WorkloadRecord).request
    for part in field.split("."):
        r = getattr(r, part)
    assert r == value


def test_block_hash_from_exponent_literal_is_exact():
    text = b'{"request": {"prefix": {"block_hashes": [1.8446744073709551615e19, 9.007199254740993e15]}}}'
    got = json_profile.parse_json(text, w.WorkloadRecord).request.prefix.block_hashes
    assert list(got) == [2**64 - 1, 2**53 + 1]  # not the floats 2**64 (out of range) and 2**53


@pytest.mark.parametrize("text", [
    b'{"request": {"input_tokens": 40.000000000000001}}',  # rounds to the float 40.0
    b'{"request": {"input_tokens": "4294967295.0000001"}}',
    b'{"request": {"dependencies": [{"external_delay_ns": 2.5e0}]}}',
    b'{"request": {"prefix": {"block_hashes": [1.5]}}}',
])
def test_integer_field_with_a_non_integer_literal_is_refused(text):
    with pytest.raises(TraceFormatError) as ei:
        json_profile.parse_json(text, w.WorkloadRecord, file="workload.jsonl", line=3)
    assert ei.value.rule == "json.profile" and ei.value.line == 3
    assert "is not an integer" in str(ei.value)


@pytest.mark.parametrize("value", ['1', '"1"', '" 1"', '"01"', '"+1"', '1.0', '1e0'])
def test_enum_number_in_any_spelling_is_off_profile(value):
    """The parser reads an enum's number from a JSON number or from any string int() takes (the schema
    rejects both): each is json.enum_number, in a repeated and in a singular enum field."""
    for text, path in ((b'{"request": {"finish_reasons": [%s]}}', "request.finish_reasons[0]"),
                       (b'{"request": {"dependencies": [{"trigger": %s}]}}', "request.dependencies[0].trigger")):
        data = json_profile.loads(text % value.encode())
        assert json_profile.off_profile_forms(data, w.WorkloadRecord.DESCRIPTOR) == [("enum_number", path)]
        msg = json_profile.parse_dict(data, w.WorkloadRecord)
        assert (list(msg.request.finish_reasons) or [msg.request.dependencies[0].trigger]) == [1]
    data = json_profile.loads(b'{"request": {"finish_reasons": ["FINISH_REASON_STOP"]}}')
    assert json_profile.off_profile_forms(data, w.WorkloadRecord.DESCRIPTOR) == []


@pytest.mark.parametrize("value,words", [("true", "is not an enum value"), ("false", "is not an enum value"),
                                         ("1.5", "is not an integer"), ("1.0000000000000001", "is not an integer")])
def test_enum_given_a_bool_or_a_fraction_is_refused(value, words):
    """json_format would read them as int(value) (true -> 1, 1.5 -> 1): an error, as for an integer field."""
    for text in (b'{"request": {"finish_reasons": [%s]}}', b'{"request": {"dependencies": [{"trigger": %s}]}}'):
        with pytest.raises(TraceFormatError) as ei:
            json_profile.parse_json(text % value.encode(), w.WorkloadRecord, file="workload.jsonl", line=2)
        assert ei.value.rule == "json.profile" and words in str(ei.value)


@pytest.mark.parametrize("value", ["1e3", "1000.0", "1000", "-0.0"])
def test_int64_json_number_in_any_spelling_is_off_profile(value):
    data = json_profile.loads(b'{"request": {"arrival": {"observed_offset_ns": %s}}}' % value.encode())
    assert json_profile.off_profile_forms(data, w.WorkloadRecord.DESCRIPTOR) == [
        ("int64_number", "request.arrival.observed_offset_ns")]
