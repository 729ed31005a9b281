"""Write a report directory: the matched comparison of one replay result with a trace's outcomes.

Reads the trace (manifest, workload) and its measured outcomes, the replay result (a
``replay_result.json`` file or the directory holding it), and writes ``validation_report.json``,
the PNG plots and ``timeline.perfetto.json`` into one directory.
"""

from __future__ import annotations

import re
from pathlib import Path

from unirl_replay.contract.errors import TraceFormatError

REPORT_FILE = "validation_report.json"
TABLE_FILE = "table.txt"
PERFETTO_FILE = "timeline.perfetto.json"


def _load_trace(trace_dir: str):
    from unirl_replay.contract.gate import gate
    from unirl_replay.contract.outcomes_io import iter_outcomes

    trace = gate(trace_dir, "compare")  # everything validate checks, outcomes included
    workload = [rec for _, rec in trace.iter_workload()]
    outcomes = [rec for _, rec in iter_outcomes(trace)]
    return trace.manifest, workload, outcomes


def _result_file(p: Path) -> Path:
    if p.is_dir():
        f = p / "replay_result.json"
        if not f.is_file():
            raise TraceFormatError(f"{p} holds no replay_result.json", file=str(p), rule="compare.no_replay_result")
        return f
    return p


#: the rules of a file that is no ReplayResult at all (not one JSON object, or not the message's keys)
_NOT_A_RESULT_RULES = ("json.parse", "json.profile")


def read_replay_result(path: Path, what: str = "REPLAY_RESULT"):
    """The ReplayResult in ``path``. A file that is none (``convert``'s upstream input, a compare report, another
    JSON file) is refused with its own rule and what to pass instead (``what``: the argument or option it came from);
    protobuf's list of the message's fields in lowerCamelCase is left out of that message."""
    from unirl_replay.contract.trace_io import read_message_json
    from unirl_replay.v1 import replay_pb2

    try:
        return read_message_json(path, replay_pb2.ReplayResult)
    except TraceFormatError as e:
        if e.rule not in _NOT_A_RESULT_RULES:
            raise
        text = str(e).split(f"[{e.rule}]: ", 1)[-1].split(" Available Fields", 1)[0].rstrip().rstrip(".")
        if path.with_name(path.name + ".unirl-replay.json").is_file():
            why = ("it is the upstream input `unirl-replay convert` wrote (its sidecar is next to it); replay the "
                   "trace with `unirl-replay replay TRACE_DIR --timing-model MODEL --out DIR` and pass DIR")
        else:
            why = ("pass the replay_result.json that `unirl-replay replay TRACE_DIR --timing-model MODEL --out DIR` "
                   "wrote, or DIR")
        raise TraceFormatError(f"{text}; {what} {str(path)!r} is not a replay result: {why}", file=e.file,
                               line=e.line, record_id=e.record_id, rule=e.rule) from None


def load_timing_model(replay, replay_path: Path, engines=()):
    """The replay's timing model for the profile check: a profile path as given, else relative to the
    replay result's directory and its parents (the replay may have run from another directory). A profile
    that gives, off its grid, a pass or step above the bound of every timing model where one of ``engines``
    (the trace's) runs is not evaluated (its reason says why: ``profile_npz.extrapolation_problem``, what
    ``replay`` refuses; the error decomposition's int64 ns overflowed on it, a traceback)."""
    from unirl_replay.contract.profile_npz import extrapolation_problem
    from unirl_replay.report.timing_eval import step_model

    dirs = [replay_path.resolve().parent, *replay_path.resolve().parent.parents][:6]
    model, prov, why = step_model(replay.timing_model, 0, search_dirs=dirs)
    if model is not None and model.kind == "profile":
        for engine in engines:
            problem = extrapolation_problem(model.tables, replay.timing_model.profile_path, engine)
            if problem:
                return None, prov, f"{problem}: the model is not evaluated"
    return model, prov, why
