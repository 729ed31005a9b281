"""``unirl-replay grid SPEC``: replay + compare a grid of traces x simulators x timing models in parallel."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from unirl_replay.cli import OutPath


@click.command("grid")
@click.argument("spec_file", metavar="SPEC", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=OutPath(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: the spec's `out`, else out/grid/<spec name>). A non-empty directory "
                   "is refused unless it is an earlier grid output; that one is replaced whole.")
@click.option("--backend", type=click.Choice(["local", "ray", "sequential"]), default="local", show_default=True,
              help="local: a process pool on this host; ray: Ray tasks (a local instance, or --address); "
                   "sequential: one job after another in this process.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes (local) or CPUs of the local Ray instance; default: the CPU count.")
@click.option("--address", default=None,
              help="Ray cluster to connect to (e.g. auto, or HEAD_IP:6379); implies --backend ray. Every node needs "
                   "this checkout, its .venv and the traces at the same paths (shared filesystem).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def command(spec_file: Path, out_dir: Path | None, backend: str, workers: int | None, address: str | None,
            no_progress: bool) -> None:
    """Expand SPEC (YAML or JSON: traces x simulators x timing models [+ conformance revisions]) into
    jobs, run each (replay, then compare, into its own subdirectory) on the backend, and write grid.json
    and GRID.md in job order.

    Exit status 0 when every job succeeded (and every conformance cell passed or failed as expected),
    1 when any job failed (the others still ran; grid.json has each error), 2 on a bad spec or --out.
    """
    from unirl_replay.grid.runner import GRID_MD, check_out_dir, run_grid
    from unirl_replay.grid.spec import expand, load_spec
    from unirl_replay.reference.environments import REPO_ROOT

    spec = load_spec(spec_file)
    if address is not None:
        backend = "ray"
    out = out_dir or (Path(spec.out) if spec.out else REPO_ROOT / "out" / "grid" / spec_file.stem)
    n = len(expand(spec))
    check_out_dir(out.resolve())  # before the banner, as demo does (run_grid checks it again)
    click.echo(f"unirl-replay grid: {n} job{'' if n == 1 else 's'} from {spec_file} on {backend}"
               + (f" ({address})" if address else "") + f" -> {out}", err=True)
    run = run_grid(spec, out, backend=backend, workers=workers, address=address, progress=not no_progress,
                   log=lambda m: click.echo(m, err=True))
    click.echo((run.out_dir / GRID_MD).read_text())
    click.echo(f"{len(run.results) - len(run.failed)} of {len(run.results)} jobs ok in {run.info['wall_s']:.1f} s "
               f"({run.info.get('workers')} worker{'' if run.info.get('workers') == 1 else 's'}); written to {run.out_dir}", err=True)
    if not run.ok:
        sys.exit(1)
