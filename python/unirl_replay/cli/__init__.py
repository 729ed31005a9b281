"""The ``unirl-replay`` command line: ``main`` (the entry point) and one module per verb.

Each verb module defines a click command named ``command``, is imported only when invoked, and
stays thin: it parses options and calls the stage that does the work. The CLI may import every
stage; no stage imports the CLI.
"""

from __future__ import annotations

import click


class Refusal(click.ClickException):
    """A stage's refusal (a ``UnirlReplayError``) raised from inside a command that must add to its message: shown
    as every other verb's refusal is (``error: ...`` on stderr, exit 2), not as click's ``Error:`` with exit 1."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


class OutPath(click.Path):
    """``click.Path`` of something a command writes: an empty value is refused (click reads it as the current
    directory, so ``--out "$UNSET"`` wrote into it, or ended in a traceback), whitespace-only alike."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is empty: name the file or directory to write (an unset shell variable?)", param, ctx)
        return super().convert(value, param, ctx)
