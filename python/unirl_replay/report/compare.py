"""Matched comparison of a replay with the real execution it came from -> ``ValidationReport``.

Pure functions over contract messages: nothing here reads a file. ``commands/compare.py`` opens the
trace (workload + manifest), the measured outcomes (``outcomes_io``) and the replay result and
hands the messages in. This module is the only consumer of measured outcomes besides validation.

Clocks
------
Measured times (``RequestOutcome`` etc.) are ns offsets from the capture window start on
``CLOCK_DOMAIN_CAPTURE_MONOTONIC``. Predicted times (``PredictedRequest`` etc.) are ns on
``CLOCK_DOMAIN_SIMULATED``, with 0 at the simulator's first real arrival *of that engine*. The two
clocks are never mixed: every compared value is a **duration** between two boundaries on one clock,
either of one record (request, trajectory) or from a **matched origin** (groups, batches).

Boundaries (the simulated arrival of a request is the simulated client submit: a closed-loop
successor arrives at its predecessor's simulated event plus the measured delay up to the
successor's *submit*, and an open-loop arrival is the observed submit):

======================  ==================================================  =====================================================
metric (level)          measured                                            predicted
======================  ==================================================  =====================================================
ttft (request)          first_token_ns - submit_ns                          first_token_ns - arrival_ns
e2e (request)           completion_ns - submit_ns                           completion_ns - arrival_ns
queueing_delay (req.)   scheduled_ns - submit_ns                            scheduled_ns - arrival_ns
engine_ttft (request)   first_token_ns - queued_ns                          first_token_ns - arrival_ns
engine_e2e (request)    completion_ns - queued_ns                           completion_ns - arrival_ns
trajectory_e2e (traj.)  max completion_ns - min submit_ns of its requests    max completion_ns - min arrival_ns of its requests
slot_hold (traj.)       slot_released_ns - slot_acquired_ns                 PredictedTrajectory.end_ns - start_ns
group_completion        GroupOutcome.completed_ns - O_m(batch, engine)      PredictedGroup.completed_ns - O_p(batch, engine)
batch_readiness         BatchOutcome.ready_ns - O_m(batch, engine)          PredictedBatch.ready_ns - O_p(batch, engine)
======================  ==================================================  =====================================================

``O_m(b, e)`` = min measured ``submit_ns`` over the workload requests of batch ``b`` on engine(s)
``e`` (the group's or batch's engines); ``O_p(b, e)`` = min predicted ``arrival_ns`` over the same
requests (both: the batch's first submit on those engines). Groups and batches that span engines:
each engine is replayed alone with its simulated 0 at its first observed arrival's offset, so all
engines' predictions share the trace's clock, and no dependency crosses engines in a replayable
workload; they are compared (a group's completion is the max over its members on every engine),
given the captured assignment of work to engines. Except in lanes mode (trajectory slots, or the
client limit as lanes), where upstream ignores root arrivals: a batch that is not an engine's
first starts there when that engine's own lanes free, while in the run it waited for the batch
boundary all engines share, a dependency across engines the separate replays do not carry; such a
spanning group or batch is not compared, with that reason (:class:`~.matching.CrossEngine`).

Request boundaries of a fanned-out request (n > 1) come from the parent's own fields when present;
otherwise from its ``samples`` when there is one ``SampleTiming`` per sample (first token = the
earliest sample's, completion = the last sample's), never from a partial set.

Whatever cannot be paired is a ``NotCompared`` with the reason (never approximated). Requests whose
outcome has an ``unavailable_reason`` are counted in ``ValidationReport.requests_unavailable`` and
left out of exactly the request-level metrics whose boundaries are missing (a turn with 0 output
tokens has no first token: its TTFT is left out, its E2E is compared). A boundary pair out of order (end < start, e.g. vLLM's
re-set ``queued_ts``) is not compared either.

Aggregate-only replay results (``RESULT_GRANULARITY_AGGREGATE_ONLY``) are compared only on the
aggregate keys listed in :data:`AGGREGATE_KEYS`, at ``COMPARISON_LEVEL_AGGREGATE``; every
per-record metric is listed as not compared.

Layout of the stage: :mod:`~unirl_replay.report.keys` (levels, metric keys, pairs),
:mod:`~unirl_replay.report.matching` (boundaries, both sides' values, pairing),
:mod:`~unirl_replay.report.labels` (honesty labels, input checks); this module turns matched pairs
into the ``ValidationReport`` (statistics, aggregates, repeat spread) and re-exports the names
callers use (``compare.match``, ``compare.L_REQ``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from unirl_replay import SCHEMA_VERSION
from unirl_replay.report.keys import (  # noqa: F401  (re-exported)
    AGGREGATE_KEYS,
    L_AGG,
    L_BATCH,
    L_GROUP,
    L_REQ,
    L_TRAJ,
    LEVEL_NAMES,
    METRIC_KEYS,
    ComparisonError,
    Pairs,
    SideValues,
)
from unirl_replay.report.bracket import bound_name, brackets, handoff_words, locked_handoffs
from unirl_replay.report.conditions import hardware_mismatch
from unirl_replay.report.explain import LoadedModel, builtin_model, explain
from unirl_replay.report.labels import _ROLE_WORDS, check_inputs, honesty_label, timing_label  # noqa: F401
from unirl_replay.report.matching import (  # noqa: F401  (re-exported)
    REQUEST_SPANS,
    Matching,
    WorkloadIndex,
    _engines,
    index_workload,
    match,
    match_indexed,
    measured_request_boundaries,
    measured_values,
    pair_values,
    predicted_request_boundaries,
    predicted_values,
)
from unirl_replay.report.metrics import NS_PER_MS, error_stats, repeat_spread
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb


# ---------------------------------------------------------------------------------------------
# Statistics -> messages


def metric_comparison(level: int, metric: str, p: Pairs) -> vpb.MetricComparison:
    """MetricComparison of one metric from its pairs (ns in, ms / % out). Unset fields: undefined."""
    st = error_stats(p.predicted_ns / NS_PER_MS, p.measured_ns / NS_PER_MS)
    mc = vpb.MetricComparison(level=level, metric=metric, pairs=st["pairs"], zero_measured=st["zero_measured"])
    for field, key in (("mape_pct", "mape_pct"), ("median_ape_pct", "median_ape_pct"),
                       ("p90_ape_pct", "p90_ape_pct"), ("signed_bias_pct", "signed_bias_pct"),
                       ("measured_mean_ms", "measured_mean"), ("predicted_mean_ms", "predicted_mean"),
                       ("measured_p50_ms", "measured_p50"), ("measured_p90_ms", "measured_p90"),
                       ("measured_p99_ms", "measured_p99"), ("predicted_p50_ms", "predicted_p50"),
                       ("predicted_p90_ms", "predicted_p90"), ("predicted_p99_ms", "predicted_p99")):
        if st[key] is not None:
            setattr(mc, field, st[key])
    return mc


def _aggregate(idx: WorkloadIndex, measured: dict[tuple[int, str], SideValues],
               outcomes_bounds_makespan: int | str, replay: rpb.ReplayResult
               ) -> tuple[list[vpb.MetricComparison], list[vpb.NotCompared]]:
    mcs, nc = [], []
    for key in sorted(replay.aggregate):
        pred = replay.aggregate[key]
        if key not in AGGREGATE_KEYS:
            reason = ("upstream percentile definition not verified to match ours (numpy linear)"
                      if re.match(r"^(p\d+|median)_", key) else "no measured counterpart defined for this aggregate key")
            nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=reason))
            continue
        src, stat = AGGREGATE_KEYS[key]
        if src == "makespan":
            meas = outcomes_bounds_makespan
            if isinstance(meas, str):
                nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=f"measured: {meas}"))
                continue
            meas_ms = meas / NS_PER_MS
        else:
            vals = measured[(L_REQ, src)]
            missing = [r for r, v in vals.items() if not isinstance(v, int)]
            if missing or not vals:
                nc.append(vpb.NotCompared(level=L_AGG, metric=key, reason=(
                    f"measured {src} missing for {len(missing)} of {len(vals)} requests: the aggregate "
                    f"would summarise another request set than the simulator's")))
                continue
            arr = np.asarray(list(vals.values()), dtype=np.float64) / NS_PER_MS
            meas_ms = float({"mean": np.mean, "min": np.min, "max": np.max}[stat](arr))
        st = error_stats([pred], [meas_ms])
        mc = vpb.MetricComparison(level=L_AGG, metric=key, pairs=1, zero_measured=st["zero_measured"],
                                  measured_value=meas_ms, predicted_value=pred)
        for field in ("mape_pct", "median_ape_pct", "p90_ape_pct", "signed_bias_pct"):
            if st[field] is not None:
                setattr(mc, field, st[field])
        mcs.append(mc)
    return mcs, nc


def _measured_makespan(idx: WorkloadIndex, outcomes: Iterable[opb.OutcomeRecord]) -> int | str:
    """Whole-window makespan (first submit to last completion), single-engine traces only."""
    engines = _engines(idx, list(idx.requests))
    if len(engines) != 1:
        return f"trace spans engines {', '.join(engines)}: no single simulated clock for a makespan"
    outs = {r.request.request_id: r.request for r in outcomes if r.WhichOneof("record") == "request"}
    starts, ends = [], []
    for rid, req in idx.requests.items():
        o = outs.get(rid)
        b = measured_request_boundaries(req, o) if o is not None else {}
        if "submit" not in b or "completion" not in b:
            return f"request {rid!r} lacks a measured submit or completion"
        starts.append(b["submit"])
        ends.append(b["completion"])
    return max(ends) - min(starts)


# ---------------------------------------------------------------------------------------------
# Entry point


def compare(manifest: mpb.TraceManifest, workload: Iterable[wpb.WorkloadRecord],
            outcomes: Iterable[opb.OutcomeRecord], replay: rpb.ReplayResult,
            repeats: Sequence[tuple[mpb.TraceManifest, Iterable[wpb.WorkloadRecord], Iterable[opb.OutcomeRecord]]] = (),
            matching: Matching | None = None, timing: LoadedModel | None = None,
            bounds: Sequence[tuple[str, rpb.ReplayResult]] = ()) -> vpb.ValidationReport:
    """Build the ``ValidationReport`` of ``replay`` against the trace it came from.

    Args:
        manifest: the trace's manifest (role, workload name, capture overhead, clock).
        workload, outcomes: the trace's records (materialised internally; iterate once).
        replay: the replay result.
        repeats: other measured runs of the same workload (manifest, workload, outcomes), for the
            run-to-run spread; the main trace is counted as one repeat.
        matching: :func:`match` of the same inputs when the caller already has it (for plots);
            computed here otherwise.
        timing: the replay's timing model, loaded (``timing_eval.step_model``), for the profile
            check and the decomposition; polynomial / fixed models need none, a profile without
            it is reported as not evaluated.
        bounds: other UNMODELLED replays of the same trace (``(source, result)``), e.g. lanes = the
            client limit next to a replay with the limit dropped: reported as a bracket
            (``ValidationReport.brackets``), never as one prediction.
    Returns:
        The report (``artifacts`` empty: the command fills it).
    Raises:
        ComparisonError: other trace / workload, unusable clock, contradictory labels, or a repeat
            of another workload or role.
    """
    check_inputs(manifest, replay)
    workload = list(workload)
    outcomes = list(outcomes)
    idx = index_workload(workload)
    other_hw = hardware_mismatch(manifest, replay, (timing or builtin_model(replay.timing_model))[1])
    report = vpb.ValidationReport(
        schema_version=SCHEMA_VERSION, trace_id=manifest.trace_id, role=manifest.role,
        workload_name=manifest.workload_name, simulator=replay.simulator, timing_model=replay.timing_model,
        granularity=replay.granularity, capture_overhead=manifest.capture_overhead,
        label=honesty_label(manifest, replay, other_hardware=other_hw is not None))
    if other_hw is not None and replay.timing_model.calibration in (
            rpb.CALIBRATION_STATUS_CALIBRATED, rpb.CALIBRATION_STATUS_CALIBRATED_PROBE, rpb.CALIBRATION_STATUS_UNVALIDATED):
        # CALIBRATED is "a profile measured on the same engine configuration as the trace": not this one. The
        # replay stage says so in its result (UNVALIDATED); a result written before it did keeps the profile's own
        # status, and the report's says so here
        was = ("measured" if replay.timing_model.calibration == rpb.CALIBRATION_STATUS_UNVALIDATED else
               rpb.CalibrationStatus.Name(replay.timing_model.calibration).removeprefix("CALIBRATION_STATUS_"))
        report.timing_model.calibration = rpb.CALIBRATION_STATUS_UNVALIDATED
        report.notes.append(f"timing model UNVALIDATED for this capture: the profile is {was} on other hardware "
                            f"({other_hw})")
    comp = manifest.completeness
    if manifest.HasField("completeness") and not comp.complete:  # finalize kept only the whole records of the window
        lost = "; ".join(f"{x.kind} {x.count}" for x in comp.lost[:8]) + (" ..." if len(comp.lost) > 8 else "")
        report.notes.append(f"INCOMPLETE capture (manifest completeness): the trace holds the window's whole groups "
                            f"and trajectories only; lost: {lost or 'not listed'}. A rollout batch that lost work is "
                            "kept with its whole groups but no measured ready time, and is not compared; see `capture "
                            "finalize`'s report or the manifest's completeness.lost for the causes")
    for key in sorted(k for k in manifest.labels if k.startswith("warning.")):  # what finalize warned of, not lost
        report.notes.append(f"capture warning ({key.removeprefix('warning.')[:80]}): {manifest.labels[key][:600]}")
    per_request = replay.granularity != rpb.RESULT_GRANULARITY_AGGREGATE_ONLY
    if per_request and matching is None:
        matching = match_indexed(idx, outcomes, replay)
    meas, unavailable = ((matching.measured, matching.unavailable) if per_request
                         else measured_values(idx, outcomes))
    report.requests_unavailable = len(unavailable)
    report.notes.append("durations only; groups and batches measured from the batch's first submit on "
                        "their engine(s) (see docs/comparison.md)")
    if manifest.role == cpb.WORKLOAD_ROLE_CALIBRATION and replay.timing_model.calibration in (
            rpb.CALIBRATION_STATUS_CALIBRATED, rpb.CALIBRATION_STATUS_CALIBRATED_PROBE):
        report.notes.append("calibration workload with a calibrated profile: in-sample prediction")
    if not manifest.capture_overhead.HasField("overhead_ratio"):
        report.notes.append("capture overhead not measured in this trace")

    if not per_request:
        report.notes.append("aggregate-only replay result: compared at the aggregate level only")
        for level, metric in METRIC_KEYS:
            report.not_compared.append(vpb.NotCompared(
                level=level, metric=metric, reason="replay result is aggregate-only: no per-record predictions"))
        for rid in unavailable:
            report.not_compared.append(vpb.NotCompared(
                level=L_REQ, metric="*", record_id=rid, reason="measured outcome unavailable (left out of aggregates' "
                "request set)"))
        mcs, nc = _aggregate(idx, meas, _measured_makespan(idx, outcomes), replay)
        report.metrics.extend(mcs)
        report.not_compared.extend(nc)
    else:
        with_reason = {(n.level, n.metric) for n in matching.not_compared}
        empty: list[str] = []
        for key in METRIC_KEYS:
            if len(matching.pairs[key].ids):
                report.metrics.append(metric_comparison(key[0], key[1], matching.pairs[key]))
            elif not _level_has_records(idx, key[0]):
                if LEVEL_NAMES[key[0]] not in empty:
                    empty.append(LEVEL_NAMES[key[0]])
            elif key not in with_reason:  # every record of the level has its own reason below otherwise
                report.not_compared.append(vpb.NotCompared(level=key[0], metric=key[1],
                                                           reason="no matched pair at this level"))
        if empty:
            report.notes.append(f"no {' / '.join(empty)} records in this workload: nothing to compare at that level "
                                "(e.g. a GRPO rollout has no trajectories)")
        report.not_compared.extend(matching.not_compared)
        _note_cross_engine(idx, matching, report)
        explain(idx, outcomes, manifest, replay, matching.pairs, timing, report)
        _bracket(idx, outcomes, manifest, replay, matching, bounds, report)
    report.workload_requests = len(idx.requests)
    report.workload_samples = sum(max(r.num_samples, 1) for r in idx.requests.values())

    report.repeat_spread.extend(spread_over_repeats(manifest, meas, repeats))
    return report


def _level_has_records(idx: WorkloadIndex, level: int) -> bool:
    return bool({L_REQ: idx.requests, L_TRAJ: {**idx.trajectories, **idx.requests_of_trajectory},
                 L_GROUP: {**idx.groups, **idx.requests_of_group},
                 L_BATCH: {**idx.batches, **idx.requests_of_batch}}.get(level, {1: 1}))


def _note_cross_engine(idx: WorkloadIndex, matching: Matching, report: vpb.ValidationReport) -> None:
    """Say so in the report when groups / batches spanning engines were compared on the shared clock."""
    spans = {L_GROUP: idx.requests_of_group, L_BATCH: idx.requests_of_batch}
    counts = {}
    for level, metric in ((L_GROUP, "group_completion"), (L_BATCH, "batch_readiness")):
        ids = matching.pairs[(level, metric)].ids
        counts[level] = sum(1 for rid in ids if len(_engines(idx, spans[level].get(rid, []))) > 1)
    if counts[L_GROUP] or counts[L_BATCH]:
        report.notes.append(
            f"{counts[L_GROUP]} groups and {counts[L_BATCH]} batches span engines and are compared on the trace's "
            "shared clock: each engine was replayed alone with its simulated 0 at its first observed arrival, no "
            "dependency crosses engines in the replayed work, and a group completes at the max over its members on "
            "every engine (given the captured assignment of work to engines)")


def _same_model_as_the_replay(src: str, bound: rpb.ReplayResult, replay: rpb.ReplayResult) -> None:
    """A bracket is two replays of one model that differ only in the constraint they drop: a bound from another
    simulator or timing model would put, e.g., a CALIBRATED profile's upper bound under the label of an
    UNCALIBRATED polynomial replay (or the reverse), and "inside the bracket" would mean nothing.

    Raises:
        ComparisonError: the bound's simulator (name, version, trace format, components) or timing model (kind,
            status, parameters, profile digest; not the path the profile was read from) differs from the replay
            result's.
    """
    def sim(r: rpb.ReplayResult) -> str:
        return f"{r.simulator.name} {r.simulator.version}".strip() or "an unnamed simulator"

    if (bound.simulator.name, bound.simulator.version) != (replay.simulator.name, replay.simulator.version):
        raise ComparisonError(f"bound {src!r} ran on {sim(bound)}, the replay result on {sim(replay)}: both bounds "
                              "of a bracket come from one simulator and one timing model; replay the other bound "
                              "with the replay result's --simulator")
    # one name and version is not yet one simulator: the upstream format it was fed (agentic_mooncake / mooncake: other
    # semantics of sessions and delays) and its components (ai-dynamo-runtime, the Rust engine that simulates) also
    # make the bound's numbers another model's (a bound of another runtime was accepted into the bracket)
    if bound.simulator != replay.simulator:
        def ident(r: rpb.ReplayResult) -> str:
            comps = ", ".join(f"{k} {v}" for k, v in sorted(r.simulator.components.items()))
            return f"trace format {r.simulator.trace_format or 'unnamed'!r}" + (f", {comps}" if comps else "")

        raise ComparisonError(f"bound {src!r} ran on {sim(bound)} with {ident(bound)}, the replay result with "
                              f"{ident(replay)}: both bounds of a bracket come from one simulator (its upstream trace "
                              "format and component versions too) and one timing model; replay the other bound with "
                              "the replay result's simulator install")
    a, b = rpb.TimingModel(), rpb.TimingModel()
    a.CopyFrom(replay.timing_model)
    b.CopyFrom(bound.timing_model)
    a.ClearField("profile_path")
    b.ClearField("profile_path")
    if a != b:
        raise ComparisonError(f"bound {src!r} used {timing_label(bound.timing_model)}, the replay result "
                              f"{timing_label(replay.timing_model)}: both bounds of a bracket come from one timing "
                              "model (the report's label names one); replay the other bound with the replay "
                              "result's --timing-model")


def _bracket(idx: WorkloadIndex, outcomes: list[opb.OutcomeRecord], manifest: mpb.TraceManifest,
             replay: rpb.ReplayResult, matching: Matching, bounds: Sequence[tuple[str, rpb.ReplayResult]],
             report: vpb.ValidationReport) -> None:
    if not replay.unmodelled_constraints:
        if bounds:
            raise ComparisonError("--bound is for UNMODELLED replays: this replay modelled every constraint, it "
                                  "is the prediction")
        return
    if not bounds and not any(c.rule.startswith("engine_client.") for c in replay.unmodelled_constraints):
        rules = ", ".join(dict.fromkeys(c.rule for c in replay.unmodelled_constraints))
        report.notes.append(f"UNMODELLED: the replay dropped {rules} by explicit opt-in (the notes say how): these "
                            "numbers hold that gap; they are neither the prediction of the run as it ran nor a bound")
        return
    if not bounds:
        report.notes.append(f"UNMODELLED: these numbers are ONE BOUND ({bound_name(replay)}), not the prediction; "
                            "replay the other bound too (--allow-unmodelled engine_client.inflight_limit[.as_lanes]) "
                            "and pass it with --bound to bracket the truth")
        return
    results = [("replay result", replay, matching.pairs)]
    seen = {bound_name(replay): "the replay result"}
    for src, b in bounds:
        check_inputs(manifest, b)
        if not b.unmodelled_constraints:
            raise ComparisonError(f"bound {src!r} modelled every constraint: it is a prediction, not a bound")
        _same_model_as_the_replay(src, b, replay)
        name = bound_name(b)
        if name in seen and name != "UNMODELLED replay":  # the same bound twice brackets nothing
            raise ComparisonError(f"bound {src!r} is the same bound as {seen[name]} ({name}): pass the other one "
                                  "(--allow-unmodelled engine_client.inflight_limit vs "
                                  "engine_client.inflight_limit.as_lanes)")
        seen[name] = repr(src)
        if b.granularity != rpb.RESULT_GRANULARITY_PER_REQUEST:
            raise ComparisonError(f"bound {src!r} is aggregate-only: a bracket needs per-request rows")
        results.append((src, b, match_indexed(idx, outcomes, b).pairs))
    out = brackets(results)
    if any("ABOVE" in b.reading for b in out):  # measured slower than the slow bound: say what neither has
        rows = []
        for rec in outcomes:
            if rec.WhichOneof("record") != "request":
                continue
            o, req = rec.request, idx.requests.get(rec.request.request_id)
            if req is not None and all(o.HasField(f) for f in ("submit_ns", "queued_ns", "completion_ns")):
                rows.append((req.engine_id, o.submit_ns, o.queued_ns, o.completion_ns))
        _, gaps = locked_handoffs(rows)
        if gaps:
            for b in out:
                if "ABOVE" in b.reading:
                    b.reading += "; " + handoff_words(gaps)
    report.brackets.extend(out)


def spread_over_repeats(manifest: mpb.TraceManifest, main_measured: dict[tuple[int, str], SideValues],
                        repeats: Sequence[tuple[mpb.TraceManifest, Iterable[wpb.WorkloadRecord], Iterable[opb.OutcomeRecord]]],
                        ) -> list[vpb.RepeatSpread]:
    """RepeatSpread per metric over the main run plus ``repeats`` (each repeat: its mean, in ns,
    over its own measured values). Metrics measured in fewer than two runs get no entry.

    Raises:
        ComparisonError: a repeat has another workload name or role, or is the main trace or another
            repeat again (same trace_id, or the same measured times under another trace_id).
    """
    if not repeats:
        return []
    runs = [main_measured]
    ids = {manifest.trace_id}
    for m, wl, outs in repeats:
        if m.trace_id in ids:  # one measured run counted twice would shrink the spread it reports
            raise ComparisonError(f"repeat {m.trace_id!r} is " + ("the compared trace itself" if m.trace_id ==
                                  manifest.trace_id else "given twice") + ": a repeat is another measured run")
        ids.add(m.trace_id)
        if m.workload_name != manifest.workload_name or m.role != manifest.role:
            raise ComparisonError(f"repeat {m.trace_id!r} is workload {m.workload_name!r} "
                                  f"({_ROLE_WORDS.get(m.role, '?')}), not {manifest.workload_name!r} "
                                  f"({_ROLE_WORDS.get(manifest.role, '?')})")
        run = measured_values(index_workload(wl), outs)[0]
        if run and run in runs:  # a copy of one run under another trace_id: no two measured runs agree to the ns
            first = manifest.trace_id if run == runs[0] else repeats[runs.index(run) - 1][0].trace_id
            raise ComparisonError(f"repeat {m.trace_id!r} holds exactly the measured times of {first!r}: a copy of "
                                  "one run (another trace_id), not another measured run")
        runs.append(run)
    out = []
    for key in METRIC_KEYS:
        means = []
        for run in runs:
            vals = [v for v in run.get(key, {}).values() if isinstance(v, int)]
            if vals:
                means.append(float(np.mean(vals)))
        if len(means) < 2:
            continue
        cv, dev = repeat_spread(means)
        rs = vpb.RepeatSpread(level=key[0], metric=key[1], repeats=len(means))
        if cv is not None:
            rs.cv_pct, rs.max_dev_pct = cv, dev
        out.append(rs)
    return out
