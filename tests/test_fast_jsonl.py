"""The fast JSONL decoder (msgspec + direct construction) equals the reference parser
(json.loads + ParseDict) on every line: equal messages, or the same TraceFormatError."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from json_mutations import replace_one_value
from tracebuild import agentic_trace, grpo_trace, messages
from unirl_replay.contract import fast_jsonl, json_profile
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2, outcomes_pb2, replay_pb2, report_pb2
from unirl_replay.v1 import workload_pb2 as w

TYPES = [w.WorkloadRecord, outcomes_pb2.OutcomeRecord, manifest_pb2.TraceManifest, replay_pb2.ReplayResult,
         report_pb2.TraceCheck]


def reference(raw, cls):
    """(message, None) or (None, (rule, file, line, text)) from the reference parser."""
    try:
        return json_profile.parse_json(raw, cls, file="workload.jsonl", line=7), None
    except TraceFormatError as e:
        return None, (e.rule, e.file, e.line, str(e))


def fast(raw, cls):
    try:
        return fast_jsonl.parse_json_line(raw, cls, file="workload.jsonl", line=7), None
    except TraceFormatError as e:
        return None, (e.rule, e.file, e.line, str(e))


def assert_same(raw, cls):
    (m1, e1), (m2, e2) = reference(raw, cls), fast(raw, cls)
    assert e1 == e2
    if m1 is not None:
        assert type(m2) is cls and m1 == m2
        assert m1.SerializeToString(deterministic=True) == m2.SerializeToString(deterministic=True)
    return m1


def _uses_slow_types(desc, seen=None) -> bool:
    """Whether a message type has fields the fast path always leaves to the reference."""
    from google.protobuf.descriptor import FieldDescriptor as F
    seen = seen if seen is not None else set()
    if desc.full_name in seen:
        return False
    seen.add(desc.full_name)
    for f in desc.fields:
        if f.type in (F.TYPE_BYTES, F.TYPE_FLOAT):
            return True
        if f.message_type is not None and _uses_slow_types(f.message_type, seen):
            return True
    return False


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(TYPES))
def test_random_messages_decode_equal(data, cls):
    msg = data.draw(messages(cls))
    line = json_profile.to_json_line(msg)
    back = assert_same(line, cls)
    assert back == msg
    if not _uses_slow_types(cls.DESCRIPTOR):
        # the canonical line takes the fast path (the test fails if it silently always fell back)
        assert fast_jsonl.convert_dict(json.loads(line), cls) == msg


def test_canonical_records_take_the_fast_path(monkeypatch):
    parts = agentic_trace(trajectories=3, turns=3)
    grpo = grpo_trace(prompts=2, samples=3)
    recs = [*parts.workload, *grpo.workload]
    lines = [json_profile.to_json_line(r) for r in recs]
    monkeypatch.setattr(json_profile, "parse_json", lambda *a, **k: pytest.fail("fell back to the reference"))
    got = [fast_jsonl.parse_json_line(x, w.WorkloadRecord) for x in lines]
    assert got == recs
    outs = [*parts.outcomes, *grpo.outcomes]
    assert [fast_jsonl.parse_json_line(json_profile.to_json_line(o), outcomes_pb2.OutcomeRecord) for o in outs] == outs


# Lines the fast path must hand over: each gives what the reference gives (message or error).
EDGE_LINES = [
    b"{not json", b"[1, 2]", b"null", b'"x"', b"{}", b"\xef\xbb\xbf{}", b'{"request": {"request_id": "\xff"}}',
    b'{"request": {"bogus_key": 1}}',
    b'{"request": {"requestId": "camel"}}',
    b'{"request": {"request_id": null}}',
    b'{"request": {"finish_reasons": ["FINISH_REASON_NOPE"]}}',
    b'{"request": {"finish_reasons": [1]}}',
    b'{"request": {"num_samples": -1}}',
    b'{"request": {"num_samples": 4294967296}}',
    b'{"request": {"num_samples": 1.0}}',
    b'{"request": {"num_samples": 1.5}}',
    b'{"request": {"num_samples": "1"}}',
    b'{"request": {"num_samples": true}}',
    b'{"request": {"policy_version": 5}}',
    b'{"request": {"policy_version": "-5"}}',
    b'{"request": {"policy_version": " 5"}}',
    b'{"request": {"policy_version": "1_0"}}',
    b'{"request": {"policy_version": "+5"}}',
    b'{"request": {"policy_version": "9223372036854775808"}}',
    b'{"request": {"policy_version": "1e3"}}',
    b'{"request": {"prefix": {"block_hashes": ["1", "", "2"]}}}',
    b'{"request": {"prefix": {"block_hashes": ["1", 2, "3"]}}}',
    b'{"request": {"prefix": {"block_hashes": ["1,2"]}}}',
    b'{"request": {"prefix": {"block_hashes": ["-1"]}}}',
    b'{"request": {"prefix": {"block_hashes": ["18446744073709551616"]}}}',
    b'{"request": {"prefix": {"block_hashes": ["\xd9\xa3"]}}}',
    b'{"request": {"prefix": {"block_hashes": "1"}}}',
    b'{"request": {"prefix": []}}',
    b'{"request": {"arrival": {"observed_offset_ns": "1", "after_dependencies": {}}}}',
    b'{"request": {"request_id": "a"}, "trajectory": {"trajectory_id": "t"}}',
    b'{"request": {"request_id": "a", "request_id": "b"}}',
    b'{"request" :{"request_id":"a","request_id":"b"}}',
    b'{"request":{"request_id" :"a","request_id":"b"}}',
    b'{"request": {"arrival": {"after_dependencies": {}}}}',
    b'{"request": {"dependencies": [{"external_delay_ns": "0"}, {}]}}',
    b'{"request": {"turn_index": 0}}',
    b'{"request": {"input_tokens": 1e400}}',
    b'{"request": {"request_id": "\\ud800"}}',
    b'{"request": {"request_id": NaN}}',
]


@pytest.mark.parametrize("raw", EDGE_LINES)
def test_edge_lines_match_the_reference(raw):
    assert_same(raw, w.WorkloadRecord)


def test_maps_doubles_and_manifests():
    r = replay_pb2.ReplayResult(aggregate={"b": 1.5, "a": 2.0, "c": 3.0})
    r.simulator.components["x"] = "1"
    for raw in (json_profile.to_json_line(r), b'{"aggregate": {"a": 1}}', b'{"aggregate": {"a": "NaN"}}',
                b'{"aggregate": {"a": "x"}}', b'{"aggregate": []}', b'{"timing_model": {"prefill_ms": 0}}'):
        assert_same(raw, replay_pb2.ReplayResult)
    man = manifest_pb2.TraceManifest(labels={"k": "v"}, cache_state=c.CACHE_STATE_KIND_COLD)
    assert_same(json_profile.to_json_line(man), manifest_pb2.TraceManifest)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_mutated_records_match_the_reference(data):
    """Canonical request lines with one value replaced by an arbitrary JSON value."""
    rec = data.draw(messages(w.WorkloadRecord))
    d = json_profile.to_dict(rec)
    json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) |
                               st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4),
                               lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=4), ch,
                                                                                     max_size=3), max_leaves=5)
    replace_one_value(data, d, json_values, into_arrays=False)
    raw = json.dumps(d, ensure_ascii=data.draw(st.booleans())).encode("utf-8", "surrogatepass")
    assert_same(raw, w.WorkloadRecord)
