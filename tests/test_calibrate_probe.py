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


def _bundled_model():
    from unirl_replay.contract.trace_io import open_trace

    return open_trace(PROFILE.parents[1] / "traces" / "grpo-a").manifest.model


def probed_trace(tmp_path, decode_level=1.5, prefill_level=2.0):
    prefill, decode = _fit_models(_prov())
    t = grpo_trace()
    t.manifest.trace_id = "probed-1"
    t.manifest.model.CopyFrom(_bundled_model())  # the probe ran in engines of the profile's model (a profile levels no other)
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


# --- two-term levelling on a small hand-built profile ------------------------------------------------------

COEF = {"p0": 10.0, "p1": 0.5, "p2": 0.0, "d0": 8.0, "d1": 0.001, "d2": 1.0}


def _fitted(b, ctx):
    return COEF["d0"] + COEF["d1"] * b * ctx + COEF["d2"] * b


def small_profile(tmp_path, residual=True):
    """A hand-built measured profile: tables = the fit x a fixed residual pattern (the table's measured form)."""
    from unirl_replay.calibrate.profile_file import write_profile

    isl = np.array([1.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0])
    kv = np.array([1.0, 128.0, 1024.0, 4096.0, 16384.0])
    ctx = np.array([1.0, 64.0, 128.0, 512.0])
    B = np.clip(kv[:, None] / ctx[None, :], 1, 256)
    itl = COEF["d0"] + COEF["d1"] * kv[:, None] + COEF["d2"] * B
    if residual:
        itl = itl * (1.0 + 0.05 * np.sin(np.arange(itl.size)).reshape(itl.shape))
    tables = {"prefill_isl": isl, "prefill_ttft_ms": COEF["p0"] + COEF["p1"] * isl,
              "decode_active_kv_tokens": kv, "decode_context_length": ctx, "decode_itl": itl}
    prov = {"measured": True, "calibration_workloads": ["hand-built"], "engine": {"from_trace": {"max_num_seqs": 256}},
            "fit": {"prefill": {"coefficients": {k: COEF[k] for k in ("p0", "p1", "p2")}},
                    "decode": {"coefficients": {k: COEF[k] for k in ("d0", "d1", "d2")}}}}
    return write_profile(tmp_path / "small.npz", tables, prov), prov


def hand_probe(dec, pre, engines=("e0", "e1")):
    """A manifest whose probes carry the given decode {(B, ctx): ms} and prefill {(rows, tokens): ms} medians."""
    from unirl_replay.v1 import manifest_pb2 as mpb

    m = mpb.TraceManifest(trace_id="hand")
    for e in engines:
        for when in ("before", "after"):
            p = m.probes.add(engine_id=e, when=when)
            for (b, ctx), ms in dec.items():
                p.points.add(phase="decode", batch_size=b, context_tokens=ctx, repeats=5, median_ms=ms)
            for (rows, n), ms in pre.items():
                p.points.add(phase="prefill", batch_size=rows, prefill_tokens=n, repeats=5, median_ms=ms)
    return m


def test_two_term_levelling_reproduces_both_decode_points_and_scales_the_table_cell_by_cell(tmp_path):
    from unirl_replay.calibrate.probe import decode_two_term

    base, prov = small_profile(tmp_path)
    a, c = 1.6, 1.25  # the fixed part 1.6x slower, the per-sequence part 1.25x
    m1, m32 = a * COEF["d0"] + c * (_fitted(1, 128) - COEF["d0"]), a * COEF["d0"] + c * (_fitted(32, 128) - COEF["d0"])
    man = hand_probe({(1, 128): m1, (32, 128): m32}, {(0, 512): 1.1 * (10 + 0.5 * 512)})
    got = decode_two_term(list(man.probes), prov)
    assert got["method"] == "two_term"
    assert got["fixed_factor"] == pytest.approx(a) and got["per_sequence_factor"] == pytest.approx(c)
    assert [q["levelled_ms"] for q in got["points"]] == [pytest.approx(m1, abs=1e-3), pytest.approx(m32, abs=1e-3)]
    out = tmp_path / "lev.npz"
    _, new = level_profile(base, man, out, levelling="two_term")
    a0, b0 = np.load(base), np.load(out)
    kv, ctx = a0["decode_active_kv_tokens"], a0["decode_context_length"]
    for i, k in enumerate(kv):
        for j, cc in enumerate(ctx):
            bb = min(max(k / cc, 1.0), 256.0)
            var = COEF["d1"] * k + COEF["d2"] * bb
            want = (a * COEF["d0"] + c * var) / (COEF["d0"] + var)
            # cell by cell: the measured cell (with its residual) x D'/D at that cell
            assert b0["decode_itl"][i, j] == pytest.approx(a0["decode_itl"][i, j] * want, rel=1e-9)
    pl = new["probe_levelled"]
    assert pl["levelling"] == "two_term" and pl["decode"]["applied"]["method"] == "two_term"
    # the scalar level is kept next to it (median of the 8 entries' ratios = of the two points' ratios)
    assert pl["decode_level"] == pytest.approx(np.median([m1 / _fitted(1, 128), m32 / _fitted(32, 128)]))
    assert "D'(B, C) / D(B, C)" in pl["method"] and pl["scalar_method"].startswith("decode_itl x median")


