"""`unirl-replay grid`: spec checks, output-directory safety, the local process-pool backend against
the plain sequential path (request-level digests, reports), failure reporting, conformance shards."""

from __future__ import annotations

import json

import pytest
from grid_helpers import REPO, assert_grid_equals, sequential_reference, small_spec

from unirl_replay.cli.main import main
from unirl_replay.contract import out_dir as outputs
from unirl_replay.grid.runner import check_out_dir, run_grid
from unirl_replay.grid.spec import GridSpecError, expand, load_spec


def _write(tmp_path, text, name="spec.json"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,rule", [
    ('{"traces": ["../nope"], "timing_models": ["polynomial"]}', "grid.spec.trace_missing"),
    ('{"traces": [], "timing_models": ["polynomial"], "colour": 1}', "grid.spec.unknown_key"),
    ('{"timing_models": ["polynomial"]}', "grid.spec.empty"),
    ('{"traces": ["TRACE"]}', "grid.spec.timing_models"),
    ('{"traces": ["TRACE"], "timing_models": ["polynomial"], "simulators": ["gem5"]}', "grid.spec.simulator"),
    ('{"traces": ["TRACE"], "timing_models": ["polynomial", "polynomial"]}', "grid.spec.duplicate"),
    ('{"traces": ["TRACE"], "timing_models": ["polynomial"], "layout": "{trace}"}', "grid.spec.layout"),
    ('{"traces": ["TRACE"], "timing_models": ["polynomial"], "format": "csv"}', "grid.spec.format"),
    ('{"traces": ["TRACE"], "timing_models": ["polynomial"], "compare": "yes"}', "grid.spec.type"),
    ('{"traces": ["TRACE", {"path": "TRACE"}], "timing_models": ["polynomial"]}', "grid.spec.duplicate"),
    ('{"traces": [', "grid.spec.parse"),
])
def test_bad_specs_are_typed_errors_naming_file_and_rule(tmp_path, text, rule):
    p = _write(tmp_path, text.replace("TRACE", str(REPO / "traces" / "grpo-a")))
    with pytest.raises(GridSpecError) as e:
        load_spec(p)
    assert e.value.rule == rule and e.value.file == str(p), str(e.value)


