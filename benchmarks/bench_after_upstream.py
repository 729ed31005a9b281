"""Benchmark (not a test): `replay`'s work after the upstream call alone, the upstream's rows replayed.

Usage:
    .venv/bin/python benchmarks/bench_after_upstream.py TRACE --save ROWS.pkl    # run the real upstream once, keep its rows
    .venv/bin/python benchmarks/bench_after_upstream.py TRACE --rows ROWS.pkl [--out DIR]

With ``--save`` the real upstream runs once inside ``runner.replay_trace`` and its answer (the
``SimulatorRun``: rows, summary, wall ns) is pickled. With ``--rows`` the same ``replay_trace`` +
``write_result`` run with ``dynamo.run_upstream`` answering from the pickle, so the part after
the upstream call (mapping rows back, deriving trajectories / groups / batches, building the
ReplayResult, writing ``replay_result.json``) can be timed alone, as often as wanted, on the very
rows the upstream gave; the result file is deterministic (the pickled wall ns included), so two
checkouts' results can be compared byte for byte (``sha256`` printed). Another checkout's code:
``PYTHONPATH=<other>/python:<other>/gen/python``.

Printed (one JSON line): the process CPU time after the (last) upstream answer until the file is
written, split into the replay part (``replay_trace``'s return) and the write; per-function CPU
of the parts that exist in the code being run; the resident size when the upstream answered, the
peak after it (``VmHWM`` reset at that moment through ``/proc/self/clear_refs``) and the growth;
the load average. Not counted here by default, unlike in ``bench_pipeline.py --steps replay``:
freeing the upstream's rows (the pickle keeps them alive), about 0.4-0.6 s per 100k rows on the
project machine. With ``--count-free`` the bench drops its own reference when it hands the answer
over, so the rows are freed where ``replay`` frees them (when ``replay_workload`` returns) and
that cost is in the replay part, as in a real run.

``--cli``: the ``replay`` command itself (``cli.main.main(["replay", TRACE, ...])`` in-process,
its gate included but before the upstream answer, so not counted), the upstream answered from
the pickle as above: the after part is then what the command does from the answer to its
return (``replay_part_cpu_s`` = everything, ``write_cpu_s`` not split). In-process the command
frees the rows when it returns (counted, as ``--count-free``); ``--left-to-exit`` gives the
command the program's exit hold (``cli.main.left_to_exit``, what ``unirl-replay`` has: the rows
are left to the process exit and not counted). A checkout without the hold ignores it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from cpu_laps import wrap_cpu

TIMING = "fixed:20,2"


def _status_mib(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--save", help="run the real upstream once and pickle its answer here")
    ap.add_argument("--rows", help="the pickled upstream answer to replay")
    ap.add_argument("--out", default=None, help="result directory (a temporary one by default)")
    ap.add_argument("--count-free", action="store_true", help="free the upstream's rows where replay frees them "
                    "(the bench keeps no reference): their freeing is counted in the replay part")
    ap.add_argument("--cli", action="store_true", help="time the replay command (cli.main.main) instead of "
                    "replay_trace + write_result (implies --count-free)")
    ap.add_argument("--left-to-exit", action="store_true", help="with --cli: the program's exit hold (the rows are "
                    "left to the process exit, as in `unirl-replay replay`)")
    a = ap.parse_args()
    from unirl_replay.contract import json_write
    from unirl_replay.replay import mapback, runner
    from unirl_replay.replay.simulators import dynamo

    if a.save:
        real = dynamo.run_upstream

        def saving(*args, **kw):
            run = real(*args, **kw)
            with open(a.save, "wb") as f:
                pickle.dump(run, f, protocol=5)
            return run
        dynamo.run_upstream = saving
        runner.replay_trace(a.trace, TIMING)
        print(json.dumps({"saved": a.save}))
        return
    if not a.rows:
        ap.error("--rows or --save")
    if a.cli:
        a.count_free = True
    with open(a.rows, "rb") as f:
        held = [pickle.load(f)]  # with --count-free, handed over and no longer referenced here
    mark: dict = {}

    def answering(*_args, **_kw):
        try:  # reset the peak resident size: what is measured after this is the after part's
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            mark["peak_reset"] = True
        except OSError:
            mark["peak_reset"] = False
        mark["rss_at_answer_mib"] = _status_mib("VmRSS:")
        mark["cpu"] = time.process_time()
        mark["wall"] = time.perf_counter()
        return held.pop() if a.count_free else held[0]
    dynamo.run_upstream = answering
    parts: dict[str, float] = {}

    def timed(mod, name):
        if getattr(mod, name, None) is None:
            return

        wrap_cpu(mod, name, parts, name)
    for name in ("map_rows", "predicted_values", "predicted_values_bulk", "predicted_values_mapped", "predicted_columns"):
        timed(mapback, name)
    for name in ("derive_trajectories_values", "derive_trajectories_columns", "derive_groups_values", "derive_batches"):
        timed(runner, name)
    timed(json_write, "to_json_bytes")
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="bench_after_"))
    load0 = os.getloadavg()[0]
    if a.cli:
        from unirl_replay.cli import main as cli
        if a.left_to_exit:
            cli._LEFT_TO_EXIT = []  # what cli.main.run sets up (a checkout without it: ignored)
        out.mkdir(parents=True, exist_ok=True)
        rc = cli.main(["replay", a.trace, "--timing-model", TIMING, "--out", str(out / "cli")])
        if rc:
            raise SystemExit(f"replay exited {rc}")
        c1 = c2 = time.process_time()
        w2 = time.perf_counter()
        path = out / "cli" / runner.RESULT_FILE
        n_requests = json.loads(path.read_bytes()).get("requests", []).__len__()
    else:
        res = runner.replay_trace(a.trace, TIMING)
        c1 = time.process_time()
        path = runner.write_result(out, res)
        c2, w2 = time.process_time(), time.perf_counter()
        n_requests = len(res.requests)
    peak = _status_mib("VmHWM:")
    print(json.dumps({
        "after_upstream_cpu_s": round(c2 - mark["cpu"], 3), "replay_part_cpu_s": round(c1 - mark["cpu"], 3),
        "write_cpu_s": round(c2 - c1, 3), "after_upstream_s": round(w2 - mark["wall"], 3),
        "parts_cpu_s": {k: round(v, 3) for k, v in parts.items()},
        "requests": n_requests, "result_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "rss_at_answer_mib": round(mark["rss_at_answer_mib"], 1), "peak_after_mib": round(peak, 1),
        "growth_mib": round(peak - mark["rss_at_answer_mib"], 1), "peak_reset": mark["peak_reset"],
        "rows_freed_in_replay_part": a.count_free and not a.left_to_exit, "cli": a.cli, "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}))
    if not a.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
