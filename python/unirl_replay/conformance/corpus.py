"""Loading the conformance corpus (``conformance/cases/<name>/``) and diffing results against it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import TraceFormatError

# Keys of a ReplayResult (JSON profile) that a conformance case pins. Simulator identity, wall
# time and notes vary between revisions by design and are not part of the expectation.
DEFAULT_PINNED = ("request_id", "engine_id", "arrival_ns", "first_token_ns", "completion_ns")
REPLAY_KEYS = ("granularity", "cache_state", "requests", "trajectories", "groups", "rollout_batches", "makespan_ns")


@dataclass(frozen=True)
class Case:
    """One corpus case.

    Attributes:
        name: directory name, also the case id.
        dir: the case directory.
        rule: the rule the case covers (one line).
        fmt: upstream trace format to convert to.
        timing_model: timing model spec for the replay op (``fixed:P,D``).
        ops: operations checked: ``convert`` and/or ``replay``.
        expect_rejection: ``{"type", "rule"}`` when the adapter must reject the trace.
        pin_request_fields: PredictedRequest fields the replay expectation pins (the rest, e.g.
            ``scheduled_ns``, is not part of the case).
        trace_path: the trace directory (``trace/`` in the case, or elsewhere via ``"trace"``).
        allow_unmodelled: rules the case lets the adapter drop and label (``"allow_unmodelled"``).
    """

    name: str
    dir: Path
    rule: str
    fmt: str
    timing_model: str
    ops: tuple[str, ...]
    expect_rejection: dict[str, str] | None
    pin_request_fields: tuple[str, ...] = DEFAULT_PINNED
    trace_path: str = "trace"
    allow_unmodelled: tuple[str, ...] = ()

    @property
    def trace_dir(self) -> Path:
        return (self.dir / self.trace_path).resolve()

    def expected(self, op: str) -> Any:
        """The expected answer of ``op``, read from ``expected/``; raises TraceFormatError if absent."""
        if self.expect_rejection is not None:
            return {"status": "rejected", "error": self.expect_rejection}
        path = self.dir / "expected" / ("converted.json" if op == "convert" else "replay_result.json")
        if not path.is_file():
            raise TraceFormatError(f"expected file missing for op {op!r}", file=str(path), rule="conformance.expected_missing")
        from unirl_replay.contract import json_guard

        # the contract's JSON guard, as for case.json: a broken file was a JSONDecodeError / UnicodeDecodeError
        # traceback, and a NaN in it was compared as if the case expected one
        return json_guard.loads(path.read_bytes(), file=str(path))


def load_corpus(root: Path, only: list[str] | None = None) -> list[Case]:
    """All cases under ``root/cases`` (sorted by name), or just those named in ``only``.

    Raises:
        TraceFormatError: no ``cases/`` folder, a name in ``only`` that is no case, a ``case.json`` that
            is not a JSON object, is missing a key or names an unknown op.
    """
    from unirl_replay.contract import json_guard

    if not (root / "cases").is_dir():
        raise TraceFormatError("no cases/ folder: not a conformance corpus", file=str(root), rule="conformance.corpus")
    cases = []
    names = sorted(d.name for d in (root / "cases").iterdir() if (d / "case.json").is_file())
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise TraceFormatError(f"no case named {unknown} in the corpus (cases: {', '.join(names[:8])}"
                               + (" ..." if len(names) > 8 else "") + ")", file=str(root / "cases"),
                               rule="conformance.case_unknown")
    for d in sorted((root / "cases").iterdir()):
        if not (d / "case.json").is_file() or (only and d.name not in only):
            continue
        spec = json_guard.loads((d / "case.json").read_bytes(), file=str(d / "case.json"))
        if not isinstance(spec, dict):
            raise TraceFormatError("case.json must be a JSON object", file=str(d / "case.json"),
                                   rule="conformance.case")
        try:
            ops = tuple(spec["ops"])
            case = Case(d.name, d, spec["rule"], spec.get("format", "agentic_mooncake"),
                        spec.get("timing_model", "fixed:10,1"), ops, spec.get("expect_rejection"),
                        tuple(spec.get("pin_request_fields", DEFAULT_PINNED)), spec.get("trace", "trace"),
                        tuple(spec.get("allow_unmodelled", ())))
        except KeyError as e:
            raise TraceFormatError(f"missing key {e}", file=str(d / "case.json"), rule="conformance.case") from None
        except TypeError as e:  # e.g. "ops": 5
            raise TraceFormatError(f"a key of the wrong type: {e}", file=str(d / "case.json"),
                                   rule="conformance.case") from None
        bad = [op for op in ops if op not in ("convert", "replay")]
        if bad:
            raise TraceFormatError(f"unknown ops {bad}", file=str(d / "case.json"), rule="conformance.case")
        cases.append(case)
    return cases


def project_answer(case: Case, op: str, answer: dict[str, Any]) -> Any:
    """The part of an executor answer a case pins: converted rows, the pinned replay keys (and
    the pinned fields of each request row), or the rejection."""
    if answer.get("status") == "rejected":
        err = answer.get("error", {})
        return {"status": "rejected", "error": {"type": err.get("type"), "rule": err.get("rule")}}
    if answer.get("status") != "ok":
        return {"status": answer.get("status"), "message": answer.get("message")}
    if op == "convert":
        return answer["converted"]
    result = answer["replay_result"]
    out = {k: result[k] for k in REPLAY_KEYS if k in result}
    if "requests" in out:
        out["requests"] = [{k: r[k] for k in case.pin_request_fields if k in r} for r in out["requests"]]
    return out


def first_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    """A one-line description of the first difference between two JSON values, or None if equal.

    Example: ``requests[2].completion_ns: expected "40000000", got "41000000"``.
    """
    if type(expected) is not type(actual) and not (isinstance(expected, (int, float)) and isinstance(actual, (int, float))):
        return f"{path or '<root>'}: expected {json.dumps(expected)[:80]}, got {json.dumps(actual)[:80]}"
    if isinstance(expected, dict):
        for k in sorted(set(expected) | set(actual)):
            sub = f"{path}.{k}" if path else k
            if k not in actual:
                return f"{sub}: missing (expected {json.dumps(expected[k])[:80]})"
            if k not in expected:
                return f"{sub}: unexpected (got {json.dumps(actual[k])[:80]})"
            d = first_difference(expected[k], actual[k], sub)
            if d:
                return d
        return None
    if isinstance(expected, list):
        for i, (e, a) in enumerate(zip(expected, actual)):
            d = first_difference(e, a, f"{path}[{i}]")
            if d:
                return d
        if len(expected) != len(actual):
            return f"{path or '<root>'}: expected {len(expected)} items, got {len(actual)}"
        return None
    if expected != actual:
        return f"{path or '<root>'}: expected {json.dumps(expected)}, got {json.dumps(actual)}"
    return None
