"""`unirl-replay demo` end to end on small traces, with the real upstream replay."""

from __future__ import annotations

import json

import pytest
from tracebuild import agentic_trace, grpo_trace

from unirl_replay.cli.main import main

pytest.importorskip("dynamo.replay")


@pytest.fixture()
def traces(tmp_path):
    g = grpo_trace(prompts=3, samples=4).write(tmp_path / "traces" / "grpo")
    a = agentic_trace(trajectories=3, turns=3)
    client = next(r.engine_client for r in a.workload if r.WhichOneof("record") == "engine_client")
    client.inflight_request_limit = 1  # UniRL's locked direct-vLLM client, with 2 trajectory slots
    return g, a.write(tmp_path / "traces" / "agentic")


def test_demo_writes_labelled_reports_for_every_trace_and_model(traces, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["demo", "--trace", str(traces[0]), "--trace", str(traces[1]), "--out", str(out), "--no-profile"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["trace"], r["timing_model"]) for r in summary] == [("grpo", "default"), ("agentic", "default")]
    for r in summary:
        assert "UNCALIBRATED" in r["label"]
        assert (out / r["report_dir"] / "validation_report.json").is_file()
        assert (out / r["report_dir"] / "timeline.perfetto.json").is_file()
        assert list((out / r["report_dir"]).glob("*.png"))
        assert r["mape_pct"]["request.e2e"] is not None
    # the agentic trace's client in-flight limit cannot be expressed upstream: replayed without it, labelled
    assert "UNMODELLED: engine_client.inflight_limit" in summary[1]["label"]
    assert "UNMODELLED" not in summary[0]["label"]
    report = (out / "REPORT.md").read_text()
    assert "| grpo | unlabelled | default | 3 |" in report
    err = capsys.readouterr().err
    assert "[1/6] validate" in err and "[6/6] compare agentic" in err
    # each replay step's line names the model's honesty label, not only the step's tag ("default")
    assert err.count("requests predicted, polynomial default (UNCALIBRATED) (") == 2, err


