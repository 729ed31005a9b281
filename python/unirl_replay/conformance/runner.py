"""Run the conformance corpus against executors for one or more simulator revisions.

Each simulator revision other than the one installed in the running environment is installed
into its own cached virtual environment (``.cache/conformance/<dist>-<version>/``) with uv, so the
main environment never changes. The Python executor runs there with this checkout's sources on
``PYTHONPATH``.

The second line, ``aisimulate==<dev build>``: the executor runs in this environment and replays
through the aisimulate adapter, which runs the build in its own cached environment
(``.cache/simulators/aisimulate-<version>/``, the same mechanism), made here first with progress.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from unirl_replay.conformance.corpus import Case, first_difference, project_answer
from unirl_replay.conformance.protocol import MAX_LINE_CHARS, PROTOCOL_ID, STATUSES
from unirl_replay.contract import json_guard
from unirl_replay.contract.errors import MissingEnvironmentError, TraceFormatError, UnirlReplayError
from unirl_replay.replay.simulators import environments

from unirl_replay.reference.environments import REPO_ROOT  # noqa: E402
# Upstream runtime deps of ai-dynamo's replay path, plus this package's light deps. aisimulate is
# deliberately absent (an unreachable download stub; see pyproject.toml).
REVISION_DEPS = ["pydantic>=2.10,<=2.13.5", "msgspec", "tqdm", "uvloop", "typing-extensions",
                 "protobuf>=7.36.2,<8", "numpy>=2.0", "click>=8.1", "jsonschema>=4.23"]

PASS, FAIL, XFAIL, XPASS, ERROR = "pass", "fail", "xfail", "xpass", "error"


@dataclass
class CellResult:
    """Outcome of one case on one revision; ``detail`` is the one-line diff or error."""

    status: str
    detail: str = ""


@dataclass
class RevisionRun:
    revision: str
    executor: str
    results: dict[str, CellResult] = field(default_factory=dict)


LINES = ("ai-dynamo", "aisimulate")


def parse_revision(spec: str) -> tuple[str, str]:
    """``"ai-dynamo==1.6.1"`` -> ``("ai-dynamo", "1.6.1")``, ``"aisimulate==0.13.0.dev…"`` likewise;
    raises UnirlReplayError otherwise."""
    dist, sep, version = spec.partition("==")
    dist, version = dist.strip(), version.strip()
    if not sep or dist not in LINES or not environments.valid_version(version):  # the version names a cached environment
        raise UnirlReplayError(f"--simulator must look like ai-dynamo==X.Y.Z or aisimulate==VERSION "
                               f"(a dev build, e.g. aisimulate==0.13.0.dev202610270000000085), got {spec!r}")
    return dist, version


def installed_revision() -> str | None:
    """The ai-dynamo revision installed in this environment, as ``ai-dynamo==X``, or None."""
    try:
        return f"ai-dynamo=={metadata.version('ai-dynamo')}"
    except metadata.PackageNotFoundError:
        return None


def revision_python(spec: str, cache_dir: Path, log: Callable[[str], None]) -> str:
    """Python of an environment holding simulator ``spec``; the current one if it already has it.

    Creates ``cache_dir/<dist>-<version>`` on first use (a few minutes: the runtime wheel is ~75 MB)
    with the shared cached-environment mechanism (:mod:`unirl_replay.replay.simulators.environments`).
    Raises MissingEnvironmentError when the install fails (e.g. the revision is not on PyPI).
    """
    if spec == installed_revision():
        return sys.executable
    dist, version = parse_revision(spec)
    pkgs = [f"{dist}=={version}"]
    if dist == "ai-dynamo":
        pkgs.append(f"ai-dynamo-runtime=={version}")
    py = environments.ensure_env(
        cache_dir / f"{dist}-{version}", label=spec, no_deps=pkgs, deps=REVISION_DEPS, log=log,
        hint=f"Check that the revision exists (`pip index versions {dist}`); the corpus can run on "
             "ai-dynamo releases that ship dynamo.replay (1.3.0.post1 and later), see conformance/MATRIX.md")
    return str(py)


def executor_command(python: str) -> tuple[list[str], dict[str, str]]:
    """Command and environment of the Python executor run by ``python`` on this checkout's sources."""
    env = dict(os.environ)
    src = os.pathsep.join([str(REPO_ROOT / "python"), str(REPO_ROOT / "gen" / "python")])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return [python, "-m", "unirl_replay.conformance.executor"], env


