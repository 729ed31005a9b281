"""Probe-levelled profile: a measured profile scaled to the level a reference probe measured in the
capture's engine; a separate calibration workload labelled CALIBRATED+PROBE; the base is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tracebuild import grpo_trace
from unirl_replay.calibrate.probe import ProbeError, _fit_models, level_profile
from unirl_replay.cli.main import main
from unirl_replay.replay.timing_models import parse_timing_model
from unirl_replay.report.labels import timing_label
from unirl_replay.v1 import replay_pb2 as rpb

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def _prov():
    return json.loads(str(np.load(PROFILE, allow_pickle=False)["provenance"]))


def probed_trace(tmp_path, decode_level=1.5, prefill_level=2.0):
    prefill, decode = _fit_models(_prov())
    t = grpo_trace()
    t.manifest.trace_id = "probed-1"
    for when in ("before", "after"):
        p = t.manifest.probes.add(engine_id="e0", when=when, artifact_path=f"probe-{when}.jsonl")
        for b in (1, 32):
            m = decode(b, 128) * decode_level
            p.points.add(phase="decode", batch_size=b, context_tokens=128, repeats=5, median_ms=m,
                         p25_ms=0.98 * m, p75_ms=1.02 * m)
        m = prefill(512) * prefill_level
        p.points.add(phase="prefill", prefill_tokens=512, repeats=5, median_ms=m, p25_ms=0.97 * m, p75_ms=1.03 * m)
    return t.write(tmp_path / "trace")


def test_levelled_profile_scales_the_tables_and_is_labelled(tmp_path):
    trace = probed_trace(tmp_path)
    before = PROFILE.read_bytes()
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(PROFILE), "--out", str(out)]) == 0
    assert PROFILE.read_bytes() == before
    a, b = np.load(PROFILE), np.load(out)
    assert np.allclose(b["decode_itl"], 1.5 * a["decode_itl"]) and np.allclose(b["prefill_ttft_ms"], 2.0 * a["prefill_ttft_ms"])
    assert np.array_equal(a["prefill_isl"], b["prefill_isl"])
    tm, _ = parse_timing_model(f"profile:{out}")
    assert tm.calibration == rpb.CALIBRATION_STATUS_CALIBRATED_PROBE
    assert "probe:probed-1" in tm.calibration_workloads
    assert timing_label(tm) == "profile lev.npz (CALIBRATED+PROBE)"
    prov = json.loads(Path(str(out) + ".provenance.json").read_text())
    assert prov["probe_levelled"]["decode_level"] == pytest.approx(1.5)
    assert len(prov["probe_levelled"]["probes"]) == 2
    # never overwrites
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(PROFILE), "--out", str(out)]) == 2


def test_replay_with_the_levelled_profile_is_slower_by_the_level(tmp_path):
    pytest.importorskip("dynamo.replay")
    from replay_build import engine, index, manifest, req
    from unirl_replay.replay.runner import replay_workload

    out = tmp_path / "lev.npz"
    from unirl_replay.contract.trace_io import open_trace
    level_profile(PROFILE, open_trace(probed_trace(tmp_path)).manifest, out)
    ix = index(req("r0", inp=400, out=(20,), at_ms=0, bs=16))
    mf = manifest(engine(bs=16, blocks=1024, seqs=32, mnbt=2048, pc=False))
    base, lev = (replay_workload(ix, mf, f"profile:{p}").requests[0] for p in (PROFILE, out))
    assert (lev.first_token_ns - lev.arrival_ns) == pytest.approx(2.0 * (base.first_token_ns - base.arrival_ns), rel=1e-3)
    assert (lev.completion_ns - lev.first_token_ns) == pytest.approx(1.5 * (base.completion_ns - base.first_token_ns),
                                                                    rel=1e-2)


def test_no_probe_no_levelling(tmp_path):
    from unirl_replay.contract.trace_io import open_trace

    t = grpo_trace().write(tmp_path / "plain")
    with pytest.raises(ProbeError, match="no reference probe"):
        level_profile(PROFILE, open_trace(t).manifest, tmp_path / "x.npz")


def test_run_conditions_measure_the_children_and_the_host():
    import subprocess
    import sys

    from unirl_replay.calibrate.conditions import conditions_json, run_conditions, snapshot

    t0 = snapshot()
    subprocess.run([sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"],
                   check=True)
    c = run_conditions(t0, snapshot(), hardware={"cpu_model": "X", "cpu_count": 2})
    assert c.engine_process_cpu_ns["calibration driver + engine"] >= 0.25e9
    assert c.duration_ns >= 0.25e9 and c.HasField("loadavg_1m_start") and c.cpu_model == "X"
    assert 0 <= c.host_busy_pct <= 100 and 0 <= c.steal_pct <= 100
    assert conditions_json(c)["cpu_count"] == 2
