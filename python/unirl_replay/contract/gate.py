"""The one gate every trace-consuming command passes a trace through, before anything else.

``gate(trace_dir, stage)`` runs the rules of ``unirl-replay validate`` that the stage relies on
and returns the opened :class:`~unirl_replay.contract.trace_io.Trace`, or raises ONE typed error
(:class:`~unirl_replay.contract.errors.TraceRejectedError`; for an incomplete trace its subclass
``IncompleteTraceRejectedError``) whose message lists the violations exactly as ``validate``
prints them. Only warning-level rules pass. So nothing reaches upstream (or a comparison) that
``validate`` rejects.

Stages and the rules they rely on:

=============== ==================================================================================
``convert``     container, manifest, workload (every rule but the outcome group): the outcomes
``replay``      file is not read, and may be absent (a predictor never needs it)
``conformance``
``calibrate``
``compare``     everything ``validate`` checks, outcomes included
``demo``
=============== ==================================================================================

The fast pass (:mod:`unirl_replay.contract.validate.fast`): for the stages that do not read the
outcomes, the workload is first read once as columns (binpb, arrow) and checked over them; only
when that pass proves the rules silent is the trace passed without the row rules, otherwise (or
for a JSONL trace, or with the fast pass off: ``FAST = False`` or ``UNIRL_REPLAY_GATE_FAST=0``)
``check_trace`` runs exactly as before, so a refusal is always the row rules' own message.
:func:`gate_read` also returns those columns, so ``convert`` reads the workload once.

The predictor stage (``replay``) cannot import this module (it reaches the outcomes reader through
``validate``); its callers -- the CLI verbs, the demo, the conformance executor -- gate first.
"""

from __future__ import annotations

import os

from unirl_replay.contract.gc_pause import paused_gc
from unirl_replay.contract.errors import IncompleteTraceRejectedError, TraceRejectedError
from unirl_replay.contract.trace_io import Trace, open_trace, verify_artifact
from unirl_replay.contract.validate import WARNING, check_trace, format_violation
from unirl_replay.contract.workload_columns import WorkloadColumns
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD
from unirl_replay.v1.report_pb2 import TraceCheck

#: stage -> whether it relies on the outcome rules (and so reads the outcomes artifact)
STAGES: dict[str, bool] = {"convert": False, "replay": False, "conformance": False, "calibrate": False,
                           "compare": True, "demo": True}
#: violations listed in a refusal's message (the rest are counted; ``validate`` lists them all)
MAX_LISTED = 20

#: the fast pass on (tests turn it off to compare; ``UNIRL_REPLAY_GATE_FAST=0`` does too)
FAST = True

__all__ = ["STAGES", "MAX_LISTED", "FAST", "gate", "gate_read", "refusal"]


def refusal(trace_dir: str | os.PathLike, stage: str, res: TraceCheck) -> TraceRejectedError | None:
    """The error refusing ``res`` at ``stage``, or None when the trace passes (warnings only)."""
    if res.status == TraceCheck.STATUS_VALID:
        return None
    errors = [v for v in res.violations if v.severity != WARNING]
    status = TraceCheck.Status.Name(res.status).removeprefix("STATUS_").lower()
    lines = [format_violation(v) for v in errors[:MAX_LISTED]]
    more = len(errors) - len(lines)
    msg = (f"the trace is {status} ({len(errors)} error{'' if len(errors) == 1 else 's'}); refused before {stage}. `unirl-replay validate` reports:\n  "
           + "\n  ".join(lines) + (f"\n  ... and {more} more (run `unirl-replay validate {trace_dir}`)" if more else ""))
    cls = IncompleteTraceRejectedError if res.status == TraceCheck.STATUS_INCOMPLETE else TraceRejectedError
    return cls(msg, file=str(trace_dir), stage=stage, violations=errors,
               first_rule=errors[0].rule if errors else "trace.format")


def gate(trace_dir: str | os.PathLike, stage: str) -> Trace:
    """Check ``trace_dir`` with the rules ``stage`` relies on; return it opened, or refuse it.

    Raises:
        TraceRejectedError: an error-level violation (the message lists them as ``validate`` does).
        IncompleteTraceRejectedError: the trace is incomplete.
        ValueError: unknown stage (a programming error).
    """
    return gate_read(trace_dir, stage)[0]


def gate_read(trace_dir: str | os.PathLike, stage: str) -> tuple[Trace, WorkloadColumns | None]:
    """:func:`gate`, and the workload the fast pass read as columns (``read_columns(trace,
    facts=True)``) when it passed the trace, else None: what ``convert`` reads next, read once."""
    if stage not in STAGES:
        raise ValueError(f"unknown gate stage {stage!r}; one of {sorted(STAGES)}")
    if not STAGES[stage] and FAST and os.environ.get("UNIRL_REPLAY_GATE_FAST", "1") != "0":
        clean, cols = _fast(trace_dir)
        if clean:
            return open_trace(trace_dir, verify_digests=False), cols
        cols = None  # not sure: the row rules read the trace again (the columns are not kept meanwhile)
    res = check_trace(trace_dir, outcomes=STAGES[stage])
    err = refusal(trace_dir, stage, res)
    if err is not None:
        raise err
    return open_trace(trace_dir, verify_digests=False), None  # verified by check_trace a moment ago


@paused_gc()  # the columns are 100k+ tuples: the collector would rescan them all, for nothing
def _fast(trace_dir) -> tuple[bool, WorkloadColumns | None]:
    """(CLEAN, the columns read) of the fast pass; (False, ...) whenever it is not sure."""
    from unirl_replay.contract.validate.fast import workload_clean
    from unirl_replay.contract.workload_columns import read_columns

    try:  # as check_trace opens it, the digest verified only for an encoding the pass reads
        trace = open_trace(trace_dir, warn=False, inspect=True, verify_digests=False)
        if trace.compat.newer or trace.encoding not in ("binpb", "arrow"):
            return False, None
        verify_artifact(trace.dir, trace.artifact(ARTIFACT_KIND_WORKLOAD))
        cols = read_columns(trace, facts=True)
    except Exception:  # noqa: BLE001 - a typed error, an unreadable file, a hostile file's surprise: check_trace words it
        return False, None
    try:
        clean = workload_clean(trace, cols)
    except Exception:  # noqa: BLE001 - not sure: the row rules decide (and word any problem)
        clean = False
    if cols is not None:
        cols.facts = None  # the converter does not read them
    return clean, cols
