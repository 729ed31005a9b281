"""The direct JSON writer (contract/json_write.py) writes json_profile's values, keys in the same
order, with map keys sorted: equal dicts, byte-identical text up to float exponent spelling, and
messages equal after parsing back."""

import json
import re

import msgspec
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


def _walk(msg):
    """msg and every message nested in it (singular, repeated and map values)."""
    yield msg
    for fd, v in msg.ListFields():
        if fd.message_type is None or fd.message_type.full_name.startswith("google.protobuf."):
            continue
        if fd.message_type.GetOptions().map_entry:
            vt = fd.message_type.fields_by_name["value"]
            if vt.message_type is not None:
                for x in v.values():
                    yield from _walk(x)
        elif fd.is_repeated:
            for x in v:
                yield from _walk(x)
        else:
            yield from _walk(v)


def test_flat_converters_exist_for_the_result_rows():
    for cls in (replay_pb2.PredictedRequest, replay_pb2.PredictedTrajectory, replay_pb2.PredictedGroup,
                replay_pb2.PredictedBatch):
        assert json_write._table(cls.DESCRIPTOR) is not json_write._general(cls.DESCRIPTOR)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(TYPES))
def test_flat_converters_equal_the_listfields_walk(data, cls):
    msg = data.draw(messages(cls))
    for m in _walk(msg):
        flat = json_write._table(m.DESCRIPTOR)
        ref = json_write._general(m.DESCRIPTOR)
        a, b = flat(m), ref(m)
        assert list(a.items()) == list(b.items())  # same keys, same order, same values
        assert [type(x) for x in a.values()] == [type(x) for x in b.values()]


def test_flat_converters_on_defaults_and_extremes():
    r = replay_pb2.PredictedRequest(request_id="", engine_id="é", arrival_ns=0, scheduled_ns=-1,
                                    first_token_ns=2**63 - 1, completion_ns=-(2**63), cached_tokens=0)
    for m in (r, replay_pb2.PredictedRequest(), replay_pb2.PredictedRequest(cached_tokens=2**32 - 1),
              replay_pb2.PredictedTrajectory(trajectory_id="t", start_ns=0), replay_pb2.PredictedGroup(completed_ns=0),
              replay_pb2.PredictedBatch(rollout_batch_id="\x00\n\"")):
        a, b = json_write._table(m.DESCRIPTOR)(m), json_write._general(m.DESCRIPTOR)(m)
        assert list(a.items()) == list(b.items())
        check(m)


# --- long repeated fields written by columns (json_write._rows_writer / _compact) -------------

def _all_types():
    from unirl_replay.v1 import common_pb2
    from google.protobuf import message_factory
    seen, out = set(), []

    def visit(d):
        if d.full_name in seen or d.GetOptions().map_entry:
            return
        seen.add(d.full_name)
        out.append(d)
        for n in d.nested_types:
            visit(n)
    for mod in (w, outcomes_pb2, manifest_pb2, replay_pb2, report_pb2, common_pb2):
        for d in mod.DESCRIPTOR.message_types_by_name.values():
            visit(d)
    return [message_factory.GetMessageClass(d) for d in out]


ROW_TYPES = [c for c in _all_types() if json_write._rows_writer(c.DESCRIPTOR) is not None]
_ODD_TEXT = st.text(alphabet=st.sampled_from(['a', 'é', '"', '\\', '\x00', '\n', '\u2028', '😀', '/', '<']),
                    max_size=6)


def test_the_result_rows_are_written_by_columns():
    names = {c.DESCRIPTOR.name for c in ROW_TYPES}
    assert {"PredictedRequest", "PredictedTrajectory", "PredictedGroup", "PredictedBatch"} <= names
    assert any(f.type == f.TYPE_ENUM for c in ROW_TYPES for f in c.DESCRIPTOR.fields)  # enums covered too
    assert json_write._rows_writer(replay_pb2.ReplayResult.DESCRIPTOR) is None  # not flat


@st.composite
def _rows(draw, cls):
    """A list of rows of ``cls``: random messages, some rows copied (long runs of one shape), some
    fields set to the default explicitly, odd strings."""
    rows = draw(st.lists(messages(cls), max_size=12))
    out = []
    for m in rows:
        for _ in range(draw(st.integers(1, 4))):
            c = cls()
            c.CopyFrom(m)
            for fd in cls.DESCRIPTOR.fields:
                pick = draw(st.integers(0, 5))
                if pick == 0 and fd.has_presence:
                    setattr(c, fd.name, type(getattr(c, fd.name))())  # set to the default: present
                elif pick == 1 and fd.type == fd.TYPE_STRING:
                    setattr(c, fd.name, draw(_ODD_TEXT))
                elif pick == 2:
                    c.ClearField(fd.name)
            out.append(c)
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(ROW_TYPES))
def test_rows_writer_equals_the_dict_path(data, cls):
    rows = data.draw(_rows(cls))
    got = json_write._rows_writer(cls.DESCRIPTOR)(rows)
    assert got == json_write._encode([json_write.to_dict(m) for m in rows])


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), rows_min=st.sampled_from([0, 1, 3]))
def test_compact_result_equals_the_dict_path(data, rows_min):
    res = data.draw(messages(replay_pb2.ReplayResult))
    for field, cls in (("requests", replay_pb2.PredictedRequest), ("trajectories", replay_pb2.PredictedTrajectory),
                       ("groups", replay_pb2.PredictedGroup), ("rollout_batches", replay_pb2.PredictedBatch)):
        getattr(res, field).extend(data.draw(_rows(cls)))
    old = json_write._ROWS_MIN
    json_write._ROWS_MIN = rows_min
    try:
        got, text = json_write._compact(res), json_write.to_json_bytes(res)
    finally:
        json_write._ROWS_MIN = old
    ref = json_write._encode(json_write.to_dict(res))
    assert got == ref
    assert text == json_write.to_json_bytes(res)  # the dict path at the default threshold (small lists)
    assert text == msgspec.json.format(ref, indent=2) + b"\n"