def test_yaml_spec_expands_in_spec_order_with_paths_relative_to_the_spec(tmp_path):
    (tmp_path / "sub").mkdir()
    # the profile must exist: a timing model is checked when the spec is read (tests/test_grid_spec_inputs.py)
    (tmp_path / "p.npz").write_bytes((REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz").read_bytes())
    p = _write(tmp_path / "sub", f"""
traces:
  - path: {REPO / 'traces' / 'grpo-a'}
  - {{path: {REPO / 'traces' / 'agentic-a'}, allow_unmodelled: [engine_client.inflight_limit]}}
timing_models: ["fixed:10,1", {{name: cal, spec: "profile:../p.npz"}}]
""", "g.yaml")
    jobs = expand(load_spec(p))
    assert [j.job_id for j in jobs] == ["grpo-a/dynamo/fixed-10-1", "grpo-a/dynamo/cal", "agentic-a/dynamo/fixed-10-1",
                                        "agentic-a/dynamo/cal"]
    assert [j.index for j in jobs] == [0, 1, 2, 3]
    assert jobs[1].timing_model.spec == f"profile:{tmp_path / 'p.npz'}"  # against the spec's folder, absolute
    assert jobs[2].trace.allow_unmodelled == ("engine_client.inflight_limit",)
    with pytest.raises(GridSpecError) as e:  # a layout without the simulator cannot hold two simulators
        p2 = _write(tmp_path, json.dumps({"traces": [str(REPO / "traces" / "grpo-a")], "timing_models": ["polynomial"],
                                          "simulators": ["dynamo", "aisimulate"], "layout": "{trace}/{timing_model}"}))
        load_spec(p2)
    assert e.value.rule == "grid.spec.layout"


def test_out_dir_with_user_files_is_refused_and_left_alone(tmp_path, capsys):
    spec = small_spec(tmp_path / "spec.json")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    rc = main(["grid", str(spec), "--out", str(out), "--backend", "sequential", "--no-progress"])
    assert rc == 2
    assert "not an earlier grid output" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "my notes"
    assert not list(tmp_path.glob(".mine.*")), "no partial directory is left behind"
    outputs.record(out, ["notes.txt"], "grid")
    check_out_dir(out)  # an earlier output whose every entry our marker lists may be replaced
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(Exception, match="not a directory"):
        check_out_dir(f)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    pytest.importorskip("dynamo.replay")
    return sequential_reference(tmp_path_factory.mktemp("sequential"))


def test_local_backend_equals_the_sequential_path(reference, tmp_path):
    spec = load_spec(small_spec(tmp_path / "spec.json"))
    run = run_grid(spec, tmp_path / "out", backend="local", workers=2, progress=False)
    assert run.ok and run.info["workers"] == 2
    assert_grid_equals(tmp_path / "out", reference)
    pids = {r["pid"] for r in run.results}
    assert len(pids) >= 1 and all(p != __import__("os").getpid() for p in pids), "jobs ran in worker processes"


def test_failed_job_is_reported_the_others_finish_and_a_rerun_replaces_the_output(reference, tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    spec = small_spec(tmp_path / "spec.json", agentic_unmodelled=False)  # agentic-a is rejected without the opt-in
    out = tmp_path / "out"
    rc = main(["grid", str(spec), "--out", str(out), "--workers", "2", "--no-progress"])
    assert rc == 1
    doc = json.loads((out / "grid.json").read_text())
    status = {j["job_id"]: j["status"] for j in doc["jobs"]}
    assert status == {"grpo-a/dynamo/fixed": "ok", "grpo-a/dynamo/polynomial": "ok",
                      "agentic-a/dynamo/fixed": "failed", "agentic-a/dynamo/polynomial": "failed"}
    failed = [j for j in doc["jobs"] if j["status"] == "failed"]
    assert all(j["error"]["type"] == "UnsupportedWorkloadError" and j["error"]["rule"] == "engine_client.inflight_limit"
               for j in failed)
    assert doc["ok"] is False and doc["failed"] == ["agentic-a/dynamo/fixed", "agentic-a/dynamo/polynomial"]
    for j in doc["jobs"][:2]:
        assert j["replay_sha256"] == reference[j["job_id"]]["replay_sha256"]
    err = json.loads((out / "agentic-a" / "dynamo" / "fixed" / "error.json").read_text())["error"]
    assert err["rule"] == "engine_client.inflight_limit" and "traceback" not in err  # a typed error, no traceback
    md = (out / "GRID.md").read_text()
    assert "2 failed jobs" in md and "engine_client.inflight_limit" in md
    # the message is the replay command's ("pass --allow-unmodelled ..."); the grid says what that is in a spec
    assert err["hint"].startswith("in a grid spec that opt-in is the trace's `allow_unmodelled: [RULE]`")
    assert md.count("(hint: in a grid spec that opt-in is the trace's `allow_unmodelled: [RULE]`") == 2
    printed = capsys.readouterr().err
    assert "FAILED agentic-a/dynamo/fixed: UnsupportedWorkloadError" in printed and "[hint: in a grid spec" in printed
    assert set(outputs.owned(out)) == {"grid.json", "GRID.md", "grpo-a", "agentic-a"}, "the output marker lists it"
    # a user's file put inside the earlier output (any level) is never removed with it: the re-run is refused
    (out / "agentic-a" / "dynamo" / "notes.txt").write_text("mine")
    only_grpo = json.loads(spec.read_text())
    only_grpo["traces"] = only_grpo["traces"][:1]
    spec.write_text(json.dumps(only_grpo))
    capsys.readouterr()
    assert main(["grid", str(spec), "--out", str(out), "--backend", "sequential", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "Traceback" not in err
    assert (out / "agentic-a" / "dynamo" / "notes.txt").read_text() == "mine" and (out / "grid.json").is_file()
    # without it, a later grid into the same (marked) directory replaces it whole: no stale job directories
    (out / "agentic-a" / "dynamo" / "notes.txt").unlink()
    assert main(["grid", str(spec), "--out", str(out), "--backend", "sequential", "--no-progress"]) == 0
    assert not (out / "agentic-a").exists() and (out / "grpo-a" / "dynamo" / "polynomial" / "replay_result.json").is_file()


def test_conformance_cases_as_grid_shards_equal_the_sequential_runner(tmp_path):
    pytest.importorskip("dynamo.replay")
    from unirl_replay.conformance import runner
    from unirl_replay.conformance.corpus import load_corpus

    names = ["fanout_grpo_n4", "reject_client_inflight_limit", "timestamp_units", "agentic_chain_waits"]
    rev = runner.installed_revision()
    spec = _write(tmp_path, json.dumps({"conformance": {"corpus": str(REPO / "conformance"), "cases": names,
                                                         "shards": 2}}))
    jobs = expand(load_spec(spec))
    assert [(j.job_id, j.cases) for j in jobs] == [
        (f"conformance/{rev.replace('==', '-')}/shard-1-of-2", tuple(sorted(names)[:2])),
        (f"conformance/{rev.replace('==', '-')}/shard-2-of-2", tuple(sorted(names)[2:]))]
    run = run_grid(load_spec(spec), tmp_path / "out", backend="local", workers=2, progress=False)
    assert run.ok, run.results
    cases = load_corpus(REPO / "conformance", names)
    seq = runner.run_revision(REPO / "conformance", cases, rev, REPO / ".cache" / "conformance", lambda m: None)
    grid_matrix = json.loads((tmp_path / "out" / "conformance" / "matrix.json").read_text())
    assert grid_matrix == runner.matrix_json(cases, [seq])


@pytest.mark.parametrize("spec,jobs", [
    ("grids/small.yaml", ["grpo-a/dynamo/fixed", "grpo-a/dynamo/polynomial", "agentic-a/dynamo/fixed",
                          "agentic-a/dynamo/polynomial"]),
    ("grids/demo.yaml", [f"{t}/{m}" for t in ("agentic-a", "agentic-ray-a", "grpo-a") for m in ("calibrated", "default")]),
    ("results/holdout/grid.yaml", [f"{m}/r{r}/{t}" for m in ("grpo", "agentic") for r in (1, 2, 3)
                                   for t in ("calibrated", "default")]),
    ("grids/conformance-matrix.yaml", [f"conformance/ai-dynamo-{v}" for v in (
        "1.3.0.post1", "1.3.1", "1.4.0", "1.4.1", "1.4.2", "1.5.0", "1.5.1", "1.6.0", "1.6.1")]
     + [f"conformance/aisimulate-0.13.0.dev2026{v}" for v in (
         "10170000000074", "10200000000077", "10230000000081", "10240000000082", "10270000000085")]),
])
def test_the_demo_holdout_and_conformance_matrix_are_grid_specs(spec, jobs):
    expanded = expand(load_spec(REPO / spec))
    assert [j.job_id for j in expanded] == jobs
    if spec == "results/holdout/grid.yaml":  # each run is compared with the other two runs of its window
        j = expanded[2]
        assert j.trace.name == "grpo/r2" and [p.rsplit("/", 1)[-1] for p in j.trace.repeats] == ["grpo-r1", "grpo-r3"]
        assert not j.trace.plots and expanded[0].trace.plots and not j.keep_upstream
        assert all(x.trace.allow_unmodelled == ("engine_client.inflight_limit",) for x in expanded[6:])


def test_the_conformance_matrix_grid_runs_the_revisions_make_conformance_matrix_runs():
    """s16 newcomer: the spec said it was `make conformance-matrix` as a grid but held only its 9 ai-dynamo
    revisions, not the 5 AISimulate builds (and "26 cases" of a corpus of 32)."""
    import re

    make = (REPO / "Makefile").read_text()

    def words(var):
        return re.search(rf"^{var} := ((?:.*\\\n)*.*)$", make, re.M).group(1).replace("\\\n", " ").split()

    want = [f"ai-dynamo=={v}" for v in words("CONFORMANCE_REVISIONS")] + \
        [f"aisimulate=={v}" for v in words("AISIMULATE_BUILDS")]
    assert load_spec(REPO / "grids" / "conformance-matrix.yaml").conformance.revisions == want
    cases = sum(1 for p in (REPO / "conformance" / "cases").iterdir() if (p / "case.json").is_file())
    assert f"{cases} cases" in (REPO / "grids" / "conformance-matrix.yaml").read_text()


def test_simulator_axis_dynamo_and_aisimulate_predict_the_same_requests(tmp_path):
    """The simulator axis is passed to replay_trace: the two simulator lines give the same rows."""
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.simulators import AISIMULATE_DEFAULT, environments
    from unirl_replay.replay.simulators.aisimulate import env_dir_for

    if not environments.is_complete(env_dir_for(AISIMULATE_DEFAULT)):
        pytest.skip("aisimulate environment absent: run `make aisimulate-env` (make test does)")
    p = _write(tmp_path, json.dumps({"traces": [{"path": str(REPO / "traces" / "grpo-a"), "plots": False}],
                                     "timing_models": ["fixed:10,1"], "simulators": ["dynamo", "aisimulate"]}))
    run = run_grid(load_spec(p), tmp_path / "out", backend="local", workers=2, progress=False)
    assert run.ok, run.results
    dyn, ais = run.results
    assert (dyn["job_id"], ais["job_id"]) == ("grpo-a/dynamo/fixed-10-1", "grpo-a/aisimulate/fixed-10-1")
    assert dyn["requests_sha256"] == ais["requests_sha256"], "the same per-request predictions on both lines"
    assert dyn["replay_sha256"] != ais["replay_sha256"], "the result names its simulator"
    assert ais["simulator_version"] == AISIMULATE_DEFAULT
