"""CLI `replay` / `convert` on a trace directory, and timing-model specs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from replay_build import dep, manifest, record, req, traj

from unirl_replay.cli.main import main
from unirl_replay.contract.errors import MissingEnvironmentError  # noqa: F401  (documented error type)
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model
from unirl_replay.contract.trace_io import TraceWriter
from unirl_replay.v1 import replay_pb2


def write_trace(d, msgs, mf=None):
    with TraceWriter(d) as tw:
        for m in msgs:
            tw.write_workload(record(m))
        tw.finalize(mf or manifest())
    return d


MSGS = [req("r0", out=(3,), traj="t", turn=0), req("r1", traj="t", turn=1, deps=[dep("r0", 50)]),
        traj("t", ["r0", "r1"]), req("solo", out=(2, 2), at_ms=10, prefix_key="s")]


def test_replay_command_writes_result_keyed_by_request_id(tmp_path):
    pytest.importorskip("dynamo.replay")
    trace = write_trace(tmp_path / "trace", MSGS)
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--timing-model", "fixed:100,10", "--out", str(out)]) == 0
    doc = json.loads((out / "replay_result.json").read_text())
    assert [r["request_id"] for r in doc["requests"]] == ["r0", "r1", "solo"]
    assert doc["simulator"]["name"] == "ai-dynamo" and doc["simulator"]["version"] == "1.6.1"
    assert doc["timing_model"]["calibration"] == "CALIBRATION_STATUS_FIXED"
    assert doc["workload_sha256"] and doc["engines"][0]["engine_id"] == "e0"
    assert (out / "upstream" / "e0.agentic_mooncake.jsonl").is_file()


def test_convert_command(tmp_path):
    trace = write_trace(tmp_path / "trace", MSGS)
    out = tmp_path / "in.jsonl"
    assert main(["convert", str(trace), "--format", "agentic_mooncake", "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["schema"] == "dynamo.agentic_mooncake"
    assert [x["request_id"] for x in lines[1:]] == ["000000|r0", "000001|r1", "000002|solo#s0", "000002|solo#s1"]


def test_unsupported_trace_exits_2_with_message(tmp_path, capsys):
    bad = [req("a", traj="t", turn=0, policy=1), req("b", traj="t", turn=1, policy=2, deps=[dep("a", 1)]),
           traj("t", ["a", "b"])]
    trace = write_trace(tmp_path / "trace", bad)
    assert main(["replay", str(trace), "--timing-model", "fixed:1,1", "--out", str(tmp_path / "o")]) == 2
    assert "unsupported [resume.cross_policy]" in capsys.readouterr().err


def test_timing_model_specs(tmp_path):
    tm, up = parse_timing_model("polynomial")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_UNCALIBRATED and up == {"type": "polynomial"}
    tm, up = parse_timing_model("fixed:12.5,3")
    assert (tm.prefill_ms, tm.decode_ms, tm.calibration) == (12.5, 3.0, replay_pb2.CALIBRATION_STATUS_FIXED)
    assert up == {"type": "fixed", "prefill_ms": 12.5, "decode_ms": 3.0}
    arrays = dict(prefill_isl=np.array([1.0, 100.0]), prefill_ttft_ms=np.array([1.0, 5.0]),
                  decode_active_kv_tokens=np.array([1.0, 1000.0]), decode_context_length=np.array([1.0, 500.0]),
                  decode_itl=np.ones((2, 2)))
    np.savez(tmp_path / "p.npz", **arrays)
    tm, up = parse_timing_model(f"profile:{tmp_path / 'p.npz'}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_UNCALIBRATED and len(tm.profile_sha256) == 64
    assert up["provider"] == "dynamo_profile"
    np.savez(tmp_path / "m.npz", **arrays,
             provenance=np.array(json.dumps({"measured": True, "calibration_workloads": ["cal-a"]})))
    tm, _ = parse_timing_model(f"profile:{tmp_path / 'm.npz'}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED and list(tm.calibration_workloads) == ["cal-a"]
    for bad in ("fixed:1", "fixed:0,1", "nope", f"profile:{tmp_path / 'missing.npz'}"):
        with pytest.raises(TimingModelError):
            parse_timing_model(bad)
