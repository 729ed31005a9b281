"""``unirl-replay demo``: the whole job on the bundled real traces (see :mod:`unirl_replay.demo.run`)."""

from __future__ import annotations

from pathlib import Path

import click

from unirl_replay.cli import OutPath, Refusal

from unirl_replay.demo import run as demo


@click.command("demo")
@click.option("--out", "out_dir", type=OutPath(file_okay=False, path_type=Path), default=Path("out/demo"),
              show_default=True, help="Output directory (created).")
@click.option("--trace", "traces", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Trace directory to use (repeatable); default: every trace under traces/.")
@click.option("--profile", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Calibrated timing profile (NPZ); default: profiles/vllm-cpu-tiny-qwen2-20261130b.npz, the "
                   "profile of README's demo table.")
@click.option("--no-profile", is_flag=True, help="Run only the uncalibrated default model.")
def command(out_dir: Path, traces: tuple[Path, ...], profile: Path | None, no_profile: bool) -> None:
    """Validate, replay (calibrated profile and default model), compare and report, on real traces."""
    if no_profile and profile is not None:
        raise click.UsageError("--profile and --no-profile: which one? (--no-profile runs only the default model)")
    trace_dirs = list(traces) or demo.find_traces(demo.DEFAULT_TRACES_DIR)
    if not trace_dirs:
        raise Refusal(f"no trace directories found under {demo.DEFAULT_TRACES_DIR}{_not_a_checkout(demo.DEFAULT_TRACES_DIR)}; "
                      "pass --trace DIR (repeatable), e.g. a checkout's traces/grpo-a")
    prof = None if no_profile else (profile or demo.find_profile(demo.DEFAULT_PROFILES_DIR))
    if prof is None and not no_profile:
        click.echo(f"warning: no {demo.DEFAULT_PROFILE} (nor a single profile) in {demo.DEFAULT_PROFILES_DIR}"
                   f"{_not_a_checkout(demo.DEFAULT_PROFILES_DIR)}: only the uncalibrated default model runs; pass "
                   "--profile FILE", err=True)
    demo.check_out_dir(out_dir)  # before anything is printed or run
    log = lambda m: click.echo(m, err=True)  # noqa: E731
    # "calibrated" only where the profile's provenance says it was measured (demo.profile_tag)
    what = "" if not prof else (("calibrated profile " if demo.profile_tag(prof) == "calibrated" else
                                 "UNCALIBRATED profile (no measured provenance) ") + str(prof) + " and ")
    log(f"unirl-replay demo: {len(trace_dirs)} trace{'' if len(trace_dirs) == 1 else 's'}, timing models: "
        + what + "the uncalibrated default (polynomial)")
    note = "Run with --no-profile: only the uncalibrated default model ran." if no_profile else ""
    demo.run_demo(out_dir, trace_dirs, prof, log, note)
    click.echo((out_dir / "REPORT.md").read_text())
    click.echo(f"Report written to {out_dir.resolve()} (REPORT.md, summary.json; per trace and model: "
               "replay_result.json with the upstream/ input it replayed, validation_report.json, table.txt, PNG plots, "
               "timeline.perfetto.json)")


def _not_a_checkout(d: Path) -> str:
    """Why a default directory of the checkout is not there: an installed unirl-replay (a wheel) has none."""
    if d.is_dir():
        return ""
    return (f" ({d} does not exist: the bundled traces and profiles are in a checkout of unirl-replay, not in an "
            "installed package)")
