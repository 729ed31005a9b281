"""Benchmark (not a test): convert an N-request agentic trace and replay it upstream.

Usage: .venv/bin/python benchmarks/bench_convert.py [--requests 1000000] [--replay-requests N]
       [--check-requests 50000] [--no-replay]

Workload: N/5 trajectories x 5 turns (input 512-2047 tokens sharing a 256-token system prompt,
output 32-287 tokens, measured tool waits 0-200 ms), one slot pool of 64 lanes, block size 16.
Measures, for the conversion (in-memory WorkloadRecords -> checked -> agentic_mooncake v2 file):
wall time and peak RSS growth (VmHWM reset through /proc/self/clear_refs). Then runs upstream
replay (fixed timing model) on the converted file of the first ``--replay-requests`` requests
and reports its wall time next to the conversion time of the same size.

Also printed: the conversion's phases (index, checks, convert = dense hash remap, write), the
1-minute load average (``os.getloadavg``) before and after each measured step (the machine has 2
cores; other jobs inflate both times), and a byte-identity check: the first ``--check-requests``
requests are also converted the straightforward way (dict rows, per-prompt ``HashRemap``, one
``json`` encode per row; tests/test_convert_fast_write.py) and the two files must be equal.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from replay_build import chained, dep, engine, pool, record, req, traj  # noqa: E402

from unirl_replay.replay.convert import agentic_mooncake  # noqa: E402
from unirl_replay.replay.workload import WorkloadIndex  # noqa: E402
from unirl_replay.replay.support import check_supported  # noqa: E402

BS = 16


def rss_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def build(n_requests: int, seed: int = 0) -> list:
    rnd = random.Random(seed)
    sys_prompt = chained(256, BS, "system")
    recs = []
    for t in range(n_requests // 5):
        tid = f"traj{t:07d}"
        rids = []
        for k in range(5):
            rid = f"{tid}-{k}"
            inp = rnd.randrange(512, 2048)
            hashes = sys_prompt + [rnd.getrandbits(64) for _ in range(-(-inp // BS) - len(sys_prompt))]
            deps = [dep(rids[-1], rnd.uniform(0, 200))] if rids else ()
            recs.append(record(req(rid, inp=inp, out=(rnd.randrange(32, 288),), traj=tid, turn=k, bs=BS,
                                   hashes=hashes, deps=deps, at_ms=None if deps else t * 1.0)))
            rids.append(rid)
        recs.append(record(traj(tid, rids, pool="pool", order=t)))
    recs.append(record(pool("pool", 64)))
    return recs


def load() -> str:
    return "load %.2f/%.2f/%.2f" % os.getloadavg()


def convert(recs, eng, out: Path) -> tuple[float, int, int, dict]:
    reset_peak()
    base = rss_kib("VmRSS")
    phases = {}
    t0 = time.perf_counter()
    ix = WorkloadIndex.from_records(recs)
    t1 = time.perf_counter()
    plans, _ = check_supported(ix, {"e0": eng})
    t2 = time.perf_counter()
    conv = agentic_mooncake.convert_engine(plans["e0"], ix)
    t3 = time.perf_counter()
    conv.write(out)  # streams rows to the file (none are kept)
    t4 = time.perf_counter()
    phases = {"index": t1 - t0, "checks": t2 - t1, "convert": t3 - t2, "write": t4 - t3}
    return t4 - t0, rss_kib("VmHWM") - base, len(conv.sequences), phases


def subset(recs, n_requests: int) -> list:
    """The records of the first ``n_requests // 5`` trajectories (and the pool)."""
    keep = n_requests // 5
    return [r for r in recs if not (r.HasField("request") and int(r.request.trajectory_id[4:]) >= keep)
            and not (r.HasField("trajectory") and int(r.trajectory.trajectory_id[4:]) >= keep)]


def check_identity(recs, eng, n_requests: int, d: Path) -> None:
    from test_convert_fast_write import reference_agentic

    sub = subset(recs, n_requests)
    convert(sub, eng, d / "fast.jsonl")
    ix = WorkloadIndex.from_records(sub)
    plans, _ = check_supported(ix, {"e0": eng})
    ref = reference_agentic(plans["e0"], ix).encode()
    got = (d / "fast.jsonl").read_bytes()
    ok = got == ref
    print(f"byte identity (first {n_requests} requests, fast file vs dict/HashRemap/json reference): "
          f"{'IDENTICAL' if ok else 'DIFFERENT'} sha256 {hashlib.sha256(got).hexdigest()[:16]}", flush=True)
    if not ok:
        raise SystemExit("the fast conversion differs from the reference")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--replay-requests", type=int, default=None)
    ap.add_argument("--check-requests", type=int, default=50_000)
    ap.add_argument("--no-replay", action="store_true")
    a = ap.parse_args()
    eng = engine(bs=BS, blocks=200_000, seqs=256, mnbt=8192, max_len=8192)
    t0 = time.perf_counter()
    recs = build(a.requests)
    print(f"built {a.requests} requests in {time.perf_counter() - t0:.1f} s (not measured)", flush=True)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "in.jsonl"
        if a.check_requests:
            check_identity(recs, eng, min(a.check_requests, a.requests), Path(d))
        print(f"before conversion: {load()}", flush=True)
        dt, peak, rows, ph = convert(recs, eng, out)
        print(f"convert N={a.requests}: {dt:.2f} s ({', '.join(f'{k} {v:.2f}' for k, v in ph.items())}), "
              f"peak RSS growth {peak / 1024:.0f} MiB, {rows} rows, file {out.stat().st_size / 2**20:.0f} MiB, "
              f"sha256 {hashlib.sha256(out.read_bytes()).hexdigest()[:16]}; after: {load()}", flush=True)
        if a.no_replay:
            return
        n_rep = a.replay_requests or a.requests
        if n_rep != a.requests:
            dt, peak, rows, ph = convert(subset(recs, n_rep), eng, out)
            print(f"convert N={n_rep}: {dt:.2f} s, peak RSS growth {peak / 1024:.0f} MiB", flush=True)
        del recs
        from unirl_replay.replay.convert.common import engine_args
        from unirl_replay.replay.simulators.dynamo import run_upstream
        args, _ = engine_args(eng, {"type": "fixed", "prefill_ms": 20.0, "decode_ms": 2.0})
        print(f"before replay: {load()}", flush=True)
        t0 = time.perf_counter()
        run = run_upstream(out, trace_format="agentic_mooncake", engine_args=args, agentic_lanes=64,
                           execution_model=agentic_mooncake.MODEL, per_request=True)
        print(f"upstream replay N={n_rep}: {time.perf_counter() - t0:.2f} s "
              f"(simulated {run.summary['duration_ms'] / 1000:.0f} s, {run.summary['completed_requests']} completed); "
              f"after: {load()}", flush=True)

if __name__ == "__main__":
    main()