_PREDICTED_TIMES = ("arrival_ns", "scheduled_ns", "first_token_ns", "completion_ns")
#: the latest predicted time (ns from the replay's start) a result may hold: 2^50 ns, about 13 days of simulated
#: time, far past any capture window; a larger value is no replay's (an edited or corrupt result), and sums of
#: such times over a trace's batches would not fit the report's int64 fields
MAX_PREDICTED_NS = 1 << 50


#: the derived rows of a ReplayResult: (field, id key, workload record kind, its times in order)
_DERIVED = (("trajectories", "trajectory_id", "trajectory", ("start_ns", "end_ns")),
            ("groups", "group_id", "group", ("completed_ns",)),
            ("rollout_batches", "rollout_batch_id", "rollout_batch", ("ready_ns",)))


def _check_rows(path: Path, replay, request_ids: set[str] | None, derived_ids: dict[str, set[str]] | None = None) -> None:
    """The ReplayResult contract (replay.proto): one row per ``Request.request_id`` of the replayed trace (no id
    twice, none the trace lacks), and a row's times >= 0 and in order (arrival <= scheduled <= first token
    <= completion); one row per trajectory, group and rollout batch id (``derived_ids``: the trace's, by
    workload record kind: none it lacks), their times >= 0 (a trajectory's start <= end)."""
    def esc(i: str) -> str:
        return i.encode("unicode_escape").decode()[:120]

    seen: set[str] = set()
    for r in replay.requests:
        if r.request_id in seen:
            raise TraceFormatError(f"request {r.request_id!r} has two rows (one row per request_id)", file=path.name,
                                   record_id=esc(r.request_id), rule="id.duplicate")
        seen.add(r.request_id)
        if request_ids is not None and r.request_id not in request_ids:
            raise TraceFormatError(f"request {r.request_id!r} is no request of the trace compared: a replay of "
                                   "another workload?", file=path.name, record_id=esc(r.request_id),
                                   rule="replay.unmatched")
        times = [(f, getattr(r, f)) for f in _PREDICTED_TIMES if r.HasField(f)]
        _time_range(path, "", times, esc(r.request_id))
        neg = [f"{f} = {v}" for f, v in times if v < 0]
        bad = [f"{a} {x} > {b} {y}" for (a, x), (b, y) in zip(times, times[1:]) if x > y]
        if neg or bad:
            raise TraceFormatError(f"predicted times {'negative' if neg else 'out of order'}: {', '.join(neg or bad)}",
                                   file=path.name, record_id=esc(r.request_id), rule="time.order")
    for name, key, kind, fields in _DERIVED:
        rows = getattr(replay, name)
        ids = [getattr(x, key) for x in rows]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise TraceFormatError(f"{key} {dup[0]!r} has two rows", file=path.name, record_id=esc(dup[0]),
                                   rule="id.duplicate")
        known = (derived_ids or {}).get(kind)
        for x in rows:
            rid = getattr(x, key)
            if known is not None and rid not in known:
                raise TraceFormatError(f"{kind} {rid!r} is no {kind} of the trace compared: a replay of another "
                                       "workload?", file=path.name, record_id=esc(rid), rule="replay.unmatched")
            times = [(f, getattr(x, f)) for f in fields if x.HasField(f)]
            _time_range(path, f"{kind} ", times, esc(rid))
            neg = [f"{f} = {v}" for f, v in times if v < 0]
            bad = [f"{a} {u} > {b} {w}" for (a, u), (b, w) in zip(times, times[1:]) if u > w]
            if neg or bad:
                raise TraceFormatError(f"predicted {kind} times {'negative' if neg else 'out of order'}: "
                                       f"{', '.join(neg or bad)}", file=path.name, record_id=esc(rid), rule="time.order")


def _time_range(path: Path, what: str, times: list, record_id: str) -> None:
    """Refuse (TraceFormatError, rule replay.time_range) a predicted time beyond :data:`MAX_PREDICTED_NS`."""
    big = [f"{f} = {v}" for f, v in times if v > MAX_PREDICTED_NS]
    if big:
        raise TraceFormatError(f"predicted {what}time {big[0]} ns is past {MAX_PREDICTED_NS} ns (about 13 days of "
                               "simulated time): no replay wrote it (was the result edited?)", file=path.name,
                               record_id=record_id, rule="replay.time_range")


