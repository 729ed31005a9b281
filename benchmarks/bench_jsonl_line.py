"""Benchmark (not a test): where the time of one JSONL line goes, against binpb's FromString.

Usage: .venv/bin/python benchmarks/bench_jsonl_line.py [--trace DIR] [--lines 2000] [--rounds 15]

Takes the first request lines of a written JSONL trace (``bench_pipeline``'s or ``bench_jsonl``'s:
``DIR/workload.jsonl`` and ``DIR/outcomes.jsonl``; written here at 2,000 requests when ``--trace``
is not given) and times, in this one process, each stage of the fast path on the same lines:
the whole typed tier, its parts (Struct decode, byte-exact re-encoding check, converter without
the hashes, the hash decoder, the message constructor), the generic tier, the reference parser,
and ``FromString`` of the same messages' binpb bytes. Each case runs ``--rounds`` times,
interleaved; the minimum process CPU time (``time.process_time``) per line is printed: on a
shared machine the minimum is the least disturbed figure.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def bench(cases: dict, n: int, rounds: int) -> dict[str, float]:
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for k, fn in cases.items():
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return {k: 1e6 * v / n for k, v in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    if a.trace is None:
        a.trace = str(Path(tempfile.mkdtemp(prefix="bench_jsonl_line_")) / "trace")
        subprocess.run([sys.executable, str(HERE / "bench_pipeline.py"), "--child", "write", "--trace", a.trace,
                        "--requests", str(max(a.lines, 2000)), "--encodings", "jsonl"], check=True, capture_output=True)
    from unirl_replay.contract import fast_jsonl, fast_typed, json_profile
    from unirl_replay.v1 import outcomes_pb2 as o
    from unirl_replay.v1 import workload_pb2 as w

    sys.path.insert(0, str(HERE))
    from bench_pipeline import cpu_model
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; microseconds of process "
          f"CPU time per line, minimum of {a.rounds} interleaved rounds")
    for name, cls in (("workload", w.WorkloadRecord), ("outcomes", o.OutcomeRecord)):
        with open(Path(a.trace) / f"{name}.jsonl", "rb") as f:
            lines = [x for x in itertools.islice(f, 20 * a.lines) if x.startswith(b'{"request"')][:a.lines]
        plan = fast_typed.plan_for(cls)
        structs = [plan.decode(x[:-1]) for x in lines]
        kwargs = [plan.convert(s) for s in structs]
        binpb = [cls(**k).SerializeToString() for k in kwargs]
        cases = {
            "binpb FromString (same messages)": lambda: [cls.FromString(b) for b in binpb],
            "typed tier, whole": lambda: [fast_typed.try_parse(x, cls) for x in lines],
            "  Struct decode (hashes kept raw)": lambda: [plan.decode(x[:-1]) for x in lines],
            "  re-encode + compare bytes": lambda: [plan.encode(s) == x[:-1] for s, x in zip(structs, lines)],
            "  converter (hash decoder included)": lambda: [plan.convert(s) for s in structs],
        }
        if name == "workload":
            raws = [s.request.prefix.block_hashes for s in structs]
            cases["  of which the hash decoder (~80 hashes)"] = lambda: [fast_typed._u64_list(r) for r in raws]
        cases |= {
            "  message constructor": lambda: [cls(**k) for k in kwargs],
            "generic tier (before: msgspec objects + tables)": lambda: [fast_jsonl._try_generic(x, cls) for x in lines],
            "reference (json_guard + ParseDict)": lambda: [json_profile.parse_json(x, cls) for x in lines[:200]],
        }
        res = bench(cases, len(lines), a.rounds)
        res["reference (json_guard + ParseDict)"] *= len(lines) / 200
        base = res["binpb FromString (same messages)"]
        print(f"\n{name}: {len(lines)} request lines, {sum(map(len, lines)) / len(lines):.0f} bytes each\n")
        print("| stage | us per line | x FromString |\n|---|---:|---:|")
        for k, v in res.items():
            print(f"| {k} | {v:.2f} | {v / base:.1f} |")


if __name__ == "__main__":
    main()
