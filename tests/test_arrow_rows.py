"""The array-fed agentic_mooncake row writer (replay/convert/arrow_rows.py) writes exactly the
bytes of the Python writer (and of the dict / HashRemap / json reference) on random workloads:
fan-out, predecessors with several samples, dependencies before their predecessor in file order,
lanes, warm-ups, lead, escaped ids, several chunks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from replay_build import c, dep, engine, index, manifest, pool, req, traj  # noqa: E402
from test_convert_fast_write import random_workload, reference_agentic  # noqa: E402

from unirl_replay.replay.convert import agentic_mooncake, arrow_rows  # noqa: E402
from unirl_replay.replay.support import check_supported  # noqa: E402


def both(tmp_path, monkeypatch, plan, ix, lead=0.0):
    """(array writer's file, Python writer's file, whether the array writer took the plan)."""
    taken = []
    real = arrow_rows.rows_text

    def spy(*a, **k):
        r = real(*a, **k)
        taken.append(r is not None)
        return r

    out = []
    for enabled in (True, False):
        with monkeypatch.context() as m:
            m.setattr(arrow_rows, "ENABLED", enabled)
            m.setattr(arrow_rows, "MIN_REQUESTS", 0)  # the small random workloads take the array writer too
            m.setattr(arrow_rows, "rows_text", spy)
            conv = agentic_mooncake.convert_engine(plan, ix, lead_ms=lead, digest="d")
            out.append(conv.write(tmp_path / f"{enabled}.jsonl").read_bytes())
    return out[0], out[1], taken[0]


@pytest.mark.parametrize("chunk", [1, 3, 1 << 14])
@pytest.mark.parametrize("seed", range(16))
def test_same_bytes_as_the_python_writer(tmp_path, monkeypatch, seed, chunk):
    monkeypatch.setattr(arrow_rows, "CHUNK", chunk)
    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=seed % 4 == 0 and seed % 3 != 2)
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines}, cache_state=mf.cache_state)
    for plan in plans.values():
        for lead in (0.0, 12.25):
            fast, slow, taken = both(tmp_path, monkeypatch, plan, ix, lead)
            assert taken  # random ids hold quotes, backslashes, non-ASCII: escaped, not declined
            assert fast == slow == reference_agentic(plan, ix, lead, "d").encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 3), st.lists(st.integers(1, 4), min_size=1, max_size=3),
                          st.sampled_from([None, 0.0, 0.001, 1.5, 1e9, 123.456789]), st.booleans()),
                min_size=1, max_size=6),
       st.booleans(), st.sampled_from(["t", "t\u00e9", 't"q', "t\\b", "t\x01"]))
def test_random_chains(tmp_path_factory, monkeypatch, turns, lanes, name):
    """Chains and forks per play, delays with and without a measured value, fan-out both sides."""
    tmp = tmp_path_factory.mktemp("rows")
    msgs = []
    for t, (nturn, outs, delay, join) in enumerate(turns):
        tid, rids = f"{name}{t}", []
        for k in range(nturn):
            rid = f"{tid}-{k}"
            deps = ()
            if rids:
                d = dep(rids[-1], delay) if delay is not None else dep(rids[-1],
                                                                        absence=c.DELAY_ABSENCE_NONE_BY_CONSTRUCTION)
                deps = [d] + ([dep(rids[0], 2.0, relation=c.DEPENDENCY_RELATION_JOIN)] if join and len(rids) > 1 else [])
            msgs.append(req(rid, inp=9 + k, out=tuple(outs), traj=tid, turn=k, hashes=[t, k, 7],
                            deps=deps, at_ms=None if deps else 1000.0 * t + 0.5))
            rids.append(rid)
        msgs.append(traj(tid, rids, pool="p" if lanes else "", order=t if lanes else None))
    if lanes:
        msgs.append(pool("p", 2))
    msgs.reverse()  # dependents before their predecessors in workload (= play) order
    ix = index(*msgs)
    mf = manifest(engine(bs=4))
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines}, cache_state=mf.cache_state)
    fast, slow, taken = both(tmp, monkeypatch, plans["e0"], ix)
    assert taken and fast == slow


def test_unknown_trigger_keeps_the_python_writer(tmp_path, monkeypatch):
    msgs = [req("a", at_ms=0.0, traj="t", turn=0, hashes=[1, 2]),
            req("b", traj="t", turn=1, hashes=[1, 3], deps=[dep("a", 1.0)]), traj("t", ["a", "b"])]
    ix = index(*msgs)
    ix.by_id["b"].dependencies[0].trigger = 7  # a number the converter has no upstream name for
    from unirl_replay.contract.errors import TraceFormatError

    with pytest.raises(TraceFormatError, match="enum.unknown"):  # refused by the support check (was a KeyError)
        check_supported(ix, {"e0": engine()})
    ix.by_id["b"].dependencies[0].trigger = 1
    plans, _ = check_supported(ix, {"e0": engine()})
    plan = plans["e0"]  # a plan whose facts hold that number anyway (made by hand): the Python writer decides
    plan.facts = {rid: (*f[:4], tuple((p, n, 7, rel, d) for p, n, _, rel, d in f[4]), *f[5:])
                  for rid, f in plan.facts.items()}
    conv = agentic_mooncake.convert_engine(plan, ix)
    called = []
    monkeypatch.setattr(arrow_rows, "_chunks", lambda *a, **k: called.append(1))
    with pytest.raises(KeyError):  # what the Python writer always did
        conv.write(tmp_path / "x.jsonl")
    assert not called


def test_a_small_conversion_never_loads_pyarrow(tmp_path):
    """The light environment's process stays light: a small jsonl conversion (the bundled grpo-a) uses the Python
    writer and never imports pyarrow (its import costs more than the array writer saves below MIN_REQUESTS)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    code = ("import sys\nfrom unirl_replay.replay.runner import convert_trace\n"
            f"convert_trace({str(repo / 'traces' / 'grpo-a')!r}, {str(tmp_path / 'out')!r})\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'pyarrow')\nassert not bad, bad\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-1500:]


_SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-4, 9.999999999999999e-05, 1e-5, 0.00012, 1e14, 1e15, 999999999999999.9,
            1e16, 9999999999999998.0, 123456789012345.0, 2.0**49, 5e-324, 1.7976931348623157e308, 4.327302,
            305.14294199999995, 0.1 + 0.2, float("inf"), float("-inf"), float("nan")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.floats(min_value=0, max_value=1e9), st.sampled_from(_SPECIAL),
                          st.integers(0, 2**63 - 1).map(lambda ns: ns / 1e6),
                          st.integers(-2**63, 2**63 - 1).map(lambda ns: ns / 1e6)), max_size=60))
