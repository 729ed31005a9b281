"""The typed tier of the fast JSONL decode (contract/fast_typed.py) against the reference parser
(json_guard + ParseDict): a line it takes gives the reference's message and has no off-profile
form (the reader skips the off-profile inspection for such lines); every other line is left to
the reference, so errors keep its wording. Compact lines (the writers' form) reach the typed
tier, so the mutations here are made on them."""

import json
import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from json_mutations import BYTE_EDITS, replace_one_value
from tracebuild import agentic_trace, grpo_trace, messages
from unirl_replay.contract import fast_jsonl, fast_typed, json_guard, json_profile, json_write
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.v1 import manifest_pb2, outcomes_pb2, replay_pb2
from unirl_replay.v1 import workload_pb2 as w

RECORDS = [w.WorkloadRecord, outcomes_pb2.OutcomeRecord]


def reference(raw, cls):
    try:
        return json_profile.parse_json(raw, cls, file="workload.jsonl", line=3), None
    except TraceFormatError as e:
        return None, (e.rule, e.file, e.line, str(e))


def check(raw: bytes, cls) -> bool:
    """Typed tier vs reference on one line; True when the typed tier took it."""
    msg = fast_typed.try_parse(raw, cls)
    ref, err = reference(raw, cls)
    for tier, got in (("typed", msg), ("generic", fast_jsonl._try_generic(raw, cls))):
        if got is not None:
            assert err is None, f"{tier} tier accepted a line the reference rejects: {raw!r} ({err})"
            assert got == ref
            assert got.SerializeToString(deterministic=True) == ref.SerializeToString(deterministic=True)
            data = json_guard.loads(raw)
            assert json_profile.off_profile_forms(data, cls.DESCRIPTOR) == [], (tier, raw)
    # the whole fast path (both tiers + reference fallback) words errors exactly as the reference
    try:
        got = fast_jsonl.parse_json_line(raw, cls, file="workload.jsonl", line=3), None
    except TraceFormatError as e:
        got = None, (e.rule, e.file, e.line, str(e))
    assert got[1] == err
    if err is None:
        assert got[0] == ref
    return msg is not None


def compact(msg) -> bytes:
    return json_write.to_json_line(msg)


def test_plans_exist_for_the_record_types_only_where_supported():
    assert fast_typed.plan_for(w.WorkloadRecord) is not None
    assert fast_typed.plan_for(outcomes_pb2.OutcomeRecord) is not None
    # maps / doubles / well-known types: no typed plan (the generic tier and the reference handle them)
    assert fast_typed.plan_for(replay_pb2.ReplayResult) is None
    assert fast_typed.plan_for(manifest_pb2.TraceManifest) is None
    assert fast_typed.try_parse(b"{}", replay_pb2.ReplayResult) is None


def test_canonical_records_take_the_typed_tier():
    parts = agentic_trace(trajectories=3, turns=3)
    grpo = grpo_trace(prompts=2, samples=3)
    for recs, cls in (([*parts.workload, *grpo.workload], w.WorkloadRecord),
                      ([*parts.outcomes, *grpo.outcomes], outcomes_pb2.OutcomeRecord)):
        for r in recs:
            for line in (compact(r), json_profile.to_json_line(r)):
                assert fast_typed.try_parse(line, cls) == r, line


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(RECORDS))
def test_random_records_typed_equals_reference(data, cls):
    msg = data.draw(messages(cls))
    line = compact(msg)
    assert check(line, cls), line  # every writer's line is taken ...
    assert fast_typed.try_parse(line, cls) == msg  # ... and read back as written
    assert check(line[:-1], cls)  # without its newline (the reader strips nothing else)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(RECORDS))
def test_value_mutations_of_compact_lines(data, cls):
    """One value anywhere replaced by an arbitrary JSON value (or a key added), written compactly."""
    d = json_profile.to_dict(data.draw(messages(cls)))
    replace_one_value(data, d)
    raw = json.dumps(d, separators=(",", ":"), ensure_ascii=data.draw(st.booleans())).encode("utf-8", "surrogatepass")
    check(raw, cls)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(RECORDS))
