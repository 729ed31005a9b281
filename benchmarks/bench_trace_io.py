"""Benchmark (not a test): write and read a 1,000,000-request trace in both encodings.

For each encoding and size (100k, 1M requests) it writes a trace with ``TraceWriter`` (requests,
one per line/frame, plus one outcome per request), then opens it and streams both artifacts,
each step in a fresh subprocess so that ``ru_maxrss`` (peak resident memory of that process) is
the step's own. Prints a markdown table. Flat memory = the 1M peak is close to the 100k peak.

    .venv/bin/python benchmarks/bench_trace_io.py [--sizes 100000,1000000] [--dir /tmp/bench]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _request(i: int):
    from unirl_replay.v1 import common_pb2 as c
    from unirl_replay.v1 import workload_pb2 as w
    r = w.Request(request_id=f"req-{i:08d}", num_samples=1, sample_ids=[f"s-{i:08d}"], group_id=f"g{i // 8}",
                  rollout_batch_id=f"b{i // 4096}", engine_id="e0", worker_id="w0", policy_version=0,
                  input_tokens=300 + i % 200, output_tokens=[100 + i % 50], finish_reasons=[c.FINISH_REASON_STOP])
    r.prefix.block_size_tokens = 16
    r.prefix.block_hashes.extend((i * 31 + k) * 0x9E3779B97F4A7C15 % (1 << 64) for k in range(-(-r.input_tokens // 16)))
    r.arrival.observed_offset_ns = i * 1_000_000
    return w.WorkloadRecord(request=r)


def _outcome(i: int):
    from unirl_replay.v1 import outcomes_pb2 as o
    t = i * 1_000_000
    return o.OutcomeRecord(request=o.RequestOutcome(request_id=f"req-{i:08d}", submit_ns=t, queued_ns=t,
                                                    scheduled_ns=t + 10**6, first_token_ns=t + 5 * 10**6,
                                                    completion_ns=t + 50 * 10**6, cached_tokens=0))


def step_write(d: str, enc: str, n: int) -> dict:
    from tracebuild_min import manifest
    from unirl_replay.contract.trace_io import TraceWriter
    t0 = time.perf_counter()
    with TraceWriter(d, enc) as wr:
        for i in range(n):
            wr.write_workload(_request(i))
            wr.write_outcome(_outcome(i))
        m = wr.finalize(manifest(n))
    return {"s": time.perf_counter() - t0, "bytes": sum(a.size_bytes for a in m.artifacts)}


def step_read(d: str, enc: str, n: int) -> dict:
    from unirl_replay.contract.outcomes_io import iter_outcomes
    from unirl_replay.contract.trace_io import open_trace
    t0 = time.perf_counter()
    t = open_trace(d)
    k = sum(1 for _ in t.iter_workload()) + sum(1 for _ in iter_outcomes(t))
    assert k == 2 * n, k
    return {"s": time.perf_counter() - t0}


def _child(args) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    res = {"write": step_write, "read": step_read}[args.child](args.dir, args.enc, args.n)
    res["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", choices=["write", "read"])
    ap.add_argument("--enc")
    ap.add_argument("--n", type=int)
    args = ap.parse_args()
    if args.child:
        return _child(args)
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench_trace_io_"))
    rows = []
    for enc in ("jsonl", "binpb"):
        for n in (int(x) for x in args.sizes.split(",")):
            d = base / f"{enc}-{n}"
            shutil.rmtree(d, ignore_errors=True)
            out = {}
            for step in ("write", "read"):
                p = subprocess.run([sys.executable, __file__, "--child", step, "--dir", str(d), "--enc", enc,
                                    "--n", str(n)], capture_output=True, text=True, check=True)
                out[step] = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append((enc, n, out))
            shutil.rmtree(d, ignore_errors=True)
            print(f"done {enc} {n}: {out}", file=sys.stderr, flush=True)
    print("| encoding | requests | artifacts size (MiB) | write (s) | write peak RSS (MiB) | read (s) | read peak RSS (MiB) | write / read (µs per request+outcome) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for enc, n, o in rows:
        print(f"| {enc} | {n:,} | {o['write']['bytes'] / 2**20:.0f} | {o['write']['s']:.1f} | {o['write']['rss_mib']:.0f} "
              f"| {o['read']['s']:.1f} | {o['read']['rss_mib']:.0f} | {1e6 * o['write']['s'] / n:.0f} / {1e6 * o['read']['s'] / n:.0f} |")


if __name__ == "__main__":
    main()
