"""Honesty labels and the input checks that refuse a dishonest comparison.

Every report, table and plot carries :func:`honesty_label`: the workload's role and name, the
simulator, the timing model with its calibration status, and the flags (aggregate-only,
IN-SAMPLE, UNMODELLED) that change how a number may be read.
"""

from __future__ import annotations

from unirl_replay.report.keys import ComparisonError
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import replay_pb2 as rpb


_ROLE_WORDS = {cpb.WORKLOAD_ROLE_CALIBRATION: "calibration", cpb.WORKLOAD_ROLE_HOLDOUT: "holdout",
               cpb.WORKLOAD_ROLE_UNLABELLED: "unlabelled"}


#: The calibration statuses a replay writes for each timing-model kind (replay.timing_models, replay.runner: a
#: profile of other hardware becomes UNVALIDATED); any other pair is refused.
_STATUS_OF_KIND = {
    rpb.TIMING_MODEL_KIND_POLYNOMIAL: {rpb.CALIBRATION_STATUS_UNCALIBRATED},
    rpb.TIMING_MODEL_KIND_FIXED: {rpb.CALIBRATION_STATUS_FIXED},
    rpb.TIMING_MODEL_KIND_PROFILE: {rpb.CALIBRATION_STATUS_UNCALIBRATED, rpb.CALIBRATION_STATUS_CALIBRATED,
                                    rpb.CALIBRATION_STATUS_CALIBRATED_PROBE, rpb.CALIBRATION_STATUS_UNVALIDATED},
    rpb.TIMING_MODEL_KIND_HARDWARE_DATABASE: {rpb.CALIBRATION_STATUS_UNVALIDATED},
}


def timing_label(tm: rpb.TimingModel, other_hardware: bool = False) -> str:
    """Readable timing model with its calibration status, e.g. ``"polynomial (UNCALIBRATED)"``.

    ``other_hardware``: the profile was measured on another host than the capture's
    (:func:`unirl_replay.report.conditions.hardware_mismatch`); a CALIBRATED or CALIBRATED+PROBE
    profile then reads ``"profile p.npz (UNVALIDATED on this host: CALIBRATED on other hardware)"``,
    never as a calibrated prediction of this run.

    Raises:
        ComparisonError: the status is unspecified, a polynomial / fixed model claims CALIBRATED
            (a generic or analytic model is never a calibrated prediction), or the status is one no replay
            writes for the model's kind (:data:`_STATUS_OF_KIND`).
    """
    status = rpb.CalibrationStatus.Name(tm.calibration).removeprefix("CALIBRATION_STATUS_").replace(
        "CALIBRATED_PROBE", "CALIBRATED+PROBE")
    if tm.calibration == rpb.CALIBRATION_STATUS_UNSPECIFIED:
        raise ComparisonError("replay result's timing model has no calibration status; refusing to label it")
    if tm.kind in (rpb.TIMING_MODEL_KIND_POLYNOMIAL, rpb.TIMING_MODEL_KIND_FIXED) and \
            tm.calibration in (rpb.CALIBRATION_STATUS_CALIBRATED, rpb.CALIBRATION_STATUS_CALIBRATED_PROBE):
        raise ComparisonError(f"{rpb.TimingModelKind.Name(tm.kind)} timing model labelled CALIBRATED: "
                              "only a measured profile can be a calibrated prediction")
    allowed = _STATUS_OF_KIND.get(tm.kind)
    if allowed is not None and tm.calibration not in allowed:
        # e.g. a profile labelled FIXED read "profile p.npz (FIXED)": a status no replay writes for its kind
        raise ComparisonError(
            f"replay result's timing model is {rpb.TimingModelKind.Name(tm.kind)} labelled {status}: a replay labels "
            f"that kind only {' / '.join(rpb.CalibrationStatus.Name(a).removeprefix('CALIBRATION_STATUS_') for a in sorted(allowed))} "
            "(was the result edited?)")
    if tm.kind == rpb.TIMING_MODEL_KIND_POLYNOMIAL:
        what = "polynomial default"
    elif tm.kind == rpb.TIMING_MODEL_KIND_FIXED:
        pre = f"{tm.prefill_ms:g}" if tm.HasField("prefill_ms") else "?"
        dec = f"{tm.decode_ms:g}" if tm.HasField("decode_ms") else "?"
        what = f"fixed prefill {pre} ms / decode {dec} ms"
    elif tm.kind == rpb.TIMING_MODEL_KIND_PROFILE:
        name = tm.profile_path.rsplit("/", 1)[-1] or "?"
        what = f"profile {name}"
    elif tm.kind == rpb.TIMING_MODEL_KIND_HARDWARE_DATABASE:
        # a GPU database prediction is never calibrated or validated: at most a labelled what-if
        if tm.calibration != rpb.CALIBRATION_STATUS_UNVALIDATED:
            raise ComparisonError("GPU-database timing model not labelled UNVALIDATED: no execution on that "
                                  "hardware was measured for this trace")
        model = tm.model.rstrip("/").rsplit("/", 1)[-1] or "?"
        return (f"WHAT-IF this window on {tm.hardware or '?'} (GPU database, model {model}; UNVALIDATED, "
                "functional_only; not a prediction of the measured run)")
    else:
        raise ComparisonError("replay result's timing model kind is unspecified")
    if other_hardware and tm.calibration in (rpb.CALIBRATION_STATUS_CALIBRATED, rpb.CALIBRATION_STATUS_CALIBRATED_PROBE):
        return f"{what} (UNVALIDATED on this host: {status} on other hardware)"  # a result written before the replay checked the hardware
    if other_hardware and tm.kind == rpb.TIMING_MODEL_KIND_PROFILE and tm.calibration == rpb.CALIBRATION_STATUS_UNVALIDATED:
        return f"{what} (UNVALIDATED on this host: measured on other hardware)"  # the replay stage said so
    return f"{what} ({status})"


