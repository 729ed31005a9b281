"""Benchmark (not a test): JSONL read and validate against binpb, and against another checkout.

Usage: .venv/bin/python benchmarks/bench_jsonl.py [--requests 100000] [--rounds 3] [--dir DIR]
       [--old-tree /path/to/other/checkout] [--steps read,columns,convert,validate] [--trace-dir D]

The trace is ``bench_pipeline``'s (``bench_convert``'s agentic workload: ~80 prefix hashes per
request, one outcome per request), written once per encoding into ``--dir`` and kept there (a
second run reuses it). Each round runs every (step, encoding, code) cell once, interleaved, in a
fresh process; ``code`` is this checkout and, with ``--old-tree``, the other checkout's
``python/`` and ``gen/python/`` first on ``PYTHONPATH`` (same interpreter). For every cell it
prints wall time, CPU time (user + system of the child: what the step itself cost, less
sensitive than wall time to the other jobs of a shared machine), peak RSS and the 1-minute load
average before and after, then a summary: per cell the minimum over rounds, and the ratios
JSONL / binpb of the same code and round (median over rounds).

* ``read``     -- ``open_trace`` (digests verified) + streaming every workload record (messages);
* ``columns``  -- ``open_trace`` + ``workload_columns.read_columns`` (the facts the converter
  reads, the hashes as one ``uint64`` array: what ``convert`` reads; JSONL since
  ``contract/jsonl_columns.py``);
* ``convert``  -- ``runner.convert_trace`` (agentic_mooncake, the upstream's input written to a
  temporary directory);
* ``validate`` -- ``validate.check_trace`` (workload and outcomes).

``--trace-dir D`` takes the two traces from ``D/trace-binpb-N`` and ``D/trace-jsonl-N`` (e.g. the
same workload written once per encoding by an earlier run) instead of ``--dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(step: str, trace: str) -> None:
    import resource
    import time
    t0 = time.perf_counter()
    res: dict = {}
    if step == "read":
        from unirl_replay.contract.trace_io import open_trace
        res["records"] = sum(1 for _ in open_trace(trace).iter_workload())
    elif step == "columns":
        from unirl_replay.contract.gc_pause import paused_gc
        from unirl_replay.contract.trace_io import open_trace
        from unirl_replay.contract.workload_columns import read_columns
        with paused_gc():  # as convert_trace / replay_trace call it
            cols = read_columns(open_trace(trace))
        res["requests"] = None if cols is None else len(cols)  # None: declined (the code before jsonl_columns)
    elif step == "convert":
        import tempfile

        from unirl_replay.replay.runner import convert_trace
        with tempfile.TemporaryDirectory() as d:
            convert_trace(trace, Path(d) / "upstream.jsonl")
    else:
        from unirl_replay.contract.validate import check_trace
        r = check_trace(trace)
        res["status"] = r.status
    res["wall_s"] = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    res["cpu_s"] = ru.ru_utime + ru.ru_stime  # the whole process: interpreter start and imports too
    res["rss_mib"] = ru.ru_maxrss / 1024
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/bench_jsonl")
    ap.add_argument("--old-tree", default=None)
    ap.add_argument("--steps", default="read,validate")
    ap.add_argument("--trace-dir", default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--trace", default=None)
    a = ap.parse_args()
    if a.child:
        return _child(a.child, a.trace)
    sys.path.insert(0, str(HERE))
    from bench_pipeline import cpu_model

    base = Path(a.trace_dir or a.dir)
    base.mkdir(parents=True, exist_ok=True)
    traces = {}
    for enc in ("binpb", "jsonl"):
        t = base / f"trace-{enc}-{a.requests}"
        if not (t / "manifest.json").is_file():
            subprocess.run([sys.executable, str(HERE / "bench_pipeline.py"), "--child", "write", "--trace", str(t),
                            "--requests", str(a.requests), "--encodings", enc], check=True, capture_output=True)
        traces[enc] = t
    codes = {"this": None}
    if a.old_tree:
        codes = {"old": f"{a.old_tree}/python:{a.old_tree}/gen/python", "this": None}
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; python {sys.version.split()[0]}; "
          f"{a.requests:,} requests; old = {a.old_tree}", flush=True)
    results: dict[tuple, list[dict]] = {}
    for rnd in range(a.rounds):
        for step in a.steps.split(","):
            for code, pp in codes.items():
                for enc in ("binpb", "jsonl"):
                    env = dict(os.environ)
                    if pp:
                        env["PYTHONPATH"] = pp
                    before = os.getloadavg()[0]
                    p = subprocess.run([sys.executable, __file__, "--child", step, "--trace", str(traces[enc])],
                                       capture_output=True, text=True, env=env)
                    if p.returncode:
                        print(p.stderr[-3000:], file=sys.stderr)
                        raise SystemExit(f"{step} {enc} {code} failed")
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                    r["load"] = (before, os.getloadavg()[0])
                    results.setdefault((step, code, enc), []).append(r)
                    print(f"round {rnd + 1} {step:8s} {code:4s} {enc}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s, "
                          f"peak RSS {r['rss_mib']:.0f} MiB (load {before:.2f} -> {r['load'][1]:.2f})", flush=True)
    print("\n| step | code | encoding | wall min (s) | cpu min (s) | JSONL / binpb wall (median) | "
          "JSONL / binpb cpu (median) | load (1 min) |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for step in a.steps.split(","):
        for code in codes:
            for enc in ("binpb", "jsonl"):
                rs = results[(step, code, enc)]
                loads = [x for r in rs for x in r["load"]]
                if enc == "jsonl":
                    bs = results[(step, code, "binpb")]
                    rw = statistics.median(j["wall_s"] / b["wall_s"] for j, b in zip(rs, bs))
                    rc = statistics.median(j["cpu_s"] / b["cpu_s"] for j, b in zip(rs, bs))
                    ratio = f"{rw:.2f} | {rc:.2f}"
                else:
                    ratio = "- | -"
                print(f"| {step} | {code} | {enc} | {min(r['wall_s'] for r in rs):.2f} | "
                      f"{min(r['cpu_s'] for r in rs):.2f} | {ratio} | {min(loads):.1f}-{max(loads):.1f} |")
    if a.old_tree:
        print("\n| step | encoding | old / this wall (median) | old / this cpu (median) |")
        print("|---|---|---:|---:|")
        for step in a.steps.split(","):
            for enc in ("binpb", "jsonl"):
                o, t = results[(step, "old", enc)], results[(step, "this", enc)]
                print(f"| {step} | {enc} | {statistics.median(x['wall_s'] / y['wall_s'] for x, y in zip(o, t)):.2f} | "
                      f"{statistics.median(x['cpu_s'] / y['cpu_s'] for x, y in zip(o, t)):.2f} |")


if __name__ == "__main__":
    main()
