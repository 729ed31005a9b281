"""validate: every rule of unirl_replay.contract.validate.RULES is triggered by a broken trace, naming the record."""

import json

import pytest
from click.testing import CliRunner

from tracebuild import (MS, TraceParts, agentic_trace, batches_trace, dep, grpo_trace, make_manifest, make_request,
                        request_outcome)
from unirl_replay.cli.validate import command
from unirl_replay.contract.trace_io import read_message_json, write_message_json
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w
from unirl_replay.v1.manifest_pb2 import TraceManifest
from unirl_replay.v1.report_pb2 import TraceCheck, Violation
from unirl_replay.contract.json_profile import OFF_PROFILE_FORMS
from unirl_replay.contract.validate import RULES, check_trace

VALID, INVALID, INCOMPLETE = TraceCheck.STATUS_VALID, TraceCheck.STATUS_INVALID, TraceCheck.STATUS_INCOMPLETE
COVERED: set[str] = set()


def check(parts, tmp_path, enc="jsonl"):
    return check_trace(parts.write(tmp_path / f"t-{enc}", enc))


def hits(res, rule):
    COVERED.add(rule)
    return [v for v in res.violations if v.rule == rule]


@pytest.mark.parametrize("builder", [grpo_trace, agentic_trace, batches_trace])
@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_builders_are_valid(builder, enc, tmp_path):
    res = check(builder(), tmp_path, enc)
    assert res.status == VALID, list(res.violations)
    assert not res.violations and res.record_counts["workload"] > 0


def _after(t, bid, prev, gap=0):
    """Batch ``bid`` waits for ``prev`` (after_batch) with a driver gap of ``gap`` ns."""
    b = t.batch(bid)
    b.after_batch.previous_rollout_batch_id = prev
    b.after_batch.driver_gap_ns = gap


def _three_batches():
    return batches_trace(batches=3)


# -- record rules: (rule, record id, builder, mutation, severity)

def _swap_turns(t):
    tr = t.trajectory("traj-0")
    tr.request_ids[0], tr.request_ids[1] = tr.request_ids[1], tr.request_ids[0]


def _cycle(t):
    t.request("traj-0/t0").dependencies.append(dep("traj-0/t2"))
    t.request("traj-0/t0").arrival.after_dependencies.SetInParent()


def _cross(t):
    t.request("traj-1/t1").dependencies[0].predecessor_request_id = "traj-0/t1"


def _dup_request(t):
    t.add(make_request("req-0", samples=4, group_id="g0", batch_id="b0"))


def _mixed_arrival(t):
    t.request("req-1").ClearField("arrival")


def _no_arrival_anywhere(t):
    for r in t.requests():
        r.ClearField("arrival")


def _unmatched_outcome(t):
    t.add(request_outcome("ghost", 0))


def _order(t):
    oc = t.outcome("req-0")
    oc.queued_ns, oc.scheduled_ns = 5 * MS, 2 * MS  # vLLM re-queued: queue time negative


def _first_token_after_completion(t):
    t.outcome("req-1").first_token_ns = t.outcome("req-1").completion_ns + 1


def _warmup(t):
    """A CacheWarmup (one block of e0's block size) in a trace whose manifest stays COLD."""
    b = t.manifest.engines[0].block_size_tokens
    t.workload.append(w.WorkloadRecord(cache_warmup=w.CacheWarmup(
        warmup_id="wu0", engine_id="e0", input_tokens=b, prefix=c.PrefixBlocks(block_size_tokens=b, block_hashes=[7]))))


def _warm_declared(t, **warmup):
    """A CacheWarmup (``warmup``'s fields) in a trace whose manifest is CACHE_STATE_KIND_WARM_DECLARED."""
    t.manifest.cache_state = c.CACHE_STATE_KIND_WARM_DECLARED
    t.workload.append(w.WorkloadRecord(cache_warmup=w.CacheWarmup(warmup_id="wu0", engine_id="e0", **warmup)))


def _hashes_without_block_size(t):
    """req-0 keeps its hashes, its block size is 0 (convert / replay: prefix.block_size_mismatch)."""
    t.request("req-0").prefix.block_size_tokens = 0


def _prefix_count(t):
    r = t.request("req-0")
    r.input_tokens = 1024  # 64 hashes needed at block 16
    r.prefix.CopyFrom(c.PrefixBlocks(block_size_tokens=512, block_hashes=[1, 2, 3]))


def _singleton(t):
    g = t.group("g0")
    g.member_ids[:] = ["traj-0"]
    t.trajectory("traj-1").group_id = "g1"
    t.add(w.Group(group_id="g1", rollout_batch_id="b0", unit=w.GROUP_UNIT_TRAJECTORIES, expected_size=2,
                  member_ids=["traj-1"]))
    t.batch("b0").group_ids.append("g1")


def _group_in_no_batch(t):
    t.batch("b0").group_ids.remove("g1")


def _group_in_two_batches(t):
    t.add(w.RolloutBatch(rollout_batch_id="b1", group_ids=["g1"], readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS))


def _suspect_scale(t):
    t.request("req-1").arrival.observed_offset_ns = 10 * MS * 1_000_000  # 10,000 s in a 60 s window


def _small(t):
    for i, r in enumerate(t.requests()):
        r.arrival.observed_offset_ns = i  # "seconds" written as ns


def _missing_delay(t):
    t.request("traj-0/t1").dependencies[0].ClearField("external_delay_ns")


def _late_sample(t):
    out = t.outcome("req-1")
    for i in range(4):
        out.samples.add(sample_id=f"req-1/s{i}", first_token_ns=out.first_token_ns,
                        completion_ns=out.completion_ns + (MS if i == 2 else 0))


def _partial_samples(t):
    out = t.outcome("req-0")
    for i in range(2):
        out.samples.add(sample_id=f"req-0/s{i}", first_token_ns=out.first_token_ns, completion_ns=out.completion_ns)


def _request_in_other_group(t):
    t.request("req-1").group_id = "g0"  # g1 lists it (unit SAMPLES)


def _both_delay(t):
    t.request("traj-0/t1").dependencies[0].delay_absence = c.DELAY_ABSENCE_NOT_MEASURED


def _traj_outcome(t, tid) -> o.TrajectoryOutcome:
    return next(r.trajectory for r in t.outcomes if r.WhichOneof("record") == "trajectory"
                and r.trajectory.trajectory_id == tid)


def _slot_released_early(t):
    _traj_outcome(t, "traj-0").slot_released_ns = 1 * MS  # its turns complete at 20, 90 and 160 ms


def _slot_acquired_late(t):
    _traj_outcome(t, "traj-1").slot_acquired_ns = 200 * MS  # its first turn was submitted at 5 ms


def _request_done_after_its_samples(t):
    oc = t.outcome("req-0")  # completion 20 ms; every sample's last token at 6 ms
    for i in range(4):
        oc.samples.add(sample_id=f"req-0/s{i}", first_token_ns=oc.first_token_ns, completion_ns=oc.first_token_ns + MS)


def _request_first_token_before_its_samples(t):
    oc = t.outcome("req-0")  # first token 5 ms; every sample's first token at 6 ms
    for i in range(4):
        oc.samples.add(sample_id=f"req-0/s{i}", first_token_ns=oc.first_token_ns + MS, completion_ns=oc.completion_ns)


