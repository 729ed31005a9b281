"""Our breaking check (unirl_replay.contract.breaking) against the committed v1 baseline.

Each case edits a copy of proto/ the way a careless change would, builds it with the real buf, and
runs the check as scripts/check_gen.sh does. `buf breaking` (WIRE_JSON) lets the first two through
(asserted here too, so the test shows why our check exists); ours fails on every one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "compat" / "unirl_replay_v1.binpb"
BUF = str(Path(sys.executable).parent / "buf")

CASES = {
    # (file, old text, new text, rule expected, whether WIRE_JSON also catches it)
    "uint32 -> int32": ("workload.proto", "  uint32 input_tokens = 11;", "  int32 input_tokens = 11;",
                        "field.type: unirl_replay.v1.Request.input_tokens (field 11): uint32 -> int32 (signedness", False),
    "dropped optional": ("workload.proto", "  optional int64 external_delay_ns = 4;", "  int64 external_delay_ns = 4;",
                         "field.presence: unirl_replay.v1.Dependency.external_delay_ns (field 4): lost presence", False),
    "int64 -> uint64": ("outcomes.proto", "  optional int64 completion_ns = 6;", "  optional uint64 completion_ns = 6;",
                        "field.type: unirl_replay.v1.RequestOutcome.completion_ns (field 6): int64 -> uint64", None),
    "renamed field": ("manifest.proto", "  string workload_name = 13;", "  string workload_family = 13;",
                      "field.name: unirl_replay.v1.TraceManifest.workload_name (field 13): renamed", True),
}


def _build(tmp: Path, edit: tuple[str, str, str] | None) -> Path:
    work = tmp / "work"
    shutil.copytree(ROOT / "proto", work / "proto")
    shutil.copy(ROOT / "buf.yaml", work / "buf.yaml")
    if edit:
        name, old, new = edit
        p = work / "proto" / "unirl_replay" / "v1" / name
        text = p.read_text()
        assert text.count(old) == 1, f"{old!r} not in {name}: update the test case"
        p.write_text(text.replace(old, new))
    subprocess.run([BUF, "build", "-o", str(tmp / "current.binpb")], cwd=work, check=True, capture_output=True)
    return work


def _check(tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "unirl_replay.contract.breaking", "--against", str(BASELINE),
                           str(tmp / "current.binpb")], capture_output=True, text=True)


def test_current_proto_is_compatible(tmp_path):
    _build(tmp_path, None)
    r = _check(tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_deliberate_breaking_change_fails(tmp_path, case):
    name, old, new, expected, wire_json_catches = CASES[case]
    work = _build(tmp_path, (name, old, new))
    r = _check(tmp_path)
    assert r.returncode == 1
    assert expected in r.stderr, r.stderr
    if wire_json_catches is not None:
        buf = subprocess.run([BUF, "breaking", "--against", str(BASELINE)], cwd=work, capture_output=True, text=True)
        assert (buf.returncode != 0) == wire_json_catches, buf.stdout + buf.stderr
