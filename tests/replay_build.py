"""In-memory builders of workload messages for the convert / replay / derive tests.

Times are given in ms for readability and stored in ns, as the contract wants.
"""

from __future__ import annotations

import hashlib

from unirl_replay.replay.workload import WorkloadIndex
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m
from unirl_replay.v1 import workload_pb2 as w

MS = 1_000_000
P, D = 100.0, 10.0  # fixed timing model used by the analytic tests
FIXED = f"fixed:{P:g},{D:g}"


def h64(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


def chained(n_tokens: int, bs: int, key: str) -> list[int]:
    return [h64(key, i) for i in range(-(-n_tokens // bs))]


def engine(eid="e0", bs=4, blocks=1000, seqs=16, mnbt=1024, pc=True, chunked=True, max_len=4096):
    return m.EngineConfig(engine_id=eid, block_size_tokens=bs, num_kv_blocks=blocks, max_num_seqs=seqs,
                          max_num_batched_tokens=mnbt, max_model_len=max_len, enable_prefix_caching=pc,
                          enable_chunked_prefill=chunked)


def manifest(*engines, cache=c.CACHE_STATE_KIND_COLD, policy=None, trace_id="t-test"):
    mf = m.TraceManifest(schema_version="unirl_replay.v1", trace_id=trace_id, cache_state=cache,
                         role=c.WORKLOAD_ROLE_UNLABELLED)
    mf.privacy.content = c.CONTENT_POLICY_EXCLUDED  # a complete manifest: commands gate traces (validate)
    mf.window.duration_ns = 3600 * 10**9
    mf.window.clock_domain = c.CLOCK_DOMAIN_CAPTURE_MONOTONIC
    mf.engines.extend(engines or [engine()])
    if policy is not None:
        mf.policy.policy_version = policy
    return mf


def dep(pred, delay_ms=None, absence=None, trigger=c.DEPENDENCY_TRIGGER_COMPLETION,
        relation=c.DEPENDENCY_RELATION_SEQUENCE):
    d = w.Dependency(predecessor_request_id=pred, trigger=trigger, relation=relation)
    if delay_ms is not None:
        d.external_delay_ns = int(round(delay_ms * MS))
    if absence is not None:
        d.delay_absence = absence
    return d


def req(rid, inp=8, out=(2,), *, at_ms=None, deps=(), traj="", turn=None, group="", batch="",
        eng="e0", bs=4, hashes=None, prefix_key=None, policy=None):
    r = w.Request(request_id=rid, num_samples=len(out), trajectory_id=traj, group_id=group,
                  rollout_batch_id=batch, engine_id=eng, input_tokens=inp, output_tokens=list(out))
    r.sample_ids.extend(f"{rid}/s{i}" for i in range(len(out)))
    r.finish_reasons.extend([c.FINISH_REASON_STOP] * len(out))
    if turn is not None:
        r.turn_index = turn
    if policy is not None:
        r.policy_version = policy
    r.prefix.block_size_tokens = bs
    r.prefix.block_hashes.extend(hashes if hashes is not None else chained(inp, bs, prefix_key or rid))
    if deps:
        r.arrival.after_dependencies.SetInParent()
        r.dependencies.extend(deps)
    else:
        r.arrival.observed_offset_ns = int(round((at_ms or 0.0) * MS))
    return r


def traj(tid, rids, *, pool="", order=None, eng="e0", group="", batch=""):
    t = w.Trajectory(trajectory_id=tid, request_ids=list(rids), slot_pool_id=pool, engine_id=eng,
                     group_id=group, rollout_batch_id=batch)
    if order is not None:
        t.start_order = order
    return t


def pool(pid, slots, engines=("e0",)):
    return w.SlotPool(pool_id=pid, trajectory_slots=slots, engine_ids=list(engines))


def client(eid, limit):
    return w.EngineClient(engine_id=eid, inflight_request_limit=limit)


def group(gid, members, expected, unit=w.GROUP_UNIT_SAMPLES, batch=""):
    return w.Group(group_id=gid, member_ids=list(members), expected_size=expected, unit=unit,
                   rollout_batch_id=batch)


def batch(bid, groups, rule=w.BATCH_READINESS_RULE_ALL_GROUPS, n=0, after=None, gap_ms=0.0):
    """A RolloutBatch; ``after``: the batch it waited for (``after_batch``), ``gap_ms`` the driver gap."""
    b = w.RolloutBatch(rollout_batch_id=bid, group_ids=list(groups), readiness_rule=rule, required_groups=n)
    if after is not None:
        b.after_batch.previous_rollout_batch_id = after
        b.after_batch.driver_gap_ns = int(round(gap_ms * MS))
    return b


def warmup(wid, inp, hashes, eng="e0", bs=4):
    x = w.CacheWarmup(warmup_id=wid, engine_id=eng, input_tokens=inp)
    x.prefix.block_size_tokens = bs
    x.prefix.block_hashes.extend(hashes)
    return x


_FIELD = {w.Request: "request", w.Trajectory: "trajectory", w.Group: "group", w.RolloutBatch: "rollout_batch",
          w.SlotPool: "slot_pool", w.EngineClient: "engine_client", w.CacheWarmup: "cache_warmup"}


def record(msg) -> w.WorkloadRecord:
    rec = w.WorkloadRecord()
    getattr(rec, _FIELD[type(msg)]).CopyFrom(msg)
    return rec


def index(*msgs) -> WorkloadIndex:
    return WorkloadIndex.from_records(record(x) for x in msgs)


def ms(ns: int) -> float:
    return ns / MS