def replay_timing_label(tm: rpb.TimingModel) -> str:
    """:func:`timing_label` of a timing model as a replay wrote it, for the lines ``replay`` and ``demo`` print
    before any comparison: a profile the replay labelled UNVALIDATED (measured on other hardware than the
    capture's, ``replay.runner``) reads ``(UNVALIDATED on this host: measured on other hardware)`` as
    ``compare`` says it; every other status as it is."""
    other_hw = tm.kind == rpb.TIMING_MODEL_KIND_PROFILE and tm.calibration == rpb.CALIBRATION_STATUS_UNVALIDATED
    return timing_label(tm, other_hardware=other_hw)


def honesty_label(manifest: mpb.TraceManifest, replay: rpb.ReplayResult, other_hardware: bool = False) -> str:
    """One-line label for every title: role + workload name | simulator | timing model (status)
    [| aggregate-only] [| IN-SAMPLE] [| UNMODELLED: <rules>].

    ``other_hardware``: see :func:`timing_label` (set by ``compare`` when the profile's provenance names
    another CPU than the capture's manifest)."""
    role = _ROLE_WORDS.get(manifest.role, "ROLE UNSPECIFIED")
    parts = [f"{role} workload {manifest.workload_name or manifest.trace_id}",
             f"{replay.simulator.name or 'simulator ?'} {replay.simulator.version}".strip(),
             timing_label(replay.timing_model, other_hardware)]
    if replay.granularity == rpb.RESULT_GRANULARITY_AGGREGATE_ONLY:
        parts.append("aggregate-only")
    if manifest.workload_name and manifest.workload_name in replay.timing_model.calibration_workloads:
        parts.append("IN-SAMPLE")
    if replay.unmodelled_constraints:
        parts.append(unmodelled_words(replay.unmodelled_constraints))
    return " | ".join(parts)


#: rejection rules whose explicit opt-in has another name (the rule is what the result records as dropped,
#: UnmodelledConstraint.rule; the opt-in is what the user passed to --allow-unmodelled)
OPT_IN_OF = {"batch_boundary.unexpressible": "batch_boundary.open_loop"}


def unmodelled_words(constraints) -> str:
    """``UNMODELLED: rule, ...`` for a result's dropped constraints, each rule with the opt-in that dropped it where
    the two differ (``batch_boundary.unexpressible (opt-in batch_boundary.open_loop)``), and the client limit
    replayed as lanes named as the pessimistic bound it is (``engine_client.inflight_limit.as_lanes``: the title of
    either bound said ``engine_client.inflight_limit`` alone, so the two read alike)."""
    words = {}
    for c in constraints:
        r = c.rule
        if r == "engine_client.inflight_limit" and "lanes = the client limit" in c.reason:
            w = f"{r}.as_lanes (pessimistic bound)"
        else:
            w = f"{r} (opt-in {OPT_IN_OF[r]})" if r in OPT_IN_OF else r
        words.setdefault(w, None)
    return "UNMODELLED: " + ", ".join(words)


def check_identity(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> None:
    """The replay result is of this trace (its trace id, its workload file). Run before the rows are checked
    against the trace's ids, so a replay of another trace says so instead of naming one unmatched row."""
    if replay.trace_id and manifest.trace_id and replay.trace_id != manifest.trace_id:
        raise ComparisonError(f"replay result is of trace {replay.trace_id[:120]!r}, not {manifest.trace_id[:120]!r}: "
                              "compare it with the trace directory that was replayed")
    wl = [a.sha256 for a in manifest.artifacts if a.kind == mpb.ARTIFACT_KIND_WORKLOAD]
    if replay.workload_sha256 and wl and wl[0] and replay.workload_sha256 != wl[0]:
        raise ComparisonError(f"the replay result is of another workload file (sha256 {replay.workload_sha256[:12]}...; "
                              f"this trace's workload is {wl[0][:12]}...): compare it with the trace directory "
                              "that was replayed (a `recode`d copy of a trace has its own workload file and digest)")


def check_inputs(manifest: mpb.TraceManifest, replay: rpb.ReplayResult) -> None:
    check_identity(manifest, replay)
    if manifest.window.clock_domain != cpb.CLOCK_DOMAIN_CAPTURE_MONOTONIC:
        raise ComparisonError("trace times are not on CLOCK_DOMAIN_CAPTURE_MONOTONIC "
                              f"({cpb.ClockDomain.Name(manifest.window.clock_domain)}): cannot pair boundaries")
    if replay.granularity == rpb.RESULT_GRANULARITY_UNSPECIFIED:
        raise ComparisonError("replay result granularity is unspecified")
    if manifest.role == cpb.WORKLOAD_ROLE_HOLDOUT and manifest.workload_name in replay.timing_model.calibration_workloads:
        raise ComparisonError(f"holdout workload {manifest.workload_name!r} is among the profile's calibration "
                              "workloads: calibration and holdout are never mixed")