def test_scalar_levelling_is_still_available_and_recorded(tmp_path):
    base, _ = small_profile(tmp_path)
    man = hand_probe({(1, 128): 1.5 * _fitted(1, 128), (32, 128): 1.2 * _fitted(32, 128)},
                     {(0, 512): 1.0 * 266, (8, 2048): 1.3 * 1034})
    out = tmp_path / "scalar.npz"
    assert main(["calibrate", "--level-to-probe", str(_write(tmp_path, man)), "--base", str(base), "--out", str(out),
                 "--levelling", "scalar"]) == 0
    a0, b0 = np.load(base), np.load(out)
    assert np.allclose(b0["decode_itl"], 1.35 * a0["decode_itl"])
    assert np.allclose(b0["prefill_ttft_ms"], 1.0 * a0["prefill_ttft_ms"])  # the isolated row only, as before
    pl = json.loads(Path(str(out) + ".provenance.json").read_text())["probe_levelled"]
    assert pl["levelling"] == "scalar" and pl["decode"]["applied"] == {"method": "scalar", "level": pytest.approx(1.35)}
    assert pl["decode"]["two_term"]["method"] == "two_term"  # the other method's factors are recorded too


def _write(tmp_path, man):
    t = grpo_trace()
    t.manifest.trace_id = man.trace_id
    t.manifest.probes.extend(man.probes)
    known = {e.engine_id for e in t.manifest.engines}
    for eid in sorted({p.engine_id for p in man.probes} - known):  # a probe names an engine of the trace (manifest.probe)
        t.manifest.engines.add().CopyFrom(t.manifest.engines[0])
        t.manifest.engines[-1].engine_id = eid
    return t.write(tmp_path / "trace")


@pytest.mark.parametrize("dec, coef, why", [
    # one distinct decode point: two factors cannot be solved
    ({(32, 128): 50.0}, {}, "1 distinct decode point"),
    # B=32 faster than B=1 would need a negative per-sequence factor
    ({(1, 128): 20.0, (32, 128): 15.0}, {}, "not positive"),
    # a B=1 step faster than the per-sequence slope from B=32 leaves room for: the fixed factor goes negative
    ({(1, 128): 2.0, (32, 128): 80.0}, {}, "not positive"),
    # two points at nearly the same batch: the system is ill-conditioned
    ({(1, 128): 10.0, (1, 129): 10.5}, {}, "ill-conditioned"),
    # a base fit without a fixed part
    ({(1, 128): 10.0, (32, 128): 50.0}, {"d0": 0.0}, "d0 = 0"),
])
def test_two_term_refusals_fall_back_to_the_scalar_level_and_say_why(tmp_path, dec, coef, why):
    from unirl_replay.calibrate.probe import decode_two_term

    base, prov = small_profile(tmp_path)
    prov["fit"]["decode"]["coefficients"].update(coef)
    man = hand_probe(dec, {(0, 512): 266.0})
    got = decode_two_term(list(man.probes), prov)
    assert got["method"] == "refused" and why in got["reason"], got
    if coef:
        return  # the table's base model is the npz's own provenance; the refusal itself is what is tested
    out = tmp_path / "fb.npz"
    _, new = level_profile(base, man, out, levelling="two_term")
    pl = new["probe_levelled"]
    assert pl["decode"]["applied"]["method"] == "scalar" and why in pl["decode"]["applied"]["fallback_reason"]
    assert "fell back to the scalar level" in pl["method"]
    assert np.allclose(np.load(out)["decode_itl"], pl["decode_level"] * np.load(base)["decode_itl"])


