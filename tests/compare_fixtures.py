"""Hand-built trace + replay result shared by the comparison, plots and Perfetto tests.

All times are written in ms and converted to ns (``ms(x)``). One engine ``e0``, one rollout batch
``B1`` (ALL_GROUPS) with three groups:

- ``G1``: open-loop requests r1, r2 (n = 1 each);
- ``G2``: trajectory ``T1`` = r3 then r4 (r4 after a 20 ms measured tool wait);
- ``G3``: request r5, whose measured outcome is unavailable ("metrics disabled").

Measured (window offsets, ms)                 Predicted (simulated clock, 0 = first arrival, ms)
    req  submit sched first  compl                  arrival sched first compl
    r1   100    102   110    150                    0       0     12    55
    r2   100    105   120    200                    0       3     18    90
    r3   110    110   130    160                    10      12    35    70
    r4   180    185   (none) 240                    90      90    100   150
    r5   105    -     -      -   (unavailable)      5       5     20    80
    T1 slot 108 -> 245                              T1 10 -> 150
    G1 200, G2 240, G3 170; B1 ready 240            G1 90, G2 150, G3 80; B1 ready 150
"""

from __future__ import annotations

from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import workload_pb2 as wpb

MS = 1_000_000


def ms(x: float) -> int:
    return int(round(x * MS))


def manifest(role=cpb.WORKLOAD_ROLE_HOLDOUT, name="grpo-toy", trace_id="toy-1", overhead=0.031) -> mpb.TraceManifest:
    m = mpb.TraceManifest(schema_version="unirl_replay.v1", trace_id=trace_id, role=role, workload_name=name)
    m.window.clock_domain = cpb.CLOCK_DOMAIN_CAPTURE_MONOTONIC
    m.window.duration_ns = ms(300)
    m.privacy.content = cpb.CONTENT_POLICY_EXCLUDED
    m.cache_state = cpb.CACHE_STATE_KIND_COLD
    m.engines.add(engine_id="e0", block_size_tokens=16, num_kv_blocks=1024, max_num_seqs=8,
                  max_num_batched_tokens=2048, max_model_len=4096, enable_prefix_caching=True,
                  enable_chunked_prefill=True)
    if overhead is not None:
        m.capture_overhead.overhead_ratio = overhead
        m.capture_overhead.pairs = 3
        m.capture_overhead.method = "paired runs, median wall time"
    return m


def _req(rid, group, traj="", turn=None, engine="e0", batch="B1", arrival_ms=None, n=1):
    r = wpb.Request(request_id=rid, group_id=group, rollout_batch_id=batch, engine_id=engine,
                    trajectory_id=traj, num_samples=n, input_tokens=100,
                    sample_ids=[f"{rid}-s{i}" for i in range(n)], output_tokens=[10] * n,
                    finish_reasons=[cpb.FINISH_REASON_STOP] * n)
    r.prefix.block_size_tokens = 16  # ceil(100 / 16) = 7 chained hashes, unique per request
    base = 1000 * (sum(map(ord, rid)) + 1)
    r.prefix.block_hashes.extend(base + i for i in range(7))
    if turn is not None:
        r.turn_index = turn
    if arrival_ms is None:
        r.arrival.after_dependencies.SetInParent()
    else:
        r.arrival.observed_offset_ns = ms(arrival_ms)
    return wpb.WorkloadRecord(request=r)


def workload() -> list[wpb.WorkloadRecord]:
    recs = [
        _req("r1", "G1", arrival_ms=100),
        _req("r2", "G1", arrival_ms=100),
        _req("r3", "G2", traj="T1", turn=0, arrival_ms=110),
        _req("r4", "G2", traj="T1", turn=1),
        _req("r5", "G3", arrival_ms=105),
    ]
    dep = recs[3].request.dependencies.add(predecessor_request_id="r3",
                                           trigger=cpb.DEPENDENCY_TRIGGER_COMPLETION,
                                           relation=cpb.DEPENDENCY_RELATION_SEQUENCE)
    dep.external_delay_ns = ms(20)
    recs.append(wpb.WorkloadRecord(trajectory=wpb.Trajectory(
        trajectory_id="T1", group_id="G2", rollout_batch_id="B1", engine_id="e0", request_ids=["r3", "r4"])))
    recs.append(wpb.WorkloadRecord(group=wpb.Group(group_id="G1", rollout_batch_id="B1", unit=wpb.GROUP_UNIT_SAMPLES,
                                                   expected_size=2, member_ids=["r1", "r2"])))
    recs.append(wpb.WorkloadRecord(group=wpb.Group(group_id="G2", rollout_batch_id="B1",
                                                   unit=wpb.GROUP_UNIT_TRAJECTORIES, expected_size=1,
                                                   member_ids=["T1"])))
    recs.append(wpb.WorkloadRecord(group=wpb.Group(group_id="G3", rollout_batch_id="B1", unit=wpb.GROUP_UNIT_SAMPLES,
                                                   expected_size=1, member_ids=["r5"])))
    recs.append(wpb.WorkloadRecord(rollout_batch=wpb.RolloutBatch(
        rollout_batch_id="B1", group_ids=["G1", "G2", "G3"],
        readiness_rule=wpb.BATCH_READINESS_RULE_ALL_GROUPS, engine_ids=["e0"])))
    return recs


