"""compare warns when the capture's conditions differ from the calibration's (never silent)."""

from __future__ import annotations

from unirl_replay.report.conditions import condition_warnings, probe_levels
from unirl_replay.report.timing_eval import StepModel
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import replay_pb2 as rpb

PROV = {"measured": True, "hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2},
        "loadavg": {"start": [0.36, 1.0, 1.1], "end": [0.9, 1.2, 1.1]}}


def _replay(kind=rpb.TIMING_MODEL_KIND_PROFILE):
    r = rpb.ReplayResult()
    r.timing_model.kind = kind
    return r


def _manifest():
    m = mpb.TraceManifest()
    m.hardware.cpu_model, m.hardware.cpu_count = "AMD EPYC", 2
    return m


def test_nothing_recorded_is_itself_a_warning_and_defaults_are_quiet():
    ws = condition_warnings(_manifest(), _replay(), PROV, None)
    assert len(ws) == 1 and "recorded no run conditions" in ws[0]
    assert condition_warnings(_manifest(), _replay(rpb.TIMING_MODEL_KIND_POLYNOMIAL), PROV, None) == []


def test_cpu_load_steal_and_uptime_differences_are_named():
    m = _manifest()
    m.hardware.cpu_model = "Intel Xeon"
    m.conditions.loadavg_1m_start, m.conditions.loadavg_1m_end = 1.9, 2.4
    m.conditions.steal_pct = 12.0
    m.conditions.engine_uptime_ns = 30 * 10**9
    prov = {**PROV, "conditions": {"engine_uptime_ns": 900 * 10**9}}
    ws = " | ".join(condition_warnings(m, _replay(), prov, None))
    assert "CPU model differs" in ws and "load differs: capture up to 2.40" in ws and "calibration up to 0.90" in ws
    assert "steal 12.0 %" in ws and "time since start differs: capture 30 s, calibration 900 s" in ws
    assert "no reference probe" in ws


def test_old_traces_load_label_is_read():
    m = _manifest()
    m.labels["loadavg.window"] = "start 1.14/1.05/1.17, end 1.60/1.05/1.17"
    ws = condition_warnings(m, _replay(), PROV, None)
    assert any("capture up to 1.60 (label loadavg.window)" in w for w in ws)


def test_probe_level_beyond_its_spread_warns():
    m = _manifest()
    m.conditions.loadavg_1m_start = 0.8
    p = m.probes.add(engine_id="e0", when="before")
    p.points.add(phase="decode", batch_size=32, context_tokens=128, repeats=5, median_ms=3.0, p25_ms=2.9, p75_ms=3.1)
    p.points.add(phase="prefill", prefill_tokens=512, repeats=5, median_ms=10.4, p25_ms=10.0, p75_ms=10.8)
    p.points.add(phase="prefill", batch_size=8, prefill_tokens=2048, repeats=5, median_ms=14.0, p25_ms=13.5,
                 p75_ms=14.5)
    model = StepModel("fixed", 0, fixed=(10.0, 2.0))
    levels = [round(lv, 2) for _, _, lv, _ in probe_levels(m, model)]
    assert levels == [1.5, 1.04, 1.4]
    ws = condition_warnings(m, _replay(), PROV, model)
    assert any("decode B=32 ctx 128) ran at 1.50x" in w for w in ws)
    assert not any("prefill 512" in w for w in ws)  # 1.04x: within tolerance
    # the batched pass is named as one (never read as one 2048-token prompt)
    assert any("(batched prefill, 8 rows, 2048 tokens in one pass) ran at 1.40x" in w for w in ws)
    assert all("levelled to this trace's own probe" not in w for w in ws)
    # a profile levelled to this trace's own probe: the level is applied, what is left is the point's misfit
    m.trace_id = "grpo-r1"
    own = {**PROV, "probe_levelled": {"trace_id": "grpo-r1", "levelling": "scalar"}}
    ws = condition_warnings(m, _replay(), own, model)
    hit = [w for w in ws if "decode B=32 ctx 128) ran at 1.50x the probe-levelled profile's time" in w]
    assert hit and "levelled to this trace's own probe (scalar levelling)" in hit[0]
    assert not any("differs from the calibration's" in w for w in ws)
    # levelled to another trace's probe: that is a calibration level, and this window's differs from it
    ws = condition_warnings(m, _replay(), {**PROV, "probe_levelled": {"trace_id": "grpo-r2"}}, model)
    assert any("ran at 1.50x the profile's time" in w and "differs from the calibration's" in w for w in ws)