def test_prefill_level_varies_with_the_pass_size_between_the_two_points(tmp_path):
    base, _ = small_profile(tmp_path)
    P = lambda n: COEF["p0"] + COEF["p1"] * n  # noqa: E731
    man = hand_probe({(1, 128): 1.5 * _fitted(1, 128), (32, 128): 1.5 * _fitted(32, 128)},
                     {(0, 512): 1.0 * P(512), (8, 2048): 1.3 * P(2048)})
    out = tmp_path / "lev.npz"
    _, new = level_profile(base, man, out, levelling="two_term")
    a0, b0 = np.load(base), np.load(out)
    ratio = dict(zip(a0["prefill_isl"], b0["prefill_ttft_ms"] / a0["prefill_ttft_ms"]))
    # flat outside the points, the points' own levels at them, log-token interpolation between (1024 = halfway)
    assert ratio[1.0] == pytest.approx(1.0) and ratio[256.0] == pytest.approx(1.0) and ratio[512.0] == pytest.approx(1.0)
    assert ratio[1024.0] == pytest.approx(1.15) and ratio[2048.0] == pytest.approx(1.3) and ratio[4096.0] == pytest.approx(1.3)
    pre = new["probe_levelled"]["prefill"]
    assert pre["applied"]["method"] == "log_tokens_interpolation"
    assert [(q["tokens"], q["rows"], q["level"]) for q in pre["by_tokens"]["points"]] == [(512, [1], 1.0), (2048, [8], 1.3)]
    # the fixed + per-token fit of the same two points is recorded, not used: here its fixed factor is negative
    chk = pre["by_tokens"]["two_term_check"]
    assert chk["used"] is False and chk["fixed_factor"] < 0 and "not positive" in chk["refused"]
    # equal decode levels: the two-term decode levelling is the uniform scalar one
    assert np.allclose(b0["decode_itl"], 1.5 * a0["decode_itl"])
    # the scalar method's prefill level stays the isolated row's
    assert new["probe_levelled"]["prefill_level"] == pytest.approx(1.0)


