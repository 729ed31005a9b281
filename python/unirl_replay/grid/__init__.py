"""Scale-out: replay and comparison grids (``unirl-replay grid SPEC``).

Owns: the grid spec (``spec``: traces x simulators x timing models [+ conformance revisions],
expanded into jobs), one job's work on a worker (``jobs``: replay + compare into the job's own
directory, or a shard of the conformance corpus on one simulator revision; never raises, a failure
is a result), the backends that run jobs (``backends``: in process, a local process pool, Ray) and
the driver (``runner``: output-directory safety, ordering, progress, ``grid.json`` / ``GRID.md``).

Inputs reach workers by path (a trace directory on a filesystem every worker sees), never through
the driver; each job writes its own subdirectory and returns only a small summary.

May import: ``unirl_replay.contract``, ``unirl_replay.replay`` (the runner's ``replay_trace`` /
``write_result``), ``unirl_replay.report`` (``outputs.compare_to_dir``),
``unirl_replay.conformance`` (runner and corpus), ``unirl_replay.demo`` (its headline metrics),
``unirl_replay.reference.environments``, ``unirl_replay.v1``, itself, tqdm, and Ray (lazily,
only in ``backends``, only for ``--backend ray``).
Never imports: capture, calibrate, cli, a reference driver, UniRL / vLLM / torch, or a simulator
package directly (simulators are reached through ``replay`` or a conformance executor).
"""
