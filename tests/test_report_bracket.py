"""The agentic bracket: the two bounds upstream can express for UniRL's client in-flight limit.

agentic-a (real UniRL, one request in flight per engine client while 4 trajectories hold slots):
lanes = slots with the limit dropped under-predicts readiness, lanes = the limit over-predicts it;
the report shows both, labelled UNMODELLED, and where the measured value falls - never one number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unirl_replay.contract.errors import UnsupportedWorkloadError
from unirl_replay.report.keys import ComparisonError
from unirl_replay.v1 import report_pb2 as vpb

REPO = Path(__file__).resolve().parents[1]
AGENTIC = REPO / "traces" / "agentic-a"
GRPO = REPO / "traces" / "grpo-a"


@pytest.fixture(scope="module")
def bounds(tmp_path_factory):
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_trace, write_result

    out = {}
    for rule in ("engine_client.inflight_limit", "engine_client.inflight_limit.as_lanes"):
        d = tmp_path_factory.mktemp(rule.replace(".", "_"))
        res = replay_trace(AGENTIC, "polynomial", work_dir=d / "up", unmodelled=(rule,))
        write_result(d, res)
        out[rule] = d
    return out


def test_both_bounds_bracket_the_measured_readiness(bounds, tmp_path):
    from unirl_replay.report.outputs import compare_to_dir
    from unirl_replay.report.text import format_report

    rep = compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "r", plots_too=False,
                         bounds=[str(bounds["engine_client.inflight_limit.as_lanes"])])
    assert "UNMODELLED: engine_client.inflight_limit" in rep.label
    (b,) = [b for b in rep.brackets if b.metric == "batch_readiness"]
    assert b.level == vpb.COMPARISON_LEVEL_ROLLOUT_BATCH and b.records == 2
    names = [x.name for x in b.bounds]
    assert any("limit dropped" in n for n in names) and any("lanes = the client limit" in n for n in names)
    lo, hi = sorted(x.mean_ms for x in b.bounds)
    assert lo < hi
    # the reading says where the measured mean falls, consistent with the numbers it states
    inside = lo <= b.measured_mean_ms <= hi
    assert ("inside" in b.reading) == inside
    txt = format_report(rep)
    assert "UNMODELLED bracket" in txt and "no single prediction" in txt
    # below the batch level the pessimistic bound of batch readiness can be the shorter one: said where it is
    for other in rep.brackets:
        means = {("pes" if "pessimistic" in x.name else "opt"): x.mean_ms for x in other.bounds}
        said = "the pessimistic bound (of batch readiness) is the shorter one" in other.reading
        assert said == (other.metric != "batch_readiness" and means["pes"] < means["opt"]), (other.metric, means)


def test_an_unmodelled_replay_alone_says_it_is_one_bound(bounds, tmp_path):
    from unirl_replay.report.outputs import compare_to_dir

    rep = compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "r", plots_too=False)
    assert not rep.brackets and any("ONE BOUND" in n for n in rep.notes)


def test_bound_of_a_modelled_replay_and_both_opt_ins_at_once_are_refused(bounds, tmp_path):
    from unirl_replay.replay.runner import replay_trace, write_result
    from unirl_replay.report.outputs import compare_to_dir

    res = replay_trace(GRPO, "polynomial", work_dir=tmp_path / "up")
    write_result(tmp_path / "g", res)
    with pytest.raises(ComparisonError, match="modelled every constraint"):
        compare_to_dir(GRPO, tmp_path / "g", tmp_path / "r", plots_too=False, bounds=[str(tmp_path / "g")])
    with pytest.raises(UnsupportedWorkloadError, match="the two bounds"):
        replay_trace(AGENTIC, "polynomial", work_dir=tmp_path / "up2",
                     unmodelled=("engine_client.inflight_limit", "engine_client.inflight_limit.as_lanes"))


def test_the_same_bound_twice_is_refused(bounds, tmp_path):
    """A bound that is the replay's own bound again brackets nothing: refused (was a bracket of width 0)."""
    from unirl_replay.report.outputs import compare_to_dir

    opt, pes = bounds["engine_client.inflight_limit"], bounds["engine_client.inflight_limit.as_lanes"]
    with pytest.raises(ComparisonError, match=r"is the same bound as the replay result \(lanes = slots"):
        compare_to_dir(AGENTIC, opt, tmp_path / "r", plots_too=False, bounds=[str(opt)])
    with pytest.raises(ComparisonError, match="is the same bound as"):
        compare_to_dir(AGENTIC, opt, tmp_path / "r", plots_too=False, bounds=[str(pes), str(pes)])
    assert not (tmp_path / "r").exists()