def test_a_batched_point_with_mixed_pass_sizes_is_levelled_per_repeat(tmp_path):
    from unirl_replay.calibrate.probe import prefill_by_tokens
    from unirl_replay.v1 import manifest_pb2 as mpb

    _, prov = small_profile(tmp_path)
    P = lambda n: COEF["p0"] + COEF["p1"] * n  # noqa: E731
    probe = mpb.ReferenceProbe(engine_id="e0", when="before")
    probe.points.add(phase="prefill", prefill_tokens=512, repeats=5, median_ms=P(512))
    sizes = [2048, 1792, 2048, 1792, 2048]
    ms = [1.3 * P(n) for n in sizes]  # the same level 1.3 at both pass sizes
    probe.points.add(phase="prefill", batch_size=8, prefill_tokens=1792, repeats=5, median_ms=float(np.median(ms)),
                     repeat_step_ms=ms, repeat_pass_tokens=sizes, repeat_pass_rows=[n // 256 for n in sizes])
    got = prefill_by_tokens([probe], prov)
    # each repeat over the model at its own size: exactly 1.3, where the mixed median over P(1792) would not be
    assert [(q["tokens"], q["rows"], q["level"], q["levels"]) for q in got["points"]] == [
        (512, [1], 1.0, 1), (2048, [7, 8], 1.3, 5)]  # placed at the median-low of its 5 passes
    assert [q["kind"] for q in got["points"]] == ["isolated", "batched"]
    assert float(np.median(ms)) / P(1792) > 1.4


def test_unknown_levelling_is_refused(tmp_path):
    base, _ = small_profile(tmp_path)
    with pytest.raises(ProbeError, match="unknown levelling"):
        level_profile(base, hand_probe({(1, 128): 10.0}, {(0, 512): 266.0}), tmp_path / "x.npz", levelling="cubic")


# --- the contended probe points (ReferenceProbe.contended_points) ------------------------------------------

def contended_trace(tmp_path, iso=(1.5, 2.0), cont=(1.9, 2.4), with_contended=True):
    """probed_trace's two entries (isolated levels ``iso``), each with contended points at the levels ``cont``."""
    from unirl_replay.contract.trace_io import open_trace

    prefill, decode = _fit_models(_prov())
    d = probed_trace(tmp_path, *iso)
    t = open_trace(d)
    man = t.manifest
    if with_contended:
        for p in man.probes:
            for b in (1, 32):
                m = decode(b, 128) * cont[0]
                p.contended_points.add(phase="decode", batch_size=b, context_tokens=128, repeats=2, median_ms=m,
                                       p25_ms=0.99 * m, p75_ms=1.01 * m)
            m = prefill(512) * cont[1]
            p.contended_points.add(phase="prefill", prefill_tokens=512, repeats=2, median_ms=m, p25_ms=m, p75_ms=m)
            p.contended_load = "the other engine decoding 12 rows"
    return man


def test_contended_levelling_rests_on_the_contended_points_only_and_is_named(tmp_path):
    man = contended_trace(tmp_path)
    a = np.load(PROFILE)
    _, iso = level_profile(PROFILE, man, tmp_path / "iso.npz")
    _, con = level_profile(PROFILE, man, tmp_path / "con.npz", probe_condition="contended")
    assert iso["probe_levelled"]["decode_level"] == pytest.approx(1.5)
    assert iso["probe_levelled"]["probe_condition"] == "isolated"
    assert iso["probe_levelled"]["variant"] == "CALIBRATED+PROBE"
    pl = con["probe_levelled"]
    assert pl["decode_level"] == pytest.approx(1.9) and pl["prefill_level"] == pytest.approx(2.4)
    assert pl["probe_condition"] == "contended" and pl["variant"] == "CALIBRATED+PROBE contended"
    assert "contended_points" in pl["method"] and pl["label"] == "CALIBRATED+PROBE"
    # the points it rests on are the contended ones (2 entries x 3 points), never the isolated ones
    assert len(pl["points"]) == 6 and {round(q["level"], 3) for q in pl["points"]} == {1.9, 2.4}
    b = np.load(tmp_path / "con.npz")
    assert np.allclose(b["decode_itl"], 1.9 * a["decode_itl"]) and np.allclose(b["prefill_ttft_ms"], 2.4 * a["prefill_ttft_ms"])
    tm, _ = parse_timing_model(f"profile:{tmp_path / 'con.npz'}")
    assert tm.calibration == rpb.CALIBRATION_STATUS_CALIBRATED_PROBE


def test_contended_levelling_without_contended_points_is_refused(tmp_path):
    man = contended_trace(tmp_path, with_contended=False)
    with pytest.raises(ProbeError, match="no contended probe points"):
        level_profile(PROFILE, man, tmp_path / "x.npz", probe_condition="contended")
    assert not (tmp_path / "x.npz").exists()
    with pytest.raises(ProbeError, match="unknown probe condition"):
        level_profile(PROFILE, man, tmp_path / "y.npz", probe_condition="busy")


def test_cli_probe_condition_contended(tmp_path, capsys):
    from unirl_replay.contract.trace_io import open_trace

    man = contended_trace(tmp_path)
    t = open_trace(tmp_path / "trace")
    d = tmp_path / "trace2"
    from tracebuild import grpo_trace as _g  # the same trace, the manifest with contended points

    tb = _g()
    tb.manifest.CopyFrom(man)
    tb.write(d)
    assert t.manifest.trace_id == man.trace_id
    out = tmp_path / "c.npz"
    assert main(["calibrate", "--level-to-probe", str(d), "--base", str(PROFILE), "--out", str(out),
                 "--probe-condition", "contended"]) == 0
    assert "CALIBRATED+PROBE contended" in capsys.readouterr().out
    prov = json.loads(Path(str(out) + ".provenance.json").read_text())["probe_levelled"]
    assert prov["probe_condition"] == "contended" and prov["decode_level"] == pytest.approx(1.9)


def test_mixed_levelling_takes_decode_contended_and_prefill_isolated(tmp_path):
    man = contended_trace(tmp_path)
    _, prov = level_profile(PROFILE, man, tmp_path / "mix.npz", probe_condition="mixed")
    pl = prov["probe_levelled"]
    assert pl["decode_level"] == pytest.approx(1.9) and pl["prefill_level"] == pytest.approx(2.0)
    assert pl["variant"] == "CALIBRATED+PROBE mixed" and "exploratory" in pl["method"]
    man2 = contended_trace(tmp_path / "b", with_contended=False)
    with pytest.raises(ProbeError, match="no contended probe points"):
        level_profile(PROFILE, man2, tmp_path / "y.npz", probe_condition="mixed")


# --- levelling like with like: the calibration session's own medians of the probe's points ------------------


def _P(n):
    return COEF["p0"] + COEF["p1"] * n + COEF["p2"] * n * n


def reference_profile(tmp_path, ref):
    """``small_profile`` whose provenance carries ``reference_points`` (the sweep's own medians of the probe's points):
    ``ref`` = {key: (rows, tokens, median_ms)}."""
    from unirl_replay.calibrate.profile_file import write_profile

    base, prov = small_profile(tmp_path)
    z = np.load(base)
    prov = {**prov, "reference_points": [
        {"key": k, "phase": k.split(":")[0], "batch_size": rows, "prefill_tokens": n, "median_ms": ms, "repeats": 3}
        for k, (rows, n, ms) in ref.items()]}
    out = tmp_path / "ref.npz"
    return write_profile(out, {k: z[k] for k in z.files if k != "provenance"}, prov), prov


def test_levels_divide_by_the_calibration_sessions_own_points_when_the_profile_has_them(tmp_path):
    # the sweep's engine measured the probe's points off the fit (a multi-row profile's fit is no one-row curve):
    # decode 2x the fit, the isolated 512 row 0.5x, the batched 8 x 256 pass 0.4x
    ref = {"decode:b1:ctx128": (1, 0, 2.0 * _fitted(1, 128)), "decode:b32:ctx128": (32, 0, 2.0 * _fitted(32, 128)),
           "prefill:512": (0, 512, 0.5 * _P(512)), "prefill:b8:2048": (8, 2048, 0.4 * _P(2048))}
    base, _ = reference_profile(tmp_path, ref)
    man = hand_probe({(1, 128): 1.5 * ref["decode:b1:ctx128"][2], (32, 128): 1.5 * ref["decode:b32:ctx128"][2]},
                     {(0, 512): 1.2 * ref["prefill:512"][2], (8, 2048): 1.3 * ref["prefill:b8:2048"][2]})
    _, new = level_profile(base, man, tmp_path / "s.npz", levelling="scalar")
    pl = new["probe_levelled"]
    # probe / the session's median of the same point, not probe / fit (that would be 3.0 and 0.6)
    assert pl["decode_level"] == pytest.approx(1.5) and pl["prefill_level"] == pytest.approx(1.2)
    assert pl["reference"] == ["calibration_session"] and "like with like" in pl["method"]
    assert {q["reference"] for q in pl["points"]} == {"calibration_session"}
    assert np.allclose(np.load(tmp_path / "s.npz")["prefill_ttft_ms"], 1.2 * np.load(base)["prefill_ttft_ms"])
    _, new2 = level_profile(base, man, tmp_path / "t.npz", levelling="two_term")
    pl2 = new2["probe_levelled"]
    # the decode targets are 1.5 x the fit at both points: both factors 1.5, the table x 1.5 everywhere
    assert pl2["decode"]["applied"]["fixed_factor"] == pytest.approx(1.5)
    assert pl2["decode"]["applied"]["per_sequence_factor"] == pytest.approx(1.5)
    assert np.allclose(np.load(tmp_path / "t.npz")["decode_itl"], 1.5 * np.load(base)["decode_itl"])
    pts = pl2["prefill"]["by_tokens"]["points"]
    assert [(q["tokens"], q["level"], q["reference"]) for q in pts] == [(512, 1.2, "calibration_session"),
                                                                       (2048, 1.3, "calibration_session")]


def test_a_batched_repeat_of_another_size_is_referred_to_the_sessions_pass_scaled_by_the_fit(tmp_path):
    ref = {"decode:b1:ctx128": (1, 0, _fitted(1, 128)), "decode:b32:ctx128": (32, 0, _fitted(32, 128)),
           "prefill:512": (0, 512, _P(512)), "prefill:b8:2048": (8, 2048, 0.4 * _P(2048))}
    base, _ = reference_profile(tmp_path, ref)
    man = hand_probe({(1, 128): _fitted(1, 128), (32, 128): _fitted(32, 128)}, {(0, 512): _P(512)})
    for p in man.probes:  # every repeat's pass held 7 rows (1792 tokens) at 1.3x the session's pass scaled to 1792
        pt = p.points.add(phase="prefill", batch_size=7, prefill_tokens=1792, repeats=3,
                          median_ms=1.3 * 0.4 * _P(2048) * _P(1792) / _P(2048))
        pt.repeat_step_ms.extend([pt.median_ms] * 3)
        pt.repeat_pass_tokens.extend([1792] * 3)
        pt.repeat_pass_rows.extend([7] * 3)
    _, new = level_profile(base, man, tmp_path / "t.npz", levelling="two_term")
    pts = new["probe_levelled"]["prefill"]["by_tokens"]["points"]
    assert [(q["tokens"], q["level"]) for q in pts] == [(512, 1.0), (1792, 1.3)]


def test_levels_fall_back_to_the_fit_without_reference_points(tmp_path):
    base, _ = small_profile(tmp_path)
    man = hand_probe({(1, 128): 1.5 * _fitted(1, 128), (32, 128): 1.5 * _fitted(32, 128)}, {(0, 512): 1.2 * _P(512)})
    _, new = level_profile(base, man, tmp_path / "s.npz", levelling="scalar")
    pl = new["probe_levelled"]
    assert pl["decode_level"] == pytest.approx(1.5) and pl["prefill_level"] == pytest.approx(1.2)
    assert pl["reference"] == ["fit"] and "like with like" not in pl["method"]
    assert pl["reference_method"].endswith("has no reference_points)")
