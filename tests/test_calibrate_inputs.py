"""`unirl-replay calibrate` with bad input, without engines: a raw file that is not the driver's JSON, a
--raw-out that exists, engine settings in the --like manifest that do not parse, --engine-env given twice,
options that mean nothing in the mode chosen. Each is a clear error (exit 2), never a traceback, and no
file a user had is replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_calibrate import synthetic_raw
from tracebuild import grpo_trace
from unirl_replay.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def _run(capsys, *args) -> tuple[int, str]:
    rc = main(["calibrate", *map(str, args)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


@pytest.mark.parametrize("text,why", [
    ("{not json", "json.parse"),
    ("[1, 2]", "(top level): [1, 2] is not of type 'object'"),
    ("{}", "'prefill' is a required property"),
    ('{"prefill": [{"isl": "a"}], "decode": []}', "prefill.0.isl: 'a' is not of type 'integer'"),
    ('{"prefill": [], "decode": [{"kv": 1, "ctx": [2]}]}', "decode.0.ctx"),
    ('{"prefill": [], "decode": [], "pins": [1]}', "pins: [1] is not of type 'object'"),
    ('{"prefill": [{"isl": 1, "ttft_ms": NaN}], "decode": []}', "json.nan"),
])
def test_from_raw_that_is_not_the_driver_json(tmp_path, capsys, text, why):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = tmp_path / "raw.json"
    raw.write_text(text)
    out = tmp_path / "p.npz"
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--out", out)
    assert rc == 2 and "--from-raw" in err and "raw.json" in err and why in err, err
    assert not out.exists()


def test_from_raw_of_the_driver_still_fits(tmp_path, capsys):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(synthetic_raw()))
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--out", tmp_path / "p.npz", "--workload-name", "cal-x")
    assert rc == 0, err


def test_raw_out_never_replaces_a_file(tmp_path, capsys):
    """--raw-out that exists (or is --out) is refused before anything is measured; it used to be overwritten,
    even by a run whose fit then failed."""
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(synthetic_raw()))
    mine = tmp_path / "notes.txt"
    mine.write_text("a user's notes\n")
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--raw-out", mine, "--out", tmp_path / "p.npz")
    assert rc == 2 and "--raw-out" in err and "exists" in err
    assert mine.read_text() == "a user's notes\n" and not (tmp_path / "p.npz").exists()
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--raw-out", tmp_path / "p.npz", "--out", tmp_path / "p.npz")
    assert rc == 2 and "name of its own" in err and not (tmp_path / "p.npz").exists()
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--raw-out", tmp_path / "new" / "raw2.json",
                   "--out", tmp_path / "p.npz", "--workload-name", "cal-x")
    assert rc == 0, err
    assert json.loads((tmp_path / "new" / "raw2.json").read_text())["prefill"] == synthetic_raw()["prefill"]


@pytest.mark.parametrize("edit,why", [
    (lambda t: t.manifest.engines[0].extra.__setitem__("engine_kwargs.gpu_memory_utilization", "abc"),
     "gpu_memory_utilization 'abc' is not a fraction"),
    (lambda t: t.manifest.engines[0].extra.__setitem__("engine_kwargs.gpu_memory_utilization", "nan"),
     "gpu_memory_utilization 'nan' is not a fraction"),
    (lambda t: t.manifest.labels.__setitem__("knob.model_seed", "x1"), "knob.model_seed 'x1'"),
    (lambda t: t.manifest.labels.__setitem__("knob.model_seed", "-3"), "knob.model_seed '-3'"),
])
def test_like_manifest_settings_that_do_not_parse(tmp_path, capsys, edit, why):
    t = grpo_trace(prompts=1, samples=2)
    edit(t)
    d = t.write(tmp_path / "t")
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(synthetic_raw()))
    rc, err = _run(capsys, "--like", d, "--from-raw", raw, "--out", tmp_path / "p.npz", "--workload-name", "cal-x")
    assert rc == 2 and why in err and "manifest.json" in err, err


def test_engine_env_given_twice_with_two_values(tmp_path, capsys):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    rc, err = _run(capsys, "--like", d, "--engine-env", "OMP_NUM_THREADS=1", "--engine-env", "OMP_NUM_THREADS=2",
                   "--out", tmp_path / "p.npz")
    assert rc == 2 and "OMP_NUM_THREADS given twice ('1' and '2')" in err


@pytest.mark.parametrize("item", ["=x", "A", "é=1", "1A=2", "A B=1"])
def test_engine_env_that_is_not_name_value(tmp_path, capsys, item):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    rc, err = _run(capsys, "--like", d, "--engine-env", item, "--out", tmp_path / "p.npz")
    assert rc == 2 and "expected NAME=VALUE" in err


def test_options_of_the_other_mode_are_refused(tmp_path, capsys):
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    rc, err = _run(capsys, "--level-to-probe", d, "--base", PROFILE, "--like", d, "--engine-env", "A=1",
                   "--out", tmp_path / "p.npz")
    assert rc == 2 and "--like, --engine-env would be ignored" in err
    rc, err = _run(capsys, "--like", d, "--base", PROFILE, "--out", tmp_path / "p.npz")
    assert rc == 2 and "--base is the profile --level-to-probe levels" in err
    assert not (tmp_path / "p.npz").exists()