def test_demo_stops_on_an_invalid_trace_with_the_rule(traces, tmp_path, capsys):
    bad = grpo_trace(prompts=2, samples=4)
    bad.request("req-1").num_samples = 3  # fan-out count no longer matches sample ids
    d = bad.write(tmp_path / "bad")
    rc = main(["demo", "--trace", str(d), "--out", str(tmp_path / "o"), "--no-profile"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "demo.validate" in err and "fanout.count" in err


def test_demo_validates_every_trace_first_and_keeps_the_previous_output(traces, tmp_path):
    out = tmp_path / "out"
    assert main(["demo", "--trace", str(traces[0]), "--out", str(out), "--no-profile"]) == 0
    before = (out / "summary.json").read_text()
    assert "Run with --no-profile" in (out / "REPORT.md").read_text()
    bad = grpo_trace(prompts=2, samples=4)
    bad.request("req-1").num_samples = 3
    d = bad.write(tmp_path / "bad")
    # the broken trace comes second: nothing is replayed, the earlier output is untouched
    assert main(["demo", "--trace", str(traces[0]), "--trace", str(d), "--out", str(out), "--no-profile"]) == 2
    assert (out / "summary.json").read_text() == before
    assert not list(tmp_path.glob(".out.*"))  # no half-written sibling left behind
    # a user's file put inside the earlier output, at any level, is never removed with it: the re-run is refused
    inner = next(p for p in out.rglob("*") if p.is_dir())
    (inner / "notes.txt").write_text("mine")
    assert main(["demo", "--trace", str(traces[1]), "--out", str(out), "--no-profile"]) == 2
    assert (inner / "notes.txt").read_text() == "mine" and (out / "summary.json").read_text() == before
    (inner / "notes.txt").unlink()
    # a re-run replaces the output whole: the agentic run's directory does not linger
    assert main(["demo", "--trace", str(traces[1]), "--out", str(out), "--no-profile"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["agentic"]


def test_demo_refuses_an_unrelated_non_empty_directory(traces, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["demo", "--trace", str(traces[0]), "--out", str(out), "--no-profile"]) == 2
    assert (out / "notes.txt").read_text() == "keep me"


def test_demo_refuses_a_trace_name_twice_and_a_profile_with_no_profile(traces, tmp_path, capsys):
    """The same trace (or two traces of one directory name) went to one <out>/<name>/, the second replacing
    the first's results, and REPORT.md listed both rows; --profile with --no-profile silently dropped the profile."""
    g = traces[0]
    other = grpo_trace(prompts=2, samples=2).write(tmp_path / "elsewhere" / "grpo")
    for pair in ([g, g], [g, other]):
        out = tmp_path / "out"
        assert main(["demo", "--trace", str(pair[0]), "--trace", str(pair[1]), "--out", str(out), "--no-profile"]) == 2
        assert "given more than once" in capsys.readouterr().err and not out.exists()
    prof = tmp_path / "p.npz"
    prof.write_bytes(b"x")
    assert main(["demo", "--trace", str(g), "--profile", str(prof), "--no-profile", "--out", str(tmp_path / "o")]) == 2
    assert "--profile and --no-profile" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_the_demo_profile_is_named_not_the_newest_file(tmp_path):
    """Adding a profile must not change the demo: "the newest *.npz by name" picked up ...-20261201-bound.npz
    (engines bound to one core) and the README's demo table (20261130b) no longer matched `make demo`."""
    from unirl_replay.demo.run import DEFAULT_PROFILE, DEFAULT_PROFILES_DIR, find_profile

    assert find_profile(DEFAULT_PROFILES_DIR) == DEFAULT_PROFILES_DIR / DEFAULT_PROFILE
    readme = (DEFAULT_PROFILES_DIR.parent / "README.md").read_text()
    assert f"profile {DEFAULT_PROFILE} (CALIBRATED)" in readme  # the profile of the demo table shown there
    assert DEFAULT_PROFILE in (DEFAULT_PROFILES_DIR.parent / "grids" / "demo.yaml").read_text()
    (tmp_path / "a.npz").write_bytes(b"")
    assert find_profile(tmp_path) == tmp_path / "a.npz"
    (tmp_path / "z-newer.npz").write_bytes(b"")
    assert find_profile(tmp_path) is None  # which one is not guessed


def test_the_readme_and_docs_demo_show_what_the_bundled_demo_prints(tmp_path):
    """`make demo` on the bundled traces writes the REPORT.md that docs/demo holds and whose table the README
    quotes, and the grpo-a table docs/demo shows: numbers that went stale (agentic-ray-a's after a replay fix)
    fail here, not in a newcomer's hands."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    report = (out / "REPORT.md").read_text()
    assert report == (repo / "docs" / "demo" / "REPORT.md").read_text()
    readme = (repo / "README.md").read_text()
    rows = [ln for ln in report.splitlines() if ln.startswith("| ") and not ln.startswith("| trace ")]
    assert rows and all(r in readme for r in rows), [r for r in rows if r not in readme]
    assert (out / "grpo-a" / "calibrated" / "table.txt").read_text() == \
        (repo / "docs" / "demo" / "grpo-a-calibrated-table.txt").read_text()
    # the agentic-ray-a tables the README links: the whole table, its honesty label first (they were the metric
    # rows alone, so the default polynomial's table never said UNCALIBRATED, nor either one UNMODELLED)
    for model in ("calibrated", "default"):
        shown = (repo / "docs" / "capture" / f"agentic-ray-a-{model}-table.txt").read_text()
        assert shown == (out / "agentic-ray-a" / model / "table.txt").read_text(), model
        assert shown.startswith("Validation report: ") and "UNMODELLED: engine_client.inflight_limit" in \
            shown.splitlines()[0]


def test_a_profile_without_measured_provenance_is_never_called_calibrated(tmp_path, capsys):
    """s16 newcomer: `demo --profile P.npz` with no measured provenance (UNCALIBRATED in every report label) was
    announced as "calibrated profile", its steps read "with calibrated timing model" and REPORT.md's timing-model
    column said "calibrated"; a calibrated profile of another host's CPU read "calibrated" there too (its label:
    UNVALIDATED). Both now say what the replay labelled them."""
    import numpy as np
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    d = np.load(repo / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz")
    plain = tmp_path / "plain.npz"
    np.savez(plain, **{k: d[k] for k in d.files if k != "provenance"})
    out = tmp_path / "o"
    assert main(["demo", "--trace", str(repo / "traces" / "grpo-a"), "--profile", str(plain), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "UNCALIBRATED profile (no measured provenance)" in err and "calibrated profile" not in err, err
    assert "with calibrated timing model" not in err and "requests predicted, profile plain.npz (UNCALIBRATED)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [r["timing_model"] for r in summary] == ["profile (UNCALIBRATED)", "default"]
    assert "| grpo-a | unlabelled | profile (UNCALIBRATED) | 16 |" in (out / "REPORT.md").read_text()
    assert (out / "grpo-a" / "profile" / "table.txt").is_file()
    # a CALIBRATED profile measured on another CPU than the trace's capture: UNVALIDATED in the row, not "calibrated"
    xeon = repo / "results" / "holdout-closed-xeon" / "traces" / "grpo-r1"
    amd = repo / "profiles" / "vllm-cpu-tiny-qwen2-20261203-bound-epyc-f25m1.npz"
    out2 = tmp_path / "o2"
    assert main(["demo", "--trace", str(xeon), "--profile", str(amd), "--out", str(out2)]) == 0
    summary = json.loads((out2 / "summary.json").read_text())
    assert [r["timing_model"] for r in summary] == ["profile (UNVALIDATED)", "default"]
    assert "UNVALIDATED on this host" in summary[0]["label"]