def _check_result(path: Path, replay, request_ids: set[str] | None = None,
                  derived_ids: dict[str, set[str]] | None = None) -> None:
    """A replay result no v1 reader may act on: another schema version, unknown enum numbers, ids with control
    characters, rows the contract does not allow (:func:`_check_rows`; ``request_ids``, ``derived_ids``: the
    compared trace's)."""
    from unirl_replay import SCHEMA_VERSION
    from unirl_replay.contract.message_guard import id_problem, unknown_enums
    from unirl_replay.v1 import replay_pb2 as rpb

    if replay.schema_version and replay.schema_version != SCHEMA_VERSION:
        raise TraceFormatError(f"schema_version is {replay.schema_version[:64]!r}; this reader reads only "
                               f"{SCHEMA_VERSION!r} replay results", file=path.name, rule="replay.schema_version")

    bad = unknown_enums(replay)
    if bad:
        raise TraceFormatError(f"{bad[0]}: no such value in unirl_replay.v1 (v1 readers reject unknown enum numbers)"
                               + (f"; {len(bad) - 1} more" if len(bad) > 1 else ""), file=path.name, rule="enum.unknown")
    for r in replay.requests:
        why = id_problem(r.request_id) or id_problem(r.engine_id)
        if why:
            raise TraceFormatError(why, file=path.name, record_id=r.request_id.encode("unicode_escape").decode()[:120],
                                   rule="id.invalid")
    if replay.granularity == 0:  # RESULT_GRANULARITY_UNSPECIFIED: every replay writes one (e.g. a `{}` file)
        raise TraceFormatError("granularity is unspecified: no replay wrote this result (every replay result says "
                               "per-request or aggregate-only)", file=path.name, rule="replay.granularity")
    tm = replay.timing_model
    if tm.kind == rpb.TIMING_MODEL_KIND_FIXED and tm.HasField("prefill_ms") and tm.HasField("decode_ms"):
        from unirl_replay.contract.profile_npz import fixed_costs_problem

        # a replay writes only costs its --timing-model check passed: NaN / 1e308 were a ValueError / OverflowError
        # traceback in the error decomposition, and -5 or 0 ms a profile check of a model no replay ran
        why = fixed_costs_problem(tm.prefill_ms, tm.decode_ms)
        if why:
            raise TraceFormatError(f"timing_model fixed prefill_ms {tm.prefill_ms!r} / decode_ms {tm.decode_ms!r}: "
                                   f"{why}; no replay ran this model (was the result edited?)", file=path.name,
                                   rule="replay.timing_model")
    for name in ("makespan_ns", "simulator_wall_ns"):
        if getattr(replay, name) < 0:
            raise TraceFormatError(f"{name} = {getattr(replay, name)} is negative", file=path.name, rule="time.order")
    _time_range(path, "", [("makespan_ns", replay.makespan_ns)], "")
    _check_rows(path, replay, request_ids, derived_ids)


