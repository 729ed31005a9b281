"""``unirl-replay convert TRACE_DIR --format ... --out FILE``: write the upstream input file."""

from __future__ import annotations

import click

from unirl_replay.cli import OutPath


@click.command("convert")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "trace_format", default="agentic_mooncake", show_default=True,
              type=click.Choice(["agentic_mooncake", "mooncake"]))
@click.option("--out", "out_file", required=True, type=OutPath(dir_okay=False),
              help="Output JSONL (one file per engine as OUT_STEM.<engine><suffix> when several).")
@click.option("--engine", "engine_id", default=None, help="Convert only this engine (an engine_id of the trace's manifest).")
@click.option("--allow-unmodelled", "unmodelled", multiple=True, metavar="RULE",
              help="Explicitly drop a constraint upstream cannot express (repeatable; allow-listed rules only, e.g. "
                   "engine_client.inflight_limit, batch_boundary.open_loop); the converted input then lacks it.")
def command(trace_dir: str, trace_format: str, out_file: str, engine_id: str | None,
            unmodelled: tuple[str, ...]) -> None:
    """Convert TRACE_DIR to Dynamo Replay input (checks what upstream cannot express first)."""
    from unirl_replay.contract.gate import gate_read
    from unirl_replay.replay.runner import convert_trace

    from unirl_replay.replay.convert.sidecar import read_sidecar

    # nothing validate rejects reaches the converter; the workload the gate read as columns is the
    # converter's (read once; no reference kept here, so the converter frees it when done with it)
    for p in convert_trace(trace_dir, out_file, trace_format=trace_format, engine_id=engine_id,
                           unmodelled=unmodelled, columns=gate_read(trace_dir, "convert")[1]):
        click.echo(str(p))
        for c in read_sidecar(p).get("unmodelled", ()):  # what the file lacks, as replay says it
            click.echo(f"UNMODELLED [{c['rule']}]: {c['reason']} (recorded in {p.name}.unirl-replay.json)", err=True)
