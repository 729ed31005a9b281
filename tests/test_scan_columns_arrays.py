"""The support scan's array form (request_checks._scan_columns_arrays) against its per-request loop
(scan_columns with VECTORISED off), on the columns of real traces: random workloads (fan-out,
dependencies measured / by construction / dispatch / join, lanes, warm-ups, ids with '#s' and
non-ASCII), unedited and with random edits of the request facts (each a way a support rule can
fire). Whenever the array form answers True, the loop answers True and leaves exactly the same
plans; where the loop answers True for a one-engine workload, the array form does too."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_build import c
from test_workload_columns import workload_msgs, write

from unirl_replay.contract import workload_columns as wc
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.replay import request_checks
from unirl_replay.replay.workload import EnginePlan
from unirl_replay.v1 import outcomes_pb2  # noqa: F401 - an arrow trace's (empty) outcomes schema

FIELDS = ("engine", "requests", "plays", "play_order", "lanes", "warmups", "unmodelled", "none_by_construction",
          "first_arrival_ns", "facts", "request_ids", "columns")


def plans_of(engines):
    return {eid: EnginePlan(engine=cfg) for eid, cfg in engines.items()}


def state(plans):
    return {eid: {k: getattr(p, k) for k in FIELDS} for eid, p in plans.items()}


def both(cols, engines, wpv):
    """(array form's answer, its plans, the loop's answer, its plans)."""
    pa_, pl = plans_of(engines), plans_of(engines)
    try:
        a = request_checks._scan_columns_arrays(cols, engines, wpv, pa_)
    except (OverflowError, ValueError, TypeError):
        a = None
    untouched = state(plans_of(engines))
    if a is None:
        assert state(pa_) == untouched  # not sure: the plans are left as they were
    old = request_checks.VECTORISED
    request_checks.VECTORISED = False
    try:
        b = request_checks.scan_columns(cols, engines, wpv, pl)
    finally:
        request_checks.VECTORISED = old
    return a, pa_, b, pl


def columns(tmp, seed, enc="binpb"):
    msgs, mf = workload_msgs(seed)
    t = open_trace(write(tmp, msgs, mf, enc))
    cols = wc.read_columns(t)
    assert cols is not None
    return cols, {e.engine_id: e for e in mf.engines}


def edit(cols, rnd: random.Random) -> str:
    """One random edit of a request's facts in place (what a rule reads); returns its name."""
    reqs = cols.requests
    i = rnd.randrange(len(reqs))
    r = list(reqs[i])
    rid, ns, tid, turn, eid, pv, inp, outs, kind, t, deps, pbs = r
    choice = rnd.randrange(20)
    name = str(choice)
    if choice == 0:
        r[1] = rnd.choice([0, ns + 1])
    elif choice == 1:
        r[7] = outs + (3,)
    elif choice == 2:
        r[6] = rnd.choice([0, inp + 1, inp + 4, max(inp - 1, 0)])
    elif choice == 3:
        r[8] = rnd.choice([wc.ARRIVAL_NONE, wc.ARRIVAL_OBSERVED, wc.ARRIVAL_AFTER_DEPENDENCIES])
        if r[8] == wc.ARRIVAL_OBSERVED and t is None:
            r[9] = rnd.choice([0, 5, 10**12])
    elif choice == 4:
        r[9] = rnd.choice([-5, 0, 2**40]) if kind == wc.ARRIVAL_OBSERVED else t
    elif choice == 5:
        r[11] = rnd.choice([0, pbs + 1, 8])
    elif choice == 6:
        r[3] = rnd.choice([None, 0, 1, 7, (turn or 0) + 1])
    elif choice == 7:
        r[2] = rnd.choice(["", "t-other", reqs[rnd.randrange(len(reqs))][2]])
    elif choice == 8:
        r[4] = rnd.choice(["", "e1", "ghost"])
    elif choice == 9:
        r[5] = rnd.choice([None, 1, 2, 7])
    elif choice in (10, 11, 12, 13, 14) and deps:
        d = list(deps[rnd.randrange(len(deps))])
        k = deps.index(tuple(d))
        if choice == 10:
            d[0] = rnd.choice(["ghost", rid, reqs[rnd.randrange(len(reqs))][0]])
        elif choice == 11:
            d[1] = rnd.choice([0, c.DEPENDENCY_TRIGGER_DISPATCH, 9])
        elif choice == 12:
            d[3] = rnd.choice([None, -1, 0, 10**9])
        elif choice == 13:
            d[4] = rnd.choice([0, c.DELAY_ABSENCE_NOT_MEASURED, c.DELAY_ABSENCE_NONE_BY_CONSTRUCTION, 17])
        else:
            d[2] = rnd.choice([0, c.DEPENDENCY_RELATION_JOIN, 42])
        r[10] = deps[:k] + (tuple(d),) + deps[k + 1:]
    elif choice == 15:
        r[10] = deps + ((reqs[rnd.randrange(len(reqs))][0], 1, 1, 0, 0),)
    elif choice == 16:
        r[10] = ()
    elif choice == 17:  # the hash counts: drop one request's hashes (its offsets)
        off = cols.offsets
        cut = int(off[i + 1] - off[i])
        if cut:
            cols.keys = np.concatenate([cols.keys[:off[i]], cols.keys[off[i + 1]:]])
            cols.offsets = np.concatenate([off[:i + 1], off[i + 1:] - cut])
    elif choice == 18:  # one hash more
        off = cols.offsets
        cols.keys = np.concatenate([cols.keys[:off[i + 1]], np.array([3], np.uint64), cols.keys[off[i + 1]:]])
        cols.offsets = np.concatenate([off[:i + 1], off[i + 1:] + 1])
    else:
        r[7] = tuple(outs[:-1])
    reqs[i] = tuple(r)
    return name


