"""Does work on one CPU slow a compute loop pinned to another? (host characterisation, not a test)

A CPU engine's worker is pinned to one core (``VLLM_CPU_OMP_THREADS_BIND``) while its frontend, its
EngineCore and the client's processes run on the others. On a VM whose vCPUs share a physical core (SMT
siblings on the host, invisible to the guest's ``lscpu``) or are scheduled together, the worker's passes then
run at the speed the OTHER CPUs' activity leaves them: a GRPO window's same-size prefill passes ran either
~1x or ~2x the model (results/holdout-closed-f26m2), where the calibration sweep and the probe, whose other
CPUs are idle during a pass, measure the fast mode.

Per round: numpy 400x400 matmuls per second on ``--cpu`` (1 s) with the other CPU idle, then while a numpy
loop and then an integer loop spin on ``--other``. Ratios are taken within a round (interleaved); the load
and the CPU model are printed next to them.

    .venv/bin/python benchmarks/sibling_interference.py [--cpu 0] [--other 1] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SPINNERS = {"numpy": "import numpy as np\na = np.random.rand(400, 400)\nwhile True: a @ a",
            "int": "x = 0\nwhile True: x += 1"}


def rate(a, seconds: float = 1.0) -> float:
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        a @ a
        n += 1
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=0, help="CPU the measured loop is pinned to")
    ap.add_argument("--other", type=int, default=1, help="CPU the spinner is pinned to")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import numpy as np  # after the thread variables: one BLAS thread

    os.sched_setaffinity(0, {args.cpu})
    a = np.random.default_rng(0).random((400, 400))
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"CPU model {model!r}; load before {os.getloadavg()}; measured on CPU {args.cpu}, spinner on CPU {args.other}")
    ratios: dict[str, list[float]] = {k: [] for k in SPINNERS}
    for r in range(args.rounds):
        idle = rate(a)
        line = [f"round {r + 1}: idle {idle:.0f}/s"]
        for name, code in SPINNERS.items():
            p = subprocess.Popen(["taskset", "-c", str(args.other), sys.executable, "-c", code])
            try:
                time.sleep(0.3)
                busy = rate(a)
            finally:
                p.kill()
                p.wait()
            ratios[name].append(busy / idle)
            line.append(f"{name} spinner {busy:.0f}/s ({busy / idle:.2f}x)")
        print("; ".join(line))
    for name, xs in ratios.items():
        print(f"{name} spinner: median {statistics.median(xs):.2f}x of the idle rate (min {min(xs):.2f}x, "
              f"max {max(xs):.2f}x over {len(xs)} rounds)")
    print(f"load after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
