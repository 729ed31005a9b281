"""Benchmark (not a test): `replay`'s work before the upstream call, alone, per part.

Usage:
    .venv/bin/python benchmarks/bench_before_upstream.py TRACE [--rounds N] [--cprofile [--top K]]

Runs the ``replay`` command in-process (``cli.main.main(["replay", TRACE, ...])``) with
``dynamo.run_upstream`` replaced by a stop: everything the command does before the upstream
call runs (the gate's read and rules, the support scan, the conversion, writing the upstream
file and its sidecar), then the stop unwinds it and the command removes its output directory
as on any failure. Nothing of the upstream runs, so a round costs seconds, not the upstream's
20-40 s.

Printed per round (one JSON line): the process CPU time of the imports (the first round only:
later rounds have them loaded) and of the command up to the call, and the CPU time inside the
parts that exist in the code being run (each wrapped, counted where called: ``gate_read`` holds
``read_columns`` and ``workload_clean``; ``Conversion.write`` holds ``rows_text`` and the file
writes; ``_first_seen_ids`` is the conversion's dense hash ids); the load average. The first
round is the one a user's process has (cold caches, fresh memory); later rounds are warm.

``--cprofile``: one round under ``cProfile`` instead (imports included), the top ``K`` functions by
cumulative and by own time on stderr. cProfile inflates per-call Python work against the
kernels: use it for where the time goes, the laps for how much.

Another checkout's code: ``PYTHONPATH=<other>/python:<other>/gen/python``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cpu_laps import wrap_cpu

TIMING = "fixed:20,2"
_PARTS = (  # (module, attribute path): wrapped when present
    ("unirl_replay.contract.gate", "gate_read"),
    ("unirl_replay.contract.workload_columns", "read_columns"),
    ("unirl_replay.contract.validate.fast", "workload_clean"),
    ("unirl_replay.contract.trace_io", "sha256_file"),
    ("unirl_replay.replay.runner", "check_supported"),
    ("unirl_replay.replay.convert.common", "_first_seen_ids"),
    ("unirl_replay.replay.convert.arrow_rows", "rows_text"),
    ("unirl_replay.replay.convert.common", "Conversion.write"),
)


class _Stop(Exception):
    """Raised where the upstream call would start."""


def _wrap(laps: dict) -> None:
    import importlib

    for mod_name, attr in _PARTS:
        try:
            owner = importlib.import_module(mod_name)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p, None)
        f = getattr(owner, name, None) if owner is not None else None
        if f is None:
            continue

        wrap_cpu(owner, name, laps, attr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    c0 = time.process_time()
    prof = None
    if a.cprofile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    from unirl_replay.replay.simulators import dynamo

    def stop(*_a, **_k):
        raise _Stop

    dynamo.run_upstream = stop
    from unirl_replay.cli.main import main as cli_main

    laps: dict[str, float] = {}
    if prof is None:
        _wrap(laps)
    imports = time.process_time() - c0
    work = Path(tempfile.mkdtemp(prefix="bench_before_"))
    try:
        for r in range(1 if prof else a.rounds):
            laps.clear()
            load = os.getloadavg()[0]
            out = work / f"out{r}"
            c = time.process_time()
            try:
                cli_main(["replay", a.trace, "--timing-model", TIMING, "--out", str(out)])
            except _Stop:
                pass
            else:
                raise SystemExit("bench_before_upstream: the command returned before the upstream call")
            cpu = time.process_time() - c
            if prof is not None:
                prof.disable()
            rec = {"round": r + 1, "command_cpu_s": round(cpu, 3)}
            if r == 0:
                rec["imports_cpu_s"] = round(imports, 3)
            rec.update((k, round(v, 3)) for k, v in laps.items())
            if "pyarrow" in sys.modules:  # the allocator Arrow used (cli.main's default, or ARROW_DEFAULT_MEMORY_POOL)
                rec["arrow_pool"] = sys.modules["pyarrow"].default_memory_pool().backend_name
            rec["load_before"], rec["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
            print(json.dumps(rec), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if prof is not None:
        import pstats

        st = pstats.Stats(prof, stream=sys.stderr)
        st.sort_stats("cumulative").print_stats(a.top)
        st.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
