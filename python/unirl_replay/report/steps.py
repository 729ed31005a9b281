"""Engine steps rebuilt from the measured outcomes (vLLM V1; pure: messages in, messages out).

vLLM V1 stamps a sample's first token and its completion with the EngineCore step that produced
them, and a step produces one token for every running sequence. So the step *indices* follow from
the timestamps and the output lengths: a sample whose first token is on step ``f`` and that has
``k`` output tokens completes on step ``f + k - 1``. Every distinct first-token or completion
timestamp of an engine is one step; each sample ties its two timestamps ``k - 1`` steps apart.

The rebuild (per engine):

1. tie timestamps with union-find over offsets (``idx(completion) = idx(first) + k - 1``); a
   contradiction (two ties that disagree, or ``k = 1`` with two timestamps) makes the engine
   unavailable;
2. within each tied component, step order must follow time order (strictly);
3. components overlapping in time are joined only when the time order leaves exactly one possible
   relative offset; an overlap that stays ambiguous is never guessed: the span of time it covers
   (every component overlapping it, transitively) is left out, its samples are not placed, and
   the engine's other spans are still rebuilt (a check and a note name what was left out); only
   when nothing is left is the engine unavailable;
4. each resulting *segment* (a run of steps without idle) has, at every step, the sequences that
   prefill on it (first token there), the sequences decoding on it (first token before, completion
   on or after it), their context tokens (prompt + tokens generated so far) and the rollout batches
   they belong to; every step must hold a sequence, no pass may exceed ``max_num_batched_tokens``
   (chunked prefill would split a prompt over unobserved steps) or ``max_num_seqs``;
5. measured **intervals**: from a pass's start (the earliest vLLM ``scheduled_ns`` of the requests
   it prefills, or the previous step's end if later) to the first observed step end, then between
   consecutive observed step ends. A step's own duration is known only when it is a one-step
   interval; an interval's total is always known.

Data that cannot support a rebuild (a fanned-out request without one timing per sample, a sample
with no output token, a missing outcome, an unavailable outcome) makes that engine's
``EngineSteps.unavailable_reason`` say which record and why; nothing is filled in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from unirl_replay.report.matching import WorkloadIndex
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import report_pb2 as vpb

PH_FIRST = vpb.STEP_PHASE_FIRST_PASS
PH_PREFILL = vpb.STEP_PHASE_PREFILL
PH_DECODE = vpb.STEP_PHASE_DECODE


class Placement(NamedTuple):
    """Where one sample ran: segment, first-token step, completion step (inclusive)."""

    segment: int
    first_step: int
    last_step: int


class Rebuild(NamedTuple):
    """The rebuild of every engine: messages (for the report) and where each request's samples ran."""

    engines: list[vpb.EngineSteps]
    # engine id -> request id -> placements of its samples (only for rebuilt engines)
    placement: dict[str, dict[str, list[Placement]]]
    # (engine id, segment, step) -> (prefill new tokens, prefill prefix tokens, decode contexts), per sequence
    contexts: dict[tuple[str, int, int], tuple[list[int], list[int], list[int]]]


class _Sample(NamedTuple):
    request_id: str
    batch_id: str
    first_ns: int
    completion_ns: int
    output_tokens: int
    new_tokens: int
    prefix_tokens: int
    prompt_tokens: int
    scheduled_ns: int | None


class _Unavailable(Exception):
    pass


def _samples(idx: WorkloadIndex, req_out: Mapping[str, opb.RequestOutcome], rids: list[str]) -> tuple[list[_Sample], list[str]]:
    out, notes = [], []
    for rid in rids:
        req = idx.requests[rid]
        o = req_out.get(rid)
        if o is None:
            raise _Unavailable(f"request {rid!r} has no RequestOutcome")
        if o.unavailable_reason:
            raise _Unavailable(f"request {rid!r}: measured outcome unavailable ({o.unavailable_reason})")
        n = max(req.num_samples, 1)
        if len(req.output_tokens) != n:
            raise _Unavailable(f"request {rid!r}: {len(req.output_tokens)} output lengths for {n} samples")
        if n == 1 and not o.samples:
            if not (o.HasField("first_token_ns") and o.HasField("completion_ns")):
                raise _Unavailable(f"request {rid!r}: first_token_ns or completion_ns not reported")
            times = [(o.first_token_ns, o.completion_ns)]
        else:
            if len(o.samples) != n or not all(s.HasField("first_token_ns") and s.HasField("completion_ns")
                                              for s in o.samples):
                raise _Unavailable(f"request {rid!r}: n={n} but not one first-token and completion time per sample "
                                   f"({len(o.samples)} sample timings)")
            times = [(s.first_token_ns, s.completion_ns) for s in o.samples]
        cached = o.cached_tokens if o.HasField("cached_tokens") else 0
        if n > 1 and cached:
            notes.append(f"request {rid!r}: cached_tokens={cached} charged to each of its {n} samples "
                         "(per-sample cache hits are not recorded)")
        for i, (f, c) in enumerate(times):
            k = req.output_tokens[i]
            if k == 0:
                raise _Unavailable(f"request {rid!r} sample {i}: no output token, its prefill step is not observed")
            if c < f:
                raise _Unavailable(f"request {rid!r} sample {i}: completion before first token")
            new = max(req.input_tokens - cached, 0)
            out.append(_Sample(rid, req.rollout_batch_id, f, c, k, new, req.input_tokens - new, req.input_tokens,
                               o.scheduled_ns if o.HasField("scheduled_ns") else None))
    return out, notes


