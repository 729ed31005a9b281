"""What a newcomer trying the tool from its README met (session 18): each test failed before its fix."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_missing_replay_extra_says_how_to_install_it(monkeypatch):
    """A wheel install without the `replay` extra was told `pip install 'unirl-replay[replay]'` (the package is not
    on PyPI: the README says so) "with uv's override of its aisimulate stub: see the README", which said nothing of
    it; `pip install "<wheel>[replay]"` fails building that stub. The message now gives the uv command and the
    README has it."""
    from unirl_replay.contract.errors import MissingEnvironmentError
    from unirl_replay.replay.simulators import dynamo

    real = importlib.metadata.version

    def version(name):
        if name == "ai-dynamo":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(MissingEnvironmentError) as e:
        dynamo.simulator_versions()
    msg = str(e.value)
    assert "pip install 'unirl-replay[replay]'" not in msg
    assert "--overrides" in msg and "aisimulate; sys_platform == 'never'" in msg and "make env" in msg

    monkeypatch.setitem(sys.modules, "dynamo.replay", None)  # import fails as without the extra
    with pytest.raises(MissingEnvironmentError) as e:
        dynamo._import_replay()
    assert "--overrides" in str(e.value)

    readme = _readme()
    assert "--overrides" in readme and "aisimulate; sys_platform == 'never'" in readme
    assert re.search(r'uv pip install [^\n]*--overrides [^\n]*whl\[replay\]', readme)


def _replay_grpo(tmp_path) -> Path:
    from unirl_replay.cli.main import main

    out = tmp_path / "replay"
    assert main(["replay", str(REPO / "traces" / "grpo-a"), "--timing-model", "fixed:10,1", "--out", str(out)]) == 0
    return out


def test_compare_of_a_file_that_is_no_replay_result_says_what_to_pass(tmp_path, capsys):
    """`compare TRACE FILE` with FILE convert's upstream input or a compare report said only `grpo.jsonl
    [json.parse]: not valid JSON: Extra data` or protobuf's list of ReplayResult fields in lowerCamelCase."""
    from unirl_replay.cli.main import main

    trace = str(REPO / "traces" / "grpo-a")
    conv = tmp_path / "grpo.jsonl"
    assert main(["convert", trace, "--format", "mooncake", "--out", str(conv)]) == 0
    capsys.readouterr()
    assert main(["compare", trace, str(conv), "--out", str(tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert "[json.parse]" in err and "not a replay result" in err and "`unirl-replay convert` wrote" in err
    assert "unirl-replay replay" in err and not (tmp_path / "r1").exists()

    replay = _replay_grpo(tmp_path)
    assert main(["compare", trace, str(replay), "--out", str(tmp_path / "r2"), "--no-plots"]) == 0
    capsys.readouterr()
    report = tmp_path / "r2" / "validation_report.json"
    assert main(["compare", trace, str(report), "--out", str(tmp_path / "r3")]) == 2
    err = capsys.readouterr().err
    assert "[json.profile]" in err and "not a replay result" in err and "replay_result.json" in err
    assert "Available Fields" not in err  # protobuf's camelCase list of every field is no help here
    # a --bound alike
    assert main(["compare", trace, str(replay), "--bound", str(report), "--out", str(tmp_path / "r4")]) == 2
    err = capsys.readouterr().err
    assert "--bound" in err and "not a replay result" in err


def test_level_to_probe_of_a_base_from_other_hardware_warns(tmp_path, capsys):
    """`calibrate --level-to-probe` of a base profile swept on another CPU than the probe trace's capture printed
    `(CALIBRATED+PROBE, scalar)` (here prefill x22.6) with no word that every replay of that trace labels it
    UNVALIDATED on this host: the probe levels the speed, not the form measured elsewhere."""
    from unirl_replay.cli.main import main

    trace = REPO / "results" / "holdout-closed-f25m1" / "traces" / "grpo-r1"
    other = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261203-bound-xeon-f6m167-rows-grpo-a.npz"
    same = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261203-bound-epyc-f25m1-rows-grpo-a.npz"
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(other), "--out",
                 str(tmp_path / "other.npz")]) == 0
    cap = capsys.readouterr()
    assert "CALIBRATED+PROBE" in cap.out
    assert "warning:" in cap.err and "other hardware" in cap.err and "UNVALIDATED" in cap.err
    assert "Intel" in cap.err and "AMD EPYC" in cap.err  # both CPUs named
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(same), "--out",
                 str(tmp_path / "same.npz")]) == 0
    assert "warning" not in capsys.readouterr().err


def _help(*args: str) -> str:
    from click.testing import CliRunner

    from unirl_replay.cli.main import cli

    res = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_help_says_what_the_docs_say():
    """`validate --help` said --strict makes only fields from a newer revision errors (docs/validation-rules.md:
    off-profile JSON too, and so the code); `compare --help` left table.txt out of what --out gets."""
    assert "off-profile JSON" in _help("validate")
    assert "table.txt" in _help("compare")
    assert "replay_result.json `replay --out DIR` wrote, or DIR" in _help("compare")  # a directory is fine


def test_readme_rule_count_is_the_registry_s():
    """README's validate row said "about 100 rules" while docs/validation-rules.md (generated) says 107."""
    from unirl_replay.contract.validate.registry import RULES

    m = re.search(r"`validate TRACE_DIR[^|]*\|[^|]*?(\d+) rules", _readme())
    assert m, "README's validate row names its rule count"
    assert int(m.group(1)) == len(RULES)


