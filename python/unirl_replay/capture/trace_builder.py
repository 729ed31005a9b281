"""From one engine request record to a ``RequestOutcome``: the timing rules of a capture.

Used by :mod:`finalize` (which merges the shards and joins the records). The generated messages
are the data model; nothing here defines a record class.

Clock (``CLOCK_DOMAIN_CAPTURE_MONOTONIC``): every offset is ``time.monotonic()`` minus the window
start taken in the driver. vLLM's queued / scheduled / first-token / last-token timestamps are
``time.monotonic()`` in the EngineCore process; CLOCK_MONOTONIC is host-wide on Linux, so no
rebasing beyond subtracting the window start is needed. vLLM's ``arrival_time`` is wall clock and
is not used. ``start_unix_ns`` is the driver's wall clock at the window start (humans only).

Timing semantics:

* submit / arrival of a request = the driver's call into ``VLLMRolloutEngine.generate`` (before
  UniRL's client lock, the pipe and the runtime). GRPO: every request of a batch has the call's
  enter time as ``observed_offset_ns`` (open loop: the call submits them all at once).
* agentic turn 0: ``observed_offset_ns`` = that call's enter time. Turn k > 0:
  ``after_dependencies`` on turn k-1 (COMPLETION, SEQUENCE) with ``external_delay_ns`` = this
  call's enter - turn k-1's vLLM ``last_token_ts`` (return path + ``env.step`` + harness work).
  When turn k-1 has no completion time the delay is ``DELAY_ABSENCE_NOT_MEASURED``, never 0.
* completion = vLLM ``last_token_ts`` (max over samples for n > 1); batch ready = the generate /
  collect return in the driver.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import outcomes_pb2 as o

_FINISH = {"stop": c.FINISH_REASON_STOP, "length": c.FINISH_REASON_LENGTH, "abort": c.FINISH_REASON_ABORT}

CLOCK_NOTE = ("all offsets are time.monotonic() (host-wide CLOCK_MONOTONIC) minus the driver's window start; "
              "vLLM queued/scheduled/first_token/last_token are EngineCore time.monotonic() and need no rebase; "
              "vLLM arrival_time (wall clock) is not used")
SUBMIT_NOTE = ("submit/arrival = driver call into VLLMRolloutEngine.generate, before UniRL's client lock, the "
               "pipe and the runtime; submit->queued therefore includes the lock wait and the forward path")
GRPO_CLIENT_NOTE = ("UniRL VLLMRolloutEngine holds one pipe round trip at a time (VLLMRolloutEngine._lock); a GRPO "
                    "round trip carries every prompt of the batch in one llm.generate, so model requests are not "
                    "limited (EngineClient.inflight_request_limit absent) and batches are serial by the barrier")
AGENTIC_CLIENT_NOTE = ("UniRL VLLMRolloutEngine._lock serializes every pipe round trip and each agentic turn is one "
                       "round trip with one vLLM request: at most 1 model request in flight from this client "
                       "(EngineClient.inflight_request_limit=1), while up to trajectory_slots trajectories hold slots")


class _Clock:
    def __init__(self, start_mono: float):
        self.start = start_mono

    def ns(self, t: Optional[float]) -> Optional[int]:
        if t is None or t == 0.0:  # vLLM leaves unset timestamps at 0.0
            return None
        return int(round((t - self.start) * 1e9))


def _finish(r: Optional[str]) -> int:
    if r is None:
        return c.FINISH_REASON_UNSPECIFIED
    return _FINISH.get(r, c.FINISH_REASON_OTHER)


def _request_outcome(rid: str, sample_ids: List[str], submit_ns: int, er: Dict[str, Any], clk: _Clock,
                     notes: Dict[str, int]) -> o.RequestOutcome:
    """RequestOutcome from one engine request record (see module doc for the semantics)."""
    out = o.RequestOutcome(request_id=rid, submit_ns=submit_ns)
    if er.get("num_cached_tokens") is not None:
        out.cached_tokens = int(er["num_cached_tokens"])
    reasons: List[str] = []
    metrics = er.get("metrics")
    per = er.get("per_sample_metrics")
    if metrics is None:
        reasons.append("metrics unavailable: vLLM RequestOutput.metrics is None (disable_log_stats=True?)")
        notes["metrics_unavailable"] += 1
        return _finish_outcome(out, reasons)
    sources: List[Dict[str, Any]]
    if er["n"] > 1:
        if per and all(p is not None for p in per):
            sources = per
            for sid, p in zip(sample_ids, per):
                st = o.SampleTiming(sample_id=sid)
                ft, lt = clk.ns(p.get("first_token_ts")), clk.ns(p.get("last_token_ts"))
                if ft is not None:
                    st.first_token_ns = ft
                if lt is not None:
                    st.completion_ns = lt
                if ft is not None and lt is not None and ft > lt:
                    st.ClearField("first_token_ns")
                out.samples.append(st)
        else:
            # Parent metrics are the last-finished child's (field-pitfalls 8): only its completion is the
            # request's completion; queued / scheduled / first token of the request are unknown.
            sources = []
            reasons.append("per-sample stats missing for n>1; parent metrics belong to the last-finished child")
            lt = clk.ns(metrics.get("last_token_ts"))
            if lt is not None:
                out.completion_ns = lt
            notes["per_sample_missing"] += 1
            return _finish_outcome(out, reasons)
    else:
        sources = [metrics]

    def pick(key: str, agg) -> Optional[int]:
        vals = [clk.ns(s.get(key)) for s in sources]
        vals = [v for v in vals if v is not None]
        return agg(vals) if vals else None

    queued, sched = pick("queued_ts", min), pick("scheduled_ts", min)
    first, last = pick("first_token_ts", min), pick("last_token_ts", max)
    if queued is not None and sched is not None and queued > sched:
        reasons.append("queued_ts after scheduled_ts (vLLM re-sets queued_ts on re-queue; field-pitfalls 7): dropped")
        queued = None
        notes["queued_dropped"] += 1
    for name, val in (("queued_ns", queued), ("scheduled_ns", sched), ("first_token_ns", first),
                      ("completion_ns", last)):
        if val is None:
            reasons.append(f"{name} not reported by vLLM")
        else:
            setattr(out, name, val)
    # Any remaining order violation means the clocks disagree: drop the later field, say so.
    names = ("submit_ns", "queued_ns", "scheduled_ns", "first_token_ns", "completion_ns")
    prev: Optional[Tuple[str, int]] = None
    for n in names:
        if out.HasField(n):
            v = getattr(out, n)
            if prev is not None and v < prev[1]:
                reasons.append(f"{n} before {prev[0]} by {prev[1] - v} ns (clock disagreement): dropped")
                out.ClearField(n)
                notes["order_dropped"] += 1
                continue
            prev = (n, v)
    return _finish_outcome(out, reasons)


def _finish_outcome(out: o.RequestOutcome, reasons: List[str]) -> o.RequestOutcome:
    if reasons:
        out.unavailable_reason = "; ".join(reasons)
    return out
