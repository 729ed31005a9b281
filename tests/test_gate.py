"""The one gate: every trace-consuming command refuses what `validate` rejects, with its messages."""

from __future__ import annotations

import pytest

from tracebuild import agentic_trace, batches_trace, grpo_trace
from unirl_replay.cli.main import main
from unirl_replay.contract.errors import IncompleteTraceRejectedError, TraceRejectedError
from unirl_replay.contract.gate import STAGES, gate
from unirl_replay.contract.validate import check_trace, format_violation


def _cycle(t):
    d0 = t.request("traj-0/t0")
    d0.ClearField("arrival")
    d0.dependencies.add().CopyFrom(t.request("traj-0/t1").dependencies[0])
    d0.dependencies[0].predecessor_request_id = "traj-0/t2"
    d0.arrival.after_dependencies.SetInParent()


def _split_group(t):  # one GRPO group whose requests sit in two rollout batches
    from unirl_replay.v1 import workload_pb2 as w
    t.request("req-1").group_id = "g0"
    t.group("g0").member_ids.append("req-1")
    t.group("g0").expected_size = 8
    t.remove("group", "g1")
    t.batch("b0").group_ids.remove("g1")
    t.request("req-1").rollout_batch_id = "b1"
    t.add(w.RolloutBatch(rollout_batch_id="b1", group_ids=["g0"], readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         engine_ids=["e0"]))
    t.outcomes = [o for o in t.outcomes if not (o.WhichOneof("record") == "group" and o.group.group_id == "g1")]


def _huge_output(t):
    t.request("req-0").output_tokens[0] = 4_000_000_000


def _after(bid, prev, gap=0):
    def f(t):
        t.batch(bid).after_batch.previous_rollout_batch_id = prev
        t.batch(bid).after_batch.driver_gap_ns = gap
    return f


BROKEN = [("cycle", agentic_trace, _cycle, "dependency.cycle"),
          ("batch_boundary_cycle", batches_trace, _after("b0", "b1"), "batch.boundary_cycle"),
          ("batch_boundary_unknown", batches_trace, _after("b1", "b9"), "batch.boundary_unknown"),
          ("batch_boundary_self", batches_trace, _after("b1", "b1"), "batch.boundary_self"),
          ("batch_boundary_empty", batches_trace, _after("b1", ""), "batch.boundary_empty"),
          ("batch_boundary_gap", batches_trace, _after("b1", "b0", -1), "units.negative"),
          ("split_group", grpo_trace, _split_group, "batch.membership"),
          ("huge_output", grpo_trace, _huge_output, "bound.tokens"),
          ("tiny_kv", grpo_trace, lambda t: setattr(t.manifest.engines[0], "num_kv_blocks", 1), "bound.engine_capacity"),
          ("tiny_batch", grpo_trace, lambda t: setattr(t.manifest.engines[0], "max_num_batched_tokens", 16),
           "bound.engine_capacity")]