def test_calibrate_without_the_reference_environment_says_so_first(tmp_path, monkeypatch, capsys):
    """`calibrate --like` on a machine without .venv-ref printed the load average and "warning: the machine is busy;
    the profile records the load next to every measurement" before saying it cannot measure at all."""
    from unirl_replay.cli.main import main

    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "nope" / "python"))
    monkeypatch.setattr("os.getloadavg", lambda: (3.0, 3.0, 3.0))  # a busy machine
    assert main(["calibrate", "--like", str(REPO / "traces" / "grpo-a"), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err
    assert "make reference-env" in err
    assert "load average" not in err and "busy" not in err
    assert not (tmp_path / "p.npz").exists()


def test_demo_outside_a_checkout_says_where_the_traces_are(tmp_path, monkeypatch, capsys):
    """From an installed wheel `demo` said `Error: no trace directories found under <venv>/lib/python3.12/traces`
    (click's exit 1): a path that never exists there, and nothing about the traces being the checkout's."""
    from unirl_replay.cli.main import main
    from unirl_replay.demo import run as demo

    monkeypatch.setattr(demo, "DEFAULT_TRACES_DIR", tmp_path / "lib" / "traces")
    monkeypatch.setattr(demo, "DEFAULT_PROFILES_DIR", tmp_path / "lib" / "profiles")
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "checkout" in err and "--trace DIR" in err
    assert not (tmp_path / "d").exists()


def test_demo_names_the_files_it_writes(tmp_path, capsys):
    """The demo's last line listed REPORT.md, summary.json, validation_report.json, PNG plots and
    timeline.perfetto.json per trace and model, not their replay_result.json and table.txt."""
    from unirl_replay.cli.main import main

    out = tmp_path / "d"
    assert main(["demo", "--trace", str(REPO / "traces" / "grpo-a"), "--no-profile", "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    for name in sorted(p.name for p in (out / "grpo-a" / "default").iterdir()):
        if not name.startswith(".") and not name.endswith(".png"):
            assert name in last, (name, last)


def test_validate_of_a_shard_directory_names_finalize(tmp_path):
    """`validate UNIRL_REPLAY_TRACE_DIR` named `capture finalize`, but `validate .../raw` (the shards themselves)
    only said to pass a trace directory."""
    from unirl_replay.contract.validate import check_trace

    raw = tmp_path / "cap" / "raw"
    raw.mkdir(parents=True)
    (raw / "driver-host-123.jsonl").write_text("{}\n")
    (msg,) = [v.message for v in check_trace(raw).violations]
    assert f"capture finalize {raw} --out TRACE_DIR" in msg
    # a directory of convert's outputs (its marker there) is no shard directory
    from unirl_replay.cli.main import main

    conv = tmp_path / "conv"
    assert main(["convert", str(REPO / "traces" / "grpo-a"), "--format", "mooncake", "--out",
                 str(conv / "grpo.jsonl")]) == 0
    (msg,) = [v.message for v in check_trace(conv).violations]
    assert "capture finalize" not in msg and "not a trace" in msg


def test_finalize_of_a_path_that_does_not_exist_says_so(tmp_path, capsys):
    """`capture finalize /no/such/dir` said it "is not a directory of capture shards"."""
    from unirl_replay.cli.main import main

    assert main(["capture", "finalize", str(tmp_path / "nothere"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "UNIRL_REPLAY_TRACE_DIR/raw" in err
    f = tmp_path / "file.jsonl"
    f.write_text("{}\n")
    assert main(["capture", "finalize", str(f), "--out", str(tmp_path / "t")]) == 2
    assert "is a file" in capsys.readouterr().err  # click refuses a file there


def test_grid_spec_that_is_no_json_is_said_once(tmp_path, capsys):
    """`grid README.md` said `README.md [grid.spec.parse]: not valid JSON: README.md [json.parse]: not valid JSON:
    Expecting value ...`, and not that a spec not named *.yaml / *.yml is read as JSON."""
    from unirl_replay.cli.main import main

    spec = tmp_path / "spec.txt"
    spec.write_text("traces: [a]\n")
    assert main(["grid", str(spec), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.count("not valid JSON") == 1 and "[json.parse]" not in err and "[grid.spec.parse]" in err
    assert "*.yaml" in err


def test_grid_refuses_its_out_before_its_banner(tmp_path, capsys):
    """`grid --out DIR` with DIR holding a user's file printed `unirl-replay grid: 4 jobs from ... -> DIR` and then
    refused DIR (demo refuses before its banner since session 17)."""
    from unirl_replay.cli.main import main

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep\n")
    assert main(["grid", str(REPO / "grids" / "small.yaml"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "jobs from" not in err and "not an earlier grid output" in err
    assert (out / "notes.txt").read_text() == "keep\n"


def test_validate_state_benchmark_names_the_status(tmp_path):
    """README's `benchmarks/validate_state.py TRACE` printed `status 1` for a valid trace (the enum number, which reads
    as validate's exit status 1, invalid)."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "validate_state.py"), str(REPO / "traces" / "grpo-a")],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert "status STATUS_VALID" in out and "status 1" not in out


def test_profile_timing_model_without_a_path_says_so():
    """`--timing-model profile:` (an unset variable after the colon) said "unknown timing model 'profile:'"."""
    from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model

    with pytest.raises(TimingModelError) as e:
        parse_timing_model("profile:")
    assert "unknown" not in str(e.value) and "profile:NPZ" in str(e.value) and "path" in str(e.value)