def test_locked_handoffs_count_only_the_engine_idle_wait_of_a_held_back_request():
    from unirl_replay.report.bracket import handoff_words, locked_handoffs

    ms = 1_000_000
    rows = [("e0", 0, 2 * ms, 50 * ms),       # first request: nothing before it
            ("e0", 1 * ms, 58 * ms, 90 * ms),  # submitted while the first ran, queued 8 ms after it completed
            ("e0", 95 * ms, 97 * ms, 120 * ms),  # submitted after the previous completed: no handoff (a tool wait)
            ("e0", 100 * ms, 126 * ms, 150 * ms),  # held back: 6 ms
            ("e1", 0, 1 * ms, 40 * ms),       # another engine, batched with the next (queued before completion)
            ("e1", 0, 1 * ms, 45 * ms)]
    n, gaps = locked_handoffs(rows)
    assert n == 2 and sorted(gaps) == [6 * ms, 8 * ms]
    assert handoff_words(gaps).startswith("between requests held back by the client the engines sat idle 14.0 ms "
                                          "in the window (2 handoffs, median 7.0 ms")


def test_a_bound_of_another_timing_model_or_simulator_is_refused(bounds, tmp_path):
    """s16 newcomer: a polynomial (UNCALIBRATED) replay bracketed with a CALIBRATED profile's lanes bound read
    "2 of 2 records inside the bracket" under the polynomial label alone; both bounds must be of one model."""
    from unirl_replay.replay.runner import replay_trace, write_result
    from unirl_replay.report.outputs import compare_to_dir

    profile = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"
    other = tmp_path / "profile-lanes"
    write_result(other, replay_trace(AGENTIC, f"profile:{profile}", work_dir=other / "up",
                                     unmodelled=("engine_client.inflight_limit.as_lanes",)))
    with pytest.raises(ComparisonError, match=r"used profile vllm-cpu-tiny-qwen2-20261130b.npz \(CALIBRATED\), "
                                              r"the replay result polynomial default \(UNCALIBRATED\)"):
        compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "r", plots_too=False,
                       bounds=[str(other)])
    fixed = tmp_path / "fixed-lanes"
    write_result(fixed, replay_trace(AGENTIC, "fixed:10,1", work_dir=fixed / "up",
                                     unmodelled=("engine_client.inflight_limit.as_lanes",)))
    with pytest.raises(ComparisonError, match=r"\(FIXED\)"):
        compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "r", plots_too=False,
                       bounds=[str(fixed)])
    # another simulator revision: the result's simulator as another line would write it
    from unirl_replay.contract.trace_io import read_message_json, write_message_json
    from unirl_replay.v1 import replay_pb2 as rpb

    moved = tmp_path / "other-sim"
    moved.mkdir()
    res = read_message_json(bounds["engine_client.inflight_limit.as_lanes"] / "replay_result.json", rpb.ReplayResult)
    res.simulator.name, res.simulator.version = "aisimulate", "0.13.0.dev202610270000000085"
    write_message_json(moved / "replay_result.json", res)
    with pytest.raises(ComparisonError, match="ran on aisimulate 0.13.0.dev202610270000000085, the replay result on "
                                              "ai-dynamo 1.6.1"):
        compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "r", plots_too=False,
                       bounds=[str(moved)])
    # the same model read from another path is the same model
    copy = tmp_path / "lanes-copy"
    copy.mkdir()
    res = read_message_json(bounds["engine_client.inflight_limit.as_lanes"] / "replay_result.json", rpb.ReplayResult)
    write_message_json(copy / "replay_result.json", res)
    rep = compare_to_dir(AGENTIC, bounds["engine_client.inflight_limit"], tmp_path / "ok", plots_too=False,
                         bounds=[str(copy)])
    assert rep.brackets


@pytest.mark.parametrize("edit,words", [
    (lambda s: s.components.__setitem__("ai-dynamo-runtime", "9.9.9"), "ai-dynamo-runtime 9.9.9"),
    (lambda s: setattr(s, "trace_format", "mooncake"), "trace format 'mooncake'"),
])
def test_a_bound_of_another_simulator_runtime_or_trace_format_is_refused(tmp_path, edit, words):
    """s16 attack: a bound whose simulator had the replay result's name and version but another ai-dynamo-runtime (the
    engine that simulates) or another upstream trace format was bracketed with it, as one model's two bounds. The
    committed holdout results (no replay run here)."""
    from unirl_replay.contract.trace_io import read_message_json, write_message_json
    from unirl_replay.report.outputs import compare_to_dir
    from unirl_replay.v1 import replay_pb2 as rpb

    base = REPO / "results" / "holdout-agentic-f25m1"
    run = base / "agentic" / "r1" / "calibrated"
    bound = read_message_json(run / "bound-lanes" / "replay_result.json", rpb.ReplayResult)
    edit(bound.simulator)
    moved = tmp_path / "bound"
    moved.mkdir()
    write_message_json(moved / "replay_result.json", bound)
    with pytest.raises(ComparisonError, match=re.escape(words)):
        compare_to_dir(base / "traces" / "agentic-r1", run / "replay_result.json", tmp_path / "r", plots_too=False,
                       bounds=[str(moved)])
    compare_to_dir(base / "traces" / "agentic-r1", run / "replay_result.json", tmp_path / "ok", plots_too=False,
                   bounds=[str(run / "bound-lanes")])  # the committed bound itself still brackets
