"""Benchmark (not a test): the grid runner, sequential vs local process pool vs Ray, on this host.

Usage: .venv/bin/python benchmarks/bench_grid.py [--out DIR] [--copies 5] [--workers 2]
       [--backends sequential,local,ray] [--revisions ai-dynamo==1.6.0,ai-dynamo==1.6.1] [--shards 2]
       [--no-plots] [--skip-replay-grid] [--skip-conformance]

Grid 1 (replay): the bundled real traces (traces/grpo-a, traces/agentic-a) listed ``--copies``
times each under distinct names (same directories: inputs are reached by path, nothing is copied)
x 2 timing models (the calibrated profile in profiles/ and the default polynomial): 20 jobs of
replay + compare (with plots, as the demo, unless ``--no-plots``).
Grid 2 (conformance): the conformance corpus on ``--revisions`` x ``--shards`` jobs. Revisions
other than the installed one are installed into .cache/conformance/ on first use (timed: the
environment-install cost of a fresh node).

For each grid and backend: wall time, the backend's start-up, the sum and mean of the job times
(so wall / sum shows the parallel efficiency), the 1/5/15-minute load averages before and after
(other engineers share the 2 cores), and whether every job's request-level digest (replay) or
matrix (conformance) equals the sequential run's. Writes ``<out>/bench_grid.json`` and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def replay_spec(path: Path, copies: int, plots: bool) -> Path:
    profiles = sorted((REPO / "profiles").glob("*.npz"))
    models = ([{"name": "calibrated", "spec": f"profile:{profiles[-1]}"}] if profiles else
              [{"name": "fixed", "spec": "fixed:10,1"}]) + ["polynomial"]
    traces = []
    for k in range(1, copies + 1):
        traces.append({"path": str(REPO / "traces" / "grpo-a"), "name": f"grpo-a-{k}", "plots": plots})
        traces.append({"path": str(REPO / "traces" / "agentic-a"), "name": f"agentic-a-{k}", "plots": plots,
                       "allow_unmodelled": ["engine_client.inflight_limit"]})
    path.write_text(json.dumps({"traces": traces, "timing_models": models}, indent=2))
    return path


def conformance_spec(path: Path, revisions: list[str], shards: int) -> Path:
    path.write_text(json.dumps({"conformance": {"corpus": str(REPO / "conformance"), "revisions": revisions,
                                                "shards": shards}}, indent=2))
    return path


def run_one(spec_path: Path, out: Path, backend: str, workers: int) -> dict:
    from unirl_replay.grid.runner import run_grid
    from unirl_replay.grid.spec import load_spec

    before = load()
    t0 = time.perf_counter()
    run = run_grid(load_spec(spec_path), out, backend=backend, workers=workers, progress=False)
    wall = time.perf_counter() - t0
    after = load()
    job_s = [r.get("wall_s", 0.0) for r in run.results]
    row = {"backend": backend, "workers": run.info.get("workers"), "jobs": len(run.results),
           "failed": len(run.failed), "wall_s": round(wall, 2), "startup_s": run.info.get("startup_s"),
           "job_sum_s": round(sum(job_s), 2), "job_mean_s": round(sum(job_s) / max(len(job_s), 1), 2),
           "load_before": before, "load_after": after,
           "env_install_s": round(sum(r.get("env_s", 0.0) for r in run.results), 2)}
    if any(r.get("kind") == "replay" for r in run.results):
        row["digests"] = [r.get("replay_sha256") for r in run.results]
        row["replay_s"] = round(sum(r.get("replay_s", 0.0) for r in run.results), 2)
        row["compare_s"] = round(sum(r.get("compare_s", 0.0) for r in run.results), 2)
    if (out / "conformance" / "matrix.json").is_file():
        row["matrix"] = json.loads((out / "conformance" / "matrix.json").read_text())
    return row


def table(title: str, rows: list[dict]) -> str:
    lines = [f"### {title}", "", "| backend | workers | jobs | failed | wall s | start-up s | sum of job s | "
             "mean job s | equal to sequential | load before -> after (1/5/15 min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    ref = rows[0]
    for r in rows:
        same = (r.get("digests") == ref.get("digests")) and (r.get("matrix", {}).get("cases") ==
                                                             ref.get("matrix", {}).get("cases"))
        lines.append(f"| {r['backend']} | {r['workers']} | {r['jobs']} | {r['failed']} | {r['wall_s']} | "
                     f"{r['startup_s']} | {r['job_sum_s']} | {r['job_mean_s']} | {'yes' if same else 'NO'} | "
                     f"{r['load_before']} -> {r['load_after']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/unirl-replay-bench-grid"))
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backends", default="sequential,local,ray")
    ap.add_argument("--revisions", default="")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--skip-replay-grid", action="store_true")
    ap.add_argument("--skip-conformance", action="store_true")
    args = ap.parse_args()
    from unirl_replay.conformance import runner as conf

    backends = [b for b in args.backends.split(",") if b]
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"host_cpus": os.cpu_count(), "python": sys.version.split()[0], "grids": {}}
    grids = []
    if not args.skip_replay_grid:
        grids.append(("replay", replay_spec(args.out / "replay.json", args.copies, not args.no_plots)))
    if not args.skip_conformance:
        revs = [r for r in args.revisions.split(",") if r] or [conf.installed_revision()]
        grids.append(("conformance", conformance_spec(args.out / "conformance.json", revs, args.shards)))
    md = []
    for name, spec in grids:
        rows = []
        for b in backends:
            out = args.out / f"{name}-{b}"
            shutil.rmtree(out, ignore_errors=True)
            print(f"{name} on {b} ...", file=sys.stderr, flush=True)
            try:
                rows.append(run_one(spec, out, b, args.workers))
            except Exception as e:  # e.g. Ray could not start on a loaded host: recorded, not hidden
                print(f"  {b} failed: {e}", file=sys.stderr, flush=True)
                result.setdefault("errors", []).append({"grid": name, "backend": b, "error": str(e)[:600],
                                                        "load": load()})
                continue
            print(f"  {rows[-1]['wall_s']} s (start-up {rows[-1]['startup_s']} s, load {rows[-1]['load_after']})",
                  file=sys.stderr, flush=True)
        result["grids"][name] = rows
        if not rows:
            continue
        md.append(table(f"{name} grid ({rows[0]['jobs']} jobs)", rows))
    (args.out / "bench_grid.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\n\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