CASES = [
    ("id.duplicate", "req-0", grpo_trace, _dup_request),
    ("id.empty", "", grpo_trace, lambda t: setattr(t.request("req-0"), "request_id", "")),
    ("record.empty", "", grpo_trace, lambda t: t.workload.append(w.WorkloadRecord())),
    ("enum.unspecified", "req-0", grpo_trace, lambda t: t.request("req-0").finish_reasons.__setitem__(0, 0)),
    ("enum.unspecified", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "relation", 0)),
    ("reference.engine", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "engine_id", "e9")),
    ("reference.trajectory", "traj-0/t0", agentic_trace, lambda t: t.remove("trajectory", "traj-0")),
    ("reference.group", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "group_id", "nope")),
    ("reference.batch", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "rollout_batch_id", "nope")),
    ("reference.slot_pool", "traj-0", agentic_trace, lambda t: setattr(t.trajectory("traj-0"), "slot_pool_id", "p9")),
    ("reference.request", "traj-0", agentic_trace, lambda t: t.trajectory("traj-0").request_ids.append("ghost")),
    ("fanout.count", "req-0", grpo_trace, lambda t: t.request("req-0").output_tokens.append(3)),
    # a request's sample ids repeat one (SampleTiming.sample_id keys each sample): validate called it valid
    ("fanout.sample_ids", "req-1", grpo_trace, lambda t: t.request("req-1").sample_ids.__setitem__(3, "req-1/s0")),
    ("request.input_tokens", "req-0", grpo_trace, lambda t: (setattr(t.request("req-0"), "input_tokens", 0),
                                                             t.request("req-0").ClearField("prefix"))),
    ("fanout.count", "req-1", grpo_trace, lambda t: setattr(t.request("req-1"), "num_samples", 3)),
    ("prefix.count", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "input_tokens", 20)),
    ("prefix.block_size", "req-0", grpo_trace, _prefix_count),
    ("prefix.missing", "req-0", grpo_trace, lambda t: t.request("req-0").ClearField("prefix")),
    ("cache_warmup.cold_manifest", "wu0", grpo_trace, _warmup),
    ("prefix.block_size", "req-0", grpo_trace, _hashes_without_block_size),
    ("cache_warmup.prefix", "wu0", grpo_trace, lambda t: _warm_declared(t, input_tokens=128)),
    ("cache_warmup.prefix", "wu0", grpo_trace, lambda t: _warm_declared(t, input_tokens=0)),
    ("cache_warmup.prefix", "wu0", grpo_trace,
     lambda t: _warm_declared(t, input_tokens=16, prefix=c.PrefixBlocks(block_size_tokens=0))),
    ("prefix.block_size", "wu0", grpo_trace,
     lambda t: _warm_declared(t, input_tokens=16, prefix=c.PrefixBlocks(block_size_tokens=0, block_hashes=[7]))),
    ("arrival.kind_missing", "req-0", grpo_trace, _no_arrival_anywhere),
    ("arrival.mixed_missing", "req-1", grpo_trace, _mixed_arrival),
    ("arrival.dependencies", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").arrival, "observed_offset_ns", 5)),
    ("arrival.dependencies", "traj-0/t0", agentic_trace,
     lambda t: t.request("traj-0/t0").arrival.after_dependencies.SetInParent()),
    ("dependency.unresolved", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "predecessor_request_id", "ghost")),
    ("dependency.cross_trajectory", "traj-1/t1", agentic_trace, _cross),
    ("dependency.no_trajectory", "req-1", grpo_trace,
     lambda t: (t.request("req-1").dependencies.append(dep("req-0")),
                t.request("req-1").arrival.after_dependencies.SetInParent())),
    ("dependency.duplicate", "traj-0/t1", agentic_trace,
     lambda t: t.request("traj-0/t1").dependencies.append(dep("traj-0/t0"))),
    ("dependency.delay_absence", "traj-0/t1", agentic_trace, _missing_delay),
    ("dependency.delay_absence", "traj-0/t1", agentic_trace, _both_delay),
    ("dependency.cycle", "traj-0/t0", agentic_trace, _cycle),
    ("dependency.cycle", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "predecessor_request_id", "traj-0/t1")),
    ("turn.index", "traj-0/t1", agentic_trace, lambda t: t.request("traj-0/t1").ClearField("turn_index")),
    ("turn.order", "traj-0", agentic_trace, _swap_turns),
    ("turn.dependency_order", "traj-0/t0", agentic_trace, _cycle),
    ("trajectory.requests", "traj-0", agentic_trace, lambda t: t.trajectory("traj-0").request_ids.pop()),
    # a request on another engine than its trajectory names (both engines known): convert refused, validate passed
    ("trajectory.engine", "traj-0/t1", agentic_trace,
     lambda t: (t.manifest.engines.add().CopyFrom(t.manifest.engines[0]), setattr(t.manifest.engines[1], "engine_id", "e1"),
                setattr(t.request("traj-0/t1"), "engine_id", "e1"))),
    ("group.members", "g0", agentic_trace, lambda t: t.group("g0").member_ids.append("traj-0")),
    ("group.members", "g0", grpo_trace, lambda t: t.group("g0").member_ids.append("ghost")),
    # a request listed by two SAMPLES groups (attack-s7: VALID while its samples counted toward both sizes)
    ("group.members", "g1", grpo_trace,
     lambda t: (t.group("g1").member_ids.append("req-0"), setattr(t.group("g1"), "expected_size", 8))),
    ("group.size", "g0", grpo_trace, lambda t: setattr(t.group("g0"), "expected_size", 8)),
    ("group.size", "g0", agentic_trace, _singleton),
    ("group.singleton", "g0", agentic_trace, _singleton),
    ("batch.membership", "g1", grpo_trace, _group_in_no_batch),
    ("batch.membership", "g1", grpo_trace, _group_in_two_batches),
    ("batch.required_groups", "b0", grpo_trace,
     lambda t: (setattr(t.batch("b0"), "readiness_rule", w.BATCH_READINESS_RULE_FIRST_N_GROUPS),
                setattr(t.batch("b0"), "required_groups", 3))),
    # a rollout batch listing engines, one of its requests on another (RolloutBatch.engine_ids): validate passed it
    ("batch.engines", "b0", grpo_trace,
     lambda t: (t.manifest.engines.add().CopyFrom(t.manifest.engines[0]), setattr(t.manifest.engines[1], "engine_id", "e1"),
                setattr(t.request("req-1"), "engine_id", "e1"))),
    ("slot_pool.slots", "pool0", agentic_trace,
     lambda t: setattr(t.workload[0].slot_pool, "trajectory_slots", 0)),
    ("group.resumed_from", "g0", grpo_trace, lambda t: setattr(t.group("g0"), "resumed_from_rollout_batch_id", "")),
    ("group.resumed_from", "g1", grpo_trace, lambda t: setattr(t.group("g1"), "resumed_from_rollout_batch_id", "b0")),
    ("manifest.completeness", "test-trace", grpo_trace,
     lambda t: (setattr(t.manifest.completeness, "complete", True),
                t.manifest.completeness.lost.add(kind="engine_request", count=3, cause="engine e0 died"))),
    ("manifest.completeness", "test-trace", grpo_trace, lambda t: t.manifest.completeness.SetInParent()),
    ("manifest.completeness", "test-trace", grpo_trace,
     lambda t: t.manifest.completeness.lost.add(kind="trajectory", count=0, cause="x")),
    # two trajectories of one pool at one start position (slots are granted in start order): validate passed it
    ("slot_pool.start_order", "traj-1", agentic_trace, lambda t: setattr(t.trajectory("traj-1"), "start_order", 0)),
    # a trajectory on an engine its slot pool does not list (SlotPool.engine_ids): validate passed it
    ("slot_pool.engines", "traj-1", agentic_trace,
     lambda t: (t.manifest.engines.add().CopyFrom(t.manifest.engines[0]), setattr(t.manifest.engines[1], "engine_id", "e1"),
                t.workload[0].slot_pool.engine_ids.append("e1"), t.workload[0].slot_pool.engine_ids.remove("e0"))),
    ("trajectory.start_order", "traj-1", agentic_trace, lambda t: t.trajectory("traj-1").ClearField("start_order")),
    ("engine_client.limit", "e0", agentic_trace,
     lambda t: setattr(t.workload[1].engine_client, "inflight_request_limit", 0)),
    ("units.negative", "req-1", grpo_trace, lambda t: setattr(t.request("req-1").arrival, "observed_offset_ns", -1)),
    ("units.negative", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "external_delay_ns", -5)),
    ("units.suspect_scale", "req-1", grpo_trace, _suspect_scale),
    ("units.outside_window", "req-1", grpo_trace,
     lambda t: setattr(t.request("req-1").arrival, "observed_offset_ns", 61 * 10**9)),
    ("units.suspect_small", "", grpo_trace, _small),
    ("time.order", "req-0", grpo_trace, _order),
    ("time.order", "req-1", grpo_trace, _first_token_after_completion),
    ("time.order", "traj-0", agentic_trace,
     lambda t: setattr(t.outcomes[[r.WhichOneof("record") for r in t.outcomes].index("trajectory")].trajectory,
                       "slot_acquired_ns", 10**10)),
    ("outcome.unmatched", "ghost", grpo_trace, _unmatched_outcome),
    ("outcome.unmatched", "g7", grpo_trace, lambda t: t.add(o.GroupOutcome(group_id="g7", completed_ns=0))),
    ("id.duplicate", "req-0", grpo_trace, lambda t: t.add(request_outcome("req-0", 0))),
    # issue 13: hostile values, bounds, lineage agreement, outcome completeness
    ("enum.unknown", "req-0", grpo_trace, lambda t: t.request("req-0").finish_reasons.__setitem__(0, 99)),
    ("enum.unknown", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "trigger", 7)),
    ("enum.unknown", "test-trace", grpo_trace, lambda t: setattr(t.manifest.window, "clock_domain", 99)),
    ("id.invalid", "req-0", grpo_trace, lambda t: t.request("req-0").sample_ids.__setitem__(0, "s\x07")),
    ("id.invalid", "g\\n0", grpo_trace, lambda t: setattr(t.group("g0"), "group_id", "g\n0")),
    ("id.invalid", "req-1", grpo_trace, lambda t: setattr(t.request("req-1"), "worker_id", "w\x00")),
    ("id.invalid", "traj-0/t1", agentic_trace,
     lambda t: setattr(t.request("traj-0/t1").dependencies[0], "predecessor_request_id", "traj-0/t0\x1b")),
    ("id.invalid", "req-0", grpo_trace, lambda t: t.outcome("req-0").samples.add(sample_id="s\x85")),
    ("id.invalid", "test-trace", grpo_trace, lambda t: setattr(t.manifest.privacy, "hash_salt_id", "x" * 2000)),
    ("manifest.trace_id", "", grpo_trace, lambda t: setattr(t.manifest, "trace_id", "")),
    ("outcome.missing_reason", "req-0", grpo_trace, lambda t: t.outcome("req-0").ClearField("first_token_ns")),
    ("outcome.completion_order", "g0", grpo_trace,
     lambda t: setattr(t.outcomes[[r.WhichOneof("record") for r in t.outcomes].index("group")].group,
                       "completed_ns", 10 * MS)),
    ("outcome.completion_order", "b0", grpo_trace,
     lambda t: setattr(t.outcomes[-1].rollout_batch, "ready_ns", 15 * MS)),
    ("outcome.samples", "req-0", grpo_trace,
     lambda t: t.outcome("req-0").samples.add(sample_id="ghost", first_token_ns=5 * MS, completion_ns=6 * MS)),
    ("outcome.samples", "req-1", grpo_trace, _late_sample),
    # more prompt tokens from the prefix cache than the prompt has (RequestOutcome.cached_tokens): validate passed it
    ("outcome.cached_tokens", "traj-1/t2", agentic_trace, lambda t: setattr(t.outcome("traj-1/t2"), "cached_tokens", 101)),
    ("outcome.samples", "req-0", grpo_trace, _partial_samples),
    ("group.request_mismatch", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "rollout_batch_id", "b1")),
    ("group.request_mismatch", "req-1", grpo_trace, _request_in_other_group),
    ("group.request_mismatch", "traj-1/t0", agentic_trace, lambda t: setattr(t.request("traj-1/t0"), "group_id", "gX")),
    ("bound.model_len", "req-0", grpo_trace, lambda t: t.request("req-0").output_tokens.__setitem__(1, 5000)),
    ("bound.tokens", "req-0", grpo_trace, lambda t: t.request("req-0").output_tokens.__setitem__(1, 4_000_000_000)),
    ("bound.tokens", "req-1", grpo_trace,
     lambda t: (setattr(t.manifest.engines[0], "max_model_len", 0),
                t.request("req-1").output_tokens.__setitem__(0, 20_000_000))),
    ("bound.max_output_tokens", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "max_output_tokens", 4)),
    ("bound.count", "req-0", grpo_trace, lambda t: setattr(t.request("req-0"), "num_samples", 5000)),
    ("bound.window", "test-trace", grpo_trace, lambda t: setattr(t.manifest.window, "duration_ns", 31 * 86400 * 10**9)),
    ("bound.engine_capacity", "e0", grpo_trace, lambda t: setattr(t.manifest.engines[0], "num_kv_blocks", 1)),
    ("bound.engine_capacity", "e0", grpo_trace, lambda t: setattr(t.manifest.engines[0], "max_num_batched_tokens", 16)),
    # reference probes (manifest.proto ReferenceProbe / ProbePoint): were accepted with any value
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, median_ms=float("nan"))),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, median_ms=float("inf"))),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, median_ms=-5.0)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, median_ms=1e300)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, phase="warmup")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, context_tokens=0)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, p25_ms=30.0)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, when="sometime")),
    ("manifest.probe_artifact", "e0", grpo_trace, lambda t: _probe(t)),  # the artifact file is not written
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="../../etc/passwd")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="/tmp/probe.json")),
    # the trace's own files (s6-f): recode copied the probe "artifact" over / beside the records it wrote
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="manifest.json")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="workload.binpb")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="outcomes.arrow")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="probes/e0.json.partial")),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="probes/e0\0.json")),  # recode: traceback
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, artifact_path="probes/e0\x1b[2J.json")),
    ("manifest.probe", "e9", grpo_trace, lambda t: _probe(t, engine_id="e9")),
    # per-repeat values and sizes (s6-f): were accepted, and --level-to-probe levelled by them (a profile x5.6e173 or
    # x0.000 written; NaN / 0 / negative repeats silently dropped)
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[float("nan")] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[float("inf")] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[0.0] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[-5.0] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[1e300] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[1e-300] * 3)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_step_ms=[])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_tokens=[1024])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_rows=[4, 4])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_tokens=[0, 1024, 1024])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_rows=[0, 4, 4])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_tokens=[1, 1024, 1024])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, repeat_pass_tokens=[4294967295, 1024, 1024])),
    ("manifest.probe", "e0", grpo_trace, lambda t: _batched(t, prefill_tokens=4294967295)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, batch_size=4294967295)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, context_tokens=4294967295)),
    ("manifest.probe", "e0", grpo_trace, lambda t: _probe(t, phase="prefill", prefill_tokens=4294967295, batch_size=0,
                                                          context_tokens=0)),
    ("manifest.probe", "e0", grpo_trace, lambda t: (_probe(t), t.manifest.probes.add().CopyFrom(t.manifest.probes[0]))),
    # the contended points (ReferenceProbe.contended_points) get the same rules as the probe's points
    ("manifest.probe", "e0", grpo_trace, lambda t: (_probe(t), t.manifest.probes[0].contended_points.add(
        phase="decode", batch_size=1, context_tokens=128, repeats=1, median_ms=float("nan")))),
    ("manifest.probe", "e0", grpo_trace, lambda t: (_probe(t), t.manifest.probes[0].contended_points.add(
        phase="load", batch_size=12, repeats=1, median_ms=20.0, p25_ms=20.0, p75_ms=20.0))),
    # run conditions (manifest.proto RunConditions): were accepted with any value, and report/conditions.py then
    # warned of "CPU steal 250.0 %" or a load "up to -3.00", or stayed silent on NaN
    ("manifest.conditions", "test-trace", grpo_trace, lambda t: setattr(t.manifest.conditions, "steal_pct", float("nan"))),
    ("manifest.conditions", "test-trace", grpo_trace, lambda t: setattr(t.manifest.conditions, "steal_pct", 250.0)),
    ("manifest.conditions", "test-trace", grpo_trace, lambda t: setattr(t.manifest.conditions, "host_busy_pct", -1.0)),
    # s10-attack: a NaN / infinite / below -1 capture overhead passed and printed as "capture overhead +nan%"
    ("manifest.capture_overhead", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.capture_overhead, "overhead_ratio", float("nan"))),
    ("manifest.capture_overhead", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.capture_overhead, "overhead_ratio", float("inf"))),
    ("manifest.capture_overhead", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.capture_overhead, "overhead_ratio", -1.5)),
    ("manifest.capture_overhead", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.capture_overhead, "plain_wall_ns", -5)),
    ("manifest.conditions", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.conditions, "loadavg_1m_start", -3.0)),
    ("manifest.conditions", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.conditions, "loadavg_1m_end", float("inf"))),
    ("manifest.conditions", "test-trace", grpo_trace, lambda t: setattr(t.manifest.conditions, "duration_ns", -1)),
    ("manifest.conditions", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest.conditions, "engine_uptime_ns", -5)),
    ("manifest.conditions", "test-trace", grpo_trace,
     lambda t: t.manifest.conditions.engine_process_cpu_ns.__setitem__("e0", -1)),
    ("manifest.conditions", "e0", grpo_trace,
     lambda t: (_probe(t), setattr(t.manifest.probes[0].conditions, "steal_pct", 101.0))),
    # created_at: "RFC 3339 UTC" (manifest.proto); anything was accepted
    ("manifest.created_at", "test-trace", grpo_trace, lambda t: setattr(t.manifest, "created_at", "yesterday")),
    ("manifest.created_at", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest, "created_at", "2026-13-45T99:99:99Z")),
    ("manifest.created_at", "test-trace", grpo_trace,
     lambda t: setattr(t.manifest, "created_at", "2026-12-01T17:50:19+02:00")),
    # s15-attack2: the workload name reports print and compare matches (was accepted with an ESC in it)
    ("manifest.workload_name", "test-trace", grpo_trace, lambda t: setattr(t.manifest, "workload_name", "w\x1b[2J")),
    ("manifest.workload_name", "test-trace", grpo_trace, lambda t: setattr(t.manifest, "workload_name", "w" * 1025)),
    # issue 14: RolloutBatch.after_batch, the driver's closed-loop boundary between rollout batches
    ("batch.boundary_empty", "b1", batches_trace, lambda t: _after(t, "b1", "")),
    ("batch.boundary_empty", "b0", batches_trace, lambda t: t.batch("b0").after_batch.SetInParent()),
    ("batch.boundary_unknown", "b1", batches_trace, lambda t: _after(t, "b1", "b9")),
    ("batch.boundary_unknown", "b2", _three_batches, lambda t: t.remove("rollout_batch", "b1")),
    ("batch.boundary_self", "b1", batches_trace, lambda t: _after(t, "b1", "b1")),
    ("batch.boundary_cycle", "b0", batches_trace, lambda t: _after(t, "b0", "b1")),
    ("batch.boundary_cycle", "b0", _three_batches, lambda t: _after(t, "b0", "b2")),
    ("batch.boundary_cycle", "b1", _three_batches, lambda t: _after(t, "b1", "b2")),
    ("units.negative", "b1", batches_trace, lambda t: _after(t, "b1", "b0", -1)),
    ("units.suspect_scale", "b1", batches_trace, lambda t: _after(t, "b1", "b0", 10**16)),
    ("id.invalid", "b1", batches_trace, lambda t: _after(t, "b1", "b0\x07")),
    ("outcome.completion_order", "traj-0", agentic_trace, _slot_released_early),
    ("outcome.completion_order", "traj-1", agentic_trace, _slot_acquired_late),
    ("outcome.samples", "req-0", grpo_trace, _request_done_after_its_samples),
    ("outcome.samples", "req-0", grpo_trace, _request_first_token_before_its_samples),
    ("outcome.batch_boundary", "b1/req-0", batches_trace,
     lambda t: setattr(t.outcome("b1/req-0"), "submit_ns", 30 * MS)),  # b0 ready at 31 ms
    ("outcome.batch_boundary", "b1/req-1", batches_trace,
     lambda t: setattr(t.outcome("b1/req-1"), "submit_ns", 5 * MS)),
]


