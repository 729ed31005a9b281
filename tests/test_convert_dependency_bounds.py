"""The converter's not_before bounds (``replay.convert.common.fill_not_before``) on dependency graphs the gate
would refuse: a cycle or a missing predecessor is a typed error naming the request and the rule, never a loop.

The CLI gates first (``validate``'s ``dependency.cycle`` / ``dependency.unresolved``), so these are reached only by
calling the converter on an ungated trace (``replay.runner.convert_trace``), which looped forever on a
self-dependency (its stack growing) before.
"""

from __future__ import annotations

import pytest
from tracebuild import agentic_trace, dep

from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.replay.convert.common import fill_not_before
from unirl_replay.replay.runner import convert_trace

MS = 1_000_000


def _facts(graph: dict[str, list[tuple[str, int | None]]], arrival_ms: dict[str, int] | None = None) -> dict:
    """``facts`` as the converters build them: [3] the arrival ns, [4] (predecessor, n, trigger, relation, delay)."""
    arrival_ms = arrival_ms or {}
    return {rid: (None, None, None, arrival_ms.get(rid, 0) * MS,
                  tuple((p, 1, "t", "r", None if d is None else d * MS) for p, d in deps), None)
            for rid, deps in graph.items()}


def test_bounds_on_a_diamond_and_a_long_chain():
    facts = _facts({"a": [], "b": [("a", 5)], "c": [("a", 7)], "d": [("b", 1), ("c", None)]}, {"a": 3})
    bounds: dict = {}
    fill_not_before("d", bounds, facts, False, 10.0, 0)
    assert bounds == {"a": 13.0, "b": 18.0, "c": 20.0, "d": 20.0}  # lead 10 + arrival 3; the latest predecessor
    lanes: dict = {}
    fill_not_before("d", lanes, facts, True, 10.0, 0)
    assert lanes["a"] == 0.0 and lanes["d"] == 7.0
    chain = _facts({f"r{i}": ([(f"r{i - 1}", 1)] if i else []) for i in range(20_000)})
    got: dict = {}
    fill_not_before("r19999", got, chain, True, 0.0, 0)  # iterative: no recursion limit
    assert got["r19999"] == pytest.approx(19_999.0)


@pytest.mark.parametrize("graph, on", [
    ({"a": [("a", None)]}, "a"),                                 # itself
    ({"a": [("b", 1)], "b": [("a", 1)]}, None),                  # two requests
    ({"r": [], "a": [("r", 1), ("c", 1)], "b": [("a", 1)], "c": [("b", 1)]}, "a"),  # a cycle beside a root
])
def test_a_cycle_is_refused_by_rule_not_looped(graph, on):
    with pytest.raises(TraceFormatError) as e:
        fill_not_before(next(iter(graph)) if on is None else on, {}, _facts(graph), False, 0.0, 0)
    assert e.value.rule == "dependency.cycle" and e.value.record_id in graph


def test_a_missing_predecessor_is_refused_by_rule():
    with pytest.raises(TraceFormatError) as e:
        fill_not_before("a", {}, _facts({"a": [("ghost", 1)]}), False, 0.0, 0)
    assert e.value.rule == "dependency.unresolved" and e.value.record_id == "a" and "'ghost'" in str(e.value)


@pytest.mark.parametrize("encoding", ["binpb", "arrow", "jsonl"])
def test_convert_trace_on_an_ungated_self_dependency_raises(tmp_path, encoding):
    t = agentic_trace()
    t.request("traj-0/t1").dependencies.append(dep("traj-0/t1"))
    d = t.write(tmp_path / "trace", encoding)
    with pytest.raises(TraceFormatError) as e:
        convert_trace(d, tmp_path / "out.jsonl")
    assert e.value.rule == "dependency.cycle" and e.value.record_id == "traj-0/t1"
