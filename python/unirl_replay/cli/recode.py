"""``unirl-replay recode TRACE_DIR --encoding {jsonl,binpb,arrow} --out NEW_DIR``: the same trace in another encoding."""

from __future__ import annotations

import click

from unirl_replay.cli import OutPath

from unirl_replay.contract.trace_io import ENCODINGS


@click.command("recode")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--encoding", required=True, type=click.Choice(list(ENCODINGS)),
              help="Encoding of the new trace's record files (arrow needs the optional 'columnar' extra).")
@click.option("--out", "out_dir", required=True, type=OutPath(),
              help="New trace directory; must not exist (nothing is ever replaced).")
def command(trace_dir: str, encoding: str, out_dir: str) -> None:
    """Write TRACE_DIR's records to a new trace directory in another encoding (checked as `validate` does first)."""
    from unirl_replay.contract.recode import recode_trace

    m = recode_trace(trace_dir, encoding, out_dir)
    counts = ", ".join(f"{a.path} {a.record_count} records" for a in m.artifacts)
    click.echo(f"{out_dir}: {encoding} ({counts})")
