"""The arrow reader's gate facts kept flat (sample ids, finish reasons) and its byte-level id
measure (workload_columns._note_ids), against the strings themselves: _note_ids says printable
ASCII and the longest id exactly as Python reads the strings (sliced arrays, empty strings,
non-ASCII, control characters, long ids); and the gate's fast pass answers the same on arrow
traces with the measure on and off (off: the fast pass checks the strings), on random workloads
with random edits (test_gate_fast's), ASCII-only ids included so that the measure is used."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from test_gate_fast import EDITS  # noqa: E402
from tracebuild import TraceParts  # noqa: E402

from unirl_replay.contract import gate as gate_mod  # noqa: E402
from unirl_replay.contract import workload_columns as wc  # noqa: E402


def measure(strings: list[str], start: int):
    import pyarrow as pa

    arr = pa.array(strings, pa.string()).slice(start)
    gf = wc.GateFacts()
    wc._note_ids(gf, arr)
    return gf.ids_printable_ascii, gf.ids_max_bytes


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=12), st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E)),
                          st.sampled_from(["", "a\x07", "\x7f", "é", "x" * 1100, "ok"])), max_size=20),
       st.integers(0, 3))
def test_note_ids_reads_the_bytes_as_python_reads_the_strings(strings, start):
    got = measure(strings, start)
    rest = strings[start:]
    if not rest:
        assert got == (None, 0)
        return
    plain = all(0x20 <= ord(ch) <= 0x7E for s in rest for ch in s)
    assert got[0] is plain
    if plain:
        assert got[1] == max(map(len, rest))


def ascii_ids(ix) -> None:
    """The random workload's ids made ASCII (its non-ASCII trajectory / request ids renamed)."""
    def a(s: str) -> str:
        return s.encode("ascii", "backslashreplace").decode().replace("\\", "/")
    for r in ix.requests:
        r.request_id, r.trajectory_id = a(r.request_id), a(r.trajectory_id)
        for d in r.dependencies:
            d.predecessor_request_id = a(d.predecessor_request_id)
        r.ClearField("sample_ids")
        r.sample_ids.extend(f"{r.request_id}/s{i}" for i in range(r.num_samples))
    for t in list(ix.trajectories.values()):
        t.trajectory_id = a(t.trajectory_id)
        ids = [a(q) for q in t.request_ids]
        t.ClearField("request_ids")
        t.request_ids.extend(ids)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(seed=st.integers(0, 10**6), edits=st.lists(st.tuples(st.integers(0, len(EDITS) - 1), st.integers(0, 10**6)),
                                                  max_size=2), ascii_only=st.booleans())
def test_fast_pass_same_answer_with_and_without_the_byte_measure(seed, edits, ascii_only, tmp_path_factory,
                                                                 monkeypatch):
    try:
        d = write_random(tmp_path_factory.mktemp("t"), seed, edits, ascii_only)
    except Exception:  # noqa: BLE001 - a record the arrow writer refuses
        return
    on = gate_mod._fast(d)[0]
    with monkeypatch.context() as m:
        m.setattr(wc, "_note_ids", lambda gf, arr: None)  # not measured: the strings are checked
        off = gate_mod._fast(d)[0]
    assert on == off
    if ascii_only and not edits:
        from unirl_replay.contract.trace_io import open_trace

        cols = wc.read_columns(open_trace(d, warn=False, inspect=True, verify_digests=False), facts=True)
        assert cols.facts.ids_printable_ascii and cols.facts.flat_lists  # the measure is what decides
        assert on  # an unedited ASCII workload: clean


def write_random(tmp, seed: int, edits=(), ascii_only=False):
    from test_convert_fast_write import random_workload

    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=seed % 4 == 0 and seed % 3 != 2)
    if ascii_only:
        ascii_ids(ix)
    rnd = random.Random(seed)
    for k, s in edits:
        EDITS[k](random.Random(s).choice(ix.requests), rnd)
    t = TraceParts(mf)
    for m in [*ix.requests, *ix.trajectories.values(), *ix.slot_pools.values(), *ix.warmups]:
        t.add(m)
    return t.write(tmp, "arrow")


