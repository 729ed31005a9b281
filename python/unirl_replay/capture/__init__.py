"""Stage 1, capture: only what runs inside a user's UniRL and vLLM processes (default-off), and the merge.

Owns: the one switch (``switch``: :func:`install`, the Ray worker setup hook), per-process shards
(``shard``: ``raw/<role>-<host>-<pid>.jsonl``, bounded buffer flushed on a timer and at exit), the
vLLM general plugin (``vllm_plugin``, a no-op unless ``UNIRL_REPLAY_TRACE_DIR`` is set), the
engine-side recorder (``_engine_recorder``), the UniRL-side hooks on its engines and
``RolloutManager`` (``driver_capture``), salted chained prefix block hashes (``hashing``), the
request timing rules (``trace_builder``), the merge of shards into a v1 trace (``finalize``), the
``/proc`` counters of a window's run conditions (``procfs``), the reference probe run in the
capture's own engines (``probe``) and the window's conditions and probe entries
(``window_conditions``, at finalize).

May import: ``unirl_replay.contract``, ``unirl_replay.v1``, itself, and (lazily, inside hooks)
UniRL, vLLM and Ray, which are already loaded in the process it runs in. The hooks
(``switch``, ``shard``, ``hashing``, ``vllm_plugin``, ``_engine_recorder``, ``driver_capture``)
use the standard library only, as do ``procfs`` and ``probe``; ``finalize`` / ``trace_builder`` /
``window_conditions`` need protobuf and run after the run, anywhere. ``procfs`` and ``probe`` are
the two modules calibrate may import (one way to measure conditions and one probe definition for
both stages); they import nothing of capture's hooks at module level.
Never imports: ``unirl_replay.reference`` (the project's own CPU harness), replay, report,
calibrate, conformance, cli, demo, or a simulator: it ships into other people's processes and must
stay small.
"""


def install() -> bool:
    """Switch the capture on for this run when ``UNIRL_REPLAY_TRACE_DIR`` is set (see :mod:`.switch`).

    Call it once in the driver (the recipe / trainer entry point) before Ray starts; it reaches
    every Ray worker through the job's runtime_env. Returns False and does nothing when the
    variable is unset.
    """
    from unirl_replay.capture.switch import install as _install

    return _install()