def _probe(t, *, engine_id="e0", when="before", artifact_path="probes/e0-before.json", **point):
    """A reference probe with one decode point, the point's fields overridden by ``point``."""
    pt = {"phase": "decode", "batch_size": 32, "context_tokens": 128, "repeats": 5, "median_ms": 20.0,
          "p25_ms": 19.0, "p75_ms": 21.0, **point}
    p = t.manifest.probes.add(engine_id=engine_id, when=when, artifact_path=artifact_path)
    p.points.add(**pt)
    t.manifest.probes.add(engine_id="e0", when="after").points.add(phase="prefill", prefill_tokens=512, repeats=5,
                                                                    median_ms=100.0, p25_ms=95.0, p75_ms=105.0)


def _batched_point(**point) -> dict:
    """A batched prefill point with its repeats' own pass sizes, overridden by ``point``."""
    return {"phase": "prefill", "batch_size": 4, "prefill_tokens": 1024, "repeats": 3, "median_ms": 200.0,
            "p25_ms": 190.0, "p75_ms": 210.0, "repeat_step_ms": [190.0, 200.0, 210.0],
            "repeat_pass_tokens": [1024] * 3, "repeat_pass_rows": [4] * 3, **point}


def _batched(t, **point):
    """A probe whose point is :func:`_batched_point`."""
    _probe(t, **_batched_point(**point))


