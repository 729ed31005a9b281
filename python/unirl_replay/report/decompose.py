"""Additive decomposition of a prediction error (pure: messages in, messages out).

For one rollout batch (``batch_readiness``) or one trajectory (``trajectory_e2e``), the error
``predicted - measured`` is split into terms that sum EXACTLY to it (integer ns). It is a chain of
quantities from the measured value to the predicted one, each term one step of the chain:

1. ``client_path``: minus the measured time in the record's window during which the engine ran
   none of the record's steps while one of its requests was between the client's submit and vLLM's
   ``queued_ns`` (UniRL's client lock, the driver -> runtime pipe, tokenisation), plus, for a batch,
   the time from its last completion to its ready time (``generate`` / ``collect`` returning). The
   simulator has no client stage: a request arrives at the engine at its submit.
2. ``first_pass``: model minus real over the record's passes after an idle engine (a call's first
   prefill, holding only the requests already delivered; first-call stalls land here).
3. ``prefill_level``: model minus real over its later prefill passes (batched, often mixed with
   decodes: the model charges P + D).
4. ``decode_level``: model minus real over its decode-only steps.
   (2-4 evaluate the replay's timing model on the REAL step schedule: :mod:`.profile_check`.)
5. ``simulator_scheduling``: the rest, predicted minus the measured value with the client path
   removed and every real step replaced by the model's cost of that step: how the simulator's own
   schedule (pass composition, order, waits) differs from the real one under the same model.

The real time of an interval whose steps are of several phases is split over them in proportion
to the model's cost of each (said in the notes, with how many such intervals there were).
A record on several engines (a GRPO batch scattered over data-parallel engines) is decomposed
along the engine whose measured last completion sets its readiness (said in its notes). A record
is not decomposed (``unavailable_reason``) when its engine's steps could not be rebuilt (or not in
the span holding one of its requests), the model could not be evaluated, a step it ran also holds
another record's sequences, a pass start was not measured, or it is a FIRST_N_GROUPS batch ready
before all its requests completed (its later groups' steps run past the readiness).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from unirl_replay.report.keys import L_BATCH, L_TRAJ, Pairs
from unirl_replay.report.matching import WorkloadIndex, measured_request_boundaries
from unirl_replay.report.steps import PH_DECODE, PH_FIRST, PH_PREFILL, Placement, Rebuild
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb

TERMS = ("client_path", "first_pass", "prefill_level", "decode_level", "simulator_scheduling")
WHAT = {
    "client_path": ("submit -> vLLM queued while none of its steps ran (UniRL client lock, pipe, tokenisation), and "
                    "last token -> call returned: not modelled"),
    "first_pass": "model - real over passes after an idle engine (first-call stalls, partial first passes)",
    "prefill_level": "model - real over later prefill passes (the model's prefill level on the real schedule)",
    "decode_level": "model - real over decode-only steps (the model's decode level on the real schedule)",
    "simulator_scheduling": "simulated schedule vs the model on the real schedule (pass composition, order, waits)",
}
_CLASS = {PH_FIRST: "first_pass", PH_PREFILL: "prefill_level", PH_DECODE: "decode_level"}


def _union(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _measure(spans: Sequence[tuple[int, int]]) -> int:
    return sum(b - a for a, b in _union(spans))


def _intersect(xs: Sequence[tuple[int, int]], ys: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for a, b in _union(xs):
        for c, d in _union(ys):
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                out.append((lo, hi))
    return out


def _subtract(window: tuple[int, int], busy: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out, cur = [], window[0]
    for a, b in _union(busy):
        if a > cur:
            out.append((cur, min(a, window[1])))
        cur = max(cur, b)
    if cur < window[1]:
        out.append((cur, window[1]))
    return [(a, b) for a, b in out if b > a]


def _decompose(level: int, metric: str, rid: str, measured: int, predicted: int, es: vpb.EngineSteps | None,
               segments: set[int], seg_owner_ok: str, window: tuple[int, int], client_spans: list[tuple[int, int]],
               tail: tuple[int, int] | None) -> vpb.ErrorDecomposition:
    d = vpb.ErrorDecomposition(level=level, metric=metric, record_id=rid, measured_ns=measured,
                               predicted_ns=predicted, total_ns=predicted - measured)
    if es is None or es.unavailable_reason:
        d.unavailable_reason = "engine steps not rebuilt" + (f": {es.unavailable_reason}" if es is not None else "")
        return d
    if seg_owner_ok:
        d.unavailable_reason = seg_owner_ok
        return d
    steps = {(s.segment, s.index): s for s in es.steps if s.segment in segments}
    if any(not s.HasField("model_ms") for s in steps.values()):
        d.unavailable_reason = "the timing model was not evaluated on the real steps (see profile_check)"
        return d
    ivs = [iv for iv in es.intervals if iv.segment in segments]
    starts = {iv.segment for iv in ivs if iv.first_step == 0}
    if starts != segments:
        d.unavailable_reason = "a pass after idle has no measured start (vLLM scheduled_ns missing)"
        return d
    busy = []
    for k in segments:
        mine = [iv for iv in ivs if iv.segment == k]
        busy.append((min(iv.start_ns for iv in mine), max(iv.end_ns for iv in mine)))
    if any(a < window[0] or b > window[1] for a, b in busy):
        d.unavailable_reason = "its engine steps run outside its measured window (clock or boundary mismatch)"
        return d
    idle = _subtract(window, busy)
    client = _measure(_intersect(idle, client_spans + ([tail] if tail else [])))
    real = dict.fromkeys(_CLASS.values(), 0)
    model_ms = dict.fromkeys(_CLASS.values(), 0.0)
    mixed = 0
    for iv in ivs:
        ivsteps = [steps[(iv.segment, i)] for i in range(iv.first_step, iv.last_step + 1)]
        by = {}
        for s in ivsteps:
            by[_CLASS[s.phase]] = by.get(_CLASS[s.phase], 0.0) + s.model_ms
            model_ms[_CLASS[s.phase]] += s.model_ms
        real_ns = iv.end_ns - iv.start_ns
        if len(by) == 1:
            real[next(iter(by))] += real_ns
            continue
        mixed += 1
        tot, left = sum(by.values()), real_ns
        names = sorted(by)
        for name in names[:-1]:
            share = round(real_ns * by[name] / tot) if tot > 0 else 0
            real[name] += share
            left -= share
        real[names[-1]] += left
    deltas = {"client_path": -client}
    for name in ("first_pass", "prefill_level", "decode_level"):
        deltas[name] = round(model_ms[name] * 1e6) - real[name]
    deltas["simulator_scheduling"] = d.total_ns - sum(deltas.values())
    for name in TERMS:
        d.terms.append(vpb.DecompositionTerm(name=name, delta_ns=deltas[name], what=WHAT[name],
                                             pct_of_measured=100.0 * deltas[name] / measured if measured else 0.0))
    assert sum(t.delta_ns for t in d.terms) == d.total_ns
    if mixed:
        d.notes.append(f"{mixed} measured intervals spanned steps of several phases: their real time was split in "
                       "proportion to the model's cost of each phase")
    waits = _measure(idle) - client
    if waits:
        d.notes.append(f"{waits / 1e6:.1f} ms of the measured window the engine ran none of its steps for another "
                       "reason (tool waits, arrivals, other records' steps): in both sides, any difference is in "
                       "simulator_scheduling")
    return d


def _after_readiness(idx: WorkloadIndex, bid: str, rids: Sequence[str], bounds: Mapping[str, dict],
                     ready: int) -> str:
    """Why a batch ready before its own requests finished is not decomposed, or "".

    A FIRST_N_GROUPS batch (``collect(n)`` of more groups) is ready when its first n groups are: the
    requests of its later groups still run after the readiness. Its steps then run past its measured
    window, which is no clock or boundary mismatch: which of those steps count toward the readiness is
    not defined, so the terms are not computed (said as such)."""
    b = idx.batches.get(bid)
    if b is None or b.readiness_rule != wpb.BATCH_READINESS_RULE_FIRST_N_GROUPS:
        return ""
    late = [r for r in rids if bounds[r]["completion"] > ready]
    if not late:
        return ""
    return (f"a FIRST_N_GROUPS batch ({b.required_groups} of {len(b.group_ids)} groups) ready before all its "
            f"requests completed ({len(late)} completed after its readiness, e.g. {late[0]!r}): the steps of its "
            "later groups run past the readiness and which of them count toward it is not defined")


def _seg_requests(placement: Mapping[str, list[Placement]]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for rid, pls in placement.items():
        for p in pls:
            out.setdefault(p.segment, set()).add(rid)
    return out


def decompose(idx: WorkloadIndex, outcomes: Sequence[opb.OutcomeRecord], rebuild: Rebuild,
              pairs: Mapping[tuple[int, str], Pairs]) -> list[vpb.ErrorDecomposition]:
    """Decompose every matched ``batch_readiness`` and ``trajectory_e2e`` pair (workload order)."""
    req_out = {o.request.request_id: o.request for o in outcomes if o.WhichOneof("record") == "request"}
    bounds = {r: measured_request_boundaries(q, req_out[r]) for r, q in idx.requests.items() if r in req_out}
    steps_of = {es.engine_id: es for es in rebuild.engines}
    out = []
    for level, metric, members in ((L_BATCH, "batch_readiness", idx.requests_of_batch),
                                   (L_TRAJ, "trajectory_e2e", idx.requests_of_trajectory)):
        p = pairs.get((level, metric))
        if p is None:
            continue
        for rid, m, pr in zip(p.ids, p.measured_ns.tolist(), p.predicted_ns.tolist()):
            all_rids = members.get(rid, [])
            b_all = [bounds.get(r, {}) for r in all_rids]
            if any("submit" not in x or "queued" not in x or "completion" not in x for x in b_all):
                out.append(_decompose(level, metric, rid, m, pr, steps_of.get(idx.requests[all_rids[0]].engine_id),
                                      set(), "a request lacks a measured submit, queued or completion", (0, 0), [], None))
                continue
            engines = sorted({idx.requests[r].engine_id for r in all_rids})
            # a record on several engines (a GRPO batch scattered over data-parallel engines) is ready when
            # its last engine is done: its error is decomposed along that engine, the one whose measured last
            # completion sets the readiness; the other engines' requests only set the window's start
            eng = max(all_rids, key=lambda r: bounds[r]["completion"])
            eng = idx.requests[eng].engine_id
            rids = [r for r in all_rids if idx.requests[r].engine_id == eng]
            es = steps_of.get(eng)
            pl = rebuild.placement.get(eng, {})
            segs = {x.segment for r in rids for x in pl.get(r, [])}
            owners = _seg_requests(pl)
            mine = set(rids)
            shared = sorted({o for k in segs for o in owners.get(k, set()) - mine})
            unplaced = [r for r in rids if pl and r not in pl]
            why = (f"its engine steps also hold other requests' sequences (e.g. {shared[0]!r}): the steps are shared, "
                   "the terms would not be its own") if shared else ""
            if unplaced and not why:
                why = (f"request {unplaced[0]!r} lies in a span of {eng} whose steps were not rebuilt (ambiguous "
                       "step numbering): the terms would leave its steps out")
            if not why and level == L_BATCH:
                why = _after_readiness(idx, rid, all_rids, bounds, min(x["submit"] for x in b_all) + m)
            b = [bounds[r] for r in rids]
            if why:
                out.append(_decompose(level, metric, rid, m, pr, es, segs, why, (0, 0), [], None))
                continue
            origin = min(x["submit"] for x in b_all)
            end = origin + m
            client = [(x["submit"], x["queued"]) for x in b]
            last = max(x["completion"] for x in b)
            tail = (last, end) if level == L_BATCH and end > last else None
            d = _decompose(level, metric, rid, m, pr, es, segs, "", (origin, end), client, tail)
            if len(engines) > 1:
                d.notes.append(f"spans engines {', '.join(engines)}: decomposed along {eng}, whose measured last "
                               "completion sets the readiness (the others' requests only set the window's start; if "
                               "the simulator finished another engine last, that difference is in "
                               "simulator_scheduling)")
            out.append(d)
    return out
