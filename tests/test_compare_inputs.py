"""`unirl-replay compare` with arguments that do not fit the trace: a --batch it lacks, a --repeat that is the
trace itself or given twice. Each is refused before anything is written (exit 2, no traceback)."""

from __future__ import annotations

import compare_fixtures as fx
from test_compare_cli import _trace
from unirl_replay.cli.main import main
from unirl_replay.contract.trace_io import write_message_json


def _replay(tmp_path):
    rdir = tmp_path / "replay"
    rdir.mkdir()
    write_message_json(rdir / "replay_result.json", fx.replay())
    return rdir


def test_a_batch_the_trace_lacks_is_refused_before_writing(tmp_path, capsys):
    trace, rdir, out = _trace(tmp_path / "trace"), _replay(tmp_path), tmp_path / "cmp"
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--batch", "nope"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--batch 'nope'" in err and "'B1'" in err
    assert not out.exists()
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--batch", "B1"]) == 0
    assert (out / "timeline_B1.png").is_file()


def test_a_repeat_that_is_the_trace_itself_or_given_twice(tmp_path, capsys):
    trace, rdir, out = _trace(tmp_path / "trace"), _replay(tmp_path), tmp_path / "cmp"
    rep2 = _trace(tmp_path / "trace2", scale=1.1, trace_id="toy-2")
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(trace), "--no-plots"]) == 2
    assert "is the compared trace itself" in capsys.readouterr().err
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(rep2), "--repeat", str(rep2),
                 "--no-plots"]) == 2
    assert "'toy-2' is given twice" in capsys.readouterr().err
    assert not out.exists()
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(rep2), "--no-plots"]) == 0


def _edited_replay(tmp_path, edit):
    rp = fx.replay()
    edit(rp)
    rdir = tmp_path / "replay"
    rdir.mkdir()
    write_message_json(rdir / "replay_result.json", rp)
    return rdir


def _dup_row(rp):
    rp.requests.add().CopyFrom(rp.requests[0])


def _ghost(rp):
    rp.requests[0].request_id = "ghost"


def _negative(rp):
    rp.requests[0].completion_ns = -5


def _completion_before_first_token(rp):
    rp.requests[1].completion_ns = 1


def _dup_batch(rp):
    rp.rollout_batches.add(rollout_batch_id="B1", ready_ns=5)


def _assert_refused(tmp_path, trace, edit, rule, rid, capsys):
    """compare of ``trace`` against its replay result edited by ``edit``: exit 2, the error names the rule, the
    record and the result file, and no report directory is written."""
    d = tmp_path / edit.__name__
    d.mkdir()
    rdir = _edited_replay(d, edit)
    out = d / "cmp"
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--no-plots"]) == 2, edit.__name__
    err = capsys.readouterr().err
    assert f"[{rule}]" in err and f"record {rid!r}" in err and "replay_result.json" in err, err
    assert not out.exists()


def test_replay_results_the_contract_does_not_allow_are_refused(tmp_path, capsys):
    """replay.proto: one row per Request.request_id, in order times; such rows were compared silently (a duplicate
    row: which one counts? a ghost id: another workload's replay)."""
    trace = _trace(tmp_path / "trace")
    for edit, rule, rid in ((_dup_row, "id.duplicate", "r1"), (_ghost, "replay.unmatched", "ghost"),
                            (_negative, "time.order", "r1"), (_completion_before_first_token, "time.order", "r2"),
                            (_dup_batch, "id.duplicate", "B1")):
        _assert_refused(tmp_path, trace, edit, rule, rid, capsys)


def _negative_group(rp):
    rp.groups[0].completed_ns = -1


def _negative_batch(rp):
    rp.rollout_batches[0].ready_ns = -1


def _trajectory_ends_before_start(rp):
    rp.trajectories[0].end_ns = 5


def _ghost_group(rp):
    rp.groups[0].group_id = "G9"


def _ghost_batch(rp):
    rp.rollout_batches[0].rollout_batch_id = "B9"


def _ghost_trajectory(rp):
    rp.trajectories[0].trajectory_id = "T9"


def test_derived_rows_the_contract_does_not_allow_are_refused(tmp_path, capsys):
    """s6-f, the neighbours of the request-row checks: a group / batch row with a negative time, a trajectory that
    ends before it starts, a group / batch / trajectory id the trace lacks were all compared silently (the batch
    readiness error of ready_ns = -1 reported as a measurement)."""
    trace = _trace(tmp_path / "trace")
    for edit, rule, rid in ((_negative_group, "time.order", "G1"), (_negative_batch, "time.order", "B1"),
                            (_trajectory_ends_before_start, "time.order", "T1"),
                            (_ghost_group, "replay.unmatched", "G9"), (_ghost_batch, "replay.unmatched", "B9"),
                            (_ghost_trajectory, "replay.unmatched", "T9")):
        _assert_refused(tmp_path, trace, edit, rule, rid, capsys)


