"""validate in one workload pass: whenever pass 1 proves the reference pass silent, skipping it
gives the same TraceCheck as running both passes (shuffled record orders, every broken trace of
test_validate)."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_validate import CASES
from tracebuild import agentic_trace, grpo_trace
from unirl_replay.contract.validate import checker, check_trace


def both(parts, tmp_path, enc):
    d = parts.write(tmp_path, enc)
    one = check_trace(d)
    checker.TWO_PASSES = True
    try:
        two = check_trace(d)
    finally:
        checker.TWO_PASSES = False
    assert one == two
    return one


@pytest.mark.parametrize("builder", [grpo_trace, agentic_trace])
def test_valid_traces_read_the_workload_once(builder, tmp_path, monkeypatch):
    monkeypatch.setattr(checker._Checker, "pass2", lambda self: pytest.fail("second pass ran"))
    res = check_trace(builder().write(tmp_path / "t", "binpb"))
    assert res.status == res.STATUS_VALID


@pytest.mark.parametrize("rule,record_id,builder,mutate", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_broken_traces_same_report(rule, record_id, builder, mutate, tmp_path):
    t = builder()
    mutate(t)
    both(t, tmp_path / "t", "binpb")


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(case=st.sampled_from([None, *range(len(CASES))]), seed=st.integers(0, 2**32 - 1),
       builder=st.sampled_from([grpo_trace, agentic_trace]))
def test_shuffled_traces_same_report(case, seed, builder, tmp_path_factory):
    if case is None:
        t = builder()
    else:
        t = CASES[case][2]()
        CASES[case][3](t)
    random.Random(seed).shuffle(t.workload)
    both(t, tmp_path_factory.mktemp("t"), "binpb")


@pytest.mark.parametrize("first,turns_shift", [(1, 0), (2, 1), (1, 1), (0, 1)])
def test_resumed_trajectory_same_report(first, turns_shift, tmp_path):
    """A trajectory's ``first_turn_index`` is the turn of its ``request_ids[0]`` (pass 2's turn.order);
    the single-pass proof checked ``request_ids[i]`` against turn ``i`` (attack-s7: a trajectory
    claiming to resume at turn 1 over turns 0, 1, 2 was VALID)."""
    t = agentic_trace()
    t.trajectory("traj-0").first_turn_index = first
    for r in t.requests():
        if r.trajectory_id == "traj-0":
            r.turn_index += turns_shift
    res = both(t, tmp_path / "t", "binpb")
    fires = any(v.rule == "turn.order" for v in res.violations)
    assert fires == (first != turns_shift)
