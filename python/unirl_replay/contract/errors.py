"""Typed errors shared by every module. Each names the file, line or record and the rule broken."""

from __future__ import annotations


class UnirlReplayError(Exception):
    """Base class: every error this package raises on purpose."""


def _utf8(text: str) -> str:
    """``text`` as valid UTF-8 text: a lone UTF-16 surrogate (a JSON escape such as ``\\ud800`` in a value the
    parser quotes back in its message) written as its escape. The message goes into a ``Violation`` (a protobuf
    string field, which refuses it with a UnicodeEncodeError) and to the terminal."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    except AttributeError:  # not a str (a caller's Path): as it was
        return text


class TraceFormatError(UnirlReplayError):
    """A trace file or record breaks the contract.

    Attributes:
        file: file name (or path) concerned.
        line: 1-based line (JSONL) or frame (binpb) number; 0 when not about one record.
        record_id: id of the record concerned, when it has one.
        rule: rule id, e.g. ``"json.parse"`` or ``"dependency.cycle"``.
    """

    def __init__(self, message: str, *, file: str = "", line: int = 0, record_id: str = "", rule: str = ""):
        message, file, record_id = _utf8(message), _utf8(file), _utf8(record_id)
        self.file, self.line, self.record_id, self.rule = file, line, record_id, rule
        where = file + (f":{line}" if line else "")
        parts = [p for p in (where, f"record {record_id!r}" if record_id else "", f"[{rule}]" if rule else "") if p]
        super().__init__(f"{' '.join(parts)}: {message}" if parts else message)


class IncompleteTraceError(TraceFormatError):
    """The trace was never finalized, was truncated, or its digests do not match the manifest."""


class SchemaVersionError(TraceFormatError):
    """The trace was written for another contract version than ``unirl_replay.v1``."""


class TraceRejectedError(TraceFormatError):
    """The gate (:func:`unirl_replay.contract.gate.gate`) refused a trace: it breaks a rule ``validate``
    checks. The message lists the violations exactly as ``unirl-replay validate`` prints them.

    Attributes:
        stage: the command that was refused (``"replay"``, ``"convert"``, ``"compare"``, ...).
        violations: the error-level ``Violation`` messages (warnings never refuse a trace).
        first_rule: rule id of the first error (``rule`` is ``"<stage>.validate"``).
    """

    def __init__(self, message: str, *, file: str, stage: str, violations: list, first_rule: str):
        self.stage, self.violations, self.first_rule = stage, list(violations), first_rule
        super().__init__(message, file=file, rule=f"{stage}.validate")


class IncompleteTraceRejectedError(TraceRejectedError, IncompleteTraceError):
    """The gate refused an incomplete trace (never finalized, truncated, digest mismatch)."""


class OutputExistsError(UnirlReplayError, FileExistsError):
    """An output path holds something the tool did not write; it is never replaced or deleted."""


class TraceWriterBusyError(UnirlReplayError, FileExistsError):
    """A TraceWriter was pointed at a directory that holds a trace, or that another writer is writing."""


class UnsupportedWorkloadError(UnirlReplayError):
    """The workload uses semantics the simulator cannot express; raised before calling upstream.

    Attributes:
        rule: id of the unsupported case, e.g. ``"slot_pool.cross_engine"``.
        record_ids: the records concerned.
    """

    def __init__(self, rule: str, reason: str, record_ids: list[str] | tuple[str, ...] = ()):
        self.rule, self.reason, self.record_ids = rule, reason, tuple(record_ids)
        ids = ", ".join(self.record_ids[:5]) + (" ..." if len(self.record_ids) > 5 else "")
        super().__init__(f"unsupported [{rule}]: {reason}" + (f" (records: {ids})" if ids else ""))


class MissingEnvironmentError(UnirlReplayError):
    """An optional environment or package is not installed; the message says what to run."""
