"""``python -m unirl_replay``: the same entry point as the ``unirl-replay`` command."""

from unirl_replay.cli.main import run

run()
