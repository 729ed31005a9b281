"""Every rule of the validate registry has a minimal violating example (contract/validate/examples.py,
rendered into docs/validation-rules.md), and each example really breaks its rule: its base
traces are valid, and each materialized example makes `validate` report the rule it names, with
the registry's severity."""

from __future__ import annotations

import os

import pytest

from unirl_replay.contract.validate import RULE_SEVERITY, RULES, check_trace
from unirl_replay.contract.validate.examples import BASES, EXAMPLES, Example, materialize
from unirl_replay.v1.report_pb2 import TraceCheck


def test_every_rule_has_an_example():
    assert set(RULES) - set(EXAMPLES) == set()
    assert set(EXAMPLES) - set(RULES) == set()


@pytest.mark.parametrize("base", list(BASES))
@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
def test_bases_are_valid(tmp_path, base, encoding):
    res = check_trace(materialize(Example(base, (), encoding=encoding), tmp_path / "t"), strict=True)
    assert res.status == TraceCheck.STATUS_VALID and not res.violations, \
        [f"{v.file}:{v.line} {v.rule}: {v.message}" for v in res.violations]


@pytest.mark.parametrize("rule", list(EXAMPLES))
def test_example_breaks_its_rule(tmp_path, rule):
    if rule == "artifact.unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file of any mode; test_validate.py::test_non_regular_symlinked_and_unreadable_"
                    "artifacts covers the rule with a refused open")
    res = check_trace(materialize(EXAMPLES[rule], tmp_path / "t"))
    got = [v for v in res.violations if v.rule == rule]
    assert got, f"{rule} not reported; got {[(v.rule, v.message) for v in res.violations]}"
    assert got[0].severity == RULE_SEVERITY[rule]
    if RULE_SEVERITY[rule] == 1:
        assert res.status != TraceCheck.STATUS_VALID


def test_rules_doc_is_fresh():
    from pathlib import Path

    from unirl_replay.contract.validate import docs
    path = Path(__file__).resolve().parents[1] / "docs" / "validation-rules.md"
    assert path.read_text() == docs.render(), "run `make gen` and commit docs/validation-rules.md"
    for rule in RULES:
        assert f"| `{rule}` |" in path.read_text()
