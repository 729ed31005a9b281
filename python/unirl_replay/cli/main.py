"""The ``unirl-replay`` command line.

Each subcommand lives in ``unirl_replay.cli.<name>`` as a click command named ``command``
and is imported only when invoked, so ``unirl-replay --help`` stays fast and a missing optional
environment only affects the commands that need it.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from typing import NoReturn

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
    # Arrow's allocator for the commands that read or write arrow columns (convert, replay, validate,
    # recode): the system allocator (malloc) instead of pyarrow's bundled default (mimalloc). The
    # same bytes either way; on the project machine a 100k `replay` spends 0.15-0.3 s less CPU before
    # the upstream call with it (the upstream file's text, 84 MB built chunk by chunk, mostly; fewer
    # page resets: docs/benchmarks.md). Read by Arrow when pyarrow is first imported, so it takes
    # effect in the program (and in a process that has not imported pyarrow yet); a user's own
    # setting wins.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    bad = _not_utf8(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        click.echo(f"error: argument {bad!r} is not UTF-8 text (a file name holding bytes of another encoding?): "
                   "every path and id this tool reads or records is UTF-8 (trace manifests, reports, results, "
                   "sidecars are JSON); rename it, e.g. with convmv", err=True)
        return 2
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
        click.echo(f"error:{where}: {_os_words(e)}", err=True)
        return 2
    return 0


def _os_words(e: OSError) -> str:
    """The machine's words for ``e``, and what they mean where an output path runs through a file: ``mkdir -p
    out/x`` with ``out`` a file says "File exists" of ``out``."""
    import errno
    import os

    words = e.strerror or str(e)
    name = getattr(e, "filename", None)
    if e.errno == errno.EEXIST and name and os.path.exists(name) and not os.path.isdir(name):
        words += " (it is a file, not a directory: an output path runs through it; choose another --out)"
    elif e.errno == errno.ENOTDIR and name:
        p = os.fspath(name)
        while p and not os.path.lexists(p) and os.path.dirname(p) != p:
            p = os.path.dirname(p)
        if p and os.path.lexists(p) and not os.path.isdir(p):
            words += f" ({p} is a file, not a directory: the path runs through it)"
    return words


def _not_utf8(args) -> str | None:
    """The first argument that is no UTF-8 text (a name of bytes the file system encoding could not decode: Python
    holds them as lone surrogates, which reached a protobuf string field or a JSON writer as a UnicodeEncodeError
    traceback, after outputs were created), or None."""
    for a in args:
        if isinstance(a, str):
            try:
                a.encode("utf-8")
            except UnicodeEncodeError:
                return a
    return None


# The program's (run()): what a command leaves to the process exit, and the code it exits with.
_LEFT_TO_EXIT: list | None = None
_EXIT_CODE: int | None = None


def left_to_exit() -> list | None:
    """A list where a command may put large objects it no longer reads and that would take long
    to free one by one (a replay's upstream rows: 100k dicts, about 0.45 s): the process exit
    releases their memory instead, with the rest of the process (see :func:`run`). Only in the
    program; None when the CLI runs in-process (``main([...])``: tests, benchmarks, a library
    caller), where the command frees what it made as usual."""
    return _LEFT_TO_EXIT


def _atexit_first() -> bool:
    """No atexit callback is registered yet (so one registered now runs after every other)."""
    count = getattr(atexit, "_ncallbacks", None)
    return count is not None and count() == 0


def _exit_now() -> None:
    """The last atexit callback (registered first by :func:`run`): when a command left objects to
    the exit, or loaded pyarrow, flush stdout / stderr and end the process with main()'s code
    (``os._exit``), without the interpreter's teardown freeing every object first. pyarrow's C++
    threads race that teardown: a command on an arrow trace otherwise ended now and then (1-2 runs
    in 100) by SIGABRT, "terminate called without an active exception", after its output."""
    if _EXIT_CODE is None or not (_LEFT_TO_EXIT or "pyarrow" in sys.modules):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - e.g. a closed pipe: Python's own exit reports it as usual
        return
    os._exit(_EXIT_CODE)


def run() -> NoReturn:
    """The ``unirl-replay`` program (the console script, ``python -m unirl_replay``): :func:`main`
    on ``sys.argv``, then the exit with its code.

    When the command left objects to the exit (:func:`left_to_exit`), the interpreter's teardown
    is skipped, and so it is once a command has loaded pyarrow (:func:`_exit_now`). By then Python's exit
    has joined the non-daemon threads and run every atexit
    callback but :func:`_exit_now`, which it runs last: it is registered here first, and only
    when no other is registered yet. It flushes stdout and stderr and ends the process with the
    same code. Files the commands write are closed (and fsynced, ``replay_result.json``) before
    they return; the memory goes back to the system with the process. Nothing left to the exit,
    a callback registered before this one, or an exception out of :func:`main`: Python's own
    exit, as before."""
    global _LEFT_TO_EXIT, _EXIT_CODE
    if _atexit_first():
        atexit.register(_exit_now)
        _LEFT_TO_EXIT = []
    code = main()
    _EXIT_CODE = code
    sys.exit(code)


if __name__ == "__main__":
    run()
