"""Where the error comes from: rebuilt steps, profile check and decomposition, into the report.

Pure: messages (and an already loaded timing model) in, report fields out. The report directory
writer (:mod:`unirl_replay.report.outputs`) loads the profile file; :func:`explain` never reads one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from unirl_replay.report import profile_check as pc
from unirl_replay.report.conditions import condition_warnings, hardware_mismatch, shared_cores
from unirl_replay.report.decompose import TERMS, WHAT, decompose
from unirl_replay.report.keys import L_BATCH, Pairs
from unirl_replay.report.labels import timing_label
from unirl_replay.report.matching import WorkloadIndex
from unirl_replay.report.steps import rebuild_steps
from unirl_replay.report.timing_eval import StepModel, profile_spread
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb

#: (model or None, profile provenance, reason when None)
LoadedModel = tuple["StepModel | None", dict, str]


def builtin_model(tm: rpb.TimingModel) -> LoadedModel:
    """A model that needs no file (polynomial, fixed); a profile needs the caller to load it."""
    if tm.kind == rpb.TIMING_MODEL_KIND_POLYNOMIAL:
        return StepModel("polynomial", 0), {}, ""
    if tm.kind == rpb.TIMING_MODEL_KIND_FIXED and tm.HasField("prefill_ms") and tm.HasField("decode_ms"):
        return StepModel("fixed", 0, fixed=(tm.prefill_ms, tm.decode_ms)), {}, ""
    return None, {}, "the profile file was not given to the comparison (report.outputs loads it)"


def _kv_capacity(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> dict[str, int]:
    cap = {e.engine_id: e.num_kv_blocks * e.block_size_tokens for e in manifest.engines}
    cap.update({e.engine_id: e.num_kv_blocks * e.block_size_tokens for e in replay.engines if e.num_kv_blocks})
    return cap


def summed(decs: Sequence[vpb.ErrorDecomposition], metric: str, record_id: str) -> vpb.ErrorDecomposition | None:
    """The sum of several decompositions (e.g. every rollout batch): still exact, term by term."""
    ok = [d for d in decs if d.metric == metric and not d.unavailable_reason and d.terms]
    if len(ok) < 2:
        return None
    m, p = sum(d.measured_ns for d in ok), sum(d.predicted_ns for d in ok)
    deltas = {name: sum(t.delta_ns for d in ok for t in d.terms if t.name == name) for name in TERMS}
    if any(abs(v) >= 1 << 63 for v in (m, p, p - m, *deltas.values())):
        return None  # a sum an int64 field cannot hold (times are bounded per record: outputs.MAX_PREDICTED_NS)
    out = vpb.ErrorDecomposition(level=ok[0].level, metric=metric, record_id=record_id, measured_ns=m,
                                 predicted_ns=p, total_ns=p - m)
    for name in TERMS:
        delta = deltas[name]
        out.terms.append(vpb.DecompositionTerm(name=name, delta_ns=delta, what=WHAT[name],
                                               pct_of_measured=100.0 * delta / m if m else 0.0))
    out.notes.append(f"sum over {len(ok)} records ({', '.join(d.record_id for d in ok)})")
    return out


def explain(idx: WorkloadIndex, outcomes: Sequence[opb.OutcomeRecord], manifest: mpb.TraceManifest,
            replay: rpb.ReplayResult, pairs: Mapping[tuple[int, str], Pairs], model: LoadedModel | None,
            report: vpb.ValidationReport) -> None:
    """Fill ``engine_steps``, ``profile_check`` and ``decompositions`` of ``report`` in place."""
    rb = rebuild_steps(idx, outcomes, manifest.engines)
    model = model or builtin_model(replay.timing_model)
    sm, prov, why = model
    other_hw = hardware_mismatch(manifest, replay, prov) is not None  # compare's label says the same
    check = vpb.ProfileCheck(timing_model=timing_label(replay.timing_model, other_hw))
    if sm is not None:
        cap = _kv_capacity(manifest, replay)
        pc.evaluate_steps(rb.engines, {e: sm.with_capacity(cap.get(e, 0)) for e in cap}, rb.contexts)
    report.engine_steps.extend(rb.engines)
    rebuilt = [es for es in rb.engines if not es.unavailable_reason]
    if sm is None:
        check.unavailable_reason = why
    elif not rebuilt:
        check.unavailable_reason = "no engine's steps could be rebuilt: " + "; ".join(
            f"{es.engine_id}: {es.unavailable_reason}" for es in rb.engines)
    else:
        check.phases.extend(pc.phase_ratios(rebuilt))
        check.reading = pc.reading(check.phases, rebuilt)
        if pc.same_size_spread([iv for es in rebuilt for iv in es.intervals]):
            shared = [f"engine {eid}: {w}" for eid, text in sorted(manifest.conditions.worker_threads.items())
                      if (w := shared_cores(text))]
            if shared:
                check.reading += "; recorded in the capture's conditions: " + "; ".join(shared)
    check.profile_spread = profile_spread(prov)
    report.profile_check.CopyFrom(check)
    report.condition_warnings.extend(condition_warnings(manifest, replay, prov, sm))
    decs = decompose(idx, outcomes, rb, pairs)
    total = summed(decs, "batch_readiness", "all rollout batches")
    if total is not None:
        decs.insert(sum(d.level == L_BATCH for d in decs), total)
    trajs = summed(decs, "trajectory_e2e", "all trajectories")
    if trajs is not None:
        decs.append(trajs)
    overlaps = batch_overlaps(idx, outcomes, replay)
    for d in decs:
        if d.level == L_BATCH and d.record_id in overlaps:
            d.notes.append(overlaps[d.record_id])
    report.decompositions.extend(decs)
    report.notes.extend(conversion_notes(manifest, replay))
    report.notes.extend(boundary_notes(idx, replay))
    report.notes.extend(overlaps.values())


def boundary_notes(idx: WorkloadIndex, replay: rpb.ReplayResult) -> list[str]:
    """How each recorded batch boundary (``RolloutBatch.after_batch``) was replayed: closed loop, or open loop
    where the replay dropped it (``UnmodelledConstraint`` rule ``batch_boundary.unexpressible``)."""
    dropped = {b for c in replay.unmodelled_constraints if c.rule == "batch_boundary.unexpressible"
               for b in c.record_ids}
    out = []
    for bid, b in idx.batches.items():
        if not b.HasField("after_batch"):
            continue
        prev, gap_ms = b.after_batch.previous_rollout_batch_id, b.after_batch.driver_gap_ns / 1e6
        if bid in dropped:
            out.append(f"batch boundary {prev} -> {bid} (the run waited for {prev}'s ready) replayed OPEN LOOP "
                       "(UNMODELLED: batch_boundary.open_loop): the simulated batches may overlap where the run kept "
                       "them apart")
        else:
            out.append(f"batch boundary {prev} -> {bid} replayed closed loop, as the run: {bid}'s first request "
                       f"arrives at {prev}'s simulated completion + the measured driver gap ({gap_ms:.3f} ms, "
                       "RolloutBatch.after_batch)")
    return out


def batch_overlaps(idx: WorkloadIndex, outcomes: Sequence[opb.OutcomeRecord],
                   replay: rpb.ReplayResult) -> dict[str, str]:
    """Rollout batches the run kept apart that the simulated schedule overlaps, one note per earlier batch.

    In the run, batch b was ready before the next batch's first submit (a GRPO driver submits the next
    ``rollout.generate`` only when one returns); in the replay the next batch arrives at its observed submit
    (open loop; an agentic trajectory when the replay starts it) while the simulated b is not yet ready, so the simulated engine runs the next batch's passes
    inside b (a mixed pass costs P + D) and both batches' errors hold that overlap (in the decomposition:
    ``simulator_scheduling``). Each clock is used on its own: measured times with measured, predicted with
    predicted. Batches without a measured ready, predicted ready, submit or arrival are skipped."""
    m_ready = {o.rollout_batch.rollout_batch_id: o.rollout_batch.ready_ns for o in outcomes
               if o.WhichOneof("record") == "rollout_batch" and o.rollout_batch.HasField("ready_ns")}
    submit = {o.request.request_id: o.request.submit_ns for o in outcomes
              if o.WhichOneof("record") == "request" and o.request.HasField("submit_ns")}
    p_ready = {b.rollout_batch_id: b.ready_ns for b in replay.rollout_batches if b.HasField("ready_ns")}
    arrival = {q.request_id: q.arrival_ns for q in replay.requests if q.HasField("arrival_ns")}
    rows = []
    for bid, rids in idx.requests_of_batch.items():
        ms = [submit[r] for r in rids if r in submit]
        pa = [arrival[r] for r in rids if r in arrival]
        if bid in m_ready and bid in p_ready and ms and pa:
            rows.append((min(ms), bid, m_ready[bid], min(pa), p_ready[bid]))
    rows.sort()
    out: dict[str, str] = {}
    for (ms0, b0, mr0, pa0, pr0), (ms1, b1, _mr1, pa1, _pr1) in zip(rows, rows[1:]):
        if mr0 <= ms1 and pr0 > pa1:
            out[b0] = (f"simulated rollout batches overlap by {(pr0 - pa1) / 1e6:.1f} ms where the run kept them apart: "
                       f"{b1} arrives at "
                       f"{(pa1 - pa0) / 1e6:.1f} ms after {b0}'s first arrival in the replay (an open-loop request at its "
                       f"observed submit, an agentic trajectory when the replay starts it) while "
                       f"the simulated {b0} is ready only at {(pr0 - pa0) / 1e6:.1f} ms; in the run {b0} was ready "
                       f"at {(mr0 - ms0) / 1e6:.1f} ms, {(ms1 - mr0) / 1e6:.1f} ms before {b1}'s first submit. The "
                       f"simulated engine runs {b1}'s passes inside {b0} (a mixed pass costs P + D), so both "
                       f"batches' errors hold this overlap (decomposition: simulator_scheduling)")
    return out


_SETTINGS = ("block_size_tokens", "num_kv_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
             "enable_prefix_caching", "enable_chunked_prefill")


def conversion_notes(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> list[str]:
    """Whether the simulator ran with the trace's engine settings (a conversion check)."""
    real = {e.engine_id: e for e in manifest.engines}
    out = []
    for e in replay.engines:
        m = real.get(e.engine_id)
        if m is None:
            continue
        diff = [f"{k} {getattr(m, k)} -> {getattr(e, k)}" for k in _SETTINGS if getattr(m, k) != getattr(e, k)]
        out.append(f"conversion check, engine {e.engine_id}: the simulator ran with the trace's engine settings"
                   if not diff else f"conversion check, engine {e.engine_id}: settings differ from the trace's: "
                   + ", ".join(diff))
    return out