WARNINGS = {"group.singleton", "prefix.missing", "units.outside_window", "units.suspect_small", "manifest.probe_artifact"}


@pytest.mark.parametrize("rule,record_id,builder,mutate", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule(rule, record_id, builder, mutate, tmp_path):
    t = builder()
    mutate(t)
    res = check(t, tmp_path, "binpb" if len(rule) % 2 else "jsonl")
    found = hits(res, rule)
    assert found, f"{rule} not reported; got {[(v.rule, v.record_id, v.message) for v in res.violations]}"
    v = next((v for v in found if v.record_id == record_id), None)
    assert v is not None, [(x.record_id, x.message) for x in found]
    assert v.file and v.message
    if rule in WARNINGS:
        assert v.severity == Violation.SEVERITY_WARNING
        errors = [x for x in res.violations if x.severity != Violation.SEVERITY_WARNING]
        assert res.status == (INVALID if errors else VALID)
    else:
        assert v.severity == Violation.SEVERITY_ERROR and res.status == INVALID
    if v.file.startswith("workload") and v.record_id and rule not in ("units.suspect_small",):
        assert v.line > 0


def _multi_level(*, extra_unlisted: bool = False):
    """Multi-level lineage (workload.proto, Group.expected_size): 1 prompt -> a request of n=2 (the intermediate
    level, turn 0 of trajectory tr0) -> two requests of n=2 forked from it (turns 1 and 2, the leaves). Group g0
    (unit SAMPLES) lists the leaves only, expected_size 4 = their samples; the intermediate names g0 (its root
    prompt's group) and reaches it through the leaves' dependencies. ``extra_unlisted``: a further request of g0
    (turn 3) that g0 does not list and no member waits for."""
    t = TraceParts(make_manifest())
    t.add(make_request("mid", samples=2, group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=0))
    leaves = [f"leaf{i}" for i in range(2)]
    for i, rid in enumerate(leaves):
        t.add(make_request(rid, samples=2, group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=1 + i,
                           deps=[dep("mid", relation=c.DEPENDENCY_RELATION_SPAWN)], input_tokens=60))
    ids = ["mid", *leaves]
    if extra_unlisted:
        t.add(make_request("stray", group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=3,
                           deps=[dep("leaf1")], input_tokens=80))
        ids.append("stray")
    t.add(w.Trajectory(trajectory_id="tr0", group_id="g0", rollout_batch_id="b0", engine_id="e0", worker_id="w0",
                       request_ids=ids, root_sample_id="root", start_order=0))
    t.add(w.Group(group_id="g0", rollout_batch_id="b0", unit=w.GROUP_UNIT_SAMPLES, expected_size=4, member_ids=leaves))
    t.add(w.RolloutBatch(rollout_batch_id="b0", group_ids=["g0"], readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         engine_ids=["e0"]))
    for k, rid in enumerate(ids):
        t.add(request_outcome(rid, k * 30 * MS))
    return t


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_multi_level_lineage_intermediate_requests_are_no_members(enc, tmp_path):
    # the intermediate request names its root prompt's group, which does not list it: it reaches the group through
    # a member's dependency (was group.request_mismatch "does not list this request": no multi-level trace was valid)
    res = check(_multi_level(), tmp_path, enc)
    assert res.status == VALID, [(v.rule, v.record_id, v.message) for v in res.violations]
    # a request of the group that no member waits for, directly or through other such requests, is still refused
    res = check(_multi_level(extra_unlisted=True), tmp_path / "x", enc)
    assert [(v.rule, v.record_id) for v in res.violations if v.severity == Violation.SEVERITY_ERROR] == [
        ("group.request_mismatch", "stray")], list(res.violations)
    assert "does not list this request" in hits(res, "group.request_mismatch")[0].message


def test_multi_level_lineage_through_two_intermediate_levels(tmp_path):
    # root (turn 0) -> mid (turn 1) -> leaf (turn 2): only the leaf is listed; both earlier levels reach g0 through it
    t = TraceParts(make_manifest())
    t.add(make_request("root", group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=0))
    t.add(make_request("mid", group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=1, deps=[dep("root")]))
    t.add(make_request("leaf", samples=3, group_id="g0", batch_id="b0", trajectory_id="tr0", turn_index=2,
                       deps=[dep("mid")]))
    t.add(w.Trajectory(trajectory_id="tr0", group_id="g0", rollout_batch_id="b0", engine_id="e0", worker_id="w0",
                       request_ids=["root", "mid", "leaf"], root_sample_id="root", start_order=0))
    t.add(w.Group(group_id="g0", rollout_batch_id="b0", unit=w.GROUP_UNIT_SAMPLES, expected_size=3, member_ids=["leaf"]))
    t.add(w.RolloutBatch(rollout_batch_id="b0", group_ids=["g0"], readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         engine_ids=["e0"]))
    res = check(t, tmp_path)
    assert res.status == VALID, [(v.rule, v.record_id, v.message) for v in res.violations]


def test_violation_names_exact_line(tmp_path):
    t = grpo_trace()
    t.request("req-1").input_tokens = 20
    res = check(t, tmp_path)
    v = hits(res, "prefix.count")[0]
    assert (v.file, v.line, v.record_id) == ("workload.jsonl", t.line_of("request", "req-1"), "req-1")
    assert "ceil(20/16) = 2" in v.message


def test_prefix_count_pitfall_values(tmp_path):
    t = grpo_trace(prompts=3)
    for rid, tokens, n in (("req-0", 20, 2), ("req-1", 1024, 3), ("req-2", 1025, 3)):
        r = t.request(rid)
        r.input_tokens = tokens
        r.prefix.CopyFrom(c.PrefixBlocks(block_size_tokens=512, block_hashes=list(range(n))))
    for e in t.manifest.engines:
        e.block_size_tokens = 512
    res = check(t, tmp_path)
    assert {v.record_id for v in hits(res, "prefix.count")} == {"req-0", "req-1"}


def test_zero_delay_is_valid_and_not_measured_is_labelled(tmp_path):
    t = agentic_trace()
    t.request("traj-0/t1").dependencies[0].external_delay_ns = 0
    t.request("traj-0/t2").dependencies[0].ClearField("external_delay_ns")
    t.request("traj-0/t2").dependencies[0].delay_absence = c.DELAY_ABSENCE_NOT_MEASURED
    assert check(t, tmp_path).status == VALID


def test_manifest_rules(tmp_path):
    t = grpo_trace()
    t.manifest.role = 0
    t.manifest.window.duration_ns = 0
    t.manifest.engines.add(engine_id="e0", block_size_tokens=16)
    res = check(t, tmp_path)
    assert res.status == INVALID
    assert hits(res, "enum.unspecified") and hits(res, "manifest.window")
    assert [v.record_id for v in hits(res, "id.duplicate")] == ["e0"]
    t.manifest.engines.add(engine_id="", block_size_tokens=0)
    assert hits(check(t, tmp_path / "x"), "manifest.engine")


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_incomplete_traces(tmp_path, enc):
    d = agentic_trace().write(tmp_path / "t", enc)
    p = d / f"workload.{enc}"
    p.write_bytes(p.read_bytes()[:-4])
    res = check_trace(d)
    assert res.status == INCOMPLETE and hits(res, "artifact.size")
    (d / "manifest.json").unlink()
    res = check_trace(d)
    assert res.status == INCOMPLETE and hits(res, "trace.no_manifest")


def test_a_directory_that_is_no_trace_is_named_so(tmp_path):
    # a parent folder, a replay output: not "never finalized, capture again"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "replay_result.json").write_text("{}")
    res = check_trace(tmp_path / "out")
    assert res.status == TraceCheck.STATUS_INVALID and hits(res, "trace.not_a_trace")
    assert "not a trace directory" in hits(res, "trace.not_a_trace")[0].message
    (tmp_path / "cap" / "raw").mkdir(parents=True)
    res = check_trace(tmp_path / "cap")
    assert "capture finalize" in hits(res, "trace.not_a_trace")[0].message


def test_zero_request_trace_is_rejected(tmp_path):
    t = grpo_trace()
    for r in list(t.requests()):
        t.remove("request", r.request_id)
    t.workload = [r for r in t.workload if r.WhichOneof("record") not in ("group", "rollout_batch")]
    t.outcomes = []
    res = check(t, tmp_path)
    assert res.status == INVALID and hits(res, "trace.no_requests")
    assert "0 requests" in hits(res, "trace.no_requests")[0].message


def test_container_rules(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    (d / "workload.jsonl.partial").write_text("")
    assert hits(check_trace(d), "trace.partial_files")
    (d / "workload.jsonl.partial").unlink()
    # digest
    p = d / "outcomes.jsonl"
    p.write_bytes(p.read_bytes().replace(b"req-0", b"req-8"))
    r = check_trace(d)
    assert r.status == INCOMPLETE and hits(r, "artifact.digest")[0].file == "outcomes.jsonl"
    # count + missing + schema version + artifacts
    d2 = grpo_trace().write(tmp_path / "u")
    m = read_message_json(d2 / "manifest.json", TraceManifest)
    m.artifacts[1].record_count = 99
    write_message_json(d2 / "manifest.json", m)
    assert hits(check_trace(d2), "artifact.record_count")
    m.schema_version = "unirl_replay.v0"
    write_message_json(d2 / "manifest.json", m)
    r = check_trace(d2)
    assert r.status == INVALID and hits(r, "manifest.schema_version")
    m.schema_version = "unirl_replay.v1"
    del m.artifacts[1]
    write_message_json(d2 / "manifest.json", m)
    assert hits(check_trace(d2), "manifest.artifacts")
    (d2 / "workload.jsonl").unlink()
    m = read_message_json(d2 / "manifest.json", TraceManifest)
    m.artifacts.add().CopyFrom(read_message_json(d / "manifest.json", TraceManifest).artifacts[1])
    write_message_json(d2 / "manifest.json", m)
    assert hits(check_trace(d2), "artifact.missing")


def test_bad_record_in_stream(tmp_path):
    from unirl_replay.contract.trace_io import TraceWriter
    from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD
    for payload, rule, enc in ((b"{oops\n", "json.parse", "jsonl"), (b'{"request": 5}\n', "json.profile", "jsonl"),
                               (b"\n", "jsonl.empty_line", "jsonl"), (b"\x02\xff\xff", "binpb.decode", "binpb"),
                               (b"\xff" * 11, "binpb.frame", "binpb"), (b"\x05ab", "binpb.truncated", "binpb")):
        t = grpo_trace()
        d = tmp_path / f"{rule}"
        with TraceWriter(d, enc) as wr:
            for r in t.workload:
                wr.write_workload(r)
            wr._streams[ARTIFACT_KIND_WORKLOAD].write(payload)
            wr.finalize(t.manifest)
        res = check_trace(d)
        v = hits(res, rule)
        assert v and v[0].line == len(t.workload) + 1, (rule, list(res.violations))
        assert res.status == (INCOMPLETE if rule.endswith("truncated") else INVALID)


def test_cap_per_rule(tmp_path):
    t = grpo_trace(prompts=12)
    for r in t.requests():
        r.input_tokens += 100
    res = check_trace(t.write(tmp_path / "t"), max_per_rule=5)
    pc = [v for v in res.violations if v.rule == "prefix.count"]
    assert len(pc) == 6 and "7 more" in pc[-1].message


def test_cli_exit_codes_and_format(tmp_path):
    runner = CliRunner()
    good = grpo_trace().write(tmp_path / "good")
    assert runner.invoke(command, [str(good)]).exit_code == 0
    t = grpo_trace()
    t.request("req-1").input_tokens = 20
    bad = t.write(tmp_path / "bad")
    r = runner.invoke(command, [str(bad)])
    assert r.exit_code == 1
    assert f"workload.jsonl:{t.line_of('request', 'req-1')} req-1 prefix.count: " in r.output
    r = runner.invoke(command, [str(bad), "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["status"] == "STATUS_INVALID"
    (good / "manifest.json").unlink()
    assert runner.invoke(command, [str(good)]).exit_code == 3


def test_cli_via_main(tmp_path):
    from unirl_replay.cli.main import main
    d = grpo_trace().write(tmp_path / "t")
    assert main(["validate", str(d)]) == 0  # main returns the command's exit status
    bad = grpo_trace()
    bad.request("req-0").num_samples = 3
    assert main(["validate", str(bad.write(tmp_path / "bad"))]) == 1


@pytest.mark.parametrize("enc", ["jsonl", "binpb", "arrow"])
@pytest.mark.parametrize("shape", ["reversed", "fork", "gap_zero", "no_ready", "submit_at_ready"])
def test_batch_boundaries_that_are_valid(shape, enc, tmp_path):
    """after_batch naming a LATER record, two batches after one, a 0 gap (a real 0), a previous batch
    without a measured ready_ns, a first submit exactly at the ready event: no violation."""
    if enc == "arrow":
        pytest.importorskip("pyarrow")
    t = batches_trace(batches=3)
    if shape == "reversed":
        t.workload.reverse()
        t.outcomes.reverse()
    elif shape == "fork":
        _after(t, "b2", "b0", 5 * MS)
    elif shape == "gap_zero":
        _after(t, "b1", "b0", 0)
    elif shape == "no_ready":
        t.outcomes = [r for r in t.outcomes if r.WhichOneof("record") != "rollout_batch"]
        t.outcome("b1/req-0").submit_ns = 0
    else:
        ready = next(r.rollout_batch.ready_ns for r in t.outcomes if r.WhichOneof("record") == "rollout_batch")
        t.outcome("b1/req-0").submit_ns = ready
    res = check(t, tmp_path, enc)
    assert res.status == VALID and not res.violations, [(v.rule, v.record_id, v.message) for v in res.violations]


def test_batch_boundary_violations_name_file_line_and_batch(tmp_path):
    t = batches_trace(batches=3)
    _after(t, "b0", "b2")  # b0 -> b2 -> b1 -> b0
    _after(t, "b2", "b2x")
    t.add(w.RolloutBatch(rollout_batch_id="b3", readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         after_batch=w.BatchBoundary(driver_gap_ns=-3)))
    res = check(t, tmp_path)
    got = {(v.rule, v.file, v.line, v.record_id) for v in res.violations}
    line = {b: t.line_of("rollout_batch", b) for b in ("b0", "b1", "b2", "b3")}
    assert got == {("batch.boundary_unknown", "workload.jsonl", line["b2"], "b2"),
                   ("batch.boundary_empty", "workload.jsonl", line["b3"], "b3"),
                   ("units.negative", "workload.jsonl", line["b3"], "b3"),
                   # b0 (submitted from 0 ns) now waits for b2, ready last: its first request is named
                   ("outcome.batch_boundary", "outcomes.jsonl", 1, "b0/req-0")}, got
    _after(t, "b2", "b1")
    res = check(t, tmp_path / "cycle")
    cyc = [v for v in res.violations if v.rule == "batch.boundary_cycle"]
    assert [(v.line, v.record_id) for v in cyc] == [(line["b0"], "b0")]
    assert "b0 -> b2 -> b1 -> b0" in cyc[0].message


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_shared_start_orders_are_reported_in_file_order(enc, tmp_path):
    """slot_pool.start_order: each trajectory repeating an earlier one's start order in its pool, at its own line,
    naming the first; a trajectory of no pool (or another pool) never collides."""
    t = agentic_trace(trajectories=5, turns=1)
    for k, order in enumerate([1, 0, 1, 0, 1]):
        t.trajectory(f"traj-{k}").start_order = order
    t.trajectory("traj-4").slot_pool_id = "pool1"
    t.add(w.SlotPool(pool_id="pool1", engine_ids=["e0"], worker_id="w0", trajectory_slots=1))
    res = check(t, tmp_path, enc)
    got = [(v.record_id, v.line, v.message) for v in res.violations if v.rule == "slot_pool.start_order"]
    line = {r.trajectory.trajectory_id: i + 1 for i, r in enumerate(t.workload) if r.WhichOneof("record") == "trajectory"}
    assert [(r, ln) for r, ln, _ in got] == [("traj-2", line["traj-2"]), ("traj-3", line["traj-3"])], got
    assert "'traj-0'" in got[0][2] and "'traj-1'" in got[1][2] and "'pool0'" in got[0][2]


@pytest.mark.parametrize("pool_first", [True, False])
def test_trajectories_off_their_pools_engines_in_file_order(pool_first, tmp_path):
    """slot_pool.engines, the pool's record before or after its trajectories: each trajectory whose engine_id the
    pool does not list, at its line; an empty engine_id, a pool listing no engine, are no finding."""
    t = agentic_trace(trajectories=4, turns=1)
    t.manifest.engines.add().CopyFrom(t.manifest.engines[0])
    t.manifest.engines[1].engine_id = "e1"
    for k in (1, 3):
        t.trajectory(f"traj-{k}").engine_id = "e1"
        t.request(f"traj-{k}/t0").engine_id = "e1"
    t.trajectory("traj-2").engine_id = ""
    if not pool_first:
        t.workload.append(t.workload.pop(0))
    res = check(t, tmp_path)
    line = {r.trajectory.trajectory_id: i + 1 for i, r in enumerate(t.workload) if r.WhichOneof("record") == "trajectory"}
    got = [(v.record_id, v.line) for v in res.violations if v.rule == "slot_pool.engines"]
    assert got == [("traj-1", line["traj-1"]), ("traj-3", line["traj-3"])], res.violations
    pool = next(r.slot_pool for r in t.workload if r.WhichOneof("record") == "slot_pool")
    del pool.engine_ids[:]
    res = check(t, tmp_path / "none")
    assert not [v for v in res.violations if v.rule == "slot_pool.engines"], res.violations


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_batch_engines_name_each_engine_left_out(enc, tmp_path):
    """batch.engines: a batch listing engines is reported once for each engine of its requests it leaves out, at
    its own line, naming the first request on it; a batch listing none (not recorded) is no finding."""
    t = grpo_trace(prompts=4)
    for eid in ("e1", "e2"):
        t.manifest.engines.add().CopyFrom(t.manifest.engines[0])
        t.manifest.engines[-1].engine_id = eid
    for rid, eid in (("req-1", "e2"), ("req-2", "e1"), ("req-3", "e2")):
        t.request(rid).engine_id = eid
    res = check(t, tmp_path, enc)
    got = [(v.record_id, v.message) for v in res.violations if v.rule == "batch.engines"]
    assert [m.split("engine ")[1].split(",")[0] for _, m in got] == ["'e2'", "'e1'"], got
    assert {r for r, _ in got} == {"b0"} and "'req-1'" in got[0][1] and "'req-2'" in got[1][1]
    del t.batch("b0").engine_ids[:]
    res = check(t, tmp_path / "none", enc)
    assert not [v for v in res.violations if v.rule == "batch.engines"], res.violations


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_batch_engines_leave_undeclared_engine_to_reference_engine(enc, tmp_path):
    """A request on an engine the manifest does not declare is reference.engine at the request, once: its batch's
    engine_ids is not reported a second time for leaving out an engine that does not exist."""
    t = grpo_trace(prompts=4)
    t.request("req-1").engine_id = "e9"
    res = check(t, tmp_path, enc)
    rules = [v.rule for v in res.violations]
    assert "reference.engine" in rules and "batch.engines" not in rules, res.violations


@pytest.mark.parametrize("enc", ["jsonl", "binpb"])
def test_pool_engines_leave_undeclared_engine_to_reference_engine(enc, tmp_path):
    """A pooled trajectory on an engine the manifest does not declare is reference.engine, once: not also
    slot_pool.engines for an engine its pool cannot list."""
    t = agentic_trace()
    traj = next(r.trajectory for r in t.workload if r.WhichOneof("record") == "trajectory")
    traj.engine_id = "e9"
    res = check(t, tmp_path, enc)
    rules = [v.rule for v in res.violations]
    assert "reference.engine" in rules and "slot_pool.engines" not in rules, res.violations


def test_every_rule_has_a_test():
    tested = {c[0] for c in CASES} | {
        "trace.no_manifest", "trace.partial_files", "artifact.missing", "artifact.size", "artifact.digest",
        "artifact.record_count", "jsonl.truncated", "binpb.truncated", "manifest.schema_version", "manifest.artifacts",
        "json.parse", "json.profile", "jsonl.empty_line", "binpb.frame", "binpb.decode", "manifest.window",
        "manifest.engine", "json.duplicate_key", "json.nan", "json.huge_number", "json.depth", "jsonl.line_too_long",
        "json.file_too_large", "artifact.not_regular", "artifact.unreadable", "artifact.symlink",
        "compat.newer_revision", "binpb.unknown_fields", "trace.no_requests", "trace.not_a_trace"}  # tests/test_forward_compat.py
    tested |= {f"json.{form}" for form in OFF_PROFILE_FORMS}  # tests/test_json_off_profile.py
    # tests/test_columnar.py::test_hostile_workload_files_give_typed_errors (validate names each rule)
    tested |= {"arrow.corrupt", "arrow.schema", "arrow.oneof", "arrow.decode"}
    assert set(RULES) - tested == set()


# -- issue 13: hostile framing and JSON; every bad line reported


def _with_line(tmp_path, name, payload: bytes, enc="jsonl", at=None):
    from unirl_replay.contract.trace_io import TraceWriter
    from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_WORKLOAD
    t = grpo_trace()
    d = tmp_path / name
    with TraceWriter(d, enc) as wr:
        for r in t.workload:
            wr.write_workload(r)
        for p in (payload if isinstance(payload, list) else [payload]):
            wr._streams[ARTIFACT_KIND_WORKLOAD].write(p)
        for r in t.outcomes:
            wr.write_outcome(r)
        wr.finalize(t.manifest)
    return d, len(t.workload)


@pytest.mark.parametrize("payload,rule", [
    (b'{"request": {"request_id": "x", "request_id": "y"}}\n', "json.duplicate_key"),
    (b'{"request": {"request_id": "x", "num_samples": NaN}}\n', "json.nan"),
    (b'{"request": {"request_id": "x", "num_samples": 1e999}}\n', "json.nan"),
    (b'{"request": {"request_id": "x", "num_samples": ' + b"9" * 5000 + b"}}\n", "json.huge_number"),
    (b'{"request": {"request_id": "x", "input_tokens": "' + b"9" * 5000 + b'"}}\n', "json.profile"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "json.depth"),
    (b'{"request": ' * 5000 + b"{}" + b"}" * 5000 + b"\n", "json.depth"),
])
def test_hostile_json_lines_are_typed_violations(payload, rule, tmp_path):
    d, n = _with_line(tmp_path, "t", payload)
    res = check_trace(d)
    v = hits(res, rule)
    assert v and v[0].line == n + 1 and v[0].file == "workload.jsonl", list(res.violations)
    assert res.status == INVALID


def test_every_unparseable_line_is_reported(tmp_path):
    bad = [b"{oops\n", b'{"request": 5}\n', b"{also bad\n"]
    d, n = _with_line(tmp_path, "t", bad)
    res = check_trace(d)
    lines = sorted(v.line for v in res.violations if v.rule in ("json.parse", "json.profile"))
    assert lines == [n + 1, n + 2, n + 3], list(res.violations)
    assert res.record_counts["workload"] == n  # the good ones were all checked
    res = check_trace(_with_line(tmp_path, "many", [b"{x\n"] * 9)[0], max_per_rule=4)
    parse = [v for v in res.violations if v.rule == "json.parse"]
    assert len(parse) == 5 and "5 more" in parse[-1].message
    d, n = _with_line(tmp_path, "bin", [b"\x02\xff\xff", b"\x02\xff\xff"], enc="binpb")
    assert [v.line for v in check_trace(d).violations if v.rule == "binpb.decode"] == [n + 1, n + 2]


def test_manifest_duplicate_schema_version_is_rejected(tmp_path):
    d = grpo_trace().write(tmp_path / "t")
    text = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(text.replace('"schema_version": "unirl_replay.v1"',
                                                  '"schema_version": "unirl_replay.v2", "schema_version": "unirl_replay.v1"'))
    res = check_trace(d)
    v = hits(res, "json.duplicate_key")
    assert v and v[0].file == "manifest.json" and "schema_version" in v[0].message and res.status == INVALID


def test_oversize_line_and_file(tmp_path, monkeypatch):
    from unirl_replay.contract import trace_io
    d, n = _with_line(tmp_path, "t", b'{"request": {"request_id": "' + b"x" * 5000 + b'"}}\n')
    monkeypatch.setattr(trace_io, "MAX_LINE_BYTES", 4096)
    v = hits(check_trace(d), "jsonl.line_too_long")
    assert v and v[0].line == n + 1
    monkeypatch.setattr(trace_io, "MAX_JSON_FILE_BYTES", 100)
    v = hits(check_trace(d), "json.file_too_large")
    assert v and v[0].file == "manifest.json"


def test_non_regular_symlinked_and_unreadable_artifacts(tmp_path, monkeypatch):
    import os
    d = grpo_trace().write(tmp_path / "fifo")
    (d / "outcomes.jsonl").unlink()
    os.mkfifo(d / "outcomes.jsonl")
    assert hits(check_trace(d), "artifact.not_regular")  # never blocks on the FIFO
    d = grpo_trace().write(tmp_path / "link")
    (d / "workload.jsonl").rename(tmp_path / "elsewhere.jsonl")
    (d / "workload.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    v = hits(check_trace(d), "artifact.symlink")
    assert v and v[0].file == "workload.jsonl"
    d = grpo_trace().write(tmp_path / "perm")
    from unirl_replay.contract import trace_io
    real_open = os.open

    def denied(path, *a, **k):
        if str(path).endswith("outcomes.jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(trace_io.os, "open", denied)
    res = check_trace(d)
    v = hits(res, "artifact.unreadable")
    assert v and "Permission denied" in v[0].message and res.status == INVALID


def test_a_well_formed_probe_is_valid(tmp_path):
    t = grpo_trace()
    _probe(t)
    t.manifest.probes[0].points.add(**_batched_point())  # a batched prefill with its repeats' pass sizes too
    c = t.manifest.conditions
    c.steal_pct, c.host_busy_pct, c.loadavg_1m_start, c.loadavg_1m_end = 0.0, 100.0, 0.0, 3.5
    c.duration_ns, c.engine_uptime_ns, c.engine_process_cpu_ns["e0"] = 0, 10**9, 0
    t.manifest.probes[0].conditions.CopyFrom(c)
    res = check(t, tmp_path)
    assert not hits(res, "manifest.probe") and res.status == VALID, [(v.rule, v.message) for v in res.violations]


def test_rfc3339_utc_created_at_forms_are_valid(tmp_path):
    for i, text in enumerate(("", "2026-12-01T17:50:19Z", "2026-12-01T17:50:19.123456Z", "2026-12-01t17:50:19z",
                              "2026-12-01T17:50:19+00:00")):
        t = grpo_trace()
        t.manifest.created_at = text
        assert not hits(check(t, tmp_path / str(i)), "manifest.created_at"), text


def test_validate_json_writes_map_keys_sorted_whatever_the_runtime_order(tmp_path, monkeypatch):
    """`validate --json` is the same bytes on every run: the TraceCheck's map (record_counts) is
    written with its keys sorted (json_write), not in the protobuf runtime's map iteration order,
    which changes from process to process (`validate traces/grpo-a --json` printed "outcomes"
    first in some runs and "workload" first in others)."""
    from unirl_replay.cli import validate as cli_validate
    from unirl_replay.contract import json_write

    d = grpo_trace().write(tmp_path / "t")
    real = check_trace(d)
    many = TraceCheck()
    many.CopyFrom(real)
    for k in range(60, 0, -1):  # many keys, inserted in reverse: the runtime's order is not sorted
        many.record_counts[f"k{k:02d}"] = k
    monkeypatch.setattr("unirl_replay.contract.validate.check_trace", lambda *a, **kw: many)
    out = CliRunner().invoke(cli_validate.command, [str(d), "--json"])
    assert out.exit_code == 0, out.output
    keys = list(json.loads(out.output)["record_counts"])
    assert keys == sorted(keys)
    # the profile's bytes, with every key of the TraceCheck present (validate --json's one shape: an empty
    # violations list where the profile leaves it out)
    assert json.loads(out.output) == {**json.loads(json_write.to_json(many)), "violations": []}
    assert out.output == cli_validate.stable_json(many)


@pytest.mark.parametrize("content,expect", [
    (None, None),  # a ReferenceProbeArtifact of the entry: no warning
    ({"schema": "unirl-replay.reference-probe/1", "engine_id": "e0", "requests": [[1.0, 2.0, 3.0, 4]]}, None),  # legacy
    ({"schema": "unirl-replay.reference-probe/2", "engine_id": "e0", "when": "before", "requests": [[1.0, 2.0]]},
     "not a ReferenceProbeArtifact"),
    ({"schema": "unirl-replay.reference-probe/2", "engine_id": "e0", "when": "before", "extra": 1},
     "not a ReferenceProbeArtifact"),
    ({"schema": "something/9", "engine_id": "e0", "when": "before"}, "schema 'something/9'"),
    ({"schema": "unirl-replay.reference-probe/2", "engine_id": "e9", "when": "before"}, "the artifact is engine 'e9'"),
    ({"schema": "unirl-replay.reference-probe/2", "engine_id": "e0", "when": "after"}, "the artifact is engine 'e0' 'after'"),
    ("{not json", "not a ReferenceProbeArtifact"),
    # s16 attack: a /1 artifact was read with plain json.loads (last key wins, NaN and 1e400 taken): accepted
    ('{"schema": "unirl-replay.reference-probe/2", "schema": "unirl-replay.reference-probe/1"}', "appears twice"),
    ('{"schema": "unirl-replay.reference-probe/1", "x": NaN}', "not a ReferenceProbeArtifact"),
    ('{"schema": "unirl-replay.reference-probe/1", "x": 1e400}', "overflows to infinity"),
])
def test_a_probe_artifact_must_be_the_entry_s_reference_probe_artifact(tmp_path, content, expect):
    """The artifact a probe entry names is checked as the v1 message it is (a warning: no tool predicts from it)."""
    import json

    from unirl_replay.capture.window_conditions import write_artifacts
    from unirl_replay.v1 import manifest_pb2

    t = grpo_trace()
    _probe(t)
    d = t.write(tmp_path / "t", "jsonl")
    art = d / "probes" / "e0-before.json"
    if content is None:
        msg = manifest_pb2.ReferenceProbeArtifact(schema="unirl-replay.reference-probe/2", role="calibration",
                                                  engine_id="e0", when="before", probe_id="p")
        msg.requests.add(point="decode:b32:ctx128", repeat=0).requests.add(scheduled_ts=1.0, first_token_ts=1.5,
                                                                          last_token_ts=2.0, output_tokens=32)
        write_artifacts(d, {"probes/e0-before.json": msg})
    else:
        art.parent.mkdir(parents=True, exist_ok=True)
        art.write_text(content if isinstance(content, str) else json.dumps(content))
    res = check_trace(d)
    found = hits(res, "manifest.probe_artifact")
    if expect is None:
        assert not found and res.status == VALID, [v.message for v in res.violations]
    else:
        assert len(found) == 1 and expect in found[0].message, [v.message for v in found]
        assert found[0].severity == Violation.SEVERITY_WARNING and res.status == VALID


@pytest.mark.parametrize("field,value,expect", [
    ("probe_wall_s", "NaN", "probe_wall_s nan is not a finite wall time"),
    ("probe_wall_s", -1.0, "probe_wall_s -1.0 is not a finite wall time"),
    ("window_offset_s", "Infinity", "window_offset_s inf is not a finite offset"),
    ("points", [{"phase": "decode", "batch_size": 1, "context_tokens": 128, "repeats": 1, "median_ms": "NaN"}],
     "its point 0 (decode): median_ms nan is not a finite time"),
    ("points", [{"phase": "decode", "batch_size": 1, "context_tokens": 128, "repeats": 2, "median_ms": 5.0,
                 "step_ms": [5.0, "Infinity"]}], "its point 0 (decode): step_ms[1] inf"),
    ("contended_points", [{"phase": "prefill", "prefill_tokens": 8, "passes": [{"usable": True, "ms": -1.0}]}],
     "its point contended 0 (prefill): passes[0].ms -1.0"),
    ("probe_wall_s", 2.5, None),
    # a point without a usable repeat (no median): written so by the capture, not a finding
    ("points", [{"phase": "decode", "batch_size": 1, "context_tokens": 128, "repeats": 0, "unusable_repeats": 3,
                 "passes": [{}, {}, {}]}], None),
])
def test_a_probe_artifact_s_own_numbers_are_checked_as_the_entry_s(tmp_path, field, value, expect):
    """s18 attack: a probe artifact holding "NaN" / "Infinity" (proto3 JSON reads them into a double) in its points or
    times passed validate: its points meet the entry's point rules, its times are finite (a warning, as the rest)."""
    import json

    t = grpo_trace()
    _probe(t)
    d = t.write(tmp_path / "t", "jsonl")
    art = d / "probes" / "e0-before.json"
    art.parent.mkdir(parents=True, exist_ok=True)
    art.write_text(json.dumps({"schema": "unirl-replay.reference-probe/2", "role": "calibration", "engine_id": "e0",
                               "when": "before", "probe_id": "p", field: value}))
    res = check_trace(d)
    found = hits(res, "manifest.probe_artifact")
    if expect is None:
        assert not found and res.status == VALID, [v.message for v in res.violations]
    else:
        assert len(found) == 1 and expect in found[0].message, [v.message for v in found]
        assert found[0].severity == Violation.SEVERITY_WARNING and res.status == VALID


def test_a_probe_artifact_reached_through_a_linked_directory_is_warned_of(tmp_path):
    """s16 attack: probes/ a symbolic link to a directory outside the trace: validate read the artifact there as the
    trace's own (no warning) while a linked file was warned of, and recode refused the trace (recode.probe_artifact)."""
    import os

    from unirl_replay.capture.window_conditions import write_artifacts
    from unirl_replay.v1 import manifest_pb2

    t = grpo_trace()
    _probe(t)
    d = t.write(tmp_path / "t", "jsonl")
    elsewhere = tmp_path / "elsewhere"
    write_artifacts(elsewhere, {"probes/e0-before.json": manifest_pb2.ReferenceProbeArtifact(
        schema="unirl-replay.reference-probe/2", role="calibration", engine_id="e0", when="before", probe_id="p")})
    os.symlink(elsewhere / "probes", d / "probes")
    res = check_trace(d)
    found = hits(res, "manifest.probe_artifact")
    assert len(found) == 1 and "reached through the symbolic link 'probes'" in found[0].message, found
    assert found[0].severity == Violation.SEVERITY_WARNING and res.status == VALID


def test_warmup_in_a_warm_declared_trace_is_valid(tmp_path):
    """cache_warmup.cold_manifest's other side: the same warm-up under CACHE_STATE_KIND_WARM_DECLARED."""
    t = grpo_trace()
    _warmup(t)
    t.manifest.cache_state = c.CACHE_STATE_KIND_WARM_DECLARED
    res = check(t, tmp_path, "jsonl")
    assert res.status == VALID, [(v.rule, v.message) for v in res.violations]


def test_hashes_with_block_size_0_are_an_error_not_missing_hashes(tmp_path):
    """D6: hashes present at block size 0: prefix.block_size says so (convert / replay refuse it as
    prefix.block_size_mismatch); no false prefix.missing ("no prefix block hashes")."""
    t = grpo_trace()
    _hashes_without_block_size(t)
    for enc in ("jsonl", "binpb"):
        res = check(t, tmp_path, enc)
        assert res.status == INVALID
        assert [v.rule for v in res.violations] == ["prefix.block_size"], [(v.rule, v.message) for v in res.violations]
        assert "block_size_tokens 0" in res.violations[0].message and "'e0' block size 16" in res.violations[0].message


@pytest.mark.parametrize("warmup,words", [
    ({"input_tokens": 128}, "no prefix block hashes"),
    ({"input_tokens": 0}, "input_tokens is 0"),
    ({"input_tokens": 0, "prefix": c.PrefixBlocks(block_size_tokens=16)}, "input_tokens is 0"),
    ({"input_tokens": 16, "prefix": c.PrefixBlocks(block_size_tokens=0)}, "no prefix block hashes"),
])
def test_warmup_without_a_usable_prefix_is_an_error(tmp_path, warmup, words):
    """D5: a warm-up declares a resident prefix; with no hashes or no tokens it declares nothing the replay can
    load (convert / replay refuse it): an error, not the requests' prefix.missing warning."""
    t = grpo_trace()
    _warm_declared(t, **warmup)
    res = check(t, tmp_path, "jsonl")
    assert res.status == INVALID
    assert [(v.rule, v.record_id) for v in res.violations] == [("cache_warmup.prefix", "wu0")], \
        [(v.rule, v.message) for v in res.violations]
    assert words in res.violations[0].message and res.violations[0].severity == Violation.SEVERITY_ERROR