@pytest.mark.parametrize("name,builder,mutate,rule", BROKEN, ids=[b[0] for b in BROKEN])
def test_convert_and_replay_refuse_with_validates_messages(name, builder, mutate, rule, tmp_path, capsys):
    t = builder()
    mutate(t)
    d = t.write(tmp_path / "t")
    res = check_trace(d)
    expected = [format_violation(v) for v in res.violations if v.rule == rule]
    assert expected, list(res.violations)
    for argv in (["convert", str(d), "--out", str(tmp_path / "conv" / "x.jsonl")],
                 ["replay", str(d), "--timing-model", "fixed:10,1", "--out", str(tmp_path / "rep")],
                 ["compare", str(d), str(tmp_path), "--out", str(tmp_path / "cmp")],
                 ["recode", str(d), "--encoding", "binpb", "--out", str(tmp_path / "rec")]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"[{argv[0]}.validate]" in err and "Traceback" not in err
        for line in expected:  # validate's own lines, verbatim
            assert line in err, (argv[0], line, err)
    assert not (tmp_path / "conv").exists() and not (tmp_path / "rep").exists() and not (tmp_path / "cmp").exists()
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("encoding", ["jsonl", "binpb", "arrow"])
@pytest.mark.parametrize("name,builder,mutate,rule", [b for b in BROKEN if b[0].startswith("batch_boundary")],
                         ids=[b[0] for b in BROKEN if b[0].startswith("batch_boundary")])
def test_bad_after_batch_is_refused_by_rule_in_every_encoding(name, builder, mutate, rule, encoding, tmp_path):
    """The fast pass (binpb, arrow) and the row rules (jsonl) refuse it alike, naming the rule and batch."""
    if encoding == "arrow":
        pytest.importorskip("pyarrow")
    t = builder()
    mutate(t)
    d = t.write(tmp_path / "t", encoding)
    for stage in ("convert", "replay", "compare"):
        with pytest.raises(TraceRejectedError) as e:
            gate(d, stage)
        assert rule in {v.rule for v in e.value.violations}, (stage, str(e.value))
        assert f"workload.{encoding}:" in str(e.value) and f" {rule}: " in str(e.value)


@pytest.mark.parametrize("encoding", ["jsonl", "binpb", "arrow"])
def test_batch_boundary_outcome_rule_refuses_compare_only(encoding, tmp_path):
    """A closed-loop batch whose request was measured before the previous batch was ready: the outcome
    rule refuses the stages that read the outcomes (compare), by its id; the predictor stages pass."""
    if encoding == "arrow":
        pytest.importorskip("pyarrow")
    t = batches_trace()
    t.outcome("b1/req-0").submit_ns = 1
    d = t.write(tmp_path / "t", encoding)
    for stage in ("convert", "replay"):
        gate(d, stage)
    with pytest.raises(TraceRejectedError) as e:
        gate(d, "compare")
    assert e.value.first_rule == "outcome.batch_boundary" and "b1/req-0 outcome.batch_boundary" in str(e.value)
    assert "b0" in str(e.value)


def test_gate_returns_the_trace_and_lets_warnings_pass(tmp_path):
    t = grpo_trace()
    t.request("req-0").ClearField("prefix")  # prefix.missing is a warning (input tokens, no hashes)
    d = t.write(tmp_path / "w")
    assert [v.rule for v in check_trace(d).violations] == ["prefix.missing"]
    assert gate(d, "replay").manifest.trace_id == "test-trace"
    for stage in STAGES:
        gate(d, stage)


def test_predictor_stages_do_not_need_outcomes(tmp_path):
    t = grpo_trace()
    t.outcome("req-0").ClearField("completion_ns")  # an outcome rule broken: compare refuses, replay does not
    d = t.write(tmp_path / "t")
    gate(d, "replay")
    gate(d, "convert")
    with pytest.raises(TraceRejectedError) as e:
        gate(d, "compare")
    assert e.value.first_rule == "outcome.missing_reason" and e.value.rule == "compare.validate"
    (d / "outcomes.jsonl").unlink()
    gate(d, "replay")
    with pytest.raises(IncompleteTraceRejectedError):
        gate(d, "compare")


def test_calibrate_like_and_conformance_executor_are_gated(tmp_path):
    from unirl_replay.calibrate.profiler import engine_from_manifest
    from unirl_replay.conformance.executor import handle

    t = agentic_trace()
    _cycle(t)
    d = t.write(tmp_path / "t")
    with pytest.raises(TraceRejectedError, match="dependency.cycle"):
        engine_from_manifest(str(d))
    for op in ("convert", "replay"):
        ans = handle({"id": "x", "op": op, "trace_dir": str(d), "format": "agentic_mooncake",
                      "timing_model": "fixed:10,1"})
        assert ans["status"] == "rejected" and ans["error"]["type"] == "TraceRejectedError"
        assert ans["error"]["rule"] == "turn.dependency_order" and "dependency.cycle" in ans["error"]["message"], ans


def test_executor_survives_hostile_request_lines():
    from unirl_replay.conformance.executor import _request, handle

    for line in ("{oops", "[1, 2]", '{"id": 1, "id": 2}', "[" * 100_000, '{"op": NaN}', '{"op": "convert"}'):
        ans = handle(_request(line, 1))
        assert ans["status"] == "error" and ans["message"], (line, ans)


def test_resumed_trajectory_and_group_are_unsupported_by_name_not_malformed(tmp_path):
    """Proto: Trajectory.first_turn_index / Group.resumed_from_rollout_batch_id declare a partial /
    async resume; validate accepts the shape, the replay adapter rejects it by name."""
    from unirl_replay.contract.errors import UnsupportedWorkloadError
    from unirl_replay.replay.runner import convert_trace

    t = agentic_trace(trajectories=1, turns=3)
    t.remove("request", "traj-0/t0")
    t.trajectory("traj-0").request_ids.remove("traj-0/t0")
    t.trajectory("traj-0").first_turn_index = 1
    t1 = t.request("traj-0/t1")
    t1.ClearField("dependencies")
    t1.arrival.observed_offset_ns = 0
    t.outcomes = [o for o in t.outcomes if not (o.WhichOneof("record") == "request"
                                                and o.request.request_id == "traj-0/t0")]
    d = t.write(tmp_path / "traj")
    assert check_trace(d).status == check_trace(d).STATUS_VALID, list(check_trace(d).violations)
    gate(d, "convert")
    with pytest.raises(UnsupportedWorkloadError) as e:
        convert_trace(d, tmp_path / "x.jsonl")
    assert e.value.rule == "resume.partial"

    g = grpo_trace()
    g.group("g0").resumed_from_rollout_batch_id = "b-earlier"
    d = g.write(tmp_path / "grp")
    gate(d, "convert")
    with pytest.raises(UnsupportedWorkloadError) as e:
        convert_trace(d, tmp_path / "y.jsonl")
    assert e.value.rule == "resume.cross_batch"
