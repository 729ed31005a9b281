"""The ``unirl-replay`` command line.

Each subcommand lives in ``unirl_replay.cli.<name>`` as a click command named ``command``
and is imported only when invoked, so ``unirl-replay --help`` stays fast and a missing optional
environment only affects the commands that need it.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from unirl_replay.contract.errors import UnirlReplayError

# name -> one-line help (shown without importing the command module)
COMMANDS: dict[str, str] = {
    "validate": "Check a trace directory against the v1 contract and its semantic rules.",
    "convert": "Convert a trace to a Dynamo Replay input file (agentic_mooncake or mooncake).",
    "recode": "Write a trace's records to a new trace directory in another encoding (jsonl, binpb, arrow).",
    "replay": "Replay a trace in the real Dynamo Replay and write a replay result.",
    "compare": "Compare a replay result with the measured outcomes: report, table, plots.",
    "capture": "Finalize a UniRL run's capture shards into a trace, or run the real-rollout harness.",
    "calibrate": "Measure a timing profile on the real engine (reference environment).",
    "conformance": "Run the conformance corpus against one or more simulator revisions.",
    "grid": "Replay + compare a grid (traces x simulators x timing models) on a process pool or Ray.",
    "demo": "The whole job on the bundled real traces: validate, replay, compare, report.",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"unirl_replay.cli.{name}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(COMMANDS.items()))


@click.group(cls=LazyGroup)
@click.version_option(package_name="unirl-replay")
def cli() -> None:
    """unirl-replay: replay real UniRL rollouts in Dynamo Replay and measure the prediction."""


def main(argv: list[str] | None = None) -> int:
    """Entry point. Errors of this package print as one clear message and exit 2."""
    # Dynamo's Rust logging writes ANSI colour codes even into files and pipes; a user's log of a
    # replay (or a demo) must stay plain text. Set before the simulator is imported.
    os.environ.setdefault("DYN_SDK_DISABLE_ANSI_LOGGING", "1")
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 1
    except SystemExit as e:  # a command that sets its own exit status (validate, conformance)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except UnirlReplayError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    except OSError as e:  # the machine refused (permissions, disk full, not a directory): no traceback
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        click.echo(f"error:{where}: {e.strerror or e}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
