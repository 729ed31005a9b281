"""Benchmark (not a test): the commands end to end on a written trace, each in its own process.

Usage: .venv/bin/python benchmarks/bench_pipeline.py [--requests 100000] [--encodings binpb,jsonl,arrow]
       [--steps convert,cli_convert,gate,upstream,replay,validate,read] [--dir DIR]

The trace is ``bench_convert``'s agentic workload (N/5 trajectories x 5 turns, ~80 prefix hashes
per request, 64 trajectory lanes) plus one measured outcome per request, written with
``TraceWriter``. Steps, each a fresh ``python`` process (so its ``ru_maxrss`` is the step's own
peak RSS, interpreter and imports included):

* ``convert``  -- ``runner.convert_trace`` (open + sha256, read, index, checks, remap, write the
  agentic_mooncake file): what ``unirl-replay convert`` does;
* ``cli_convert`` -- ``unirl-replay convert TRACE --out FILE`` in-process (``cli.main.main``): the
  gate (``validate``'s container, manifest and workload rules) and then ``runner.convert_trace``,
  what a user waits for end to end;
* ``gate``     -- ``contract.gate.gate(trace, "convert")`` alone (the gate's part of ``cli_convert``);
* ``upstream`` -- ``dynamo.replay.run_trace_replay`` alone on that file (fixed timing model
  20 ms prefill / 2 ms decode, per-request rows): the reference cost;
* ``replay``   -- ``runner.replay_trace`` + ``write_result``: the whole ``replay``; reported with
  ``after upstream`` = time from the upstream call's return to the result file being written
  (mapping rows back, deriving trajectories / groups / batches, writing), the CPU time of both
  parts, and our memory apart from the upstream's (which runs in the same process): the peak
  RSS before the first upstream call and the resident size when the last one returned;
* ``cli_replay`` -- the ``unirl-replay replay TRACE --timing-model fixed:20,2 --out DIR`` program
  (``cli.main.run``; a checkout without it: ``sys.exit(cli.main.main())``, what its console
  script runs): the gate, the whole replay, the exit; reported with the upstream call's CPU
  time, the CPU time from its return to the command's return (``after_upstream_cpu_s``), and
  ``exit_cpu_s``, the process's CPU time after the command returned (the interpreter's exit);
  ``process_cpu_s`` (every step) is the whole child process's, start and exit included;
* ``validate`` -- ``validate.check_trace`` (workload and outcomes);
* ``read``     -- ``open_trace`` + streaming every workload record (trace_io alone).

Every step also reports ``cpu_s``, its process's CPU time (user + system), which other jobs on a
shared machine inflate far less than the wall time. Interleaved: steps run in the order given for one encoding, then the next; the 1-minute load
average (``os.getloadavg``) is printed around each step, and the CPU model once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMING = "fixed:20,2"


def write_trace(d: Path, n: int, enc: str) -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "tests"))
    from bench_convert import BS, build
    from replay_build import engine
    from unirl_replay.contract.trace_io import TraceWriter
    from unirl_replay.v1 import common_pb2 as c
    from unirl_replay.v1 import manifest_pb2 as m
    from unirl_replay.v1 import outcomes_pb2 as o

    recs = build(n)
    man = m.TraceManifest(
        trace_id=f"bench-{n}", producer=m.Producer(name="bench_pipeline", version="0"),
        engines=[engine(bs=BS, blocks=200_000, seqs=256, mnbt=8192, max_len=8192)],
        window=m.CaptureWindow(duration_ns=(n // 5 + 100) * 10**6 * 10, clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED), role=c.WORKLOAD_ROLE_UNLABELLED,
        cache_state=c.CACHE_STATE_KIND_COLD)
    with TraceWriter(d, enc) as wr:
        t = 0
        for rec in recs:
            if rec.HasField("request") and not rec.request.finish_reasons:  # build() may already set them
                rec.request.finish_reasons.extend([c.FINISH_REASON_STOP] * rec.request.num_samples)
            wr.write_workload(rec)
            if rec.HasField("request"):
                t += 10**6
                wr.write_outcome(o.OutcomeRecord(request=o.RequestOutcome(
                    request_id=rec.request.request_id, submit_ns=t, queued_ns=t, scheduled_ns=t + 10**6,
                    first_token_ns=t + 5 * 10**6, completion_ns=t + 50 * 10**6, cached_tokens=0)))
        wr.finalize(man)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vmrss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _time_upstream_returns() -> list[tuple]:
    """Wrap the real upstream call to record when each call returned (perf_counter, process_time) and
    the CPU time it took."""
    from unirl_replay.replay.simulators import dynamo
    returns: list[tuple] = []
    real = dynamo.run_upstream

    def timed(*a, **k):
        c = time.process_time()
        before = _peak_mib()
        out = real(*a, **k)
        returns.append((time.perf_counter(), time.process_time(), time.process_time() - c, before, _vmrss_mib()))
        return out
    dynamo.run_upstream = timed
    return returns


def step(name: str, trace: Path, work: Path) -> dict:
    t0 = time.perf_counter()
    c0 = time.process_time()
    res: dict = {}
    if name == "convert":
        from unirl_replay.replay.runner import convert_trace
        convert_trace(trace, work / "upstream.jsonl")
    elif name == "cli_convert":
        from unirl_replay.cli.main import main as cli_main
        rc = cli_main(["convert", str(trace), "--out", str(work / "upstream.jsonl")])
        if rc:
            raise SystemExit(f"unirl-replay convert exited {rc}")
    elif name == "gate":
        from unirl_replay.contract.gate import gate
        gate(trace, "convert")
    elif name == "upstream":
        sys.path.insert(0, str(HERE.parent / "tests"))
        from unirl_replay.contract.trace_io import open_trace
        from unirl_replay.replay.convert.agentic_mooncake import MODEL
        from unirl_replay.replay.convert.common import engine_args
        from unirl_replay.replay.simulators.dynamo import run_upstream
        from unirl_replay.replay.timing_models import parse_timing_model
        eng = open_trace(trace, verify_digests=False).manifest.engines[0]
        args, _ = engine_args(eng, parse_timing_model(TIMING)[1])
        t0 = time.perf_counter()
        c0 = time.process_time()
        run = run_upstream(work / "upstream.jsonl", trace_format="agentic_mooncake", engine_args=args,
                           agentic_lanes=64, execution_model=MODEL, per_request=True)
        res["completed"] = run.summary["completed_requests"]
    elif name == "replay":
        returns = _time_upstream_returns()
        from unirl_replay.replay.runner import replay_trace, write_result
        r = replay_trace(trace, TIMING)
        write_result(work / "out", r)
        end = time.perf_counter()
        res["after_upstream_s"] = end - returns[-1][0]
        res["after_upstream_cpu_s"] = time.process_time() - returns[-1][1]
        res["upstream_call_cpu_s"] = sum(r[2] for r in returns)
        # our own memory, apart from the upstream's (it runs in this process): the peak before the
        # first upstream call (read, checks, conversion) and the resident size when the last returned
        res["peak_before_upstream_mib"] = returns[0][3]
        res["rss_after_upstream_mib"] = returns[-1][4]
        res["simulator_wall_s"] = r.simulator_wall_ns / 1e9
        res["result_mib"] = (work / "out" / "replay_result.json").stat().st_size / 2**20
    elif name == "cli_replay":
        returns = _time_upstream_returns()
        from unirl_replay.cli import main as cli

        real_main = cli.main

        def main_then_report(argv=None):  # the report goes out when the command returns, before the exit
            code = real_main(argv)
            end, cpu = time.perf_counter(), time.process_time()
            res.update(rc=code, after_upstream_s=end - returns[-1][0], after_upstream_cpu_s=cpu - returns[-1][1],
                       upstream_call_cpu_s=sum(r[2] for r in returns), cpu_at_return_s=cpu,
                       s=end - t0, cpu_s=cpu - c0,
                       rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                       arrow_pool=(sys.modules["pyarrow"].default_memory_pool().backend_name
                                   if "pyarrow" in sys.modules else None),
                       result_sha256=hashlib.sha256((work / "cli-out" / "replay_result.json").read_bytes()).hexdigest())
            print(json.dumps(res), flush=True)
            return code
        cli.main = main_then_report
        shutil.rmtree(work / "cli-out", ignore_errors=True)
        sys.argv = ["unirl-replay", "replay", str(trace), "--timing-model", TIMING, "--out", str(work / "cli-out")]
        if hasattr(cli, "run"):
            cli.run()
        sys.exit(cli.main())
    elif name == "validate":
        from unirl_replay.contract.validate import check_trace
        r = check_trace(trace)
        res["status"] = r.status
        res["violations"] = len(r.violations)
        if r.status != r.STATUS_VALID:  # the figure would time the error path, not a user's valid trace
            print(f"bench_pipeline: WARNING: the benchmark trace is not valid ({len(r.violations)} violations): "
                  "the validate figure is not representative", file=sys.stderr)
    elif name == "read":
        from unirl_replay.contract.trace_io import open_trace
        res["records"] = sum(1 for _ in open_trace(trace).iter_workload())
    if "pyarrow" in sys.modules:  # the allocator Arrow used (cli.main's default, or ARROW_DEFAULT_MEMORY_POOL)
        res["arrow_pool"] = sys.modules["pyarrow"].default_memory_pool().backend_name
    res["s"] = time.perf_counter() - t0
    res["cpu_s"] = time.process_time() - c0  # this process's CPU time (user + system): less sensitive to load
    res["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--encodings", default="binpb")
    ap.add_argument("--steps", default="convert,upstream,replay,validate,read")  # also: cli_convert,gate,cli_replay
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true", help="reuse a trace already in --dir and keep it (to run "
                    "another checkout's code on the same trace: PYTHONPATH=<other>/python:<other>/gen/python)")
    ap.add_argument("--child", default=None)
    ap.add_argument("--trace", default=None)
    a = ap.parse_args()
    if a.child:
        if a.child == "write":
            write_trace(Path(a.trace), a.requests, a.encodings)
            print(json.dumps({}))
            return
        print(json.dumps(step(a.child, Path(a.trace), Path(a.dir))))
        return
    base = Path(a.dir or tempfile.mkdtemp(prefix="bench_pipeline_"))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; python {sys.version.split()[0]}", flush=True)
    for enc in a.encodings.split(","):
        trace = base / f"trace-{enc}-{a.requests}"
        work = base / f"work-{enc}-{a.requests}"
        reuse = a.keep and (trace / "manifest.json").is_file()
        if not reuse:
            shutil.rmtree(trace, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if not reuse:
            subprocess.run([sys.executable, __file__, "--child", "write", "--trace", str(trace), "--requests",
                            str(a.requests), "--encodings", enc], check=True, capture_output=True)
            size = sum(p.stat().st_size for p in trace.iterdir()) / 2**20
            print(f"[{enc} N={a.requests}] wrote the trace ({size:.0f} MiB) in {time.perf_counter() - t0:.1f} s "
                  "(not measured)", flush=True)
        for name in a.steps.split(","):
            before = "%.2f" % os.getloadavg()[0]
            ru0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            p = subprocess.run([sys.executable, __file__, "--child", name, "--trace", str(trace), "--dir", str(work)],
                               capture_output=True, text=True)
            ru1, w1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            if p.returncode:
                print(p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"step {name} failed")
            r = json.loads([x for x in p.stdout.strip().splitlines() if x.startswith("{")][-1])
            # the whole child process (interpreter start, imports, the step, its exit): what a user's command costs
            r["process_cpu_s"] = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
            r["process_s"] = w1 - w0
            if "cpu_at_return_s" in r:
                r["exit_cpu_s"] = r["process_cpu_s"] - r.pop("cpu_at_return_s")
            after = "%.2f" % os.getloadavg()[0]
            extra = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                              if k not in ("s", "rss_mib"))
            print(f"[{enc} N={a.requests}] {name}: {r['s']:.2f} s, peak RSS {r['rss_mib']:.0f} MiB"
                  f"{', ' + extra if extra else ''} (load {before} -> {after})", flush=True)
        if not a.keep:
            shutil.rmtree(trace, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