@pytest.mark.parametrize("seed", range(12))
def test_lazy_trajectories_are_the_messages(tmp_path, seed, monkeypatch):
    """MessageColumns holds the same messages, in the same order, as the dict the reader builds
    otherwise; its columns are the messages' fields (a null / absent optional: None)."""
    from unirl_replay.contract.trace_io import open_trace

    d = write_random(tmp_path, seed)
    lazy = wc.read_columns(open_trace(d))
    with monkeypatch.context() as m:
        m.setattr(wc, "LAZY_KINDS", ())
        eager = wc.read_columns(open_trace(d))
    assert isinstance(lazy.trajectories, wc.MessageColumns) and type(eager.trajectories) is dict
    assert list(lazy.trajectories) == list(eager.trajectories)
    assert len(lazy.trajectories) == len(eager.trajectories)
    for tid, msg in eager.trajectories.items():
        assert tid in lazy.trajectories and lazy.trajectories.get(tid) == msg
        i = lazy.trajectories.position(tid)
        assert lazy.trajectories.column("request_ids")[i] == list(msg.request_ids)
        assert lazy.trajectories.column("start_order")[i] == (msg.start_order if msg.HasField("start_order") else None)
        assert lazy.trajectories.column("slot_pool_id")[i] == msg.slot_pool_id
    assert "ghost" not in lazy.trajectories and lazy.trajectories.position("ghost") is None
    assert dict(lazy.trajectories) == eager.trajectories


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(seed=st.integers(0, 10**6), edits=st.lists(st.tuples(st.integers(0, len(EDITS) - 1), st.integers(0, 10**6)),
                                                  max_size=2), ascii_only=st.booleans())
def test_lazy_trajectories_same_gate_and_convert(seed, edits, ascii_only, tmp_path_factory, monkeypatch):
    """The gate's fast pass and, where it passes the trace, convert (file bytes or the typed error)
    are the same with the trajectories read lazily and as messages."""
    from unirl_replay.contract.errors import UnirlReplayError
    from unirl_replay.replay import runner

    def outcome(fn):
        try:
            return ("ok", fn())
        except UnirlReplayError as e:
            return (type(e).__name__, getattr(e, "rule", None), str(e))

    tmp = tmp_path_factory.mktemp("t")
    try:
        d = write_random(tmp, seed, edits, ascii_only)
    except Exception:  # noqa: BLE001 - a record the arrow writer refuses
        return
    res = []
    for kinds in (wc.LAZY_KINDS, ()):
        with monkeypatch.context() as m:
            m.setattr(wc, "LAZY_KINDS", kinds)
            clean, cols = gate_mod._fast(d)
            conv = None
            if clean:  # as the CLI: convert only what the gate passed (a refused trace may not convert at all)
                out = tmp / f"out{len(kinds)}"
                out.mkdir()
                conv = outcome(lambda: [p.read_bytes() for p in runner.convert_trace(d, out / "up.jsonl",
                                                                                   columns=cols)])
            res.append((clean, conv))
    assert res[0] == res[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=70), st.integers(0, 9), st.integers(0, 70),
       st.sampled_from(["int", "string", "struct", "list"]))
def test_valid_is_is_valid(values, start, length, kind):
    """workload_columns._valid (the unpacked bitmap) equals Arrow's is_valid on sliced arrays of each kind."""
    import numpy as np
    import pyarrow as pa

    if kind == "int":
        arr = pa.array(values, pa.int64())
    elif kind == "string":
        arr = pa.array([None if v is None else "s" * v for v in values], pa.string())
    elif kind == "struct":
        arr = pa.array([None if v is None else {"a": v} for v in values], pa.struct([("a", pa.int64())]))
    else:
        arr = pa.array([None if v is None else [v] * v for v in values], pa.list_(pa.int64()))
    arr = arr.slice(min(start, len(arr)), length)
    got = wc._valid(arr)
    assert got.dtype == np.bool_ and got.tolist() == arr.is_valid().to_pylist()
