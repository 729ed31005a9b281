"""The arrow reader's request arrays (workload_columns.RequestArrays) against the tuples it reads from
the same columns, and the two readers of them, the gate's fast pass (validate.fast._requests_arrays) and
the support scan (request_checks._scan_columns_arrays), against the same code on the tuples alone
(``cols.arrays`` = None): on random workloads with random edits (test_gate_fast's: each a way a rule can
fire), the same answer and the same state left (the checker's pass-1 tables, the plans)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from test_arrow_gate_facts import write_random  # noqa: E402
from test_gate_fast import EDITS  # noqa: E402

from unirl_replay.contract import workload_columns as wc  # noqa: E402
from unirl_replay.contract.trace_io import open_trace  # noqa: E402
from unirl_replay.contract.validate import fast  # noqa: E402
from unirl_replay.contract.validate.checker import _Checker  # noqa: E402
from unirl_replay.contract.validate.context import _Sink  # noqa: E402
from unirl_replay.replay import request_checks  # noqa: E402
from unirl_replay.replay.workload import EnginePlan  # noqa: E402

_STATE = ("traj_names", "traj_ord", "req", "traj_req_count", "req_group", "req_samples", "observed", "max_offset",
          "longest", "longest_prompt")
_PLAN = ("plays", "none_by_construction", "first_arrival_ns", "facts", "request_ids")


def _cols(d):
    trace = open_trace(d, warn=False, inspect=True, verify_digests=False)
    return trace, wc.read_columns(trace, facts=True)


def assert_arrays_are_the_tuples(cols) -> None:
    a = cols.arrays
    f = list(zip(*cols.requests))
    assert a.num_samples.tolist() == list(f[1]) and a.input_tokens.tolist() == list(f[6])
    assert [v if s else None for v, s in zip(a.turn.tolist(), a.turn_set.tolist())] == list(f[3])
    assert a.arrival_kinds.tolist() == list(f[8]) and a.block_sizes.tolist() == list(f[11])
    assert [v if k == wc.ARRIVAL_OBSERVED else None for v, k in zip(a.observed.tolist(), f[8])] == list(f[9])
    assert a.out_counts.tolist() == [len(o) for o in f[7]] and a.out_flat.tolist() == [x for o in f[7] for x in o]
    assert a.dep_counts.tolist() == [len(d) for d in f[10]]
    flat = [d for ds in f[10] for d in ds]
    assert a.dep_pred.tolist() == [cols.row.get(d[0], -1) for d in flat]
    assert a.dep_trigger.tolist() == [d[1] for d in flat] and a.dep_relation.tolist() == [d[2] for d in flat]
    assert [v if s else None for v, s in zip(a.dep_delay.tolist(), a.dep_delay_set.tolist())] == [d[3] for d in flat]
    assert a.dep_absence.tolist() == [d[4] for d in flat]
    first = {"": 0}
    assert a.traj_ord.tolist() == [first.setdefault(t, len(first)) for t in f[2]]
    assert a.traj_names == list(first)[1:]
    mo = cols.facts.values("max_output_tokens")
    assert [v if s else None for v, s in zip(a.max_output.tolist(), a.max_output_set.tolist())] == mo


def gate_state(trace, cols, arrays: bool):
    keep = cols.arrays
    if not arrays:
        cols.arrays = None
    try:
        ch = _Checker(trace, _Sink(1))
        ch.manifest()
        ch._window_bound()
        got = fast._requests(ch, cols)
    finally:
        cols.arrays = keep
    if got is None:
        return None
    to, tu, rid, tid = got
    st_ = {k: getattr(ch, k) for k in _STATE}
    return to.tolist(), tu.tolist(), rid, tid, cols.by_field, {k: (list(v.items()) if isinstance(v, dict) else v)
                                                               for k, v in st_.items()}


def scan_state(trace, cols, arrays: bool):
    keep = cols.arrays
    if not arrays:
        cols.arrays = None
    engines = {e.engine_id: e for e in trace.manifest.engines}
    plans = {eid: EnginePlan(engine=cfg) for eid, cfg in engines.items()}
    try:
        ok = request_checks._scan_columns_arrays(cols, engines, None, plans)
    except (OverflowError, ValueError, TypeError):
        ok = None
    finally:
        cols.arrays = keep
    return ok, {e: [getattr(p, k) for k in _PLAN] for e, p in plans.items()}


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(seed=st.integers(0, 10**6), edits=st.lists(st.tuples(st.integers(0, len(EDITS) - 1), st.integers(0, 10**6)),
                                                  max_size=2), ascii_only=st.booleans())
def test_arrays_and_their_readers_equal_the_tuples(seed, edits, ascii_only, tmp_path_factory):
    try:
        d = write_random(tmp_path_factory.mktemp("t"), seed, edits, ascii_only)
    except Exception:  # noqa: BLE001 - a record the arrow writer refuses
        return
    trace, cols = _cols(d)
    if cols is None:
        return  # the reader declined: the message path reads it (no arrays)  # the reader declined: the message path reads it (no arrays)
    assert cols.arrays is not None
    assert_arrays_are_the_tuples(cols)
    on, off = gate_state(trace, cols, True), gate_state(trace, cols, False)
    assert on == off
    trace, cols = _cols(d)
    cols.by_field = None
    on = scan_state(trace, cols, True)
    cols.by_field = None
    assert on == scan_state(trace, cols, False)


@pytest.mark.parametrize("seed", range(6))
def test_unedited_workloads_take_the_arrays(seed, tmp_path):
    d = write_random(tmp_path, seed, (), True)
    trace, cols = _cols(d)
    assert cols.arrays is not None
    on = gate_state(trace, cols, True)
    assert on is not None and on == gate_state(trace, cols, False)
    assert fast.workload_clean(trace, _cols(d)[1])


@pytest.mark.parametrize("seed", range(12))
def test_rows_from_the_arrays_are_the_rows_from_the_facts(seed, tmp_path, monkeypatch):
    """The converted file (and its sidecar) written with the row writer reading the arrays is the one written
    from the facts (``_arrays_of`` off) and the one written from the messages (no columns at all)."""
    from test_workload_columns import convert_both, workload_msgs, write

    from unirl_replay.replay.convert import arrow_rows

    monkeypatch.setattr(request_checks, "VECTORISED_MIN_REQUESTS", 0)  # small workloads: the scan's arrays too
    msgs, mf = workload_msgs(seed)
    trace = write(tmp_path, msgs, mf, "arrow")
    took = []
    real = arrow_rows._arrays_of
    monkeypatch.setattr(arrow_rows, "_arrays_of", lambda *a: took.append(real(*a)) or took[-1])
    for sub in ("on", "off"):
        (tmp_path / sub).mkdir()
    on, messages = convert_both(tmp_path / "on", trace, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(arrow_rows, "_arrays_of", lambda *a: None)
        off, _ = convert_both(tmp_path / "off", trace, monkeypatch)
    assert on == off == messages
    if on[0] == "ok" and len(mf.engines) == 1:
        assert took and took[0] is not None  # converted, one engine: the scan's arrays, read by the writer
