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

The predictor stage (``replay``) cannot import this module (it reaches the outcomes reader through
``validate``); its callers -- the CLI verbs, the demo, the conformance executor -- gate first.
"""

from __future__ import annotations

import os

from unirl_replay.contract.errors import IncompleteTraceRejectedError, TraceRejectedError
from unirl_replay.contract.trace_io import Trace, open_trace
from unirl_replay.contract.validate import WARNING, check_trace, format_violation
from unirl_replay.v1.report_pb2 import TraceCheck

#: stage -> whether it relies on the outcome rules (and so reads the outcomes artifact)
STAGES: dict[str, bool] = {"convert": False, "replay": False, "conformance": False, "calibrate": False,
                           "compare": True, "demo": True}
#: violations listed in a refusal's message (the rest are counted; ``validate`` lists them all)
MAX_LISTED = 20

__all__ = ["STAGES", "MAX_LISTED", "gate", "refusal"]


def refusal(trace_dir: str | os.PathLike, stage: str, res: TraceCheck) -> TraceRejectedError | None:
    """The error refusing ``res`` at ``stage``, or None when the trace passes (warnings only)."""
    if res.status == TraceCheck.STATUS_VALID:
        return None
    errors = [v for v in res.violations if v.severity != WARNING]
    status = TraceCheck.Status.Name(res.status).removeprefix("STATUS_").lower()
    lines = [format_violation(v) for v in errors[:MAX_LISTED]]
    more = len(errors) - len(lines)
    msg = (f"the trace is {status} ({len(errors)} errors); refused before {stage}. `unirl-replay validate` reports:\n  "
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
    if stage not in STAGES:
        raise ValueError(f"unknown gate stage {stage!r}; one of {sorted(STAGES)}")
    res = check_trace(trace_dir, outcomes=STAGES[stage])
    err = refusal(trace_dir, stage, res)
    if err is not None:
        raise err
    return open_trace(trace_dir, verify_digests=False)  # verified by check_trace a moment ago
