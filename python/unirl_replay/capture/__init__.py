"""Stage 1, capture: only what runs inside a user's UniRL and vLLM processes (default-off).

Owns: the vLLM general plugin (``vllm_plugin``, a no-op unless ``UNIRL_REPLAY_TRACE_DIR`` is
set), the engine-side recorder (``_engine_recorder``), the driver-side hooks on UniRL's engines
and ``RolloutManager`` (``driver_capture``), salted chained prefix block hashes (``hashing``) and
the assembly of raw records into a v1 trace (``trace_builder``).

May import: ``unirl_replay.contract``, ``unirl_replay.v1``, itself, and (lazily, inside hooks)
UniRL and vLLM, which are already loaded in the process it runs in.
Never imports: ``unirl_replay.reference`` (the project's own CPU harness), replay, report,
calibrate, conformance, cli, demo, or a simulator: it ships into other people's processes and must
stay small.
"""
