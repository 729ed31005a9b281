"""The benchmarks' generated traces are valid traces (a benchmark timing the error path measures nothing a
user runs: an earlier bench_pipeline trace carried two finish_reasons per one-sample request)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_pipeline_trace_is_valid(tmp_path):
    sys.path.insert(0, str(BENCH))
    import bench_pipeline

    from unirl_replay.contract.validate import check_trace

    for enc in ("binpb", "jsonl"):
        d = tmp_path / enc
        bench_pipeline.write_trace(d, 300, enc)
        r = check_trace(d)
        assert r.status == r.STATUS_VALID, [str(v) for v in r.violations[:3]]
