"""The direct JSON writer (contract/json_write.py) writes json_profile's values, keys in the same
order, with map keys sorted: equal dicts, byte-identical text up to float exponent spelling, and
messages equal after parsing back."""

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebuild import agentic_trace, messages
from unirl_replay.contract import json_profile, json_write
from unirl_replay.v1 import manifest_pb2, outcomes_pb2, replay_pb2, report_pb2
from unirl_replay.v1 import workload_pb2 as w

TYPES = [w.WorkloadRecord, outcomes_pb2.OutcomeRecord, manifest_pb2.TraceManifest, replay_pb2.ReplayResult,
         report_pb2.TraceCheck, report_pb2.ValidationReport]


def sorted_maps(value, desc):
    """json_profile.to_dict's value with every map's keys sorted (the reference, ordered)."""
    out = {}
    for key, v in value.items():
        fd = desc.fields_by_name[key]
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry:
            vt = mt.fields_by_name["value"].message_type
            out[key] = {k: (sorted_maps(v[k], vt) if vt is not None else v[k]) for k in sorted(v)}
        elif mt is not None and not mt.full_name.startswith("google.protobuf."):
            out[key] = [sorted_maps(x, mt) for x in v] if fd.is_repeated else sorted_maps(v, mt)
        else:
            out[key] = v
    return out


def check(msg):
    cls = type(msg)
    ref = sorted_maps(json_profile.to_dict(msg), cls.DESCRIPTOR)
    got = json_write.to_dict(msg)
    assert json.dumps(got) == json.dumps(ref)  # same keys, same order, same values
    text = json_write.to_json(msg)
    ref_text = json.dumps(ref, indent=2, ensure_ascii=False) + "\n"
    assert json.loads(text) == json.loads(ref_text)
    if not re.search(r"[0-9]e[-+]?[0-9]", ref_text):
        assert text == ref_text
    assert json_profile.parse_json(text, cls) == msg
    line = json_write.to_json_line(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json_profile.parse_json(line, cls) == msg
    ref_line = json_profile.to_json_line(msg)
    # byte-equal unless a float is spelled with an exponent on either side (6.103515625e-05 and
    # 0.00006103515625 are the same number; the values are compared above)
    if not re.search(rb"[0-9]e[-+]?[0-9]", line + ref_line):
        assert line == ref_line if not _has_maps(ref, cls.DESCRIPTOR) else True


def _has_maps(value, desc) -> bool:
    for key, v in value.items():
        fd = desc.fields_by_name[key]
        mt = fd.message_type
        if mt is not None and mt.GetOptions().map_entry:
            return True
        if mt is not None and not mt.full_name.startswith("google.protobuf."):
            if any(_has_maps(x, mt) for x in (v if fd.is_repeated else [v])):
                return True
    return False


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(TYPES))
def test_random_messages_write_the_profile(data, cls):
    check(data.draw(messages(cls)))


def test_map_keys_are_sorted_whatever_the_insertion_order():
    keys = [f"k{i:03d}" for i in range(200)]
    texts = set()
    for order in (keys, keys[::-1], keys[1::2] + keys[::2]):
        r = replay_pb2.ReplayResult()
        for k in order:
            r.aggregate[k] = float(len(k))
            r.simulator.components[k] = k
        texts.add(json_write.to_json(r))
        check(r)
    assert len(texts) == 1
    d = json.loads(texts.pop())
    assert list(d["aggregate"]) == keys and list(d["simulator"]["components"]) == keys


def test_workload_lines_are_byte_identical():
    parts = agentic_trace(trajectories=3, turns=3)
    for rec in [*parts.workload, *parts.outcomes]:
        assert json_write.to_json_line(rec) == json_profile.to_json_line(rec)