def compare_to_dir(trace_dir: str | Path, replay_result: str | Path, out_dir: str | Path,
                   repeats: tuple[str, ...] | list[str] = (), batch_id: str | None = None,
                   plots_too: bool = True, bounds: tuple[str, ...] | list[str] = ()):
    """Compare a replay result with a trace's measured outcomes and write everything into ``out_dir``.

    Writes ``validation_report.json``, the PNG plots and ``timeline.perfetto.json`` (per-request
    results only). ``bounds``: other UNMODELLED replay results of the trace (files or directories),
    reported as a bracket. Returns the ValidationReport message. Raises the errors of
    :func:`unirl_replay.report.compare.compare` (e.g. a replay of another trace, a mislabelled model).
    """
    from unirl_replay.contract.trace_io import write_message_json
    from unirl_replay.report import compare as C
    from unirl_replay.report import perfetto, plots
    from unirl_replay.report.text import format_report
    from unirl_replay.v1 import replay_pb2

    manifest, workload, outcomes = _load_trace(str(trace_dir))  # the gate first, before anything else
    reps = [_load_trace(str(d)) for d in repeats]
    rp = Path(replay_result)
    if rp.is_dir():
        rp = rp / "replay_result.json"
        if not rp.is_file():
            raise TraceFormatError(f"{rp.parent} holds no replay_result.json: pass the directory given to "
                                   "`unirl-replay replay --out`, or the replay_result.json file itself",
                                   file=str(rp.parent), rule="compare.no_replay_result")
    replay = read_replay_result(rp)
    request_ids = {r.request.request_id for r in workload if r.WhichOneof("record") == "request"}
    derived_ids: dict[str, set[str]] = {kind: set() for _, _, kind, _ in _DERIVED}
    for r in workload:
        kind = r.WhichOneof("record")
        if kind in derived_ids:
            derived_ids[kind].add(getattr(getattr(r, kind), kind + "_id"))
    from unirl_replay.report.keys import ComparisonError
    from unirl_replay.report.labels import check_identity

    check_identity(manifest, replay)  # a replay of another trace says so, before a row of it is found unmatched
    _check_result(rp, replay, request_ids, derived_ids)
    per_request = replay.granularity == replay_pb2.RESULT_GRANULARITY_PER_REQUEST
    if batch_id is not None:  # before anything is written: the timeline plot of a batch the trace lacks
        batches = sorted(C.index_workload(workload).requests_of_batch)
        if batch_id not in batches:
            def short(v: str) -> str:  # an id of any length is named, not echoed whole
                return repr(v) if len(v) <= 120 else f"{v[:56]!r}...{v[-56:]!r} ({len(v)} characters)"

            raise ComparisonError(f"--batch {short(batch_id)}: no rollout batch of that id has requests in "
                                  f"{trace_dir}; its batches: {', '.join(map(short, batches[:10]))}"
                                  + (" ..." if len(batches) > 10 else ""))
    matching = C.match(workload, outcomes, replay) if per_request else None
    timing = load_timing_model(replay, rp, manifest.engines)
    bound_results = []
    for b in bounds:
        bp = _result_file(Path(b))
        bound_results.append((str(b), read_replay_result(bp, "--bound")))
        try:
            check_identity(manifest, bound_results[-1][1])
        except ComparisonError as e:
            raise ComparisonError(f"--bound {b}: {e}") from None
        _check_result(bp, bound_results[-1][1], request_ids, derived_ids)
    report = C.compare(manifest, workload, outcomes, replay, repeats=reps, matching=matching, timing=timing,
                       bounds=bound_results)

    from unirl_replay.contract import out_dir as outputs

    out = Path(out_dir)
    ours = [REPORT_FILE, PERFETTO_FILE, TABLE_FILE]
    if out.is_dir():  # plot names depend on the data: every existing one of ours must be listed
        ours += [p.name for pat in ("scatter_*.png", "cdf_*.png", "timeline_*.png", "waterfall_*.png")
                 for p in out.glob(pat)]
    with outputs.removed_on_failure(out, ours):  # a failed compare leaves nothing it created
        outputs.claim(out, ours, "compare")
        if plots_too:
            if per_request:
                report.artifacts.extend(plots.write_plots(out, matching.pairs, workload, outcomes, replay, report.label,
                                                          batch_id=batch_id))
                report.artifacts.extend(plots.write_waterfalls(out, report))
                perfetto.write_chrome_trace(out / PERFETTO_FILE,
                                            perfetto.chrome_trace(workload, outcomes, replay, report.label))
                report.artifacts.append(PERFETTO_FILE)
            else:
                report.notes.append("aggregate-only result: no per-record plots or timelines")
        report.artifacts.append(TABLE_FILE)
        (out / TABLE_FILE).write_text(strip_ansi(format_report(report)) + "\n")
        write_message_json(out / REPORT_FILE, report)
        outputs.record(out, [REPORT_FILE, *report.artifacts], "compare")
        # what an earlier compare into this directory wrote and this one did not (another trace's plots)
        outputs.prune(out, [REPORT_FILE, *report.artifacts], "compare")
    return report


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """Text without terminal escape sequences (upstream logs colour their lines)."""
    return _ANSI.sub("", text)
