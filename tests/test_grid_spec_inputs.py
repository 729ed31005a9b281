"""Grid specs a careless user writes: each is a bad spec (exit 2, GridSpecError naming the file and the rule)
before any job runs, never a traceback, a silently dropped key, or job output outside --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unirl_replay.cli.main import main
from unirl_replay.grid.spec import GridSpecError, expand, load_spec

REPO = Path(__file__).resolve().parents[1]
GRPO = REPO / "traces" / "grpo-a"


def _yaml(tmp_path, body: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(f"traces:\n  - path: {GRPO}\n" + body)
    return p


@pytest.mark.parametrize("body,rule,why", [
    ("timing_models: [bogus]\n", "timing_model", "unknown timing model 'bogus'"),
    ('timing_models: ["fixed:nan,1"]\n', "timing_model", "finite and > 0"),
    ("timing_models: [profile:/nonexistent.npz]\n", "timing_model", "does not exist"),
    ('timing_models: [polynomial]\nlayout: "{trace}/../../../{timing_model}"\n', "layout", "inside --out"),
    ('timing_models: [polynomial]\nlayout: "/{trace}/{timing_model}"\n', "layout", "inside --out"),
    ('timing_models: [polynomial]\nlayout: "{trace}//{timing_model}"\n', "layout", "inside --out"),
    ('timing_models: [{name: "../x", spec: polynomial}]\n', "layout", "inside --out"),
    ('timing_models: [polynomial]\nlayout: "{trace}/{timing_model}/{foo}"\n', "layout", "KeyError 'foo'"),
    ('timing_models: [polynomial]\nlayout: "{trace}/{timing_model}/{"\n', "layout", "ValueError"),
    # s6-f: a NUL in a name or the layout was a ValueError traceback (embedded null byte) from mkdir
    ('timing_models: [{name: "a\\0b", spec: polynomial}]\n', "layout", "control character"),
    ('timing_models: [{name: "a\\x1bb", spec: polynomial}]\n', "layout", "control character"),
    ('timing_models: [polynomial]\nlayout: "{trace}/{timing_model}\\0"\n', "layout", "control character"),
    ('timing_models: ["profile:/tmp/p\\0.npz"]\n', "path", "control character"),
    ("timing_models: [polynomial]\ntraces: []\n", "parse", "found the key 'traces' twice"),
    ("timing_models: [polynomial]\nout: 5\n", "type", "out must be a directory path"),
])
def test_bad_yaml_specs(tmp_path, capsys, body, rule, why):
    spec = _yaml(tmp_path, body)
    with pytest.raises(GridSpecError) as e:
        expand(load_spec(spec))
    assert e.value.rule == f"grid.spec.{rule}" and why in str(e.value), str(e.value)
    out = tmp_path / "out"
    assert main(["grid", str(spec), "--out", str(out), "--backend", "sequential", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "spec.yaml" in err and why in err
    assert not out.exists()


def test_a_trace_path_with_a_nul_is_a_bad_spec(tmp_path, capsys):
    """s6-f: was a ValueError traceback (embedded null byte) from Path.resolve()."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"traces": [{"path": f"{GRPO}\0x"}], "timing_models": ["polynomial"]}))
    assert main(["grid", str(spec), "--out", str(tmp_path / "out"), "--backend", "sequential", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[grid.spec.path]" in err and "control character" in err, err


def test_a_json_spec_with_a_key_twice_is_refused(tmp_path):
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"traces": [{"path": str(GRPO)}], "timing_models": ["polynomial"]})[:-1] + ', "traces": []}')
    with pytest.raises(GridSpecError, match="appears twice") as e:
        load_spec(p)
    assert e.value.rule == "grid.spec.parse"


def test_good_specs_still_expand(tmp_path):
    spec = _yaml(tmp_path, 'timing_models: [polynomial, "fixed:10,1"]\nlayout: "{trace}/{timing_model}"\n')
    assert [j.job_id for j in expand(load_spec(spec))] == ["grpo-a/polynomial", "grpo-a/fixed-10-1"]
