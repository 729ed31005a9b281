"""Runner: workload -> upstream Dynamo Replay (one single-engine replay per engine) -> ReplayResult.

Reads only the workload and the manifest (never measured outcomes). Steps:

1. :func:`~unirl_replay.replay.support.check_supported` rejects what upstream cannot express
   (typed errors, before any upstream call) and plans one replay per engine.
2. Per engine, the converter builds the upstream file. With a declared warm cache the warm-ups
   are replayed alone first to measure their duration ``W`` (ms); the real requests are then
   placed ``W`` later in the same file and every result is shifted back by ``W``, so warm-ups
   appear in no row and no metric (``makespan_ns`` included).
3. The simulator (``simulator=``: ``dynamo`` by default, or ``aisimulate[==VERSION]``; one
   interface, :mod:`unirl_replay.replay.simulators`) runs upstream; rows are mapped back by ``request_id``
   (agentic_mooncake echoes it) or by signature (mooncake; ambiguous -> AGGREGATE_ONLY).
4. A request with n samples gets arrival / scheduled / first token = min over its samples and
   completion = max over its samples (all samples must complete); cached tokens = min.
5. :mod:`unirl_replay.replay.derive` gives trajectories, groups and batches.

Clock: ns on CLOCK_DOMAIN_SIMULATED; 0 is the first real arrival of the replay. Engines are
replayed independently (no barrier between them); each engine's 0 is placed at its first
observed arrival's offset from the earliest engine's, so groups and batches spanning
independent engines are derived on one clock.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from unirl_replay import SCHEMA_VERSION
from unirl_replay.replay import mapback
from unirl_replay.contract.gc_pause import paused_gc
from unirl_replay.contract.out_dir import id_file_stem
from unirl_replay.replay.convert import CONVERTERS, mooncake
from unirl_replay.replay.convert.agentic_mooncake import MODEL
from unirl_replay.replay.convert.common import Conversion, engine_args, ms_to_ns
from unirl_replay.replay.convert.sidecar import read_block_size
from unirl_replay.replay.workload import EnginePlan, WorkloadIndex
from unirl_replay.replay.support import ColumnsDeclined, check_supported
from unirl_replay.contract.workload_columns import read_columns
from unirl_replay.replay.derive import (derive_batches, derive_groups_values, derive_trajectories_columns,
                                        derive_trajectories_values)
from unirl_replay.contract.errors import TraceFormatError, UnsupportedWorkloadError
from unirl_replay.replay.simulators import DEFAULT_SIMULATOR, Simulator, SimulatorJob, get_simulator
from unirl_replay.replay.timing_models import (
    TimingModelError,
    parse_timing_model,
    profile_extrapolation_problem,
    profile_hardware_problem,
    profile_model_problem,
)
from unirl_replay.v1 import common_pb2, manifest_pb2, replay_pb2

RESULT_FILE = "replay_result.json"
FORMATS = tuple(CONVERTERS)


def _run(sim: Simulator, conv: Conversion, path: Path, eargs: dict):
    conv.write(path)  # rows are streamed to the file, then dropped (mapping back needs none)
    conv.release()
    engine = {k: v for k, v in eargs["engine"].items() if k != "timing_model"}
    # mooncake's hash block size is read back from the file's sidecar (what the file says it carries)
    block_size = read_block_size(path) if conv.trace_format == "mooncake" else conv.block_size
    return sim.run(SimulatorJob(path, conv.trace_format, engine, eargs["engine"]["timing_model"],
                                lanes=conv.lanes, block_size=block_size, execution_model=MODEL))


def _safe(name: str, among=None) -> str:
    return id_file_stem(name, among)  # bounded and collision-free: two engines never share a converted file


def _replay_engine(sim: Simulator, plan: EnginePlan, index: WorkloadIndex, fmt: str, tm: dict, work: Path,
                   digest: str) -> tuple[Conversion, list | dict | None, dict, int, list[str]]:
    """Replay one engine. Returns (conversion, rows, upstream summary, upstream wall ns, notes):
    rows = the upstream's row list (agentic_mooncake: mapped back by id later, see
    :func:`mapback.predicted_values_mapped`), {(request_id, sample): row} (mooncake, matched by
    signature) or None when rows cannot be mapped."""
    convert = CONVERTERS[fmt]
    eargs, notes = engine_args(plan.engine, tm)
    stem = f"{_safe(plan.engine.engine_id)}.{fmt}"
    wall = 0
    lead = 0.0
    if plan.warmups:
        warm = convert(plan, index, include_real=False, digest=digest)
        run = _run(sim, warm, work / f"{stem}.warmup.jsonl", eargs)
        wall += run.wall_ns
        notes.extend(n for n in run.notes if n not in notes)
        lead = max(r["terminal_time_ms"] for r in run.per_request)
        notes.append(f"engine {plan.engine.engine_id!r}: warm-ups took {lead:g} ms simulated; real "
                     "arrivals were placed after them and all times shifted back")
    conv = convert(plan, index, lead_ms=lead, digest=digest)
    run = _run(sim, conv, work / f"{stem}.jsonl", eargs)
    wall += run.wall_ns
    notes.extend(n for n in run.notes if n not in notes)
    if run.per_request is None:
        return conv, None, run.summary, wall, notes
    if fmt == "mooncake":
        return conv, mooncake.match_rows(conv, run.per_request), run.summary, wall, notes
    rows = run.per_request  # mapped back by upstream id (mapback.map_rows) with the values
    return conv, rows if isinstance(rows, list) else list(rows), run.summary, wall, notes


def _predicted(req, rows: dict, engine_id: str, shift_ms: float, offset_ns: int) -> replay_pb2.PredictedRequest:
    samples = [rows.get((req.request_id, s)) for s in range(req.num_samples)]
    p = replay_pb2.PredictedRequest(request_id=req.request_id, engine_id=engine_id)
    if any(s is None for s in samples):
        return p

    def t(ms):
        return ms_to_ns(ms - shift_ms) + offset_ns

    p.arrival_ns = min(t(s["arrival_time_ms"]) for s in samples)
    admits = [s.get("first_admit_ms") for s in samples if s.get("first_admit_ms") is not None]
    if admits:
        p.scheduled_ns = min(t(a) for a in admits)
    firsts = [s.get("first_token_ms") for s in samples if s.get("first_token_ms") is not None]
    if firsts:
        p.first_token_ns = min(t(f) for f in firsts)
    if all(s.get("terminal_status") == "completed" and s.get("terminal_time_ms") is not None for s in samples):
        p.completion_ns = max(t(s["terminal_time_ms"]) for s in samples)
    p.cached_tokens = min(int(s.get("reused_input_tokens") or 0) for s in samples)
    return p


class Handover:
    """What :func:`replay_trace` / :func:`replay_workload` hand to a caller that passes one
    (``handover=``) instead of dropping it when they return; without one nothing is kept.

    * ``upstream``: the simulator's answers, per engine ``(conversion, rows, summary, wall ns,
      notes)``. The rows are the upstream's per-request dicts (37 keys each, nested), about
      0.45 s per 100k rows to free: whoever holds the handover frees them when it drops it, or
      leaves them to the process exit (the ``unirl-replay`` program:
      :func:`unirl_replay.cli.main.run`).
    * ``requests``: when ``ReplayResult.requests`` was built from value columns (one engine,
      every request predicted, :func:`mapback.predicted_columns`), ``(request ids, engine id,
      (arrival, scheduled, first token, completion, cached tokens))``, the lists the messages
      were made of, in their order: :func:`write_result` writes their JSON from these instead of
      reading the 100k messages back (:func:`json_write.to_json_bytes` ``columns=``). None
      otherwise.
    """

    __slots__ = ("upstream", "requests")

    def __init__(self) -> None:
        self.upstream: list = []
        self.requests: tuple | None = None


def replay_workload(index: WorkloadIndex, manifest: manifest_pb2.TraceManifest, timing_model: str, *,
                    trace_format: str = "agentic_mooncake", work_dir: str | Path | None = None,
                    workload_sha256: str = "", unmodelled: Iterable[str] = (),
                    simulator: str | Simulator = DEFAULT_SIMULATOR,
                    handover: Handover | None = None) -> replay_pb2.ReplayResult:
    """Replay a workload in the real upstream simulator and build the ReplayResult.

    Args:
        index: the trace's workload records.
        manifest: its manifest (engines, cache state, policy, trace id).
        timing_model: ``polynomial`` | ``fixed:P,D`` | ``profile:NPZ``.
        trace_format: ``agentic_mooncake`` (default) or ``mooncake``.
        work_dir: where the upstream input files go (a temporary directory when None).
        workload_sha256: digest of the replayed workload artifact.
        unmodelled: rejection rules to drop instead (explicit, labelled opt-in; only those of
            ``support.UNMODELLED_ALLOWED``, e.g. ``"engine_client.inflight_limit"``). Each dropped
            constraint goes to ``ReplayResult.unmodelled_constraints`` and the notes.
        simulator: ``dynamo`` (default: the installed ai-dynamo) | ``aisimulate`` |
            ``aisimulate==VERSION`` (an exact dev build, run in its own cached environment), or an
            adapter object (:class:`~unirl_replay.replay.simulators.Simulator`).
        handover: a :class:`Handover` that receives the upstream's answers (then not freed when
            this returns) and the request columns; None: nothing kept.

    Raises:
        UnsupportedWorkloadError, TraceFormatError: before any upstream call.
        TimingModelError: bad timing-model spec, or one the simulator does not accept.
        SimulatorSpecError: bad simulator spec. MissingEnvironmentError: the simulator is missing.
    """
    if trace_format not in CONVERTERS:
        raise UnsupportedWorkloadError("format.unknown", f"unknown format {trace_format!r}; use {FORMATS}")
    sim = get_simulator(simulator) if isinstance(simulator, str) else simulator
    engines = {e.engine_id: e for e in manifest.engines}
    cache_state = manifest.cache_state or common_pb2.CACHE_STATE_KIND_COLD
    policy = manifest.policy.policy_version if manifest.policy.HasField("policy_version") else None
    plans, notes = check_supported(index, engines, cache_state=cache_state,
                                   window_policy_version=policy, trace_format=trace_format,
                                   unmodelled=unmodelled)
    tm_msg, tm_dict = parse_timing_model(timing_model)
    why = profile_model_problem(tm_msg, manifest) or profile_extrapolation_problem(
        tm_msg, [p.engine for p in plans.values()])
    if why:
        raise TimingModelError(why)
    other_hw = profile_hardware_problem(tm_msg, manifest)
    if other_hw:  # CALIBRATED is a profile of the trace's own engine configuration: this one is not
        status = replay_pb2.CalibrationStatus.Name(tm_msg.calibration).removeprefix("CALIBRATION_STATUS_").replace(
            "CALIBRATED_PROBE", "CALIBRATED+PROBE")
        tm_msg.calibration = replay_pb2.CALIBRATION_STATUS_UNVALIDATED
        notes.append(f"timing model UNVALIDATED for this capture: profile {tm_msg.profile_path.rsplit('/', 1)[-1]} is "
                     f"{status} on other hardware ({other_hw}); it is no calibrated prediction of this run "
                     "(recalibrate on the capture's host: `unirl-replay calibrate --like TRACE`)")
    if tm_dict["type"] not in sim.timing_types:
        spelled = {"fixed": "fixed:P,D", "polynomial": "polynomial", "external": "profile:NPZ", "default": "aic:HW:MODEL"}
        which = "aisimulate" if "AISimulate" in type(sim).__name__ else "dynamo (the default)"
        raise TimingModelError(f"timing model {timing_model!r} is not available on --simulator {which}; it takes "
                               "--timing-model "
                               f"{' | '.join(spelled.get(t, t) for t in sim.timing_types)}"
                               + ("; the GPU database (aic:) runs on --simulator aisimulate"
                                  if tm_dict["type"] not in ("fixed", "polynomial", "external") else ""))
    ident = sim.identity()
    res = replay_pb2.ReplayResult(
        schema_version=SCHEMA_VERSION, trace_id=manifest.trace_id, workload_sha256=workload_sha256,
        simulator=replay_pb2.SimulatorIdentity(name=ident.name, version=ident.version,
                                               trace_format=trace_format, components=ident.components),
        timing_model=tm_msg, cache_state=cache_state)
    res.engines.extend(p.engine for p in plans.values())
    res.unmodelled_constraints.extend(c for p in plans.values() for c in p.unmodelled)

    with tempfile.TemporaryDirectory(prefix="unirl-replay-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        done = {eid: _replay_engine(sim, p, index, trace_format, tm_dict, work, workload_sha256)
                for eid, p in plans.items()}
    if handover is not None:
        handover.upstream.append(done)

    global_origin = min((c.origin_ns for c, *_ in done.values()), default=0)
    wall = 0
    for eid, (conv, rows, summary, w, enotes) in done.items():
        wall += w
        notes.extend(n for n in enotes if n not in notes)
        if conv.lanes is not None:
            notes.append(f"engine {eid!r}: trajectory slots -> agentic_lanes={conv.lanes}; plays start in "
                         "Trajectory.start_order as lanes free up (observed root arrivals are not used)")
    samples = index.num_samples()
    all_ids = index.request_ids()
    counts = index.columns.num_samples if index.columns is not None else [samples[q] for q in all_ids]
    if max(counts, default=1) > 1:  # = any(n > 1 ...): counts are ints
        notes.append("fan-out: a request with n samples ran as n upstream sequences with identical hash "
                     "ids arriving together (see docs/replay-mapping.md); its first token is the min and "
                     "its completion the max over its samples")
    if len(done) > 1:
        notes.append("engines were replayed independently (one single-worker replay each, no barrier); "
                     "each engine's simulated 0 sits at its first observed arrival's offset")
    res.simulator_wall_ns = wall
    if tm_msg.kind == replay_pb2.TIMING_MODEL_KIND_HARDWARE_DATABASE:
        quals = sorted({str(s.get("agentic_qualification")) for _, _, s, *_r in done.values()
                        if s.get("agentic_qualification")})
        notes.append(f"UNVALIDATED what-if: {tm_msg.hardware} GPU database ({ident.name} {ident.version}), model "
                     f"{tm_msg.model}; no execution on that hardware was measured for this trace, so this is "
                     "not a calibrated or validated prediction (upstream qualification: "
                     f"{', '.join(quals) or 'not reported'})")

    if any(rows is None for _, rows, *_ in done.values()):
        if any(p.warmups for p in plans.values()):
            raise UnsupportedWorkloadError(
                "cache_warmup.aggregate_only",
                "upstream rows cannot be mapped back per request and the summary would include the "
                "warm-up requests", [w.warmup_id for p in plans.values() for w in p.warmups])
        res.granularity = replay_pb2.RESULT_GRANULARITY_AGGREGATE_ONLY
        for eid, (conv, rows, summary, *_r) in done.items():
            prefix = "" if len(done) == 1 else f"{eid}/"
            for k, v in summary.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
                    res.aggregate[prefix + k] = float(v)
        notes.append("AGGREGATE_ONLY: upstream rows could not be mapped to request ids unambiguously "
                     "(mooncake rows carry no ids); nothing per request, group or batch is reconstructed")
        res.notes.extend(notes)
        return res

    res.granularity = replay_pb2.RESULT_GRANULARITY_PER_REQUEST
    # values per request (mapback.predicted_values = mapback.predicted_request = _predicted, tested);
    # the messages are added to the result once, in workload order
    sample_of = dict(zip(all_ids, counts))  # a plain dict: read once per request below
    cols = None
    if len(done) == 1 and len(sample_of) == len(all_ids):  # one engine, unique ids: maybe columns
        (eid, (conv, rows, *_r)), = done.items()
        if not isinstance(rows, dict):
            cols = mapback.predicted_columns(conv.sequences, rows, all_ids, sample_of, conv.lead_ms,
                                             conv.origin_ns - global_origin)
    if cols is not None:  # the positional case: values as columns in workload order (no dict)
        del sample_of
        _columns_result(res, index, all_ids, eid, cols, samples, notes)
        res.notes.extend(notes)
        if handover is not None:
            handover.requests = (all_ids, eid, cols)
        return res
    values: dict[str, tuple | None] = {}
    engine_of: dict[str, str] = {}
    for eid, (conv, rows, *_r) in done.items():
        ids = plans[eid].ids()
        if isinstance(rows, dict):  # mooncake: matched by signature
            got = mapback.predicted_values_bulk(rows, ids, sample_of, conv.lead_ms, conv.origin_ns - global_origin)
        else:  # = predicted_values_bulk(map_rows(conv.sequences, rows), ...)
            got = mapback.predicted_values_mapped(conv.sequences, rows, ids, sample_of, conv.lead_ms,
                                                  conv.origin_ns - global_origin)
        if values:
            values.update(got)
        else:
            values = got  # one engine: no copy
        engine_of.update(dict.fromkeys(ids, eid))
    del sample_of
    reqs = res.requests
    add, add_predicted = reqs.add, mapback.add_predicted
    incomplete = []
    ends = []
    for q in all_ids:
        v = values[q]
        if v is not None and v[1] is not None and v[2] is not None and v[3] is not None:
            a, sch, f, e, cached = v  # every field: add_predicted's one-call case, inline
            add(request_id=q, engine_id=engine_of[q], arrival_ns=a, scheduled_ns=sch, first_token_ns=f,
                completion_ns=e, cached_tokens=cached)
            ends.append(e)
            continue
        add_predicted(reqs, q, engine_of[q], v)
        if v is None or v[3] is None:
            incomplete.append(q)
        else:
            ends.append(v[3])
    makespan = max(ends) if ends else None
    del engine_of, ends
    if incomplete:
        notes.append(f"{len(incomplete)} requests did not complete in the simulator (e.g. "
                     f"{incomplete[:3]}); their completion is absent")
    if makespan is not None:
        res.makespan_ns = makespan

    by_traj: dict[str, list[str]] = {}
    for q, tid in zip(all_ids, index.trajectory_of()):
        if tid:
            by_traj.setdefault(tid, []).append(q)
    traj_ends = derive_trajectories_values(values, index.trajectories.values(), by_traj, res.trajectories)
    groups = derive_groups_values(index.groups.values(), values, traj_ends, samples, res.groups)
    res.rollout_batches.extend(derive_batches(index.batches.values(), groups))
    res.notes.extend(notes)
    return res


def _columns_result(res: replay_pb2.ReplayResult, index: WorkloadIndex, all_ids: list[str], engine_id: str,
                    cols: tuple, samples, notes: list[str]) -> None:
    """The per-request part of :func:`replay_workload` from value columns aligned with ``all_ids``
    (:func:`mapback.predicted_columns`: one engine, every request predicted): the same requests,
    makespan, notes, trajectories, groups and batches as the values-dict path (tested), the
    trajectories in numpy (:func:`derive_trajectories_columns`) and the values dict built only
    for what reads it (groups; a trajectory no request names)."""
    reqs = res.requests
    add, add_predicted = reqs.add, mapback.add_predicted
    incomplete = []
    for q, a, sch, f, e, cached in zip(all_ids, *cols):
        if sch is not None and f is not None and e is not None:  # add_predicted's one-call case, inline
            add(request_id=q, engine_id=engine_id, arrival_ns=a, scheduled_ns=sch, first_token_ns=f,
                completion_ns=e, cached_tokens=cached)
            continue
        add_predicted(reqs, q, engine_id, (a, sch, f, e, cached))
        if e is None:
            incomplete.append(q)
    completion = cols[3]
    ends = completion if None not in completion else [e for e in completion if e is not None]
    if incomplete:
        notes.append(f"{len(incomplete)} requests did not complete in the simulator (e.g. "
                     f"{incomplete[:3]}); their completion is absent")
    if ends:
        res.makespan_ns = max(ends)
    del ends
    memo: list = []

    def values() -> dict[str, tuple | None]:
        if not memo:
            memo.append(dict(zip(all_ids, zip(*cols))))
        return memo[0]
    traj_ends = derive_trajectories_columns(index.trajectories, index.trajectory_of(), cols[0], completion,
                                            values, res.trajectories)
    groups = derive_groups_values(index.groups.values(), values() if index.groups else {}, traj_ends, samples,
                                  res.groups)
    res.rollout_batches.extend(derive_batches(index.batches.values(), groups))


@paused_gc()
def replay_trace(trace_dir: str | Path, timing_model: str, *, trace_format: str = "agentic_mooncake",
                 work_dir: str | Path | None = None, unmodelled: Iterable[str] = (),
                 simulator: str | Simulator = DEFAULT_SIMULATOR,
                 handover: Handover | None = None, columns=None) -> replay_pb2.ReplayResult:
    """Open a trace directory (workload + manifest only) and :func:`replay_workload` it.

    ``simulator``: ``dynamo`` (default) | ``aisimulate[==VERSION]``; ``handover``: what to keep
    for the caller (see :func:`replay_workload`); ``columns``: the workload already read by
    ``read_columns`` from this trace a moment ago (the gate's, ``contract.gate.gate_read``, its
    digest verified then): not read (nor its digest verified) again, as in :func:`convert_trace`.
    """
    from unirl_replay.contract import trace_io
    from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD

    trace = trace_io.open_trace(trace_dir, verify_digests=columns is None)
    sha = trace.artifact(ARTIFACT_KIND_WORKLOAD).sha256
    kw = dict(trace_format=trace_format, work_dir=work_dir, workload_sha256=sha, unmodelled=unmodelled,
              simulator=simulator, handover=handover)
    cols = None
    if trace_format == "agentic_mooncake":
        cols = columns if columns is not None else read_columns(trace)
    del columns
    if cols is not None:  # columns: no Request message kept; on any doubt the messages decide
        try:
            return replay_workload(WorkloadIndex.from_columns(cols), trace.manifest, timing_model, **kw)
        except ColumnsDeclined:
            pass
        del cols
    index = WorkloadIndex.from_records(rec for _, rec in trace.iter_workload())
    return replay_workload(index, trace.manifest, timing_model, **kw)


@paused_gc()
def convert_trace(trace_dir: str | Path, out_file: str | Path, *, trace_format: str = "agentic_mooncake",
                  engine_id: str | None = None, unmodelled: Iterable[str] = (), columns=None) -> list[Path]:
    """Write the upstream input file(s) of a trace (no upstream call).

    One engine: ``out_file``. Several: ``<stem>.<engine_id><suffix>`` each, unless ``engine_id``
    picks one. Warm-ups are written first with ``lead_ms = 0`` (the runner measures the lead).
    ``columns``: the workload already read by ``read_columns`` from this trace a moment ago (the
    gate's, ``contract.gate.gate_read``; its digest verified then): not read again.
    Returns the written paths.
    """
    from unirl_replay.contract import trace_io
    from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD

    trace = trace_io.open_trace(trace_dir, verify_digests=columns is None)
    m = trace.manifest
    policy = m.policy.policy_version if m.policy.HasField("policy_version") else None
    kw = dict(cache_state=m.cache_state or common_pb2.CACHE_STATE_KIND_COLD, window_policy_version=policy,
              trace_format=trace_format, unmodelled=unmodelled)
    engines = {e.engine_id: e for e in m.engines}
    plans = None
    cols = None
    if trace_format == "agentic_mooncake":
        cols = columns if columns is not None else read_columns(trace)
    del columns
    if cols is not None:  # columns: no Request message kept; on any doubt the messages decide
        index = WorkloadIndex.from_columns(cols)
        try:
            plans, _ = check_supported(index, engines, **kw)
        except ColumnsDeclined:
            plans = None
        del cols
    if plans is None:
        index = WorkloadIndex.from_records(rec for _, rec in trace.iter_workload())
        plans, _ = check_supported(index, engines, **kw)
    if engine_id is not None:
        if engine_id not in plans:
            known = sorted(plans)
            raise TraceFormatError(f"--engine {engine_id!r}: no engine of that id has requests in this trace; its "
                                   f"engines: {', '.join(map(repr, known[:10]))}" + (" ..." if len(known) > 10 else ""),
                                   file=str(trace_dir), rule="convert.engine")
        plans = {engine_id: plans[engine_id]}
    out = Path(out_file)
    targets = {eid: out if len(plans) == 1 else out.with_name(f"{out.stem}.{_safe(eid, plans)}{out.suffix}") for eid in plans}
    # every engine's target is checked before any is written (a refusal of the k-th left the first k-1 files
    # written), and a failure part way removes the files this call created
    from unirl_replay.replay.convert import sidecar
    for p in targets.values():
        sidecar.guard_target(p)
    created = [q for p in targets.values() for q in (p, sidecar.sidecar_path(p)) if not os.path.lexists(q)]
    paths = []
    try:
        for eid, plan in plans.items():
            conv = CONVERTERS[trace_format](plan, index, digest=trace.artifact(ARTIFACT_KIND_WORKLOAD).sha256)
            conv.unmodelled = tuple(plan.unmodelled)  # the sidecar says what this input lacks
            paths.append(conv.write(targets[eid]))
    except BaseException:
        for q in created:
            with contextlib.suppress(OSError):
                q.unlink()
        raise
    return paths


def write_result(out_dir: str | Path, result: replay_pb2.ReplayResult, *, handover: Handover | None = None) -> Path:
    """Write ``out_dir/replay_result.json`` in the project's JSON profile (atomic).

    ``handover``: the one :func:`replay_trace` filled for this ``result``: its request columns
    (when there are) give the requests' text instead of the 100k messages read back (the same
    bytes; :func:`json_write.to_json_bytes` checks them against the messages at 65 rows)."""
    from unirl_replay.contract import trace_io

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULT_FILE
    columns = None
    if handover is not None and handover.requests is not None:
        ids, engine_id, (arrival, scheduled, first, completion, cached) = handover.requests
        columns = {"requests": {"request_id": ids, "engine_id": [engine_id] * len(ids), "arrival_ns": arrival,
                                "scheduled_ns": scheduled, "first_token_ns": first, "completion_ns": completion,
                                "cached_tokens": cached}}
    trace_io.write_message_json(path, result, columns=columns)
    return path
