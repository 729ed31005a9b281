"""The conformance runner: the corpus passes on the installed simulator, and it cannot be fooled.

Every test here runs the real Python executor (a subprocess speaking the JSON-lines protocol)
over the real upstream Dynamo Replay.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from unirl_replay.conformance import runner
from unirl_replay.conformance.corpus import first_difference, load_corpus

pytest.importorskip("dynamo.replay")

CORPUS = Path(__file__).resolve().parents[1] / "conformance"
REV = runner.installed_revision()


def run(root: Path, names=None, executor=None):
    cases = load_corpus(root, names)
    r = runner.run_revision(root, cases, REV, root / ".cache", lambda m: None, executor)
    return cases, r


@pytest.fixture()
def corpus_copy(tmp_path):
    dst = tmp_path / "conformance"
    shutil.copytree(CORPUS / "cases", dst / "cases")
    (dst / "expected_failures").mkdir()
    return dst


def test_whole_corpus_passes_on_the_pinned_revision():
    cases, r = run(CORPUS)
    assert len(cases) >= 20
    # the pinned revision has no known gaps (no conformance/expected_failures/ai-dynamo-1.6.1.txt):
    # every case passes, simultaneous_arrivals_keep_trace_order included
    bad = {n: (c.status, c.detail) for n, c in r.results.items() if c.status != runner.PASS}
    assert not bad, bad
    assert runner.ok([r])


def test_every_case_dir_is_listed_in_the_index():
    index = (CORPUS / "README.md").read_text()
    for case in load_corpus(CORPUS):
        assert f"| `{case.name}` |" in index, f"{case.name} missing from conformance/README.md"


def _mutate_number(obj, path=()):
    """Return a copy of obj with the first int/float (or numeric string) it finds changed by +1, and its path."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            m = _mutate_number(v, path + (k,))
            if m is not None:
                return {**obj, k: m[0]}, m[1]
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            m = _mutate_number(v, path + (i,))
            if m is not None:
                return obj[:i] + [m[0]] + obj[i + 1:], m[1]
    elif isinstance(obj, bool):
        return None
    elif isinstance(obj, (int, float)) and path and path[-1] != "version":
        return obj + 1, path
    elif isinstance(obj, str) and obj.isdigit() and int(obj) > 0:
        return str(int(obj) + 1), path
    return None


@pytest.mark.parametrize("case,file", [
    ("agentic_chain_waits", "expected/converted.json"),
    ("agentic_chain_waits", "expected/replay_result.json"),
    ("group_completion_vs_batch_readiness", "expected/replay_result.json"),
    ("mooncake_open_loop", "expected/converted.json"),
])
def test_mutating_an_expected_file_fails_with_a_readable_diff(corpus_copy, case, file):
    path = corpus_copy / "cases" / case / file
    data = json.loads(path.read_text())
    if file.endswith("converted.json"):  # skip the header line: mutate a request row
        eng = next(iter(data))
        start = 1 if "schema" in data[eng][0] else 0
        mutated, where = _mutate_number(data[eng][start:])
        data[eng] = data[eng][:start] + mutated
    else:
        data, where = _mutate_number(data)
    path.write_text(json.dumps(data))
    _, r = run(corpus_copy, [case])
    cell = r.results[case]
    assert cell.status == runner.FAIL
    assert "expected" in cell.detail and "got" in cell.detail
    assert str(where[-1]) in cell.detail, (where, cell.detail)


def test_mutating_an_expected_rejection_fails(corpus_copy):
    spec_path = corpus_copy / "cases" / "wait_missing_rejected" / "case.json"
    spec = json.loads(spec_path.read_text())
    spec["expect_rejection"]["rule"] = "dependency.something_else"
    spec_path.write_text(json.dumps(spec))
    _, r = run(corpus_copy, ["wait_missing_rejected"])
    assert r.results["wait_missing_rejected"].status == runner.FAIL
    assert "error.rule: expected \"dependency.something_else\", got \"dependency.delay_not_measured\"" in \
        r.results["wait_missing_rejected"].detail


def test_expected_failure_lists_cannot_go_stale(corpus_copy):
    dist, ver = runner.parse_revision(REV)
    xf = corpus_copy / "expected_failures" / f"{dist}-{ver}.txt"
    # a listed case that passes is an XPASS and fails the run
    xf.write_text("timestamp_units  # pretend it fails here\n")
    _, r = run(corpus_copy, ["timestamp_units", "nested_fork"])
    assert r.results["timestamp_units"].status == runner.XPASS
    assert not runner.ok([r])
    # a listed case that really fails is an XFAIL and the run passes
    exp = corpus_copy / "cases" / "nested_fork" / "expected" / "replay_result.json"
    exp.write_text(exp.read_text().replace('"240000000"', '"240000001"'))
    xf.write_text("nested_fork\n")
    _, r = run(corpus_copy, ["timestamp_units", "nested_fork"])
    assert r.results["nested_fork"].status == runner.XFAIL
    assert runner.ok([r])


def test_a_foreign_executor_speaks_the_protocol(corpus_copy, tmp_path):
    # an "adapter in another language": any program speaking the JSON-lines protocol. This one
    # answers every request with a rejection, so conversion cases fail and rejection cases whose
    # rule differs fail too, each with a diff.
    script = tmp_path / "exec.py"
    script.write_text(
        "import json, sys\n"
        "print(json.dumps({'protocol': 'unirl_replay.conformance.v1', 'executor': 'always-reject'}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    r = json.loads(line)\n"
        "    print(json.dumps({'id': r['id'], 'status': 'rejected', 'error': {'type': 'UnsupportedWorkloadError', 'rule': 'dependency.delay_not_measured'}}), flush=True)\n")
    _, r = run(corpus_copy, ["wait_missing_rejected", "timestamp_units"], executor=[sys.executable, str(script)])
    assert r.executor == "always-reject"
    assert r.results["wait_missing_rejected"].status == runner.PASS
    assert r.results["timestamp_units"].status == runner.FAIL


def test_an_executor_without_hello_is_an_error_not_a_pass(corpus_copy):
    _, r = run(corpus_copy, ["timestamp_units"], executor=[sys.executable, "-c", "print('{}')"])
    assert r.results["timestamp_units"].status == runner.ERROR
    assert "hello" in r.results["timestamp_units"].detail


def test_first_difference_names_the_path():
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "a[1].b: expected 2, got 3"
    assert first_difference([1, 2], [1, 2, 3]) == "<root>: expected 2 items, got 3"
    assert first_difference({"a": 1}, {}) == "a: missing (expected 1)"
    assert first_difference({"a": 1}, {"a": 1}) is None


def test_revision_spec_is_checked():
    with pytest.raises(Exception, match="ai-dynamo==X.Y.Z"):
        runner.parse_revision("ai-dynamo")


def test_a_revision_that_cannot_be_installed_says_what_to_do(tmp_path):
    # a revision that does not exist on PyPI: a clear error, and no half-made environment left behind
    from unirl_replay.contract.errors import MissingEnvironmentError

    with pytest.raises(MissingEnvironmentError, match=r"pip index versions ai-dynamo"):
        runner.revision_python("ai-dynamo==0.0.0.999", tmp_path / "envs", lambda m: None)
    assert not (tmp_path / "envs" / "ai-dynamo-0.0.0.999").exists()