class _Ties:
    """Union-find over timestamps with integer offsets: idx(node) = idx(root) + off(node)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.off: dict[int, int] = {}

    def add(self, t: int) -> None:
        if t not in self.parent:
            self.parent[t] = t
            self.off[t] = 0

    def find(self, t: int) -> tuple[int, int]:
        path = []
        while self.parent[t] != t:
            path.append(t)
            t = self.parent[t]
        root, acc = t, 0
        for node in reversed(path):  # compress
            acc += self.off[node]
            self.off[node] = acc
            self.parent[node] = root
        return root, self.off[path[0]] if path else 0

    def tie(self, a: int, b: int, d: int) -> bool:
        """idx(b) - idx(a) = d; False on a contradiction."""
        ra, oa = self.find(a)
        rb, ob = self.find(b)
        if ra == rb:
            return ob - oa == d
        # idx(rb) = idx(b) - ob = idx(a) + d - ob = idx(ra) + oa + d - ob
        self.parent[rb] = ra
        self.off[rb] = oa + d - ob
        return True


def _components(ties: _Ties) -> list[dict[int, int]]:
    comps: dict[int, dict[int, int]] = {}
    for t in ties.parent:
        r, o = ties.find(t)
        comps.setdefault(r, {})[t] = o
    out = []
    for c in comps.values():
        lo = min(c.values())
        out.append({t: o - lo for t, o in c.items()})
    return out


def _check_order(comp: dict[int, int]) -> str:
    items = sorted(comp.items())
    for (t0, o0), (t1, o1) in zip(items, items[1:]):
        if o1 <= o0:
            return f"timestamps {t0} and {t1} ns tie to steps {o0} and {o1}: step order contradicts time order"
    return ""


def _shift_range(a: dict[int, int], b: dict[int, int]) -> tuple[float, float]:
    """Feasible integer shifts s (idx_b = s + off_b, idx_a = off_a) from the strict time order."""
    lo, hi = float("-inf"), float("inf")
    for ta, oa in a.items():
        for tb, ob in b.items():
            if ta < tb:
                lo = max(lo, oa - ob + 1)
            elif ta > tb:
                hi = min(hi, oa - ob - 1)
    return lo, hi


def _span(c: dict[int, int]) -> tuple[int, int]:
    return min(c), max(c)


def _clusters(comps: list[dict[int, int]]) -> list[list[dict[int, int]]]:
    """Components grouped by time overlap (transitively), in time order: joining never crosses a cluster."""
    out: list[list[dict[int, int]]] = []
    end = None
    for c in sorted(comps, key=_span):
        a, b = _span(c)
        if out and end is not None and a <= end:
            out[-1].append(c)
            end = max(end, b)
        else:
            out.append([c])
            end = b
    return out


def _join_clusters(comps: list[dict[int, int]]) -> tuple[list[dict[int, int]], list[tuple[int, int, str]]]:
    """(joined segments, left-out spans): each overlap cluster joined by :func:`_join`, or left out
    as ``(start_ns, end_ns, reason)`` when its step numbering is ambiguous or impossible."""
    segs: list[dict[int, int]] = []
    left_out: list[tuple[int, int, str]] = []
    for cl in _clusters(comps):
        try:
            segs.extend(_join(cl))
        except _Unavailable as e:
            left_out.append((min(_span(c)[0] for c in cl), max(_span(c)[1] for c in cl), str(e)))
    return sorted(segs, key=_span), left_out


def _join(comps: list[dict[int, int]]) -> list[dict[int, int]]:
    """Join time-overlapping components whose relative offset the time order fixes uniquely."""
    changed = True
    while changed:
        changed = False
        comps.sort(key=_span)
        for i in range(len(comps)):
            for j in range(i + 1, len(comps)):
                a, b = comps[i], comps[j]
                (a0, a1), (b0, b1) = _span(a), _span(b)
                if b0 > a1:  # sorted by start: no later component overlaps a either
                    break
                lo, hi = _shift_range(a, b)
                if lo > hi:
                    raise _Unavailable(f"steps around {b0} ns: the time order admits no step numbering")
                if lo != hi:
                    raise _Unavailable(
                        f"two groups of sequences overlap in time ({a0}..{a1} ns and {b0}..{b1} ns) with no shared "
                        f"step timestamp: their relative step numbering is ambiguous ({lo:g}..{hi:g} steps), so "
                        "the steps' composition is unknown there")
                s = int(lo)
                merged = dict(a)
                for t, o in b.items():
                    merged[t] = o + s
                m = min(merged.values())
                comps[i] = {t: o - m for t, o in merged.items()}
                del comps[j]
                changed = True
                break
            if changed:
                break
    return sorted(comps, key=_span)


def rebuild_engine(idx: WorkloadIndex, req_out: Mapping[str, opb.RequestOutcome], engine: mpb.EngineConfig | None,
                   engine_id: str, contexts: dict | None = None) -> tuple[vpb.EngineSteps, dict[str, list[Placement]]]:
    """Rebuild one engine's steps; an unavailable rebuild carries the reason and no steps."""
    es = vpb.EngineSteps(engine_id=engine_id)
    rids = [r for r, q in idx.requests.items() if q.engine_id == engine_id]
    try:
        samples, notes = _samples(idx, req_out, rids)
        es.notes.extend(notes)
        if not samples:
            raise _Unavailable("no request on this engine")
        ties = _Ties()
        for s in samples:
            ties.add(s.first_ns)
            ties.add(s.completion_ns)
        conflicts = []
        for s in samples:
            if not ties.tie(s.first_ns, s.completion_ns, s.output_tokens - 1):
                conflicts.append(f"{s.request_id} ({s.output_tokens} tokens, {s.first_ns}->{s.completion_ns} ns)")
        es.checks.append(vpb.StepCheck(name="output lengths agree with step numbering", passed=not conflicts,
                                       detail=f"{len(samples)} samples, {len(conflicts)} conflicts"
                                       + (": " + ", ".join(conflicts[:5]) if conflicts else "")))
        if conflicts:
            raise _Unavailable(f"{len(conflicts)} samples contradict the step numbering (e.g. {conflicts[0]}): "
                               "not one token per step (speculative decoding, preemption or a lost timestamp?)")
        comps = _components(ties)
        bad = [m for m in (_check_order(c) for c in comps) if m]
        if bad:
            es.checks.append(vpb.StepCheck(name="step times increase", passed=False, detail=bad[0]))
            raise _Unavailable(bad[0])
        segs, left_out = _join_clusters(comps)
        if not segs:
            raise _Unavailable(left_out[0][2])
        es.checks.append(vpb.StepCheck(name="step times increase", passed=True,
                                       detail=f"{len(segs)} segments, {len(ties.parent)} observed step ends"))
    except _Unavailable as e:
        es.unavailable_reason = str(e)
        return es, {}
    if left_out:
        inside = [s for s in samples if any(a <= s.first_ns <= b for a, b, _ in left_out)]
        rids = sorted({s.request_id for s in inside})
        es.checks.append(vpb.StepCheck(
            name="overlapping sequences numbered unambiguously", passed=False,
            detail=f"{len(left_out)} spans left out ({len(inside)} of {len(samples)} samples, requests "
                   f"{', '.join(repr(r) for r in rids[:3])}{', ...' if len(rids) > 3 else ''}): {left_out[0][2]}"))
        es.notes.append(f"{len(left_out)} spans of this engine are not rebuilt (ambiguous step numbering, never "
                        f"guessed): {len(rids)} requests there have no steps, so no profile check or decomposition "
                        "covers them; the rest of the engine is rebuilt")
        samples = [s for s in samples if not any(a <= s.first_ns <= b for a, b, _ in left_out)]

    seg_of = {}
    for k, comp in enumerate(segs):
        for t, o in comp.items():
            seg_of[t] = (k, o)
    placement: dict[str, list[Placement]] = {}
    per_seg: list[list[tuple[_Sample, int, int]]] = [[] for _ in segs]
    for s in samples:
        k, f = seg_of[s.first_ns]
        k2, c = seg_of[s.completion_ns]
        assert k == k2
        per_seg[k].append((s, f, c))
        placement.setdefault(s.request_id, []).append(Placement(k, f, c))
    max_tokens = engine.max_num_batched_tokens if engine is not None and engine.max_num_batched_tokens else None
    max_seqs = engine.max_num_seqs if engine is not None and engine.max_num_seqs else None
    problems: list[str] = []
    prev_end: int | None = None
    left_ends = sorted((a, b) for a, b, _ in left_out)
    for k, comp in enumerate(segs):
        for a, b in left_ends:  # a left-out span before this segment ends where the engine's steps did
            if b < min(comp):
                prev_end = b if prev_end is None else max(prev_end, b)
        ends = {o: t for t, o in comp.items()}
        n_steps = max(ends) + 1
        pre: list[list[_Sample]] = [[] for _ in range(n_steps)]
        dec: list[list[int]] = [[] for _ in range(n_steps)]
        batches: list[set[str]] = [set() for _ in range(n_steps)]
        for s, f, c in per_seg[k]:
            pre[f].append(s)
            batches[f].add(s.batch_id)
            for st in range(f + 1, c + 1):
                dec[st].append(s.prompt_tokens + (st - f))
                batches[st].add(s.batch_id)
        for st in range(n_steps):
            if not pre[st] and not dec[st]:
                problems.append(f"segment {k} step {st} holds no sequence")
            ptoks = sum(s.new_tokens for s in pre[st])
            if max_tokens and ptoks + len(dec[st]) > max_tokens:
                problems.append(f"segment {k} step {st} would schedule {ptoks + len(dec[st])} tokens > "
                                f"max_num_batched_tokens {max_tokens} (chunked prefill over unobserved steps)")
            if max_seqs and len(pre[st]) + len(dec[st]) > max_seqs:
                problems.append(f"segment {k} step {st} holds {len(pre[st]) + len(dec[st])} sequences > max_num_seqs")
            phase = PH_FIRST if st == 0 else (PH_PREFILL if pre[st] else PH_DECODE)
            step = vpb.EngineStep(index=st, segment=k, phase=phase, prefill_sequences=len(pre[st]),
                                  prefill_tokens=ptoks, decode_sequences=len(dec[st]), kv_tokens=sum(dec[st]),
                                  mean_context_tokens=(sum(dec[st]) / len(dec[st])) if dec[st] else 0.0,
                                  rollout_batch_ids=sorted(batches[st]))
            if st in ends:
                step.end_ns = ends[st]
            es.steps.append(step)
            if contexts is not None:
                contexts[(engine_id, k, st)] = ([s.new_tokens for s in pre[st]], [s.prefix_tokens for s in pre[st]],
                                                list(dec[st]))
        # intervals
        sched = [s.scheduled_ns for s in pre[0]]
        start = min(sched) if sched and all(x is not None for x in sched) else None
        if start is not None and prev_end is not None and prev_end > start:
            start = prev_end
        if start is None:
            es.notes.append(f"segment {k}: first pass has no vLLM scheduled_ns: its duration is not measured")
        elif start > ends[0]:
            problems.append(f"segment {k}: first pass scheduled at {start} ns after its output at {ends[0]} ns")
            start = None
        observed = sorted(ends)
        bounds = ([(None, 0)] if start is not None else []) + list(zip(observed, observed[1:]))
        for a, b in bounds:
            first = 0 if a is None else a + 1
            t0 = start if a is None else ends[a]
            phases = {es.steps[-n_steps + st].phase for st in range(first, b + 1)}
            iv = vpb.StepInterval(segment=k, first_step=first, last_step=b, start_ns=t0, end_ns=ends[b],
                                  phase=phases.pop() if len(phases) == 1 else vpb.STEP_PHASE_UNSPECIFIED,
                                  real_ms=(ends[b] - t0) / 1e6,
                                  decode_sequences=max(len(dec[st]) for st in range(first, b + 1)),
                                  prefill_tokens=sum(sum(s.new_tokens for s in pre[st]) for st in range(first, b + 1)))
            es.intervals.append(iv)
        prev_end = ends[max(ends)]
    es.checks.append(vpb.StepCheck(name="every step holds a sequence; passes within the engine's limits",
                                   passed=not problems, detail="; ".join(problems[:3]) or
                                   f"{len(es.steps)} steps in {len(segs)} segments"))
    if problems:
        return vpb.EngineSteps(engine_id=engine_id, checks=es.checks, notes=es.notes,
                               unavailable_reason="rebuilt steps fail a consistency check: " + problems[0]), {}
    es.samples = len(samples)
    return es, placement


def rebuild_steps(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord],
                  engines: Iterable[mpb.EngineConfig]) -> Rebuild:
    """Rebuild the steps of every engine of the workload (engines in id order)."""
    req_out = {o.request.request_id: o.request for o in outcomes if o.WhichOneof("record") == "request"}
    cfg = {e.engine_id: e for e in engines}
    out, placement, contexts = [], {}, {}
    for eng in sorted({q.engine_id for q in idx.requests.values()}):
        es, pl = rebuild_engine(idx, req_out, cfg.get(eng), eng, contexts)
        out.append(es)
        if pl:
            placement[eng] = pl
    return Rebuild(out, placement, contexts)
