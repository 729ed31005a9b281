"""Does Dynamo Replay need the converter's dense hash ids? (a measured lead for issue 17, not a test)

``convert`` numbers every engine's prefix block hashes 0, 1, 2, ... in first-seen order
(``convert.common.HashRemap`` / ``dense_prompt_ids``). That numbering is the one piece of state
that grows with the trace's unique blocks whatever else a converter streams: at 1M requests of
the benchmark workload (~80 blocks each, almost all unique) it needs at least 8 bytes per unique
block. If the upstream reads any 64-bit hash id the same way, a streaming converter could write
the trace's own salted chained hashes (one row at a time, no whole-trace state for hashes).

This replays each bundled trace and each conformance case not named ``reject_*`` (one refused by the
converter, e.g. ``wait_missing_rejected``, is printed as not run) twice in the real upstream, one
process, same timing model: once
with the file ``convert`` writes and once with every ``hash_ids`` value replaced by
``splitmix64(id)`` (a bijection of uint64: equal ids stay equal, distinct ones stay distinct,
the values spread over the whole 64-bit range, most above 2^63). It prints, per trace, whether
every per-request result field the project reads (first token, last token, reused input tokens,
admission) is identical.

    .venv/bin/python benchmarks/upstream_raw_hash_ids.py [--traces traces/grpo-a,traces/agentic-a]

The bundled traces were captured with vLLM's prefix caching off (nothing is reused, so their ids
cannot matter); the conformance cases with it on test the lead, and ``--prefix-caching on`` replays
every engine with it on.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "python"), str(HERE.parent / "gen" / "python")]

from unirl_replay.replay import runner  # noqa: E402
from unirl_replay.replay.simulators.dynamo import DynamoSimulator  # noqa: E402

M64 = (1 << 64) - 1
FIELDS = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens",
          "terminal_status")


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Recorded(DynamoSimulator):
    """The installed upstream on the file ``convert`` wrote; keeps each row's fields above."""

    def __init__(self, rows: dict, caching: bool):
        self.rows = rows  # upstream request id -> the fields above, filled by run
        self.caching = caching
        self.largest = 0

    def run(self, job):
        if self.caching:
            job = dataclasses.replace(job, engine={**job.engine, "enable_prefix_caching": True})
        run = super().run(self.input(job))
        for r in run.per_request or ():
            self.rows[r["request_id"]] = tuple(r.get(k) for k in FIELDS)
        return run

    def input(self, job):
        return job


class RawHashIds(Recorded):
    """The same, on a copy of each converted file whose hash ids are splitmix64'd."""

    def input(self, job):
        src = Path(job.trace_file)
        dst = src.with_name(src.stem + ".raw64" + src.suffix)
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.readline())  # the header
            for line in f:
                row = msgspec.json.decode(line)
                row["hash_ids"] = [splitmix64(h) for h in row["hash_ids"]]
                self.largest = max([self.largest, *row["hash_ids"]])
                g.write(msgspec.json.encode(row) + b"\n")  # unsigned 64-bit integers written exactly
        return dataclasses.replace(job, trace_file=dst)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=None, help="comma-separated trace dirs (default: the bundled traces and every "
                    "conformance case not named reject_*)")
    ap.add_argument("--timing-model", default="fixed:2,1")
    ap.add_argument("--prefix-caching", choices=("as-captured", "on"), default="as-captured",
                    help="on: replay every engine with prefix caching on (the bundled traces' engines had it off)")
    a = ap.parse_args()
    caching = a.prefix_caching == "on"
    root = HERE.parent
    traces = a.traces.split(",") if a.traces else (
        [str(p) for p in sorted((root / "traces").iterdir()) if (p / "manifest.json").exists()]
        + [str(p / "trace") for p in sorted((root / "conformance" / "cases").iterdir())
           if not p.name.startswith("reject_") and (p / "trace" / "manifest.json").exists()])
    for t in traces:
        dense, raw = {}, {}
        sim_raw = RawHashIds(raw, caching)
        with tempfile.TemporaryDirectory() as d:
            allow = ("engine_client.inflight_limit",) if "agentic" in t else ()
            try:
                runner.replay_trace(t, a.timing_model, work_dir=os.path.join(d, "dense"), simulator=Recorded(dense, caching),
                                    unmodelled=allow)
                runner.replay_trace(t, a.timing_model, work_dir=os.path.join(d, "raw"), simulator=sim_raw,
                                    unmodelled=allow)
            except Exception as e:  # a trace this lead cannot run as is: said, not hidden
                print(f"{t}: not run ({type(e).__name__}: {str(e)[:200]})")
                continue
        same = dense == raw
        diff = [k for k in dense if dense.get(k) != raw.get(k)]
        reused = sum(v[4] or 0 for v in dense.values())
        print(f"{Path(t).relative_to(root) if Path(t).is_relative_to(root) else t}: {len(dense)} upstream rows, reused input tokens {reused}; largest raw id {sim_raw.largest} "
              f"({'above' if sim_raw.largest >= 1 << 63 else 'below'} 2^63); per-request fields "
              f"{'IDENTICAL' if same else f'DIFFERENT in {len(diff)} rows, e.g. {diff[:3]}'}")


if __name__ == "__main__":
    main()