def test_a_long_result_is_written_as_the_dict_path_writes_it():
    res = replay_pb2.ReplayResult(schema_version="1", trace_id="t\u00e9", makespan_ns=0)
    res.notes.extend(["a", "b\n"])
    res.aggregate["x"] = 1.5
    for k in range(3 * json_write._ROWS_MIN):
        p = res.requests.add(request_id=f"r{k}\"", engine_id="e0" if k % 3 else "e1")
        if k % 7:
            p.arrival_ns, p.cached_tokens = k - 5, k % 2
        if k % 11:
            p.completion_ns = -(2**63) if k % 5 == 0 else 2**63 - 1
        res.trajectories.add(trajectory_id="" if k % 13 == 0 else f"t{k}", **({"start_ns": 0} if k % 2 else {}))
    ref = json_write._encode(json_write.to_dict(res))
    assert json_write._compact(res) == ref
    assert json_write.to_json_bytes(res) == msgspec.json.format(ref, indent=2) + b"\n"


def _columns_of(rows, cls) -> dict:
    """The rows' values as columns (a message's value, None where an explicit-presence field is unset)."""
    return {fd.name: [getattr(m, fd.name) if not fd.has_presence or m.HasField(fd.name) else None for m in rows]
            for fd in cls.DESCRIPTOR.fields}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), cls=st.sampled_from(ROW_TYPES))
def test_rows_written_from_columns_equal_the_messages(data, cls):
    """The rows writer from the columns the rows hold (runner.Handover's requests, write_result):
    the text of the messages, byte for byte (absent fields, defaults set explicitly, odd strings,
    one shape or many)."""
    rows = data.draw(_rows(cls))
    w = json_write._rows_writer(cls.DESCRIPTOR)
    cols = _columns_of(rows, cls)
    assert w.columns([cols[k] for k in w.names], len(rows)) == w(rows)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data(), change=st.sampled_from(["none", "value", "absent", "count", "field"]))
def test_a_result_written_with_columns_equals_it_written_from_its_messages(data, change):
    """to_json_bytes(res, columns={"requests": ...}): the same bytes as without, the columns used when
    they are the rows' (spied); a column that differs from the rows at a checked row, a shorter
    column or a missing field: the columns are not used (the messages are read) -- the same bytes."""
    res = data.draw(messages(replay_pb2.ReplayResult))
    del res.requests[:]
    rows = data.draw(_rows(replay_pb2.PredictedRequest))
    res.requests.extend(rows)
    cols = _columns_of(rows, replay_pb2.PredictedRequest)
    n = len(rows)
    if change == "value" and n:
        cols["engine_id"][n - 1] += "x"  # the last row is always checked
    elif change == "absent" and n:
        k = data.draw(st.sampled_from(["arrival_ns", "completion_ns", "cached_tokens"]))
        cols[k][0] = None if cols[k][0] is not None else 1
    elif change == "count":
        cols["request_id"].append("extra")
    elif change == "field":
        del cols["scheduled_ns"]
    used = []
    real = json_write._given_columns

    def spy(*a):
        used.append(real(*a))
        return used[-1]
    old = json_write._ROWS_MIN, json_write._given_columns
    json_write._ROWS_MIN, json_write._given_columns = 0, spy
    try:
        got = json_write.to_json_bytes(res, columns={"requests": cols})
        want = json_write.to_json_bytes(res)
    finally:
        json_write._ROWS_MIN, json_write._given_columns = old
    assert got == want == msgspec.json.format(json_write._encode(json_write.to_dict(res)), indent=2) + b"\n"
    if n:
        assert (used[0] is not None) == (change == "none")


def test_columns_of_a_long_result_spot_check_every_64th_row():
    """The check compares the columns with the messages at every len // 64-th row and the last: a
    difference there is found (the messages written), and text written from columns is the messages'."""
    res = replay_pb2.ReplayResult(schema_version="1")
    n = 1000
    for k in range(n):
        res.requests.add(request_id=f"r{k}", engine_id="e0", arrival_ns=k, cached_tokens=0,
                         **({"completion_ns": 2**63 - 1} if k % 3 else {}))
    cols = _columns_of(res.requests, replay_pb2.PredictedRequest)
    want = json_write.to_json_bytes(res)
    assert json_write.to_json_bytes(res, columns={"requests": cols}) == want
    w = json_write._rows_writer(replay_pb2.PredictedRequest.DESCRIPTOR)
    fd = replay_pb2.ReplayResult.DESCRIPTOR.fields_by_name["requests"]
    assert json_write._given_columns(fd, res.requests, cols, w) is not None
    cols["arrival_ns"][15 * (n // 64)] = -1
    assert json_write._given_columns(fd, res.requests, cols, w) is None
    assert json_write.to_json_bytes(res, columns={"requests": cols}) == want
