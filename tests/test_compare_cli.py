"""``unirl-replay compare`` end to end on a hand-built trace written with trace_io."""

from __future__ import annotations

import json

import compare_fixtures as fx
from unirl_replay.cli.main import main
from unirl_replay.contract.trace_io import TraceWriter, read_message_json, write_message_json
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb


def _trace(d, scale=1.0, trace_id="toy-1", edit_manifest=None):
    with TraceWriter(d) as w:
        for rec in fx.workload():
            w.write_workload(rec)
        for rec in fx.outcomes(scale=scale):
            w.write_outcome(rec)
        man = fx.manifest(trace_id=trace_id)
        if edit_manifest is not None:
            edit_manifest(man)
        w.finalize(man)
    return d


def test_compare_command_writes_report_plots_and_perfetto(tmp_path, capsys):
    trace = _trace(tmp_path / "trace")
    rep2 = _trace(tmp_path / "trace2", scale=1.1, trace_id="toy-2")
    rdir = tmp_path / "replay"
    rdir.mkdir()
    write_message_json(rdir / "replay_result.json", fx.replay())
    out = tmp_path / "cmp"
    rc = main(["compare", str(trace), str(rdir), "--out", str(out), "--repeat", str(rep2)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "holdout workload grpo-toy | ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED)" in text
    assert "capture overhead +3.1% over 3 paired runs" in text
    assert "requests left out (measured outcome unavailable): 2" in text
    report = read_message_json(out / "validation_report.json", vpb.ValidationReport)
    assert report.requests_unavailable == 2 and len(report.repeat_spread) == 9  # 7 metrics + engine_ttft, engine_e2e
    assert "timeline.perfetto.json" in report.artifacts and "timeline_B1.png" in report.artifacts
    for name in report.artifacts:
        assert (out / name).is_file(), name
    json.loads((out / "timeline.perfetto.json").read_text())
    # the table the command printed is also in the report directory (README: "a table"), plain text
    table = (out / "table.txt").read_text()
    assert "table.txt" in report.artifacts and table.splitlines()[0] == text.splitlines()[0]
    assert "\x1b" not in table and "engine requests" in table and "samples" in table


def test_compare_command_aggregate_only(tmp_path, capsys):
    trace = _trace(tmp_path / "trace")
    rp = rpb.ReplayResult(trace_id="toy-1", granularity=rpb.RESULT_GRANULARITY_AGGREGATE_ONLY)
    rp.simulator.name, rp.simulator.version = "ai-dynamo", "1.6.1"
    rp.timing_model.kind, rp.timing_model.calibration = rpb.TIMING_MODEL_KIND_FIXED, rpb.CALIBRATION_STATUS_FIXED
    rp.aggregate["duration_ms"] = 150.0
    write_message_json(tmp_path / "agg.json", rp)
    assert main(["compare", str(trace), str(tmp_path / "agg.json"), "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "AGGREGATE-ONLY" in text and "aggregate-only" in text.splitlines()[0]
    report = read_message_json(tmp_path / "o" / "validation_report.json", vpb.ValidationReport)
    # r5's measured completion is unavailable, so the measured makespan is unknown: not compared
    assert not report.metrics and list(report.artifacts) == ["table.txt"]
    (n,) = [n for n in report.not_compared if n.metric == "duration_ms"]
    assert n.reason == "measured: request 'r5' lacks a measured submit or completion"


def _table_of(trace, out) -> list[str]:
    """`compare --no-plots` of ``trace`` with the fixture's replay result into ``out``: table.txt's lines."""
    res = out.parent / f"{out.name}-replay_result.json"
    write_message_json(res, fx.replay())
    assert main(["compare", str(trace), str(res), "--out", str(out), "--no-plots"]) == 0
    return (out / "table.txt").read_text().splitlines()


def test_an_incomplete_capture_is_said_up_front_and_in_the_notes(tmp_path, capsys):
    """A trace finalize marked INCOMPLETE (completeness.complete false: an engine died, a shard is missing) holds
    only the window's whole records; compare says so first, never a clean-looking report of part of a window."""
    from unirl_replay.v1 import manifest_pb2 as mpb

    def incomplete(man):
        man.completeness.complete = False
        man.completeness.lost.append(mpb.LostRecords(kind="engine_request", count=2, cause="engine e1: killed"))

    table = _table_of(_trace(tmp_path / "trace", edit_manifest=incomplete), tmp_path / "cmp")
    warn = next(i for i, line in enumerate(table) if line.startswith("WARNING: INCOMPLETE capture"))
    assert warn < 6 and "lost: engine_request 2" in table[warn]
    report = read_message_json(tmp_path / "cmp" / "validation_report.json", vpb.ValidationReport)
    assert any(n.startswith("INCOMPLETE capture") for n in report.notes)
    # a complete capture says nothing of it
    assert not any("INCOMPLETE" in line for line in _table_of(_trace(tmp_path / "whole"), tmp_path / "cmp2"))


def test_finalize_s_warnings_in_the_manifest_are_said_first(tmp_path):
    """A capture warning finalize wrote into the manifest (warning.* labels: no driver shard, a probe inside the
    window, ...) is repeated by compare up front: it was printed once by finalize and never again."""
    def warned(man):
        man.labels["warning.probe_inside_window"] = "1 reference probe(s) ran inside the window (e.g. p1, 0.7 s ...)"

    table = _table_of(_trace(tmp_path / "trace", edit_manifest=warned), tmp_path / "cmp")
    hit = [i for i, line in enumerate(table) if line.startswith("WARNING: capture warning (probe_inside_window)")]
    assert hit and hit[0] < 6, table[:8]