def _rout(rid, submit=None, queued=None, sched=None, first=None, compl=None, reason=""):
    o = opb.RequestOutcome(request_id=rid, unavailable_reason=reason)
    for f, v in (("submit_ns", submit), ("queued_ns", queued), ("scheduled_ns", sched),
                 ("first_token_ns", first), ("completion_ns", compl)):
        if v is not None:
            setattr(o, f, ms(v))
    return opb.OutcomeRecord(request=o)


def outcomes(scale: float = 1.0) -> list[opb.OutcomeRecord]:
    """Measured outcomes; ``scale`` stretches every duration from the window start (for repeats)."""
    s = scale
    recs = [
        _rout("r1", submit=100 * s, queued=101 * s, sched=102 * s, first=110 * s, compl=150 * s),
        _rout("r2", submit=100 * s, sched=105 * s, first=120 * s, compl=200 * s),
        _rout("r3", submit=110 * s, sched=110 * s, first=130 * s, compl=160 * s),
        _rout("r4", submit=180 * s, sched=185 * s, compl=240 * s, reason="first token not reported"),
        _rout("r5", submit=105 * s, reason="metrics disabled"),
    ]
    t = opb.TrajectoryOutcome(trajectory_id="T1", slot_acquired_ns=ms(108 * s), slot_released_ns=ms(245 * s),
                              tool_durations_ns=[ms(20 * s)])
    recs.append(opb.OutcomeRecord(trajectory=t))
    for gid, t_ms in (("G1", 200), ("G2", 240), ("G3", 170)):
        recs.append(opb.OutcomeRecord(group=opb.GroupOutcome(group_id=gid, completed_ns=ms(t_ms * s))))
    recs.append(opb.OutcomeRecord(rollout_batch=opb.BatchOutcome(rollout_batch_id="B1", ready_ns=ms(240 * s))))
    return recs


def replay(kind=rpb.TIMING_MODEL_KIND_POLYNOMIAL, calibration=rpb.CALIBRATION_STATUS_UNCALIBRATED,
           trace_id="toy-1") -> rpb.ReplayResult:
    r = rpb.ReplayResult(schema_version="unirl_replay.v1", trace_id=trace_id,
                         granularity=rpb.RESULT_GRANULARITY_PER_REQUEST)
    r.simulator.name, r.simulator.version, r.simulator.trace_format = "ai-dynamo", "1.6.1", "agentic_mooncake"
    r.timing_model.kind, r.timing_model.calibration = kind, calibration
    if kind == rpb.TIMING_MODEL_KIND_FIXED:
        r.timing_model.prefill_ms, r.timing_model.decode_ms = 10.0, 1.0
    if kind == rpb.TIMING_MODEL_KIND_PROFILE:
        r.timing_model.profile_path = "/profiles/cpu-qwen.npz"
    for rid, a, s, f, c in (("r1", 0, 0, 12, 55), ("r2", 0, 3, 18, 90), ("r3", 10, 12, 35, 70),
                            ("r4", 90, 90, 100, 150), ("r5", 5, 5, 20, 80)):
        r.requests.add(request_id=rid, engine_id="e0", arrival_ns=ms(a), scheduled_ns=ms(s),
                       first_token_ns=ms(f), completion_ns=ms(c))
    r.trajectories.add(trajectory_id="T1", start_ns=ms(10), end_ns=ms(150))
    for gid, t in (("G1", 90), ("G2", 150), ("G3", 80)):
        r.groups.add(group_id=gid, completed_ns=ms(t))
    r.rollout_batches.add(rollout_batch_id="B1", ready_ns=ms(150))
    r.makespan_ns = ms(150)
    return r