def test_thread_binding_difference_is_named_and_equal_binding_is_quiet():
    """A capture's Ray-actor engine bound to one core against an unbound calibration engine is named."""
    m = _manifest()
    m.conditions.loadavg_1m_start = 0.8
    m.conditions.worker_threads["vllm:e0"] = ("OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0; "
                                              "pid 12 python: 5 threads, affinity 0 x5")
    prov = {**PROV, "conditions": {"worker_threads": {
        "calibration driver + engine": "VLLM_CPU_OMP_THREADS_BIND unset; pid 40 python: 9 threads, affinity 0-1 x9"}}}
    ws = [w for w in condition_warnings(m, _replay(), prov, None) if "thread binding" in w]
    assert len(ws) == 1
    assert "vllm:e0" in ws[0] and "'OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0'" in ws[0]
    assert "'VLLM_CPU_OMP_THREADS_BIND unset'" in ws[0]
    same = {**PROV, "conditions": {"worker_threads": {
        "calibration driver + engine": "OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0; pid 7 python: 3 threads"}}}
    assert not [w for w in condition_warnings(m, _replay(), same, None) if "thread binding" in w]
    # another core of the same size is the same binding (capture engines on cores 0 and 1, a sweep on core 0)
    m.conditions.worker_threads["vllm:e1"] = "OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=1; pid 13 python: 5 threads"
    assert not [w for w in condition_warnings(m, _replay(), same, None) if "thread binding" in w]
    # but two cores against one is not
    m.conditions.worker_threads["vllm:e2"] = "OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0-1; pid 14 python: 5 threads"
    ws = [w for w in condition_warnings(m, _replay(), same, None) if "thread binding" in w]
    assert len(ws) == 1 and "vllm:e2" in ws[0] and "BIND=0-1" in ws[0]
    # a calibration that recorded no threads (older provenance) says nothing about binding
    assert not [w for w in condition_warnings(m, _replay(), PROV, None) if "thread binding" in w]


def test_a_profile_levelled_to_the_contended_points_says_so():
    m = _manifest()
    m.trace_id = "grpo-r1"
    p = m.probes.add(engine_id="e0", when="before")
    p.points.add(phase="decode", batch_size=32, context_tokens=128, repeats=5, median_ms=3.0, p25_ms=2.9, p75_ms=3.1)
    model = StepModel("fixed", 0, fixed=(10.0, 2.0))
    prov = {**PROV, "probe_levelled": {"trace_id": "grpo-r1", "levelling": "scalar", "probe_condition": "contended"}}
    hit = [w for w in condition_warnings(m, _replay(), prov, model) if "decode B=32 ctx 128" in w]
    assert hit and "CONTENDED points" in hit[0] and "measured with every engine running it" in hit[0]
    assert "(scalar levelling)" not in hit[0]


def test_two_engines_probe_warnings_name_their_engine():
    """Two engines' probes of the same point read alike ('reference probe before the window (decode B=1 ctx 128)
    ran at 4.90x' and '... 3.48x'); each now names its engine. One engine's probe stays as it was."""
    m = _manifest()
    m.conditions.loadavg_1m_start = 0.8
    for eid, ms in (("vllm:h:1", 4.9), ("vllm:h:2", 3.48)):
        m.probes.add(engine_id=eid, when="before").points.add(phase="decode", batch_size=1, context_tokens=128,
                                                              repeats=5, median_ms=ms, p25_ms=ms * 0.98,
                                                              p75_ms=ms * 1.02)
    model = StepModel("fixed", 0, fixed=(10.0, 1.0))
    ws = condition_warnings(m, _replay(), PROV, model)
    assert any("reference probe of engine 'vllm:h:1' before the window (decode B=1 ctx 128) ran at 4.90x" in w for w in ws)
    assert any("reference probe of engine 'vllm:h:2' before the window (decode B=1 ctx 128) ran at 3.48x" in w for w in ws)
    del m.probes[1]
    ws = condition_warnings(m, _replay(), PROV, model)
    assert any(w.startswith("reference probe before the window (decode B=1 ctx 128) ran at 4.90x") for w in ws)