def run_executor(cmd: list[str], env: dict[str, str] | None, requests: list[dict[str, Any]],
                 timeout_s: float = 900) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Send all requests to one executor process; return its hello and one answer per request.

    Raises UnirlReplayError when the executor breaks the protocol (no hello, wrong count, bad JSON).
    """
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=timeout_s)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    long = next((i for i, ln in enumerate(lines, 1) if len(ln) > MAX_LINE_CHARS), None)
    if long is not None:
        raise UnirlReplayError(f"executor {cmd[0]} stdout line {long} is longer than {MAX_LINE_CHARS} characters")
    try:
        msgs = [json_guard.loads(ln, file=f"executor {cmd[0]} stdout", line=i)
                for i, ln in enumerate(lines, 1)]
    except TraceFormatError as e:
        raise UnirlReplayError(f"executor {cmd[0]} wrote a bad line: {e}; stderr: {proc.stderr[-400:]}") from None
    bad = next((i for i, m in enumerate(msgs, 1) if not isinstance(m, dict)), None)
    if bad is not None:
        raise UnirlReplayError(f"executor {cmd[0]} stdout line {bad} is not a JSON object; stderr: {proc.stderr[-400:]}")
    if not msgs or msgs[0].get("protocol") != PROTOCOL_ID:
        raise UnirlReplayError(f"executor {' '.join(cmd)} sent no {PROTOCOL_ID} hello "
                               f"(exit {proc.returncode}); stderr: {proc.stderr.strip()[-600:]}")
    hello, answers = msgs[0], msgs[1:]
    if len(answers) != len(requests):
        raise UnirlReplayError(f"executor answered {len(answers)} of {len(requests)} requests "
                               f"(exit {proc.returncode}); stderr: {proc.stderr.strip()[-600:]}")
    return hello, answers


def build_requests(cases: list[Case]) -> list[dict[str, Any]]:
    """One request per (case, op), in corpus order."""
    reqs = []
    for c in cases:
        for op in c.ops:
            r = {"id": f"{c.name}:{op}", "op": op, "trace_dir": str(c.trace_dir.resolve()), "format": c.fmt}
            if c.allow_unmodelled:
                r["allow_unmodelled"] = list(c.allow_unmodelled)
            if op == "replay":
                r["timing_model"] = c.timing_model
            reqs.append(r)
    return reqs


def answer_problem(op: str, ans: dict[str, Any]) -> str | None:
    """Why one executor answer is not of the protocol's shapes (``protocol`` module docstring), or None: an "ok"
    convert without ``converted``, an "ok" replay whose ``replay_result`` is no object or whose requests are no
    objects, a rejection whose ``error`` is no object (a foreign executor's such answer was a KeyError / TypeError
    traceback in the runner)."""
    status = ans.get("status")
    if status not in STATUSES:
        return f"status {json.dumps(status)[:40]} is none of {', '.join(STATUSES)}"
    if status == "rejected" and not isinstance(ans.get("error"), dict):
        return "a rejection's error is no object {type, rule}"
    if status != "ok":
        return None
    if op == "convert":
        return None if "converted" in ans else "an ok convert answer without converted"
    result = ans.get("replay_result")
    if not isinstance(result, dict):
        return "an ok replay answer's replay_result is no object (a ReplayResult in the JSON profile)"
    reqs = result.get("requests", [])
    if not isinstance(reqs, list) or not all(isinstance(r, dict) for r in reqs):
        return "replay_result.requests is no list of objects"
    return None


def judge(cases: list[Case], answers: list[dict[str, Any]], xfails: set[str]) -> dict[str, CellResult]:
    """Compare answers with the expectations; a listed expected failure that passes is XPASS (a failure)."""
    by_id = {a.get("id"): a for a in answers}
    out: dict[str, CellResult] = {}
    for c in cases:
        diff, broken = None, False
        for op in c.ops:
            ans = by_id.get(f"{c.name}:{op}")
            if ans is None:
                diff = f"{op}: no answer"
                break
            why = answer_problem(op, ans)
            if why:  # the executor's, not the simulator's: an ERROR whatever the expected-failure list says
                diff, broken = f"{op}: the executor's answer breaks {PROTOCOL_ID}: {why}", True
                break
            if ans.get("status") == "error":
                diff = f"{op}: executor error: {str(ans.get('message'))[:160]}"
                break
            expected = c.expected(op)
            if ans.get("status") == "rejected" and not (isinstance(expected, dict) and
                                                        expected.get("status") == "rejected"):
                err = ans.get("error") if isinstance(ans.get("error"), dict) else {}
                diff = (f"{op}: rejected ({err.get('type')}, rule {err.get('rule')}) where the case expects a result: "
                        f"{str(err.get('message'))[:200]}")  # was the first row the rejection lacks ("e0: missing")
                break
            d = first_difference(expected, project_answer(c, op, ans))
            if d:
                diff = f"{op}: {d}"
                break
        if broken:
            out[c.name] = CellResult(ERROR, diff)
        elif c.name in xfails:
            out[c.name] = CellResult(XFAIL, diff) if diff else CellResult(
                XPASS, "listed as expected failure but passes: remove it from the list")
        else:
            out[c.name] = CellResult(FAIL, diff) if diff else CellResult(PASS)
    return out


def load_xfails(root: Path, revision: str) -> set[str]:
    """Case names listed in ``root/expected_failures/<dist>-<version>.txt`` (``#`` comments allowed)."""
    dist, version = parse_revision(revision)
    path = root / "expected_failures" / f"{dist}-{version}.txt"
    if not path.exists():
        return set()
    try:  # a byte of another encoding was a UnicodeDecodeError traceback, after every case had run
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}): the list is one "
                               "case name a line", file=str(path), rule="conformance.expected_failures") from None
    names = set()
    for line in text.splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.add(name)
    return names


