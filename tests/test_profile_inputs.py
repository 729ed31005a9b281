"""Hostile timing profiles: every reader of a dynamo_profile NPZ (replay's timing model, compare's model on
the real schedule and its condition warnings, calibrate --level-to-probe's base) goes through the one
checked reader (contract.profile_npz) and refuses a bad file with a message naming it, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from test_calibrate_probe import probed_trace
from unirl_replay.cli.main import main
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model
from unirl_replay.report.timing_eval import ProfileUnreadable, read_profile, step_model
from unirl_replay.v1 import replay_pb2 as rpb

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def _tables_and_prov():
    with np.load(PROFILE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "provenance"}, json.loads(str(z["provenance"]))


def _profile(path: Path, *, prov=None, prov_text=None, drop=(), **tables) -> Path:
    t, p = _tables_and_prov()
    t.update(tables)
    for k in drop:
        t.pop(k)
    text = prov_text if prov_text is not None else json.dumps(p if prov is None else {**p, **prov})
    np.savez(path, **t, provenance=np.array(text))
    return path


# provenance keys of the wrong type: each one used to be a traceback in `compare` (AttributeError, ValueError)
BAD_PROVENANCE = [
    ({"hardware": "x"}, "provenance.hardware"),
    ({"hardware": {"cpu_count": "abc"}}, "provenance.hardware.cpu_count"),
    ({"conditions": "str"}, "provenance.conditions"),
    ({"conditions": {"worker_threads": ["a"]}}, "provenance.conditions is not a RunConditions"),
    ({"conditions": {"engine_uptime_ns": "abc"}}, "provenance.conditions is not a RunConditions"),
    ({"loadavg": "x"}, "provenance.loadavg"),
    ({"raw": "x"}, "provenance.raw"),
    ({"raw": {"prefill": [{"isl": "a", "ttft_ms": 1}]}}, "provenance.raw.prefill.0.isl"),
    ({"fit": {"prefill": {"residuals": {"mape_pct": "x"}}}}, "provenance.fit.prefill.residuals.mape_pct"),
    ({"calibration_workloads": "abc"}, "provenance.calibration_workloads"),
    # copied into every replay result and compared with the trace's workload name: names as a manifest's
    ({"calibration_workloads": ["cal\x1b[31m"]}, "provenance.calibration_workloads.0"),
    ({"calibration_workloads": ["w" * 5000]}, "provenance.calibration_workloads.0"),
    ({"measured": "yes"}, "provenance.measured"),
]


@pytest.mark.parametrize("prov,where", BAD_PROVENANCE, ids=[w for _, w in BAD_PROVENANCE])
def test_a_provenance_key_of_the_wrong_type_is_refused_by_every_reader(tmp_path, prov, where):
    f = _profile(tmp_path / "p.npz", prov=prov)
    with pytest.raises(TimingModelError, match="p.npz") as e:  # replay
        parse_timing_model(f"profile:{f}")
    assert where in str(e.value)
    with pytest.raises(ProfileUnreadable) as e2:  # compare
        read_profile(f)
    assert where in str(e2.value)
    tm = rpb.TimingModel(kind=rpb.TIMING_MODEL_KIND_PROFILE, profile_path=str(f))
    model, _, why = step_model(tm, 0)
    assert model is None and where in why


def test_the_bundled_profiles_pass_the_reader():
    for f in sorted((REPO / "profiles").glob("*.npz")):
        tables, prov, _ = read_profile(f)
        assert prov["measured"] is True and tables["decode_itl"].ndim == 2
        assert parse_timing_model(f"profile:{f}")[0].calibration == rpb.CALIBRATION_STATUS_CALIBRATED


def _bases(tmp_path):
    t, p = _tables_and_prov()
    (tmp_path / "text.npz").write_text("hello\n")
    (tmp_path / "trunc.npz").write_bytes(PROFILE.read_bytes()[:3000])
    zero = {"prefill": {"coefficients": {"p0": 0, "p1": 0, "p2": 0}},
            "decode": {"coefficients": {"d0": 0, "d1": 0, "d2": 0}}}
    return {
        "text.npz": "is not a dynamo_profile NPZ",
        "trunc.npz": "is not a dynamo_profile NPZ",
        _profile(tmp_path / "badjson.npz", prov_text="not json {").name: "'provenance' is not valid JSON",
        _profile(tmp_path / "list.npz", prov_text="[1, 2]").name: "'provenance' is not a JSON object",
        _profile(tmp_path / "missing.npz", drop=("decode_itl",)).name: "lacks arrays ['decode_itl']",
        _profile(tmp_path / "nan.npz", decode_itl=np.full_like(t["decode_itl"], np.nan)).name: "finite values > 0",
        _profile(tmp_path / "decr.npz", prefill_isl=t["prefill_isl"][::-1].copy()).name: "strictly increasing",
        _profile(tmp_path / "zerofit.npz", prov={"fit": zero}).name: "not > 0",
    }


def test_level_to_probe_refuses_a_broken_base_naming_it(tmp_path, capsys):
    trace = probed_trace(tmp_path)
    for name, why in _bases(tmp_path).items():
        out = tmp_path / f"out-{name}"
        rc = main(["calibrate", "--level-to-probe", str(trace), "--base", str(tmp_path / name), "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2, (name, err)
        assert err.startswith("error: ") and "Traceback" not in err and name in err and why in err, (name, err)
        assert not out.exists() and not Path(str(out) + ".provenance.json").exists()


def test_level_to_probe_never_overwrites_the_sidecar(tmp_path, capsys):
    trace = probed_trace(tmp_path)
    side = tmp_path / "lev.npz.provenance.json"
    side.write_text("mine\n")
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(PROFILE),
                 "--out", str(tmp_path / "lev.npz")]) == 2
    assert "exists" in capsys.readouterr().err
    assert side.read_text() == "mine\n" and not (tmp_path / "lev.npz").exists()


def test_compare_with_a_profile_changed_after_the_replay_reports_it(tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    from tracebuild import grpo_trace

    from unirl_replay.contract.trace_io import open_trace

    t = grpo_trace(prompts=2, samples=2)
    t.manifest.model.CopyFrom(open_trace(REPO / "traces" / "grpo-a").manifest.model)  # the profile's model
    d = t.write(tmp_path / "t")
    prof = tmp_path / "p.npz"
    prof.write_bytes(PROFILE.read_bytes())
    assert main(["replay", str(d), "--timing-model", f"profile:{prof}", "--out", str(tmp_path / "r")]) == 0
    _profile(prof, prov={"hardware": "x"})  # edited after the replay
    assert main(["compare", str(d), str(tmp_path / "r"), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "provenance.hardware" in out and "not done" in out


def test_level_to_probe_runs_the_gate_on_the_probe_trace(tmp_path, capsys):
    """A probe validate rejects (manifest.probe: here a NaN median) is refused with validate's message; it
    used to level the profile by NaN and fail with a misleading "prefill_ttft_ms must be finite"."""
    from tracebuild import grpo_trace

    t = grpo_trace()
    t.manifest.trace_id = "nan-probe"
    p = t.manifest.probes.add(engine_id="e0", when="before")
    p.points.add(phase="decode", batch_size=32, context_tokens=128, repeats=5, median_ms=float("nan"))
    p.points.add(phase="prefill", prefill_tokens=512, repeats=5, median_ms=100.0, p25_ms=90.0, p75_ms=110.0)
    d = t.write(tmp_path / "trace")
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(d), "--base", str(PROFILE), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "calibrate.validate" in err and "manifest.probe" in err and "median_ms nan" in err
    assert not out.exists()


def test_step_times_beyond_an_hour_are_refused_before_upstream(tmp_path):
    """fixed:1e308,1 (or a profile table of 1e300 ms) reached upstream, whose clock overflowed: a poisoned engine
    worker and an upstream traceback. A pass or step of more than an hour is refused when the spec is parsed."""
    t, _ = _tables_and_prov()
    f = _profile(tmp_path / "slow.npz", decode_itl=t["decode_itl"] * 1e300)
    with pytest.raises(TimingModelError, match="above 3600000 ms"):
        parse_timing_model(f"profile:{f}")
    for spec in ("fixed:1e308,1", "fixed:1,3600001"):
        with pytest.raises(TimingModelError, match="at most 3600000 ms"):
            parse_timing_model(spec)
    assert parse_timing_model("fixed:3600000,1")[0].prefill_ms == 3_600_000


def test_a_provenance_too_large_uncompressed_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """s6-f: the provenance member was exempt from the zip-member size check: a 445 KB profile whose provenance
    was padded with 10^8 spaces (deflate) took `calibrate --level-to-probe --base` to 1 GB RSS and was used; at
    the 256 MiB file limit that is hundreds of GB. (The limit is lowered here to keep the test light.)"""
    from unirl_replay.contract import profile_npz

    monkeypatch.setattr(profile_npz, "MAX_PROVENANCE_CHARS", 100_000)
    t, p = _tables_and_prov()
    f = tmp_path / "padded.npz"
    np.savez_compressed(f, **t, provenance=np.array(json.dumps(p) + " " * 500_000))
    with pytest.raises(TimingModelError, match=r"padded.npz.*provenance is too large"):
        parse_timing_model(f"profile:{f}")
    with pytest.raises(ProfileUnreadable, match="provenance is too large"):
        read_profile(f)
    monkeypatch.setattr(profile_npz, "MAX_PROVENANCE_CHARS", 1 << 20)  # the same file under a limit it fits
    assert parse_timing_model(f"profile:{f}")[0].calibration == rpb.CALIBRATION_STATUS_CALIBRATED


def _other_model(tmp_path, src: Path, **fields) -> Path:
    import shutil

    d = tmp_path / f"{src.name}-other-model"
    shutil.copytree(src, d)
    m = json.loads((d / "manifest.json").read_text())  # manifest.json is not digested
    m["model"].update(fields)
    (d / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    return d


@pytest.mark.parametrize("fields", [{"num_layers": 80, "hidden_size": 8192, "architecture": "llama"},
                                    {"weights_sha256": "ab" * 32}, {"num_kv_heads": 8}])
def test_a_profile_of_another_model_is_no_calibration_of_it(tmp_path, capsys, fields):
    """s6-f: `replay T --timing-model profile:P` with P measured on tiny-qwen2 (4 layers) and T a llama-70b trace
    was labelled CALIBRATED in the result and in compare's report; `--level-to-probe` levelled it into a
    CALIBRATED+PROBE profile of the other model."""
    trace = _other_model(tmp_path, REPO / "traces" / "grpo-a", **fields)
    out = tmp_path / "r"
    assert main(["replay", str(trace), "--timing-model", f"profile:{PROFILE}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "measured on another model" in err and "Traceback" not in err, err
    assert not (out / "replay_result.json").exists()
    probe = _other_model(tmp_path, REPO / "results" / "holdout-probe2" / "traces" / "grpo-r1", **fields)
    lev = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(probe), "--base", str(PROFILE), "--out", str(lev)]) == 2
    assert "measured on another model" in capsys.readouterr().err
    assert not lev.exists()
    # the same model (the bundled trace and holdout trace as they are): replayed / levelled, labelled
    tm, _ = parse_timing_model(f"profile:{PROFILE}")
    from unirl_replay.contract.trace_io import open_trace
    from unirl_replay.replay.timing_models import profile_model_problem

    assert profile_model_problem(tm, open_trace(REPO / "traces" / "grpo-a").manifest) is None
    assert main(["calibrate", "--level-to-probe", str(REPO / "results" / "holdout-probe2" / "traces" / "grpo-r1"),
                 "--base", str(PROFILE), "--out", str(lev)]) == 0


@pytest.mark.parametrize("coef,value,why", [("d1", 1e300, "the fit of decode_itl is"), ("d2", 1e308, "is not > 0 (or not finite)"),
                                            ("p1", 1e3, "the fit of prefill_ttft_ms is")])
def test_level_to_probe_refuses_a_base_whose_fit_does_not_describe_its_tables(tmp_path, capsys, coef, value, why):
    """s6-f: a provenance fit edited to d1 = 1e300 was levelled against: `decode x0.000` written as a CALIBRATED+PROBE
    profile (the level is probe / fit, the table is what replay uses)."""
    t, p = _tables_and_prov()
    phase = "decode" if coef.startswith("d") else "prefill"
    p["fit"][phase]["coefficients"][coef] = value
    base = _profile(tmp_path / "edited.npz", prov=p)
    trace = REPO / "results" / "holdout-probe2" / "traces" / "grpo-r1"
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(trace), "--base", str(base), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "edited.npz" in err and why in err and "Traceback" not in err, err
    assert not out.exists()
