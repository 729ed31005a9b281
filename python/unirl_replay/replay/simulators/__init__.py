"""One adapter module per simulator; the only modules that import a simulator's package.

``dynamo``: NVIDIA Dynamo Replay (``ai-dynamo``, pinned in ``pyproject.toml``), imported lazily so
the light commands work without it.

May import: ``unirl_replay.contract.errors`` and the simulator package it adapts.
Never imports: measured outcomes, or another simulator's package.
"""
