"""The gate's fast pass hands its transposed request fields (``WorkloadColumns.by_field``) to the support
scan: they are ``tuple(zip(*requests))``, the scan takes them once (then None) and fills the plans
exactly as it does from the requests themselves."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unirl_replay.contract.gate import gate_read
from unirl_replay.replay import request_checks
from unirl_replay.replay.runner import convert_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _plan_fields(plans):
    return {eid: (p.request_ids, p.plays, p.facts, p.first_arrival_ns, p.none_by_construction)
            for eid, p in plans.items()}


@pytest.mark.parametrize("enc", ["binpb", "arrow"])
def test_gate_fields_are_the_requests_transposed(tmp_path, monkeypatch, enc):
    if enc == "arrow":
        pytest.importorskip("pyarrow")
    import bench_pipeline

    d = tmp_path / "t"
    bench_pipeline.write_trace(d, 700, enc)
    _trace, cols = gate_read(d, "convert")
    assert cols is not None and cols.by_field is not None
    assert cols.by_field == tuple(zip(*cols.requests))

    taken, plans_seen = [], []
    real = request_checks._scan_columns_arrays

    def spy(cols, engines, wpv, plans):
        taken.append(cols.by_field is not None)
        ok = real(cols, engines, wpv, plans)
        assert cols.by_field is None  # taken once
        plans_seen.append(_plan_fields(plans))
        return ok

    monkeypatch.setattr(request_checks, "_scan_columns_arrays", spy)
    with_fields = convert_trace(d, tmp_path / "a.jsonl", columns=cols)[0].read_bytes()
    _trace, cols2 = gate_read(d, "convert")
    cols2.by_field = None
    without = convert_trace(d, tmp_path / "b.jsonl", columns=cols2)[0].read_bytes()
    assert taken == [True, False]
    assert plans_seen[0] == plans_seen[1]
    assert with_fields == without