def test_byte_mutations_of_compact_lines(data, cls):
    """Bytes inserted, deleted or replaced anywhere in a writer's line; a key-value pair doubled."""
    line = bytearray(compact(data.draw(messages(cls)))[:-1])
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["insert", "delete", "replace", "double"]))
        at = data.draw(st.integers(0, len(line)))
        if kind == "double":
            # the same key twice: copy a `"key":value` segment right after itself
            starts = [i for i in range(len(line) - 1) if line[i:i + 1] in (b"{", b",") and line[i + 1:i + 2] == b'"']
            if starts:
                s = data.draw(st.sampled_from(starts)) + 1
                ends = [i for i in range(s, len(line)) if line[i:i + 1] in (b",", b"}")]
                if ends:  # an earlier delete can leave a key with nothing closing it: nothing to double
                    e = ends[0]
                    line[e:e] = b"," + line[s:e]
            continue
        piece = data.draw(st.sampled_from(BYTE_EDITS))
        if kind == "insert":
            line[at:at] = piece
        elif kind == "delete":
            del line[at:at + data.draw(st.integers(1, 4))]
        else:
            line[at:at + 1] = piece
    check(bytes(line), cls)


def _request_line(**over) -> bytes:
    rec = w.WorkloadRecord(request=w.Request(request_id="r", num_samples=1, input_tokens=32, output_tokens=[4]))
    rec.request.prefix.block_size_tokens = 16
    rec.request.prefix.block_hashes.extend([1, 2 ** 64 - 1])
    rec.request.arrival.observed_offset_ns = 5
    d = json_profile.to_dict(rec)
    for path, v in over.items():
        node = d["request"]
        *head, last = path.split("__")
        for k in head:
            node = node[k]
        node[last] = v
    return json.dumps(d, separators=(",", ":")).encode()


EDGE = [
    _request_line(),
    _request_line(prefix__block_hashes=["01"]),
    _request_line(prefix__block_hashes=["00"]),
    _request_line(prefix__block_hashes=["0"]),
    _request_line(prefix__block_hashes=[""]),
    _request_line(prefix__block_hashes=["-0"]),
    _request_line(prefix__block_hashes=["-1"]),
    _request_line(prefix__block_hashes=["+1"]),
    _request_line(prefix__block_hashes=["1e3"]),
    _request_line(prefix__block_hashes=["1.0"]),
    _request_line(prefix__block_hashes=[" 1"]),
    _request_line(prefix__block_hashes=["1_0"]),
    _request_line(prefix__block_hashes=["\u0663"]),
    _request_line(prefix__block_hashes=[1, "2"]),
    _request_line(prefix__block_hashes=[1]),
    _request_line(prefix__block_hashes=[1.0]),
    _request_line(prefix__block_hashes=[["1"]]),
    _request_line(prefix__block_hashes=[]),
    _request_line(prefix__block_hashes=None),
    _request_line(prefix__block_hashes="1"),
    _request_line(prefix__block_hashes=["18446744073709551615"]),
    _request_line(prefix__block_hashes=["18446744073709551616"]),
    _request_line(prefix__block_hashes=["99999999999999999999"]),
    _request_line(prefix__block_hashes=["1" * 70]),
    _request_line(arrival__observed_offset_ns="-0"),
    _request_line(arrival__observed_offset_ns="-5"),
    _request_line(arrival__observed_offset_ns="05"),
    _request_line(arrival__observed_offset_ns=5),
    _request_line(arrival__observed_offset_ns="9223372036854775807"),
    _request_line(arrival__observed_offset_ns="9223372036854775808"),
    _request_line(arrival__observed_offset_ns="-9223372036854775808"),
    _request_line(arrival__observed_offset_ns="-9223372036854775809"),
    _request_line(arrival__after_dependencies={}),
    _request_line(num_samples="1"),
    _request_line(num_samples=1.0),
    _request_line(num_samples=True),
    _request_line(num_samples=0),
    _request_line(num_samples=4294967296),
    _request_line(num_samples=None),
    _request_line(turn_index=0),
    _request_line(turn_index=None),
    _request_line(finish_reasons=["FINISH_REASON_STOP"]),
    _request_line(finish_reasons=[1]),
    _request_line(finish_reasons=["FINISH_REASON_NOPE"]),
    _request_line(finish_reasons=[]),
    _request_line(requestId="camel"),
    _request_line(request_id="\\u0031"),
    _request_line(request_id="\ud800"),
    _request_line(request_id="a\u0000b\u2028"),
    _request_line(dependencies=[{"predecessor_request_id": "x", "external_delay_ns": "0"}, {}]),
    _request_line(dependencies=[{"trigger": 1}]),
    _request_line(bogus=1),
]
EDGE += [
    EDGE[0].replace(b'"request_id":"r"', b'"request_id":"r","request_id":"s"'),
    EDGE[0].replace(b'"request_id":"r"', b'"request_id":"r","request_id":"r"'),
    EDGE[0].replace(b'"block_size_tokens":16', b'"block_size_tokens":16,"block_size_tokens":16'),
    EDGE[0].replace(b'"observed_offset_ns":"5"', b'"observed_offset_ns":"5","after_dependencies":{}'),
    EDGE[0].replace(b'"1"', b'"\\u0031"'),
    EDGE[0].replace(b'"num_samples":1', b'"num_samples":1e0'),
    EDGE[0].replace(b'"num_samples":1', b'"num_samples":NaN'),
    EDGE[0].replace(b'"num_samples":1', b'"num_samples":1' + b"0" * 70),
    EDGE[0].replace(b"}}", b"},\"trajectory\":{}}"),
    EDGE[0].replace(b":", b": ", 1),
    EDGE[0] + b" ", b" " + EDGE[0], EDGE[0] + b"\r\n", EDGE[0] + b"\n", EDGE[0] + b"\n\n",
    b"\xef\xbb\xbf" + EDGE[0], EDGE[0].replace(b'"r"', b'"\xff"'), EDGE[0][:-1],
    b"{}", b"[]", b"null", b"", b'{"request":{}}', b'{"request":null}',
    # whitespace before a colon must not hide a duplicate key from the generic tier's count
    # (found by test_byte_mutations_of_compact_lines: the generic tier took it, last one winning)
    b'{"request" :{"request_id":"a","request_id":"b"}}', b'{"request"\t:{"request_id":"a","request_id":"a"}}',
    b'{"request":{"request_id" :"a","request_id":"b"}}',
]