def check(cols, engines, wpv=None, expect_taken=False):
    a, pa_, b, pl = both(cols, engines, wpv)
    if a:
        assert b is True
        assert state(pa_) == state(pl)
    used = {e or (next(iter(engines)) if len(engines) == 1 else "") for e in cols.engine_ids}
    if b and len(used) == 1 and expect_taken:
        assert a is True, "the array form declined a workload the loop takes"
    return a, b


@pytest.mark.parametrize("enc", ["binpb", "arrow"])
@pytest.mark.parametrize("seed", range(12))
def test_unedited_workloads_same_plans(tmp_path, seed, enc):
    cols, engines = columns(tmp_path, seed, enc)
    a, b = check(cols, engines, expect_taken=True)
    single = len({e for e in cols.engine_ids}) == 1
    if single and b:
        assert a is True
    for wpv in (7, 8):  # the window's policy version: agrees with the requests' or not
        check(cols, engines, wpv, expect_taken=True)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 11), st.integers(0, 2**32), st.integers(0, 3))
def test_edited_workloads_array_form_sound(tmp_path_factory, seed, rseed, nedits):
    cols, engines = columns(tmp_path_factory.mktemp("s"), seed)
    rnd = random.Random(rseed)
    for _ in range(nedits):
        edit(cols, rnd)
    check(cols, engines, expect_taken=True)


def test_the_array_form_is_taken_on_bench_style_columns(tmp_path):
    """A one-engine chain workload larger than the threshold: scan_columns answers through the arrays."""
    from replay_build import dep, engine, manifest, req, traj

    msgs = []
    for t in range(80):
        rids = [f"t{t}-{k}" for k in range(4)]
        for k, rid in enumerate(rids):
            msgs.append(req(rid, inp=16, traj=f"t{t}", turn=k, hashes=[t * 10 + k, 1, 2, 3, 4][:4],
                            deps=[dep(rids[k - 1], 1.5)] if k else (), at_ms=None if k else float(t)))
        msgs.append(traj(f"t{t}", rids))
    mf = manifest(engine("e0"))
    cols = wc.read_columns(open_trace(write(tmp_path, msgs, mf, "arrow")))
    engines = {e.engine_id: e for e in mf.engines}
    calls = []
    real = request_checks._scan_columns_arrays
    request_checks._scan_columns_arrays = lambda *a: calls.append(real(*a)) or calls[-1]
    try:
        plans = plans_of(engines)
        assert request_checks.scan_columns(cols, engines, None, plans)
    finally:
        request_checks._scan_columns_arrays = real
    assert calls == [True]
    check(cols, engines, expect_taken=True)