def test_float_text_is_json_float(xs):
    """Arrow's float text, fixed up where it differs, is exactly json's (repr) for every double."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from unirl_replay.replay.convert.common import json_float

    assert arrow_rows._float_text(pa, pc, xs).to_pylist() == [json_float(x) for x in xs]


def test_float_text_on_many_random_doubles():
    """Random bit patterns and the value shapes the converter writes (ms from int ns), 200k values."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from unirl_replay.replay.convert.common import json_float

    rng = np.random.default_rng(17)
    bits = rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64)
    ms = rng.integers(0, 2**62, 50_000) / 1e6
    near = np.exp(rng.uniform(np.log(1e-5), np.log(1e17), 50_000))
    whole = rng.integers(0, 10**16, 50_000).astype(np.float64)
    for xs in (bits, ms, near, whole):
        vals = xs.tolist()
        assert arrow_rows._float_text(pa, pc, vals).to_pylist() == [json_float(x) for x in vals]


def deps_both(plan, lead=0.0):
    """(array form, loop) of rows_text's bounds and dependency columns for ``plan``, as plain lists."""
    from unirl_replay.replay.convert.common import origin_of
    from unirl_replay.replay.workload import plan_facts

    facts = plan_facts(plan, {})
    order = [rid for play in plan.play_order for rid in plan.plays[play]]
    ordinal = {rid: k for k, rid in enumerate(order)}
    fl = [facts[r] for r in order]
    lanes = plan.lanes is not None
    origin = plan.first_arrival_ns if plan.first_arrival_ns is not None else origin_of(plan.requests)
    args = (lanes, lead, origin, ordinal, agentic_mooncake._TRIGGER, agentic_mooncake._RELATION)
    a = arrow_rows._deps_arrays(fl, *args)
    b = arrow_rows._deps_loop(plan, facts, fl, *args)
    as_list = (lambda x: [v.item() if hasattr(v, "item") else v for v in x])
    if a is not None:
        a = [as_list(x) for x in a]
    if b is not None:
        b = [as_list(x) for x in b[1:]]  # the loop also returns the plays
    return a, b


@pytest.mark.parametrize("seed", range(16))
def test_bound_arrays_equal_the_loop(seed):
    """Same not_before_ms (as float bits), same dependency columns, on the random workloads."""
    import struct

    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=seed % 4 == 0 and seed % 3 != 2)
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines}, cache_state=mf.cache_state)
    for plan in plans.values():
        for lead in (0.0, 12.25, 1e-7):
            a, b = deps_both(plan, lead)
            assert a is not None
            assert [struct.pack("<d", x) for x in a[0]] == [struct.pack("<d", x) for x in b[0]]
            assert a[1:] == b[1:]


@pytest.mark.parametrize("depth", [1, 2, 63, 64, 65, 200])
def test_bound_arrays_deep_chains(depth):
    """A chain deeper than the rounds the array form runs: it declines (the loop decides), else it agrees."""
    rids = [f"r{k}" for k in range(depth + 1)]
    msgs = [req(rid, traj="t", turn=k, hashes=[k, 1], deps=[dep(rids[k - 1], 0.1 * k)] if k else (),
                at_ms=None if k else 5.0) for k, rid in enumerate(rids)]
    msgs.append(traj("t", rids))
    msgs.reverse()
    ix = index(*msgs)
    plans, _ = check_supported(ix, {"e0": engine()})
    a, b = deps_both(plans["e0"])
    if depth > arrow_rows._MAX_ROUNDS:
        assert a is None
    else:
        assert a == b
