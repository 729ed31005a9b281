"""``unirl-replay compare TRACE_DIR REPLAY_RESULT --out DIR [--repeat TRACE_DIR ...]``.

Reads the trace (manifest, workload) and its measured outcomes (the only command besides
``validate`` that does), the replay result (a ``replay_result.json`` file or the directory holding
it), and writes into DIR: ``validation_report.json``, the table (``table.txt``, also printed), the
PNG plots (with a waterfall of the error decomposition per rollout batch) and ``timeline.perfetto.json``. Each ``--repeat`` is another trace directory of the same workload (same
workload name and role), used only for the run-to-run spread.
"""

from __future__ import annotations

from pathlib import Path

import click

from unirl_replay.cli import OutPath


@click.command("compare")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("replay_result", type=click.Path(exists=True))
@click.option("--out", "out_dir", required=True, type=OutPath(file_okay=False),
              help="Directory for validation_report.json, the table (table.txt, also printed), the PNG plots and "
                   "timeline.perfetto.json.")
@click.option("--repeat", "repeats", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Another measured trace of the same workload (repeatable): run-to-run spread.")
@click.option("--bound", "bounds", multiple=True, type=click.Path(exists=True),
              help="Another UNMODELLED replay of the same trace (e.g. --allow-unmodelled "
                   "engine_client.inflight_limit.as_lanes next to engine_client.inflight_limit): the report "
                   "brackets the measured values between the bounds instead of presenting one prediction.")
@click.option("--batch", "batch_id", default=None, help="Rollout batch shown in the timeline plot: a rollout_batch_id of the trace's workload (default: the first).")
@click.option("--no-plots", is_flag=True, help="Write the report and table only.")
def command(trace_dir: str, replay_result: str, out_dir: str, repeats: tuple[str, ...], bounds: tuple[str, ...],
            batch_id: str | None, no_plots: bool) -> None:
    """Compare REPLAY_RESULT (the replay_result.json `replay --out DIR` wrote, or DIR) with the measured outcomes of
    TRACE_DIR (the trace that was replayed)."""
    from unirl_replay.report.outputs import REPORT_FILE, TABLE_FILE, compare_to_dir, strip_ansi
    from unirl_replay.report.text import format_report

    report = compare_to_dir(trace_dir, replay_result, out_dir, repeats, batch_id, not no_plots, bounds=bounds)
    click.echo(strip_ansi(format_report(report)))
    click.echo(f"\nwrote {Path(out_dir) / REPORT_FILE} and the table {Path(out_dir) / TABLE_FILE}")