def run_revision(root: Path, cases: list[Case], revision: str, cache_dir: Path,
                 log: Callable[[str], None], executor: list[str] | None = None) -> RevisionRun:
    """Run every case on one simulator revision (or with a foreign ``executor`` command)."""
    if executor is None and parse_revision(revision)[0] == "aisimulate":
        from unirl_replay.conformance.executor import SIMULATOR_ENV
        from unirl_replay.replay.simulators.aisimulate import ensure_aisimulate_env

        try:
            ensure_aisimulate_env(parse_revision(revision)[1], log=log)  # made here, with progress, not in the executor
        except MissingEnvironmentError as e:
            run = RevisionRun(revision, "unirl-replay-python")
            for c in cases:
                run.results[c.name] = CellResult(ERROR, str(e).splitlines()[0][:200])
            return run
        cmd, env = executor_command(sys.executable)
        env[SIMULATOR_ENV] = revision
    elif executor is None:
        cmd, env = executor_command(revision_python(revision, cache_dir, log))
    else:
        cmd, env = executor, None
    run = RevisionRun(revision, " ".join(cmd))
    try:
        hello, answers = run_executor(cmd, env, build_requests(cases))
    except UnirlReplayError as e:
        for c in cases:
            run.results[c.name] = CellResult(ERROR, str(e).splitlines()[0][:200])
        return run
    run.executor = hello.get("executor", run.executor)
    run.results = judge(cases, answers, load_xfails(root, revision))
    return run


def matrix_json(cases: list[Case], runs: list[RevisionRun]) -> dict[str, Any]:
    """The matrix as a JSON-ready dict: ``{"revisions": [...], "cases": [{name, rule, results}]}``."""
    return {
        "revisions": [{"revision": r.revision, "executor": r.executor} for r in runs],
        "cases": [{"name": c.name, "rule": c.rule,
                   "results": {r.revision: {"status": r.results[c.name].status, "detail": r.results[c.name].detail}
                               for r in runs}} for c in cases],
    }


def matrix_markdown(cases: list[Case], runs: list[RevisionRun], details: bool = True) -> str:
    """The matrix as a markdown table (case x revision), failures with their one-line diff below."""
    head = "| case | rule | " + " | ".join(r.revision for r in runs) + " |"
    sep = "|---|---|" + "---|" * len(runs)
    rows = [f"| {c.name} | {c.rule} | " + " | ".join(r.results[c.name].status for r in runs) + " |" for c in cases]
    notes = []
    if details:
        for r in runs:
            for c in cases:
                cell = r.results[c.name]
                if cell.status in (FAIL, XPASS, ERROR):
                    notes.append(f"- {r.revision} / {c.name}: {cell.status.upper()}: {cell.detail}")
    totals = []
    for r in runs:
        counts: dict[str, int] = {}
        for cell in r.results.values():
            counts[cell.status] = counts.get(cell.status, 0) + 1
        totals.append(f"{r.revision}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join([head, sep, *rows, "", *totals, *([""] + notes if notes else [])])


def ok(runs: list[RevisionRun]) -> bool:
    """True when no case failed, errored, or passed while listed as an expected failure."""
    return all(cell.status in (PASS, XFAIL) for r in runs for cell in r.results.values())