def test_a_result_of_another_schema_version_or_a_negative_makespan_is_refused(tmp_path, capsys):
    """s6-f: `schema_version: "unirl_replay.v2"` and `makespan_ns: "-5"` were compared silently."""
    trace = _trace(tmp_path / "trace")
    for name, rule in (("schema_version", "replay.schema_version"), ("makespan_ns", "time.order")):
        d = tmp_path / name
        d.mkdir()
        rdir = _edited_replay(d, lambda rp: setattr(rp, name, "unirl_replay.v2" if name == "schema_version" else -5))
        out = d / "cmp"
        assert main(["compare", str(trace), str(rdir), "--out", str(out), "--no-plots"]) == 2, name
        err = capsys.readouterr().err
        assert f"[{rule}]" in err and "replay_result.json" in err and "Traceback" not in err, err
        assert not out.exists()


def test_a_result_with_no_granularity_is_refused_naming_its_file(tmp_path, capsys):
    """s11 attack: a replay result or a --bound file holding `{}` was refused with "replay result granularity is
    unspecified", naming neither the file nor a rule (for a --bound, it read as if the main result were at fault)."""
    trace, rdir = _trace(tmp_path / "trace"), _replay(tmp_path)
    empty = tmp_path / "empty_bound.json"
    empty.write_text("{}")
    for args in ([str(empty)], [str(rdir), "--bound", str(empty)]):
        out = tmp_path / f"cmp{len(args)}"
        assert main(["compare", str(trace), *args, "--out", str(out), "--no-plots"]) == 2, args
        err = capsys.readouterr().err
        assert "empty_bound.json [replay.granularity]: granularity is unspecified" in err and "Traceback" not in err
        assert not out.exists()


def test_a_repeat_that_is_a_copy_of_one_run_under_another_trace_id_is_refused(tmp_path, capsys):
    """s6-f, the neighbour of the same-trace_id check: a copy of the trace (or of a repeat) with its trace_id edited,
    or a recoded copy, was counted as another measured run, and the run-to-run spread shrank."""
    trace, rdir, out = _trace(tmp_path / "trace"), _replay(tmp_path), tmp_path / "cmp"
    copy = _trace(tmp_path / "copy", trace_id="toy-3")  # the same outcomes as `trace`
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(copy), "--no-plots"]) == 2
    assert "holds exactly the measured times of 'toy-1'" in capsys.readouterr().err
    rep2 = _trace(tmp_path / "trace2", scale=1.1, trace_id="toy-2")
    rep2_copy = _trace(tmp_path / "trace2-copy", scale=1.1, trace_id="toy-4")
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(rep2), "--repeat",
                 str(rep2_copy), "--no-plots"]) == 2
    assert "holds exactly the measured times of 'toy-2'" in capsys.readouterr().err
    assert not out.exists()
    rep3 = _trace(tmp_path / "trace3", scale=1.2, trace_id="toy-5")
    assert main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(rep2), "--repeat", str(rep3),
                 "--no-plots"]) == 0


def _huge_completion(rp):
    rp.requests[0].completion_ns = (1 << 63) - 1


def _huge_batch(rp):
    rp.rollout_batches[0].ready_ns = (1 << 63) - 1


def test_a_predicted_time_no_replay_writes_is_refused(tmp_path, capsys):
    """A result with completion_ns = 2^63 - 1 was a ValueError traceback ("Value out of range") in the error
    decomposition's sums: times past outputs.MAX_PREDICTED_NS (2^50 ns, ~13 days simulated) are refused."""
    from unirl_replay.report.explain import summed
    from unirl_replay.v1 import report_pb2 as vpb

    trace = _trace(tmp_path / "trace")
    for edit, rid in ((_huge_completion, "r1"), (_huge_batch, "B1")):
        _assert_refused(tmp_path, trace, edit, "replay.time_range", rid, capsys)
    big = [vpb.ErrorDecomposition(metric="m", measured_ns=(1 << 62), predicted_ns=(1 << 62) + 5, total_ns=5,
                                  terms=[vpb.DecompositionTerm(name="client_path", delta_ns=5)]) for _ in range(3)]
    assert summed(big, "m", "all") is None  # a sum an int64 field cannot hold: no sum, no traceback
