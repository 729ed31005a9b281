"""The errors a new user meets first: each says what is wrong, where, and what to do next."""

from __future__ import annotations

import json

import pytest
from tracebuild import agentic_trace, grpo_trace

from unirl_replay.cli.main import main


def test_validate_on_a_missing_directory_says_it_does_not_exist(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_validate_result_line_goes_to_stdout(tmp_path, capsys):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    assert main(["validate", str(d)]) == 0
    assert ": valid (" in capsys.readouterr().out


def test_truncated_artifact_says_what_to_do(tmp_path, capsys):
    d = grpo_trace(prompts=2, samples=2).write(tmp_path / "t")
    wl = d / "workload.jsonl"
    wl.write_bytes(wl.read_bytes()[:-40])
    assert main(["validate", str(d)]) == 3
    out = capsys.readouterr().out
    assert "artifact.size" in out and "re-capture" in out


def test_compare_with_a_directory_without_replay_result(tmp_path, capsys):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(d), str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "holds no replay_result.json" in err and "replay --out" in err


def test_profile_that_is_not_an_npz(tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    bogus = tmp_path / "p.npz"
    bogus.write_text("not numpy")
    assert main(["replay", str(d), "--timing-model", f"profile:{bogus}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not a dynamo_profile NPZ" in err and "allow_pickle" not in err


def test_convert_offers_the_same_explicit_opt_in_as_replay(tmp_path, capsys):
    a = agentic_trace(trajectories=2, turns=2)
    client = next(r.engine_client for r in a.workload if r.WhichOneof("record") == "engine_client")
    client.inflight_request_limit = 1
    d = a.write(tmp_path / "a")
    assert main(["convert", str(d), "--out", str(tmp_path / "in.jsonl")]) == 2
    assert "--allow-unmodelled engine_client.inflight_limit" in capsys.readouterr().err
    assert main(["convert", str(d), "--out", str(tmp_path / "in.jsonl"),
                 "--allow-unmodelled", "engine_client.inflight_limit"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "in.jsonl").read_text().splitlines()]
    assert rows[0]["schema"] == "dynamo.agentic_mooncake" and len(rows) == 1 + 4


def test_conformance_rejects_a_malformed_revision_before_running(capsys):
    assert main(["conformance", "--simulator", "ai-dynamo"]) == 2
    err = capsys.readouterr().err
    assert "ai-dynamo==X.Y.Z" in err and "running" not in err


def test_convert_an_engine_the_trace_lacks(tmp_path, capsys):
    """--engine naming no engine of the trace was a KeyError traceback."""
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    for name in ("nope", ""):
        assert main(["convert", str(d), "--out", str(tmp_path / "in.jsonl"), "--engine", name]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"--engine {name!r}" in err and "'e0'" in err
    assert not (tmp_path / "in.jsonl").exists()


EMPTY_OUT = [  # every option naming something a command writes; the rest of each command line is valid
    ["calibrate", "--level-to-probe", "{trace}", "--base", "{profile}", "--out"],
    ["recode", "{trace}", "--encoding", "binpb", "--out"],
    ["replay", "{trace}", "--timing-model", "fixed:10,1", "--out"],
    ["compare", "{trace}", "{trace}", "--out"],
    ["convert", "{trace}", "--format", "mooncake", "--out"],
    ["grid", "{trace}/manifest.json", "--out"],
    ["demo", "--out"],
    ["capture", "finalize", "{trace}", "--out"],
    ["conformance", "--out"],
]


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("argv", EMPTY_OUT, ids=lambda a: a[0] if a[0] != "capture" else "capture-finalize")
def test_an_empty_out_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch, capsys, argv, value):
    """s6-f: `--out ''` (an unset shell variable) was the current directory: `calibrate --level-to-probe` died with
    a traceback (ValueError: PosixPath('.') has an empty name), replay and compare wrote into the working
    directory, recode said " exists"."""
    from pathlib import Path

    trace = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    profile = Path(__file__).resolve().parents[1] / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    args = [a.format(trace=trace, profile=profile) for a in argv] + [value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "'--out'" in err and "is empty" in err, err
    assert not list(cwd.iterdir())


@pytest.mark.parametrize("where", ["trace", "out"])
def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path, capsys, where):
    """s10-attack: a trace directory (or --out) whose name holds bytes that are no UTF-8 (Python holds them as lone
    surrogates) was a UnicodeEncodeError traceback from validate (TraceCheck.trace_dir), replay and convert, the
    latter two after creating their --out."""
    import os

    good = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    odd = tmp_path / os.fsdecode(b"g\xffa")
    if where == "trace":
        good.rename(odd)
        trace, out = odd, tmp_path / "o"
    else:
        trace, out = good, odd
    for argv in (["validate", str(trace)],
                 ["convert", str(trace), "--out", str(out / "c.jsonl")],
                 ["replay", str(trace), "--timing-model", "polynomial", "--out", str(out)]):
        if where == "out" and argv[0] == "validate":
            continue
        before = sorted(p.name for p in tmp_path.iterdir())
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is not UTF-8" in err and "Traceback" not in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before, argv


def test_convert_of_several_engines_checks_every_target_first_and_overwrites_no_users_sidecar(tmp_path, capsys):
    """s10-attack: with a user's file at the second engine's target, convert wrote the first engine's file and
    sidecar, then refused (a failed command leaving output); a user's file at a sidecar's name (its converted
    file absent) was replaced by the sidecar."""
    from pathlib import Path

    trace = str(Path(__file__).resolve().parents[1] / "traces" / "agentic-ray-a")
    allow = ["--allow-unmodelled", "engine_client.inflight_limit"]
    out = tmp_path / "o"
    out.mkdir()
    for users in ("x.vllm_vm_18591.jsonl", "x.vllm_vm_18522.jsonl.unirl-replay.json"):
        (out / users).write_text("mine\n")
        assert main(["convert", trace, "--out", str(out / "x.jsonl"), *allow]) == 2
        assert "never replaced" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [users]
        assert (out / users).read_text() == "mine\n"
        (out / users).unlink()
    assert main(["convert", trace, "--out", str(out / "x.jsonl"), *allow]) == 0
    assert main(["convert", trace, "--out", str(out / "x.jsonl"), *allow]) == 0  # its own output is replaced
    assert len(list(out.iterdir())) == 4
