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
        _check_case(spec, d / "case.json")
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


CASE_KEYS = ("rule", "format", "timing_model", "ops", "pin_request_fields", "expected_source", "allow_unmodelled",
             "expect_rejection", "trace")
FORMATS = ("agentic_mooncake", "mooncake")


def _check_case(spec: dict[str, Any], file: Path) -> None:
    """Every case.json key is one the runner reads, of its type: a trace of 5 was a TypeError traceback, ``"ops": []``
    a case that checked nothing and passed, ``"pin_request_fields": "request_id"`` pinned its characters, an unknown
    format or a timing model of 5 an executor KeyError / AttributeError reported as the simulator's failure, a
    misspelt key (``pin_request_field``) silently the default."""

    def bad(msg: str) -> TraceFormatError:
        return TraceFormatError(msg, file=str(file), rule="conformance.case")

    def strings(key: str, allowed=None, empty_ok: bool = True) -> None:
        v = spec.get(key)
        if v is None:
            return
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v) or (not v and not empty_ok):
            raise bad(f"a key of the wrong type: {key} must be a {'' if empty_ok else 'non-empty '}list of names, got {json.dumps(v)[:80]}")
        if len(set(v)) != len(v):
            raise bad(f"{key} names one entry twice: {v}")
        unknown = [x for x in v if allowed is not None and x not in allowed]
        if unknown:
            raise bad(f"{key}: unknown {unknown}; one of {list(allowed)}")

    unknown = sorted(set(spec) - set(CASE_KEYS))
    if unknown:
        raise bad(f"unknown keys {unknown}; a case has {list(CASE_KEYS)}")
    for key in ("rule", "ops"):
        if key not in spec:
            raise bad(f"missing key {key!r}")
    rule = spec["rule"]
    if not isinstance(rule, str) or not rule.strip() or any(ord(ch) < 32 for ch in rule):
        raise bad(f"rule must be one line of text (the matrix's rule column), got {json.dumps(rule)[:80]}")
    for key in ("timing_model", "trace"):
        if key in spec and not (isinstance(spec[key], str) and spec[key]):
            raise bad(f"{key} must be a non-empty string, got {json.dumps(spec[key])[:80]}")
    if spec.get("format", FORMATS[0]) not in FORMATS:
        raise bad(f"unknown format {json.dumps(spec['format'])[:80]}; one of {list(FORMATS)}")
    strings("ops", ("convert", "replay"), empty_ok=False)
    from unirl_replay.v1 import replay_pb2

    strings("pin_request_fields", [f.name for f in replay_pb2.PredictedRequest.DESCRIPTOR.fields], empty_ok=False)
    strings("allow_unmodelled")
    rej = spec.get("expect_rejection")
    if rej is not None and not (isinstance(rej, dict) and set(rej) == {"type", "rule"}
                                and all(isinstance(v, str) and v for v in rej.values())):
        raise bad(f"expect_rejection must be {{\"type\": ERROR_CLASS, \"rule\": RULE}}, got {json.dumps(rej)[:80]}")
    src = spec.get("expected_source")
    if src is not None and not (isinstance(src, dict) and all(isinstance(v, str) for v in src.values())):
        raise bad(f"expected_source must map an op to where its expectation came from, got {json.dumps(src)[:80]}")


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
