"""A simulator revision is a version, never a path: `replay --simulator aisimulate==0/../../<dir>` made the
cached-environment directory <dir> itself, and the failed install then removed it (rmtree) with everything a
user had in it. The version is checked where a spec is parsed, and the environment maker never clears or
removes a directory that is not an environment."""

from __future__ import annotations

import pytest

from unirl_replay.cli.main import main
from unirl_replay.conformance.runner import parse_revision
from unirl_replay.contract.errors import MissingEnvironmentError, UnirlReplayError
from unirl_replay.replay.simulators import SimulatorSpecError, parse_simulator
from unirl_replay.replay.simulators.environments import ensure_env, valid_version

BAD = ["0/../../../../victim", "../../x", "1.0/..", "/tmp/x", "1.0;rm", "", "1..2"]


@pytest.mark.parametrize("version", BAD)
def test_a_version_that_is_a_path_is_refused_by_both_parsers(version):
    assert not valid_version(version)
    with pytest.raises(SimulatorSpecError):
        parse_simulator(f"aisimulate=={version}")
    with pytest.raises(UnirlReplayError):
        parse_revision(f"aisimulate=={version}")
    with pytest.raises(UnirlReplayError):
        parse_revision(f"ai-dynamo=={version}")


@pytest.mark.parametrize("version", ["1.6.1", "1.3.0.post1", "0.13.0.dev202610270000000085", "1.0.0rc1", "1.0+cpu.1"])
def test_real_versions_still_parse(version):
    assert parse_simulator(f"aisimulate=={version}") == ("aisimulate", version)
    assert parse_revision(f"ai-dynamo=={version}") == ("ai-dynamo", version)


def test_replay_with_a_path_for_a_version_leaves_the_directory_alone(tmp_path, capsys):
    from tracebuild import grpo_trace

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("a user's file\n")
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    rel = "0/" + "../" * 12 + str(victim).lstrip("/")
    assert main(["replay", str(d), "--timing-model", "polynomial", "--simulator", f"aisimulate=={rel}",
                 "--out", str(tmp_path / "o")]) == 2
    assert "is not a version" in capsys.readouterr().err
    assert (victim / "keep.txt").read_text() == "a user's file\n"


def test_the_environment_maker_never_clears_a_directory_that_is_not_an_environment(tmp_path):
    mine = tmp_path / "cache" / "aisimulate-1.0"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("a user's notes\n")
    with pytest.raises(MissingEnvironmentError, match="is not a Python environment"):
        ensure_env(mine, label="aisimulate==1.0", no_deps=["aisimulate==1.0"])
    assert (mine / "notes.txt").read_text() == "a user's notes\n"
    with pytest.raises(MissingEnvironmentError, match="no '..'"):
        ensure_env(tmp_path / "cache" / "aisimulate-0" / ".." / "x", label="x", no_deps=["x"])
    assert not (tmp_path / "cache" / "x").exists() and not (tmp_path / "cache" / "aisimulate-0").exists()