@pytest.mark.parametrize("raw", EDGE)
def test_edge_lines(raw):
    check(raw, w.WorkloadRecord)


def test_outcome_duplicate_key_behind_a_spaced_colon():
    raw = b'{"rollout_batch" :{"ready_ns":"0","ready_ns":"0"}}'
    assert reference(raw, outcomes_pb2.OutcomeRecord)[1][0] == "json.duplicate_key"
    check(raw, outcomes_pb2.OutcomeRecord)


def test_off_profile_forms_never_take_the_typed_tier():
    # each of these is accepted by the reference (with an off-profile warning in validate)
    for raw in EDGE:
        if reference(raw, w.WorkloadRecord)[1] is None:
            forms = json_profile.off_profile_forms(json_guard.loads(raw), w.WorkloadRecord.DESCRIPTOR)
            if forms:
                assert fast_typed.try_parse(raw, w.WorkloadRecord) is None, raw
    assert fast_typed.try_parse(EDGE[0], w.WorkloadRecord) is not None


def test_what_the_hash_decoder_relies_on_in_msgspec():
    """The lenient list[int] decoder refuses the forms _u64_list does not check itself."""
    dec = msgspec.json.Decoder(list[int], strict=False)
    for bad in (b'["01"]', b'["00"]', b'[""]', b'["0x1"]', b'["1_0"]'):
        with pytest.raises(msgspec.ValidationError):
            dec.decode(bad)
    assert dec.decode(b'["0","18446744073709551615"]') == [0, 2**64 - 1]
    assert dec.decode(b'["18446744073709551616"]') == [2**64]  # refused later by the constructor


def test_trace_files_mixing_canonical_and_other_lines(tmp_path):
    """A JSONL file read through trace_io: every line gives the reference's message or error."""
    from unirl_replay.contract import trace_io
    rng = random.Random(5)
    parts = agentic_trace(trajectories=4, turns=3)
    lines = []
    for r in parts.workload:
        line = compact(r)
        if rng.random() < 0.3:
            line = json.dumps(json.loads(line), separators=(", ", ": ")).encode() + b"\n"  # other spacing
        lines.append(line)
    p = tmp_path / "workload.jsonl"
    p.write_bytes(b"".join(lines))
    got = [m for _, m in trace_io.iter_records(p, w.WorkloadRecord, "jsonl")]
    assert got == list(parts.workload)
