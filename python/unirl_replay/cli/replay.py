"""``unirl-replay replay TRACE_DIR --timing-model ... --out DIR [--simulator dynamo|aisimulate[==VERSION]]``:
run the real upstream replay."""

from __future__ import annotations

import click

from unirl_replay.cli import OutPath


@click.command("replay")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--timing-model", required=True,
              help="polynomial | fixed:PREFILL_MS,DECODE_MS | profile:NPZ | aic:HARDWARE:MODEL_DIR (aisimulate only: "
                   "the GPU database, an UNVALIDATED what-if)")
@click.option("--out", "out_dir", required=True, type=OutPath(file_okay=False),
              help="Directory for replay_result.json (and the upstream input files under upstream/).")
@click.option("--format", "trace_format", default="agentic_mooncake", show_default=True,
              type=click.Choice(["agentic_mooncake", "mooncake"]))
@click.option("--allow-unmodelled", "unmodelled", multiple=True, metavar="RULE",
              help="Repeatable (one per rule: a 2-engine agentic capture may need two). "
                   "Replay WITHOUT a constraint upstream cannot express instead of rejecting the trace "
                   "(engine_client.inflight_limit: the optimistic bound; or "
                   "engine_client.inflight_limit.as_lanes: lanes = the limit, the pessimistic bound; or "
                   "batch_boundary.open_loop: a rollout-batch boundary upstream cannot hold, replayed at the "
                   "observed submits). The result "
                   "records it in unmodelled_constraints and reports label it UNMODELLED; compare the two bounds "
                   "with `compare ... --bound`.")
@click.option("--simulator", default="dynamo", show_default=True, metavar="dynamo|aisimulate[==VERSION]",
              help="Simulator line: dynamo (the installed ai-dynamo) or aisimulate (an exact pinned dev build, "
                   "installed on first use into a cached isolated environment under .cache/simulators/).")
def command(trace_dir: str, timing_model: str, out_dir: str, trace_format: str,
            unmodelled: tuple[str, ...], simulator: str) -> None:
    """Replay TRACE_DIR in Dynamo Replay (or AISimulate) and write OUT/replay_result.json keyed by request_id."""
    import gc
    from pathlib import Path

    from unirl_replay.cli.main import left_to_exit
    from unirl_replay.contract.gate import gate_read
    from unirl_replay.contract.gc_pause import paused_gc
    from unirl_replay.replay.runner import Handover, replay_trace, write_result

    from unirl_replay.contract import out_dir as outputs
    from unirl_replay.replay.runner import RESULT_FILE

    with paused_gc():  # the workload's columns, the upstream's rows: 100k+ objects each, no cycles
        # nothing validate rejects reaches upstream; the workload the gate read as columns is the
        # replay's (read once, as in `convert`)
        columns = gate_read(trace_dir, "replay")[1]
        entries = [RESULT_FILE, "upstream"]
        # the upstream's rows (and the request columns) come back in ``kept``: the result's text is
        # written from the columns, and the program leaves the rows (and the workload's columns) to
        # the process exit (``left_to_exit``: freeing 100k row dicts costs about 0.45 s and changes
        # nothing on disk); called in-process (``main([...])``), they are freed here as the command ends
        kept = Handover()
        exit_hold = left_to_exit()
        with outputs.removed_on_failure(out_dir, entries):  # a failed replay leaves nothing it created
            outputs.claim(out_dir, entries, "replay")  # never replaces what unirl-replay did not write
            try:
                res = replay_trace(trace_dir, timing_model, trace_format=trace_format,
                                   work_dir=Path(out_dir) / "upstream", unmodelled=unmodelled, simulator=simulator,
                                   handover=kept, columns=columns)
                path = write_result(out_dir, res, handover=kept)
                outputs.record(out_dir, entries, "replay")
                if exit_hold is not None:
                    gc.freeze()  # made with the collector paused: it never walks them (the process ends next)
            finally:
                if exit_hold is not None:
                    exit_hold.append((kept, columns))
                del kept, columns
    span = (f"makespan {res.makespan_ns / 1e6:.3f} ms" if res.HasField("makespan_ns")
            else "no makespan (no per-request predicted times: aggregate-only rows)")  # was "makespan nan ms"
    click.echo(f"{path}: {len(res.requests)} requests, {span} ({summary_label(res)})")
    for c in res.unmodelled_constraints:
        click.echo(f"UNMODELLED [{c.rule}]: {c.reason}", err=True)
    stale = outputs.written_by(out_dir, "compare")
    if stale:  # a report of the result this replay just replaced, left beside it (never removed: a user may want it)
        click.echo(f"note: {out_dir} still holds compare's report of an earlier replay result "
                   f"({', '.join(stale[:6])}{' ...' if len(stale) > 6 else ''}): it is not of this result; run "
                   "compare again (it replaces its own --out whole)", err=True)


def summary_label(res) -> str:
    """The simulator, the timing model with its calibration status and the dropped constraints, as every report
    title has them (``report.labels``): the one line `replay` prints never shows a FIXED or UNCALIBRATED
    prediction (or an UNVALIDATED what-if) without saying so, e.g. ``ai-dynamo 1.6.1 | polynomial default
    (UNCALIBRATED) | UNMODELLED: engine_client.inflight_limit``."""
    from unirl_replay.report.labels import replay_timing_label, unmodelled_words

    parts = [f"{res.simulator.name} {res.simulator.version}".strip(), replay_timing_label(res.timing_model)]
    if res.unmodelled_constraints:
        parts.append(unmodelled_words(res.unmodelled_constraints))
    return " | ".join(parts)
