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
