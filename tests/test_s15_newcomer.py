"""What a newcomer walking the README's tour tripped over (session 15). Hand-built inputs, no engine."""

from __future__ import annotations

from unirl_replay.report import profile_check as pc
from unirl_replay.report.steps import PH_FIRST, PH_PREFILL
from unirl_replay.v1 import report_pb2 as vpb


def _steps(passes):
    es = vpb.EngineSteps(engine_id="e0")
    for phase, tokens, real_ms, model_ms in passes:
        es.intervals.append(vpb.StepInterval(phase=phase, prefill_tokens=tokens, real_ms=real_ms, model_ms=model_ms))
    return [es]


def _growing(phase_of):
    # every size its own ratio, growing with the pass size (the model's form is off)
    sizes = (200, 400, 800, 1200, 1600, 2400, 3200, 4000)
    return [(phase_of(i), n, 10.0 * (1 + n / 2000), 10.0) for i, n in enumerate(sizes)]


def test_prefill_trend_over_first_passes_only_says_so():
    """agentic-a / agentic-ray-a: the table has no `prefill` row (every prompt is a first pass after idle),
    yet the reading said "prefill ratio grows with prompt length" without saying over which passes."""
    text = pc.reading([], _steps(_growing(lambda i: PH_FIRST)))
    assert "prefill ratio grows with prompt length" in text
    assert "over 8 passes, all first passes after idle, which also hold first-call stalls" in text
    assert "FORM is off" in text


def test_prefill_trend_never_mixes_first_passes_with_later_ones():
    """The uniform reading leaves first passes after idle out; the prompt-length trend did not, so first-call
    stalls could read as the model's form. Later passes, when there are enough of them, are read alone."""
    mixed = pc.reading([], _steps(_growing(lambda i: PH_FIRST if i < 2 else PH_PREFILL)))
    assert "over 6 later prefill passes" in mixed
    later = pc.reading([], _steps(_growing(lambda i: PH_PREFILL)))
    assert "over 8 later prefill passes" in later
    # stalls on the first passes only (here the longest prompts, 3x the model): no trend is read from them
    # through the later passes, which run at the model's level whatever their length
    stalls = [(PH_FIRST, n, 30.0, 10.0) for n in (5000, 6000, 7000)] + [(PH_PREFILL, n, 10.0, 10.0)
                                                                         for n in (100, 200, 400, 600, 800, 1000)]
    assert "prefill ratio" not in pc.reading([], _steps(stalls))
    # too few later passes: the first passes are read, said so
    few = pc.reading([], _steps(_growing(lambda i: PH_FIRST if i < 6 else PH_PREFILL)))
    assert "over 6 passes, all first passes after idle" in few


def test_grid_md_lists_each_jobs_honesty_label(tmp_path):
    """`grid grids/small.yaml`: GRID.md showed agentic-a's MAPEs with no UNMODELLED label (grid.json has it; the
    spec's own comment says "labelled UNMODELLED on every report"), nor FIXED / UNCALIBRATED."""
    from unirl_replay.grid.runner import GridRun, grid_markdown

    label = ("unlabelled workload agentic-a | ai-dynamo 1.6.1 | fixed prefill 10 ms / decode 1 ms (FIXED) | "
             "UNMODELLED: engine_client.inflight_limit")
    run = GridRun(out_dir=tmp_path, backend="local", info={"workers": 1, "wall_s": 1.0}, results=[
        {"kind": "replay", "job_id": "agentic-a/dynamo/fixed", "status": "ok", "requests": 77,
         "replay_sha256": "b3147e34f3a2" * 5, "mape_pct": {"request.e2e": 67.85}, "wall_s": 3.0, "label": label},
        {"kind": "replay", "job_id": "grpo-a/dynamo/polynomial", "status": "failed", "error": {"type": "X", "message": "boom"}}])
    md = grid_markdown(run)
    assert f"- `agentic-a/dynamo/fixed`: {label}" in md
    assert "`grpo-a/dynamo/polynomial`:" not in md.split("Labels")[1].split("failed jobs")[0]  # no label: not listed


def test_a_job_failing_with_a_message_less_exception_does_not_crash_the_grid(tmp_path, monkeypatch, capsys):
    """A job whose exception has no message (``RuntimeError()``, a bare ``assert`` in upstream code) crashed the
    driver with IndexError in GRID.md's failure list (``''.splitlines()[0]``) after every job had run."""
    import json
    from pathlib import Path

    import unirl_replay.grid.jobs as jobs
    from unirl_replay.cli.main import main

    def boom(job, dest):
        raise RuntimeError()

    monkeypatch.setattr(jobs, "_replay", boom)
    spec = tmp_path / "spec.json"
    grpo = Path(__file__).resolve().parents[1] / "traces" / "grpo-a"
    spec.write_text(json.dumps({"traces": [{"path": str(grpo)}], "timing_models": ["polynomial"]}))
    out = tmp_path / "out"
    assert main(["grid", str(spec), "--out", str(out), "--backend", "sequential", "--no-progress"]) == 1
    md = (out / "GRID.md").read_text()
    assert "1 failed jobs" in md and "RuntimeError: (no message)" in md
    assert json.loads((out / "grid.json").read_text())["jobs"][0]["error"]["type"] == "RuntimeError"


def test_compare_of_another_traces_replay_names_both_traces(tmp_path, capsys):
    """`compare traces/agentic-a out/grpo` (a replay of grpo-a) said "group 'r0:prompt:4:sample:0' is no group of
    the trace compared: a replay of another workload?": the row check ran before the trace-id check, whose
    message names both traces. A --bound of another trace says which option it was."""
    import pytest

    pytest.importorskip("dynamo.replay")
    from pathlib import Path

    from unirl_replay.cli.main import main

    traces = Path(__file__).resolve().parents[1] / "traces"
    grpo = tmp_path / "grpo"
    assert main(["replay", str(traces / "grpo-a"), "--timing-model", "polynomial", "--out", str(grpo)]) == 0
    capsys.readouterr()
    assert main(["compare", str(traces / "agentic-a"), str(grpo), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "replay result is of trace 'grpo-a-" in err and "not 'agentic-a-" in err and "no group" not in err
    assert not (tmp_path / "r").exists()
    ag = tmp_path / "ag"
    assert main(["replay", str(traces / "agentic-a"), "--timing-model", "polynomial", "--out", str(ag),
                 "--allow-unmodelled", "engine_client.inflight_limit"]) == 0
    capsys.readouterr()
    assert main(["compare", str(traces / "agentic-a"), str(ag), "--bound", str(grpo), "--out",
                 str(tmp_path / "r3"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"--bound {grpo}: replay result is of trace 'grpo-a-" in err


def test_the_summed_waterfall_is_titled_all_rollout_batches():
    """waterfall_all_rollout_batches.png (embedded in the README) was titled "Rollout batch all rollout batches: ..."."""
    from unirl_replay.report import compare as C
    from unirl_replay.report.plots import waterfall_figure

    def dec(record_id):
        d = vpb.ErrorDecomposition(level=C.L_BATCH, record_id=record_id, metric="batch_readiness",
                                   measured_ns=1_000_000_000, predicted_ns=800_000_000, total_ns=-200_000_000)
        d.terms.add(name="decode_level", delta_ns=-200_000_000)
        return waterfall_figure(d, "unlabelled workload w | ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED)")

    assert dec("all rollout batches")._suptitle.get_text().startswith("All rollout batches: predicted - measured")
    assert dec("batch-0")._suptitle.get_text().startswith("Rollout batch batch-0: predicted - measured")
