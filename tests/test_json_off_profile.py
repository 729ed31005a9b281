"""Off-profile JSON: forms the proto3 JSON parser accepts but the profile's writers never write
(camelCase keys, enum numbers, 32-bit integers as strings, 64-bit integers as numbers or in
non-canonical strings such as "007", null; duplicate keys are rejected, not warned). `validate` accepts the trace with one
warning per occurrence naming file, line and field (rule json.<form>); `validate --strict` makes them
errors. The canonical writer's output (the bundled traces, every test trace) has none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracebuild import agentic_trace, grpo_trace
from unirl_replay.contract.json_profile import OFF_PROFILE_FORMS
from unirl_replay.contract.trace_io import sha256_file
from unirl_replay.contract.validate import WARNING, check_trace
from unirl_replay.v1.report_pb2 import TraceCheck

ROOT = Path(__file__).resolve().parents[1]


def _redigest(d: Path) -> None:
    """Make the manifest match edited record files again (as a writer of those bytes would have)."""
    man = json.loads((d / "manifest.json").read_text())
    for a in man["artifacts"]:
        sha, size = sha256_file(d / a["path"])
        a["sha256"], a["size_bytes"] = sha, str(size)
    (d / "manifest.json").write_text(json.dumps(man, indent=2) + "\n")


def _edit_line(d: Path, file: str, line: int, fn) -> None:
    p = d / file
    lines = p.read_text().splitlines(keepends=True)
    lines[line - 1] = fn(lines[line - 1].rstrip("\n")) + "\n"
    p.write_text("".join(lines))
    _redigest(d)


# form -> (a textual edit of the first request line of a GRPO trace, the field path named)
EDITS = {
    "camel_case_key": (lambda s: s.replace('"rollout_batch_id"', '"rolloutBatchId"', 1), "request.rolloutBatchId"),
    "enum_number": (lambda s: s.replace('"FINISH_REASON_STOP"', "1", 1), "request.finish_reasons[0]"),
    "int32_string": (lambda s: re.sub(r'"input_tokens":(\d+)', r'"input_tokens":"\1"', s, count=1),
                     "request.input_tokens"),
    "int64_number": (lambda s: re.sub(r'"policy_version":"(\d+)"', r'"policy_version":\1', s, count=1),
                     "request.policy_version"),
    "int64_form": (lambda s: re.sub(r'"policy_version":"(\d+)"', r'"policy_version":"00\1"', s, count=1),
                   "request.policy_version"),
    "null": (lambda s: s.replace('"worker_id":"w0"', '"worker_id":null', 1), "request.worker_id"),
}


def test_every_form_has_a_case():
    assert set(EDITS) == set(OFF_PROFILE_FORMS)


@pytest.mark.parametrize("form", list(EDITS))
def test_off_profile_form_is_a_warning_and_an_error_under_strict(tmp_path, form):
    t = grpo_trace()
    d = t.write(tmp_path / "t")
    line = t.line_of("request", "req-0")
    edit, path = EDITS[form]
    before = (d / "workload.jsonl").read_text()
    _edit_line(d, "workload.jsonl", line, edit)
    assert (d / "workload.jsonl").read_text() != before, "the edit did not apply"
    res = check_trace(d)
    assert res.status == TraceCheck.STATUS_VALID, [f"{v.rule}: {v.message}" for v in res.violations]
    found = [v for v in res.violations if v.rule == f"json.{form}"]
    assert len(found) == 1 and found[0].severity == WARNING
    assert found[0].file == "workload.jsonl" and found[0].line == line and found[0].message.startswith(path)
    strict = check_trace(d, strict=True)
    assert strict.status == TraceCheck.STATUS_INVALID
    assert [v.rule for v in strict.violations if v.severity != WARNING] == [f"json.{form}"]


@pytest.mark.parametrize("spelling", ['"1"', '" 1"', '"01"'])
def test_enum_number_as_a_numeric_string_is_off_profile(tmp_path, spelling):
    """D7: json_format reads "1" as the enum number 1 (the schema rejects it): json.enum_number, like 1."""
    t = grpo_trace()
    d = t.write(tmp_path / "t")
    line = t.line_of("request", "req-0")
    _edit_line(d, "workload.jsonl", line, lambda s: s.replace('"FINISH_REASON_STOP"', spelling, 1))
    res = check_trace(d)
    assert res.status == TraceCheck.STATUS_VALID
    found = [v for v in res.violations if v.rule == "json.enum_number"]
    assert len(found) == 1 and found[0].severity == WARNING and found[0].line == line
    assert found[0].message.startswith("request.finish_reasons[0]")
    strict = check_trace(d, strict=True)
    assert strict.status == TraceCheck.STATUS_INVALID
    assert [v.rule for v in strict.violations if v.severity != WARNING] == ["json.enum_number"]


def test_manifest_forms_are_reported_too(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    text = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(text.replace('"workload_name"', '"workloadName"', 1))
    res = check_trace(d)
    v = [x for x in res.violations if x.rule == "json.camel_case_key"]
    assert res.status == TraceCheck.STATUS_VALID and len(v) == 1 and v[0].file == "manifest.json" and v[0].line == 0


def test_cli_strict(tmp_path):
    from unirl_replay.cli.validate import command
    t = grpo_trace()
    d = t.write(tmp_path / "t")
    _edit_line(d, "workload.jsonl", t.line_of("request", "req-0"), EDITS["enum_number"][0])
    runner = CliRunner()
    r = runner.invoke(command, [str(d)])
    assert r.exit_code == 0 and "json.enum_number: warning:" in r.output
    r = runner.invoke(command, [str(d), "--strict"])
    assert r.exit_code == 1 and "json.enum_number: request.finish_reasons[0]" in r.output


@pytest.mark.parametrize("trace", ["grpo-a", "agentic-a"])
def test_canonical_output_has_no_off_profile_form(tmp_path, trace):
    res = check_trace(ROOT / "traces" / trace, strict=True)
    assert res.status == TraceCheck.STATUS_VALID and not res.violations
    for t in (grpo_trace(), agentic_trace()):
        d = t.write(tmp_path / f"{trace}-{len(t.workload)}")
        assert not [v for v in check_trace(d, strict=True).violations if v.rule.startswith("json.")]
