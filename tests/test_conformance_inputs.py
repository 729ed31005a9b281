"""`unirl-replay conformance` with odd arguments: each is a clear error before any case runs (exit 2), never a
silent run of nothing, a traceback, or a user's file replaced by the matrix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from unirl_replay.cli.main import main

CORPUS = Path(__file__).resolve().parents[1] / "conformance"
REV = ["--simulator", "ai-dynamo==1.6.1"]  # named: nothing is looked up or installed before the checks


def _run(capsys, *args) -> tuple[int, str]:
    rc = main(["conformance", *REV, *map(str, args)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def test_a_case_the_corpus_lacks(capsys):
    rc, err = _run(capsys, "--case", "nope")
    assert rc == 2 and "no case named ['nope']" in err and "running" not in err


def test_a_corpus_without_cases(tmp_path, capsys):
    rc, err = _run(capsys, "--corpus", tmp_path)
    assert rc == 2 and "no cases/ folder" in err
    (tmp_path / "cases").mkdir()
    rc, err = _run(capsys, "--corpus", tmp_path)
    assert rc == 2 and "conformance.empty" in err


@pytest.mark.parametrize("text,why", [
    ("[1]", "must be a JSON object"),
    ('{"rule": "r", "ops": 5}', "wrong type"),
    ('{"rule": "r", "ops": [], "rule": "s"}', "json.duplicate_key"),
    ("{not json", "json.parse"),
])
def test_a_case_json_that_is_not_a_case(tmp_path, capsys, text, why):
    (tmp_path / "cases" / "x").mkdir(parents=True)
    (tmp_path / "cases" / "x" / "case.json").write_text(text)
    rc, err = _run(capsys, "--corpus", tmp_path)
    assert rc == 2 and "case.json" in err and why in err, err


@pytest.mark.parametrize("cmd,why", [("echo 'x", "No closing quotation"), ("  ", "an empty command")])
def test_an_executor_that_is_no_command_line(capsys, cmd, why):
    case = sorted(p.name for p in (CORPUS / "cases").iterdir())[0]
    rc, err = _run(capsys, "--executor", cmd, "--case", case)
    assert rc == 2 and why in err and "running" not in err


def test_out_never_replaces_a_users_file_and_replaces_an_earlier_matrix(tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    case = sorted(p.name for p in (CORPUS / "cases").iterdir())[0]
    mine = tmp_path / "m.json"
    mine.write_text("a user's file\n")
    rc, err = _run(capsys, "--case", case, "--out", mine)
    assert rc == 2 and "never replaced" in err and "running" not in err
    assert mine.read_text() == "a user's file\n"
    earlier = tmp_path / "matrix.json"
    shutil.copy(CORPUS / "matrix.json", earlier)
    rc, err = _run(capsys, "--case", case, "--out", earlier)
    assert rc == 0, err
    doc = json.loads(earlier.read_text())
    assert [c["name"] for c in doc["cases"]] == [case] and doc["revisions"][0]["revision"] == "ai-dynamo==1.6.1"
