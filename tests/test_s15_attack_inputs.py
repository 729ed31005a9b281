"""Session 15 attack on the inputs the earlier rounds did not try (timing profiles of other dtypes or that
extrapolate off their grid, replay results edited by hand, outputs inside a trace directory, ...): each input
below was a Python traceback, a wrong result written silently or a user's trace broken before its fix; every
one now is a clear error naming the file and the rule it broke."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from unirl_replay.cli.main import main
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model
from unirl_replay.report.timing_eval import ProfileUnreadable, read_profile

REPO = Path(__file__).resolve().parents[1]
GRPO = REPO / "traces" / "grpo-a"
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def _tables() -> dict:
    with np.load(PROFILE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "provenance"}


def _profile(path: Path, **tables) -> Path:
    t = _tables()
    t.update(tables)
    np.savez(path, **t)
    return path


@pytest.mark.parametrize("key,dtype", [("decode_itl", "<i8"), ("decode_itl", "<f4"), ("prefill_isl", "<i8"),
                                       ("prefill_ttft_ms", "<u4"), ("decode_context_length", "<f2")])
def test_a_profile_array_of_a_dtype_upstream_cannot_read_is_refused(tmp_path, capsys, key, dtype):
    """An int64 / float32 / uint32 / float16 table passed the reader (any integer or float kind) and upstream's NPZ
    reader (float64 only) raised "ValueError: Failed to load decode_itl from NPZ: ... incorrect descriptor" as a
    traceback out of `replay`."""
    t = _tables()
    f = _profile(tmp_path / "p.npz", **{key: np.clip(np.round(t[key]), 1, None).astype(dtype)})
    with pytest.raises(TimingModelError, match=f"array {key} has dtype .*float64"):
        parse_timing_model(f"profile:{f}")
    with pytest.raises(ProfileUnreadable, match="float64"):
        read_profile(f)
    rc = main(["replay", str(GRPO), "--timing-model", f"profile:{f}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "p.npz" in err and "float64" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_big_endian_float64_profile_is_still_read(tmp_path):
    f = _profile(tmp_path / "be.npz", decode_itl=_tables()["decode_itl"].astype(">f8"))
    assert read_profile(f)[0]["decode_itl"].shape == (118, 56)


def _result(tmp_path: Path, edit) -> Path:
    """The bundled replay result of grpo-a (the demo's fixed:10,1 replay, made here) with ``edit`` applied."""
    pytest.importorskip("dynamo.replay")
    out = tmp_path / "r"
    assert main(["replay", str(GRPO), "--timing-model", "fixed:10,1", "--out", str(out)]) == 0
    d = json.loads((out / "replay_result.json").read_text())
    edit(d)
    (out / "replay_result.json").write_text(json.dumps(d))
    return out


@pytest.mark.parametrize("prefill,decode,why", [("NaN", 1.0, "finite and > 0"), (1e308, 1e308, "at most 3600000 ms"),
                                                (-5.0, 1.0, "finite and > 0"), (0.0, 0.0, "finite and > 0"),
                                                (10.0, "-Infinity", "finite and > 0")],
                         ids=["nan", "huge", "negative", "zero", "-inf"])
def test_a_replay_results_fixed_model_no_replay_runs_is_refused_by_compare(tmp_path, capsys, prefill, decode, why):
    """compare evaluates the replay's timing model on the real schedule: prefill_ms "NaN" was a ValueError ("cannot
    convert float NaN to integer") and 1e308 an OverflowError traceback in the error decomposition; -5 and 0 ms
    wrote a profile check of a model no replay can run ("fixed prefill -5 ms")."""
    res = _result(tmp_path, lambda d: d["timing_model"].update(prefill_ms=prefill, decode_ms=decode))
    capsys.readouterr()
    rc = main(["compare", str(GRPO), str(res), "--out", str(tmp_path / "c"), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and "replay_result.json" in err and "[replay.timing_model]" in err and why in err, err
    assert "Traceback" not in err and not (tmp_path / "c").exists()


def _steep(path: Path, phase: str) -> Path:
    """A profile whose tables are bounded (every value <= 1 hour) but whose grid ends early with a steep last
    segment: the simulator extrapolates it linearly to the engine's sizes."""
    if phase == "prefill":
        return _profile(path, prefill_isl=np.array([1.0, 2.0]), prefill_ttft_ms=np.array([1.0, 3.5e6]))
    return _profile(path, decode_active_kv_tokens=np.array([1.0, 1.0000001]), decode_context_length=np.array([1.0, 2.0]),
                    decode_itl=np.array([[1.0, 1.0], [3e6, 3e6]]))


@pytest.mark.parametrize("phase,why", [("prefill", "a prefill pass of 4096 new tokens"),
                                       ("decode", "a decode step over 3225088 active KV tokens")])
def test_a_profile_extrapolating_beyond_an_hour_per_step_on_the_engine_is_refused_by_replay(tmp_path, capsys, phase,
                                                                                             why):
    """prefill_isl [1, 2] with ttft [1, 3.5e6] ms passed the reader (each value <= 1 hour) and the simulator
    extrapolated it to 1.4e10 ms per 4096-token pass: a replay of a 584-day makespan written with rc 0; a steeper
    grid end (prefill_isl [1, 1.000001]) was "ValueError: Value out of range" (int64 ns) as a traceback."""
    pytest.importorskip("dynamo.replay")
    f = _steep(tmp_path / "p.npz", phase)
    rc = main(["replay", str(GRPO), "--timing-model", f"profile:{f}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "p.npz" in err and why in err and "extrapolated linearly off its grid" in err, err
    assert "above 3600000 ms (1 hour)" in err and "engine 'engine-0'" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_compare_does_not_evaluate_a_profile_extrapolating_beyond_an_hour_per_step(tmp_path, capsys):
    """A replay result naming such a profile (one an earlier replay wrote, or an edited one): compare's error
    decomposition built int64 ns terms from it ("ValueError: Value out of range: 2358999130815536484385829"); the
    profile check now says why the model is not evaluated and the report is written."""
    import hashlib

    f = _steep(tmp_path / "p.npz", "prefill")
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    res = _result(tmp_path, lambda d: d["timing_model"].update(
        kind="TIMING_MODEL_KIND_PROFILE", calibration="CALIBRATION_STATUS_UNCALIBRATED", profile_path=str(f),
        profile_sha256=sha, prefill_ms=None, decode_ms=None))
    d = json.loads((res / "replay_result.json").read_text())
    d["timing_model"] = {k: v for k, v in d["timing_model"].items() if v is not None}
    (res / "replay_result.json").write_text(json.dumps(d))
    capsys.readouterr()
    rc = main(["compare", str(GRPO), str(res), "--out", str(tmp_path / "c"), "--no-plots"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    report = json.loads((tmp_path / "c" / "validation_report.json").read_text())
    assert "extrapolated linearly off its grid" in report["profile_check"]["unavailable_reason"]


def test_every_bundled_profile_covers_every_bundled_engine():
    """The check refuses no profile this project ships for any engine of a bundled or holdout trace."""
    from unirl_replay.contract.profile_npz import extrapolation_problem
    from unirl_replay.contract.trace_io import open_trace

    engines = [e for m in sorted(REPO.glob("traces/*/manifest.json")) + sorted(REPO.glob("results/*/traces/*/manifest.json"))
               for e in open_trace(m.parent, verify_digests=False).manifest.engines]
    assert engines
    for f in sorted(REPO.glob("profiles/*.npz")):
        tables = read_profile(f)[0]
        assert [w for e in engines if (w := extrapolation_problem(tables, f.name, e))] == [], f


@pytest.mark.parametrize("allow,why", [(["bogus.rule"], "is not a rejection rule"),
                                       (["engine_client.inflight_limit", "engine_client.inflight_limit.as_lanes"],
                                        "are the two bounds")], ids=["unknown", "both-bounds"])
def test_a_grid_traces_allow_unmodelled_no_replay_accepts_is_a_bad_spec(tmp_path, capsys, allow, why):
    """`allow_unmodelled: [bogus.rule]` expanded into jobs whose replays each failed (UnsupportedWorkloadError in
    grid.json, exit 1) where a bad timing model spec is a bad grid spec (exit 2) before anything runs."""
    from unirl_replay.grid.spec import GridSpecError, load_spec

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [{"path": str(GRPO), "allow_unmodelled": allow}],
                                "timing_models": ["fixed:10,1"], "plots": False}))
    with pytest.raises(GridSpecError, match=why) as e:
        load_spec(spec)
    assert e.value.rule == "grid.spec.allow_unmodelled"
    rc = main(["grid", str(spec), "--out", str(tmp_path / "out"), "--backend", "sequential", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "g.json" in err and why in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_grid_traces_allowed_rule_still_expands(tmp_path):
    from unirl_replay.grid.spec import load_spec

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [{"path": str(REPO / "traces" / "agentic-a"),
                                            "allow_unmodelled": ["engine_client.inflight_limit"]}],
                                "timing_models": ["fixed:10,1"]}))
    assert load_spec(spec).traces[0].allow_unmodelled == ("engine_client.inflight_limit",)


def test_the_extents_of_unknown_engine_sizes_are_the_pinned_simulators_defaults():
    from dynamo.mocker.config import normalize_mocker_config

    from unirl_replay.contract import profile_npz

    up = normalize_mocker_config()["engine"]
    assert {k: up[k] for k in profile_npz.UPSTREAM_ENGINE_DEFAULTS} == profile_npz.UPSTREAM_ENGINE_DEFAULTS
    assert up["max_model_len"] is None  # so a context is bounded by the KV cache


def test_a_trace_leaving_engine_sizes_unknown_replays_with_a_slow_hosts_profile(tmp_path, capsys):
    """A valid trace whose manifest leaves max_num_batched_tokens, num_kv_blocks and max_model_len unknown runs
    with upstream's defaults (8192 tokens a pass): a measured profile of a slow host (0.6 ms a prompt token) is
    replayed, not refused for a 2^24-token pass the simulator never runs."""
    trace = tmp_path / "t"
    shutil.copytree(GRPO, trace)
    m = json.loads((trace / "manifest.json").read_text())
    for e in m["engines"]:
        for k in ("max_num_batched_tokens", "num_kv_blocks", "max_model_len"):
            e.pop(k, None)
    (trace / "manifest.json").write_text(json.dumps(m))
    assert main(["validate", str(trace)]) == 0
    prof = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261203-bound-epyc-f25m1-rows-grpo-a.npz"
    rc = main(["replay", str(trace), "--timing-model", f"profile:{prof}", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 0 and (tmp_path / "r" / "replay_result.json").exists(), err


@pytest.mark.parametrize("name", ["outcomes.jsonl.partial", "converted.partial", "workload.binpb", "outcomes.arrow"])
def test_convert_never_writes_a_file_named_as_one_of_the_trace_it_lies_in(tmp_path, capsys, name):
    """`convert TRACE --out TRACE/outcomes.jsonl.partial` wrote the file (rc 0) and every command then refused the
    user's trace as INCOMPLETE (trace.partial_files: "a writer did not finish") until the file was found and removed;
    a second record stream (workload.binpb beside workload.jsonl) was written there as well."""
    trace = tmp_path / "t"
    shutil.copytree(GRPO, trace)
    rc = main(["convert", str(trace), "--out", str(trace / name)])
    err = capsys.readouterr().err
    assert rc == 2 and name in err and "is named as a file of the trace directory" in err, err
    assert sorted(p.name for p in trace.iterdir()) == ["manifest.json", "outcomes.jsonl", "workload.jsonl"]
    assert main(["validate", str(trace)]) == 0


def test_convert_still_writes_beside_a_trace_and_a_partial_name_elsewhere(tmp_path, capsys):
    trace = tmp_path / "t"
    shutil.copytree(GRPO, trace)
    assert main(["convert", str(trace), "--out", str(trace / "converted.jsonl")]) == 0
    assert main(["convert", str(trace), "--out", str(tmp_path / "other" / "x.partial")]) == 0
    assert main(["validate", str(trace)]) == 0


@pytest.mark.parametrize("kind,status", [("TIMING_MODEL_KIND_PROFILE", "CALIBRATION_STATUS_FIXED"),
                                         ("TIMING_MODEL_KIND_POLYNOMIAL", "CALIBRATION_STATUS_UNVALIDATED"),
                                         ("TIMING_MODEL_KIND_FIXED", "CALIBRATION_STATUS_UNCALIBRATED")])
def test_compare_refuses_a_timing_model_status_no_replay_writes_for_its_kind(tmp_path, capsys, kind, status):
    """A hand-edited result whose profile is labelled FIXED printed as 'profile p.npz (FIXED)'."""
    res = tmp_path / "r"
    assert main(["replay", str(GRPO), "--timing-model", "fixed:10,1", "--out", str(res)]) == 0
    d = json.loads((res / "replay_result.json").read_text())
    d["timing_model"].update(kind=kind, calibration=status)
    if kind == "TIMING_MODEL_KIND_PROFILE":
        d["timing_model"]["profile_path"] = "p.npz"
    (res / "replay_result.json").write_text(json.dumps(d))
    capsys.readouterr()
    rc = main(["compare", str(GRPO), str(res), "--out", str(tmp_path / "c"), "--no-plots"])
    err = capsys.readouterr().err
    assert rc != 0 and "a replay labels that kind only" in err and "Traceback" not in err, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("verb", ["recode", "convert"])
def test_an_output_path_running_through_a_file_says_so(tmp_path, capsys, verb):
    """`recode TRACE --out TRACE/manifest.json/x` said only "manifest.json: File exists" (mkdir -p's words)."""
    f = tmp_path / "a-file"
    f.write_text("keep me\n")
    args = {"recode": ["recode", str(GRPO), "--encoding", "binpb", "--out", str(f / "x")],
            "convert": ["convert", str(GRPO), "--out", str(f / "x" / "c.jsonl")]}[verb]
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and str(f) in err and "is a file, not a directory" in err and "Traceback" not in err, err
    assert f.read_text() == "keep me\n"
