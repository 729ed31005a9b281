"""Semantic validation of a trace directory beyond the schema: ``check_trace(dir) -> TraceCheck``.

Every violation names the file, the 1-based line (JSONL) or frame (binpb) -- 0 when it is about
the whole file --, the record id, the rule id (:data:`RULES`) and a message. Warnings
(``Violation.SEVERITY_WARNING``) never make a trace invalid.

Streaming and memory: the workload is read two times (three when a dependency does not point to
an earlier turn of its own trajectory, to look for cycles), the outcomes once. What stays in memory
is one small int per request id (trajectory ordinal, turn index, fan-out) and per-id entries for
trajectories, groups and batches: a 1M-request trace checks in a few hundred MB at most.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from unirl_replay.contract.errors import IncompleteTraceError, TraceFormatError
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import MANIFEST_FILE, Trace, open_trace, verify_artifact
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import workload_pb2 as w
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_OUTCOMES, ARTIFACT_KIND_WORKLOAD, TraceManifest
from unirl_replay.v1.report_pb2 import TraceCheck, Violation

ERROR = Violation.SEVERITY_ERROR
WARNING = Violation.SEVERITY_WARNING

#: Times farther than this factor times the window duration are flagged as a likely unit error.
SUSPECT_SCALE = 100
#: With at least 2 observed arrivals all inside window / SUSPECT_SMALL, the offsets look like s or ms.
SUSPECT_SMALL = 100_000

#: rule id -> what it checks. Every rule has a test in tests/test_validate.py.
RULES: dict[str, str] = {
    # container (reported by trace_io; status INCOMPLETE for the first group)
    "trace.no_manifest": "manifest.json missing: never finalized (INCOMPLETE)",
    "trace.partial_files": "*.partial leftovers of an unfinished writer (INCOMPLETE)",
    "artifact.missing": "an artifact listed in the manifest is missing (INCOMPLETE)",
    "artifact.size": "artifact size differs from the manifest (INCOMPLETE)",
    "artifact.digest": "artifact sha256 differs from the manifest (INCOMPLETE)",
    "artifact.record_count": "record count differs from the manifest (INCOMPLETE)",
    "jsonl.truncated": "last JSONL line has no newline (INCOMPLETE)",
    "binpb.truncated": "binpb stream ends inside a frame (INCOMPLETE)",
    "manifest.schema_version": "schema_version is not unirl_replay.v1",
    "manifest.artifacts": "manifest must list exactly one workload and one outcomes artifact, same encoding",
    "json.parse": "a line / file is not JSON",
    "json.profile": "JSON that is not a valid message (unknown key, wrong type, unknown enum name)",
    "jsonl.empty_line": "empty line in a JSONL stream",
    "binpb.frame": "corrupt length prefix",
    "binpb.decode": "frame is not a valid message",
    # manifest
    "manifest.window": "capture window missing or duration_ns <= 0",
    "manifest.engine": "engine without engine_id or with block_size_tokens 0",
    "trace.no_requests": "a trace with 0 requests (nothing to replay: e.g. a capture whose records never joined)",
    # records
    "record.empty": "a WorkloadRecord / OutcomeRecord with no member of its oneof set",
    "id.empty": "a record without its id",
    "id.duplicate": "an id used twice by records of one kind (per artifact)",
    "enum.unspecified": "an enum left at its _UNSPECIFIED value",
    "reference.engine": "engine_id not among the manifest's engines",
    "reference.trajectory": "trajectory_id names no Trajectory record",
    "reference.group": "group_id names no Group record",
    "reference.batch": "rollout_batch_id names no RolloutBatch record",
    "reference.slot_pool": "slot_pool_id names no SlotPool record",
    "reference.request": "a Trajectory / Group lists a request id that no Request has",
    "fanout.count": "len(sample_ids) == num_samples == len(output_tokens) == len(finish_reasons), num_samples >= 1",
    "prefix.count": "len(block_hashes) == ceil(input_tokens / block_size_tokens)",
    "prefix.block_size": "prefix block size equals the engine's block_size_tokens",
    "prefix.missing": "request with input tokens but no prefix hashes (warning)",
    "arrival.kind_missing": "request without an arrival",
    "arrival.mixed_missing": "request without an arrival among requests with observed arrivals (never defaulted)",
    "arrival.dependencies": "arrival.after_dependencies set exactly when dependencies is non-empty",
    "dependency.unresolved": "predecessor_request_id names no request",
    "dependency.cross_trajectory": "dependency leaves the request's trajectory",
    "dependency.no_trajectory": "request with dependencies but no trajectory",
    "dependency.duplicate": "the same predecessor listed twice",
    "dependency.delay_absence": "external_delay_ns present XOR delay_absence set",
    "dependency.cycle": "dependencies form a cycle",
    "turn.index": "turn_index present exactly when trajectory_id is set",
    "turn.order": "a trajectory's request_ids are its requests with turn_index 0, 1, 2, ... in order",
    "turn.dependency_order": "a dependency points to the same or a later turn",
    "trajectory.requests": "requests naming a trajectory that its request_ids do not list",
    "group.members": "a group member is not a request / trajectory (by unit) or belongs to another group",
    "group.size": "group member count (samples or trajectories) differs from expected_size",
    "group.singleton": "group of size 1 while expected_size > 1: group id set per trajectory? (warning)",
    "batch.membership": "every group in exactly one batch, and in the batch it names",
    "batch.required_groups": "FIRST_N_GROUPS: 1 <= required_groups <= len(group_ids); ALL_GROUPS: 0 or len",
    "slot_pool.slots": "a slot pool with 0 trajectory slots",
    "units.negative": "a time or delay below 0",
    "units.suspect_scale": f"a time beyond {SUSPECT_SCALE}x the window duration: wrong unit?",
    "units.outside_window": "an observed arrival after the window end (warning)",
    "units.suspect_small": f"all observed arrivals in the first 1/{SUSPECT_SMALL} of the window: seconds / ms? (warning)",
    "time.order": "submit <= queued <= scheduled <= first_token <= completion (and slot acquired <= released)",
    "outcome.unmatched": "an outcome record whose id matches no workload record of its kind",
}


class _Sink:
    """Collects violations, at most ``cap`` per rule (then one summary per rule)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.violations: list[Violation] = []
        self.counts: Counter[str] = Counter()
        self.errors = 0

    def __call__(self, rule: str, file: str, line: int, record_id: str, message: str, severity: int = ERROR) -> None:
        assert rule in RULES, rule
        self.counts[rule] += 1
        if severity == ERROR:
            self.errors += 1
        if self.counts[rule] <= self.cap:
            self.violations.append(Violation(rule=rule, file=file, line=line, record_id=record_id, message=message,
                                             severity=severity))

    def finish(self) -> list[Violation]:
        out = list(self.violations)
        for rule, n in self.counts.items():
            if n > self.cap:
                sev = next(v.severity for v in self.violations if v.rule == rule)
                out.append(Violation(rule=rule, message=f"{n - self.cap} more violations of this rule not listed",
                                     severity=sev))
        return out


def _from_error(e: TraceFormatError) -> Violation:
    return Violation(rule=e.rule or "trace.format", file=Path(e.file).name if e.file else "", line=e.line,
                     record_id=e.record_id, message=str(e.args[0]).split(": ", 1)[-1] if e.args else "",
                     severity=ERROR)


def _pack(traj_ord: int, turn: int | None, samples: int) -> int:
    return (traj_ord << 53) | ((0 if turn is None else turn + 1) << 20) | min(samples, (1 << 20) - 1)


def _unpack(v: int) -> tuple[int, int | None, int]:
    t = (v >> 20) & ((1 << 33) - 1)
    return v >> 53, (t - 1 if t else None), v & ((1 << 20) - 1)


_REC_ID = {"request": "request_id", "trajectory": "trajectory_id", "group": "group_id",
           "rollout_batch": "rollout_batch_id", "slot_pool": "pool_id", "engine_client": "engine_id",
           "cache_warmup": "warmup_id"}


class _Checker:
    def __init__(self, trace: Trace, sink: _Sink):
        self.t = trace
        self.v = sink
        m: TraceManifest = trace.manifest
        self.m = m
        self.wfile = trace.artifact(ARTIFACT_KIND_WORKLOAD).path
        self.ofile = trace.artifact(ARTIFACT_KIND_OUTCOMES).path
        self.window_ns = m.window.duration_ns if m.HasField("window") else 0
        self.engine_block = {e.engine_id: e.block_size_tokens for e in m.engines}
        # pass-1 state: ids per kind, compact request info
        self.req: dict[str, int] = {}          # request_id -> packed (trajectory ordinal, turn, samples)
        self.traj_ord: dict[str, int] = {"": 0}  # trajectory id (as named by requests or records) -> ordinal
        self.traj_names: list[str] = [""]
        self.traj_req_count: Counter[int] = Counter()
        self.traj_group: dict[str, str] = {}   # Trajectory record id -> its group_id
        self.group_batch: dict[str, str] = {}  # Group record id -> its rollout_batch_id
        self.group_line: dict[str, int] = {}
        self.batches: set[str] = set()
        self.pools: set[str] = set()
        self.ids: dict[str, set[str]] = {k: set() for k in _REC_ID}
        self.observed = self.missing_arrivals = 0
        self.max_offset = 0
        self.suspicious_traj: set[int] = set()
        self.counts = Counter()

    # -- helpers
    def _ord(self, tid: str) -> int:
        o = self.traj_ord.get(tid)
        if o is None:
            o = self.traj_ord[tid] = len(self.traj_names)
            self.traj_names.append(tid)
        return o

    def _time(self, file: str, line: int, rid: str, name: str, value: int) -> None:
        if value < 0:
            self.v("units.negative", file, line, rid, f"{name} = {value} ns is negative")
        elif self.window_ns > 0 and value > SUSPECT_SCALE * self.window_ns:
            self.v("units.suspect_scale", file, line, rid,
                   f"{name} = {value} ns is {value / self.window_ns:.0f}x the window ({self.window_ns} ns): wrong unit?")

    def _engine(self, file: str, line: int, rid: str, engine_id: str) -> None:
        if engine_id not in self.engine_block:
            self.v("reference.engine", file, line, rid,
                   f"engine_id {engine_id!r} is not among the manifest's engines {sorted(self.engine_block)}")

    def _prefix(self, line: int, rid: str, input_tokens: int, has_prefix: bool, prefix: c.PrefixBlocks,
                engine_id: str) -> None:
        f = self.wfile
        if not has_prefix or not prefix.block_size_tokens:
            if input_tokens > 0:
                self.v("prefix.missing", f, line, rid, f"{input_tokens} input tokens but no prefix block hashes",
                       WARNING)
            return
        b = prefix.block_size_tokens
        need = math.ceil(input_tokens / b)
        if len(prefix.block_hashes) != need:
            self.v("prefix.count", f, line, rid, f"{len(prefix.block_hashes)} block hashes for {input_tokens} tokens "
                   f"at block size {b}; ceil({input_tokens}/{b}) = {need}")
        eb = self.engine_block.get(engine_id)
        if eb is not None and eb != b:
            self.v("prefix.block_size", f, line, rid, f"prefix block size {b} != engine {engine_id!r} block size {eb}")

    def _unique(self, kind: str, file: str, line: int, rid: str, seen: set[str]) -> bool:
        if not rid:
            self.v("id.empty", file, line, "", f"{kind} record without {_REC_ID.get(kind, 'id')}")
            return False
        if rid in seen:
            self.v("id.duplicate", file, line, rid, f"{kind} id {rid!r} used by an earlier {kind} record")
            return False
        seen.add(rid)
        return True

    def _enum(self, file: str, line: int, rid: str, name: str, value: int) -> None:
        if value == 0:
            self.v("enum.unspecified", file, line, rid, f"{name} is unspecified")

    # -- manifest
    def manifest(self) -> None:
        m, f = self.m, MANIFEST_FILE
        if not m.HasField("window") or m.window.duration_ns <= 0:
            self.v("manifest.window", f, 0, m.trace_id, "capture window missing or duration_ns <= 0")
        self._enum(f, 0, m.trace_id, "window.clock_domain", m.window.clock_domain)
        self._enum(f, 0, m.trace_id, "role", m.role)
        self._enum(f, 0, m.trace_id, "privacy.content", m.privacy.content)
        self._enum(f, 0, m.trace_id, "cache_state", m.cache_state)
        seen: set[str] = set()
        for e in m.engines:
            if not e.engine_id or not e.block_size_tokens:
                self.v("manifest.engine", f, 0, e.engine_id, "engine needs engine_id and block_size_tokens > 0")
            elif e.engine_id in seen:
                self.v("id.duplicate", f, 0, e.engine_id, f"engine id {e.engine_id!r} listed twice")
            seen.add(e.engine_id)

    # -- workload pass 1: ids, per-record rules
    def pass1(self) -> None:
        f = self.wfile
        for line, rec in self.t.iter_workload():
            self.counts["workload"] += 1
            kind = rec.WhichOneof("record")
            if kind is None:
                self.v("record.empty", f, line, "", "WorkloadRecord with no record kind set")
                continue
            msg = getattr(rec, kind)
            rid = getattr(msg, _REC_ID[kind])
            fresh = self._unique(kind, f, line, rid, self.ids[kind])
            if kind == "request":
                self._request1(line, msg, fresh)
            elif kind == "trajectory":
                if fresh:
                    self.traj_group[rid] = msg.group_id
                    self._ord(rid)
                self._engine(f, line, rid, msg.engine_id)
            elif kind == "group":
                if fresh:
                    self.group_batch[rid] = msg.rollout_batch_id
                    self.group_line[rid] = line
                self._enum(f, line, rid, "unit", msg.unit)
            elif kind == "rollout_batch":
                self.batches.add(rid)
                self._enum(f, line, rid, "readiness_rule", msg.readiness_rule)
                n, req = len(msg.group_ids), msg.required_groups
                if msg.readiness_rule == w.BATCH_READINESS_RULE_FIRST_N_GROUPS and not 1 <= req <= n:
                    self.v("batch.required_groups", f, line, rid, f"required_groups {req} not in [1, {n}]")
                elif msg.readiness_rule == w.BATCH_READINESS_RULE_ALL_GROUPS and req not in (0, n):
                    self.v("batch.required_groups", f, line, rid, f"ALL_GROUPS with required_groups {req} != {n}")
                for e in msg.engine_ids:
                    self._engine(f, line, rid, e)
            elif kind == "slot_pool":
                self.pools.add(rid)
                if msg.trajectory_slots == 0:
                    self.v("slot_pool.slots", f, line, rid, "trajectory_slots is 0")
                for e in msg.engine_ids:
                    self._engine(f, line, rid, e)
            elif kind == "engine_client":
                self._engine(f, line, rid, msg.engine_id)
            elif kind == "cache_warmup":
                self._engine(f, line, rid, msg.engine_id)
                self._prefix(line, rid, msg.input_tokens, msg.HasField("prefix"), msg.prefix, msg.engine_id)

    def _request1(self, line: int, r: w.Request, fresh: bool) -> None:
        f, rid = self.wfile, r.request_id
        has_turn = r.HasField("turn_index")
        if fresh:
            o = self._ord(r.trajectory_id) if r.trajectory_id else 0
            self.req[rid] = _pack(o, r.turn_index if has_turn else None, r.num_samples)
            if o:
                self.traj_req_count[o] += 1
        if bool(r.trajectory_id) != has_turn:
            self.v("turn.index", f, line, rid, "turn_index must be set exactly when trajectory_id is set "
                   f"(trajectory_id={r.trajectory_id!r}, turn_index {'set' if has_turn else 'absent'})")
        n = r.num_samples
        lens = (len(r.sample_ids), len(r.output_tokens), len(r.finish_reasons))
        if n < 1 or any(x != n for x in lens):
            self.v("fanout.count", f, line, rid, f"num_samples={n}, sample_ids={lens[0]}, output_tokens={lens[1]}, "
                   f"finish_reasons={lens[2]}: all must be equal and >= 1")
        for i, fr in enumerate(r.finish_reasons):
            self._enum(f, line, rid, f"finish_reasons[{i}]", fr)
        self._engine(f, line, rid, r.engine_id)
        self._prefix(line, rid, r.input_tokens, r.HasField("prefix"), r.prefix, r.engine_id)
        kind = r.arrival.WhichOneof("kind") if r.HasField("arrival") else None
        if kind == "observed_offset_ns":
            self.observed += 1
            off = r.arrival.observed_offset_ns
            self.max_offset = max(self.max_offset, off)
            self._time(f, line, rid, "arrival.observed_offset_ns", off)
            if 0 < self.window_ns < off <= SUSPECT_SCALE * self.window_ns:
                self.v("units.outside_window", f, line, rid,
                       f"arrival {off} ns is after the window end ({self.window_ns} ns)", WARNING)
        elif kind is None:
            self.missing_arrivals += 1
        if kind is not None and (kind == "after_dependencies") != bool(r.dependencies):
            self.v("arrival.dependencies", f, line, rid, f"arrival is {kind} but the request has "
                   f"{len(r.dependencies)} dependencies (after_dependencies iff dependencies non-empty)")
        preds: set[str] = set()
        for i, d in enumerate(r.dependencies):
            self._enum(f, line, rid, f"dependencies[{i}].trigger", d.trigger)
            self._enum(f, line, rid, f"dependencies[{i}].relation", d.relation)
            has_delay = d.HasField("external_delay_ns")
            if has_delay == bool(d.delay_absence):
                self.v("dependency.delay_absence", f, line, rid, f"dependencies[{i}] needs exactly one of "
                       f"external_delay_ns (measured, 0 is a real 0) and delay_absence (why not measured)")
            if has_delay:
                self._time(f, line, rid, f"dependencies[{i}].external_delay_ns", d.external_delay_ns)
            if d.predecessor_request_id in preds:
                self.v("dependency.duplicate", f, line, rid, f"predecessor {d.predecessor_request_id!r} listed twice")
            preds.add(d.predecessor_request_id)

    # -- workload pass 2: references
    def pass2(self) -> None:
        f = self.wfile
        group_in_batches: Counter[str] = Counter()
        for line, rec in self.t.iter_workload():
            kind = rec.WhichOneof("record")
            if kind == "request":
                self._request2(line, rec.request)
            elif kind == "trajectory":
                self._trajectory2(line, rec.trajectory)
            elif kind == "group":
                self._group2(line, rec.group)
            elif kind == "rollout_batch":
                b = rec.rollout_batch
                for gid in b.group_ids:
                    if gid not in self.group_batch:
                        self.v("reference.group", f, line, b.rollout_batch_id, f"member group {gid!r} has no Group record")
                        continue
                    group_in_batches[gid] += 1
                    if self.group_batch[gid] != b.rollout_batch_id:
                        self.v("batch.membership", f, line, b.rollout_batch_id, f"lists group {gid!r}, whose "
                               f"rollout_batch_id is {self.group_batch[gid]!r}")
        for gid, gline in self.group_line.items():
            k = group_in_batches[gid]
            if k != 1:
                self.v("batch.membership", f, gline, gid, f"group is listed by {k} rollout batches; exactly 1 required")
        if self.observed >= 2 and self.window_ns > 0 and 0 < self.max_offset < self.window_ns / SUSPECT_SMALL:
            self.v("units.suspect_small", f, 0, "", f"all {self.observed} observed arrivals within {self.max_offset} ns "
                   f"of a {self.window_ns} ns window: offsets in s or ms declared as ns?", WARNING)

    def _request2(self, line: int, r: w.Request) -> None:
        f, rid = self.wfile, r.request_id
        if not (r.HasField("arrival") and r.arrival.WhichOneof("kind")):
            if self.observed:
                self.v("arrival.mixed_missing", f, line, rid, f"no arrival, while {self.observed} requests have an "
                       "observed one: a missing arrival is never defaulted")
            else:
                self.v("arrival.kind_missing", f, line, rid, "no arrival (observed_offset_ns or after_dependencies)")
        if r.trajectory_id and r.trajectory_id not in self.traj_group:
            self.v("reference.trajectory", f, line, rid, f"trajectory {r.trajectory_id!r} has no Trajectory record")
        if r.group_id and r.group_id not in self.group_batch:
            self.v("reference.group", f, line, rid, f"group {r.group_id!r} has no Group record")
        if r.rollout_batch_id and r.rollout_batch_id not in self.batches:
            self.v("reference.batch", f, line, rid, f"rollout batch {r.rollout_batch_id!r} has no RolloutBatch record")
        if not r.dependencies:
            return
        me = self.req.get(rid)
        my_traj, my_turn, _ = _unpack(me) if me is not None else (0, None, 0)
        if not r.trajectory_id:
            self.v("dependency.no_trajectory", f, line, rid, "request with dependencies has no trajectory_id "
                   "(dependencies stay inside one trajectory)")
        for d in r.dependencies:
            p = d.predecessor_request_id
            if p == rid:
                self.v("dependency.cycle", f, line, rid, "request depends on itself")
                continue
            pv = self.req.get(p)
            if pv is None:
                self.v("dependency.unresolved", f, line, rid, f"predecessor {p!r} is no request of this trace")
                continue
            p_traj, p_turn, _ = _unpack(pv)
            ordered = bool(my_traj) and p_traj == my_traj and p_turn is not None and my_turn is not None and p_turn < my_turn
            if not ordered:
                self.suspicious_traj.update((my_traj, p_traj))
            if p_traj != my_traj and r.trajectory_id:
                self.v("dependency.cross_trajectory", f, line, rid, f"predecessor {p!r} is in trajectory "
                       f"{self.traj_names[p_traj]!r}, this request in {r.trajectory_id!r}")
            elif p_traj == my_traj and my_traj and p_turn is not None and my_turn is not None and p_turn >= my_turn:
                self.v("turn.dependency_order", f, line, rid, f"predecessor {p!r} is turn {p_turn}, "
                       f"not earlier than this turn {my_turn}")

    def _trajectory2(self, line: int, t: w.Trajectory) -> None:
        f, tid = self.wfile, t.trajectory_id
        o = self.traj_ord.get(tid, -1)
        for ref, val, known in (("reference.group", t.group_id, self.group_batch),
                                ("reference.batch", t.rollout_batch_id, self.batches),
                                ("reference.slot_pool", t.slot_pool_id, self.pools)):
            if val and val not in known:
                self.v(ref, f, line, tid, f"{val!r} has no record")
        for i, r in enumerate(t.request_ids):
            pv = self.req.get(r)
            if pv is None:
                self.v("reference.request", f, line, tid, f"request_ids[{i}] = {r!r} is no request of this trace")
                continue
            p_traj, p_turn, _ = _unpack(pv)
            if p_traj != o or p_turn != i:
                self.v("turn.order", f, line, tid, f"request_ids[{i}] = {r!r} has trajectory "
                       f"{self.traj_names[p_traj]!r} turn {p_turn}; expected {tid!r} turn {i}")
        claimed = self.traj_req_count.get(o, 0)
        if claimed != len(t.request_ids):
            self.v("trajectory.requests", f, line, tid, f"{claimed} requests name this trajectory, "
                   f"request_ids lists {len(t.request_ids)}")

    def _group2(self, line: int, g: w.Group) -> None:
        f, gid = self.wfile, g.group_id
        if g.rollout_batch_id and g.rollout_batch_id not in self.batches:
            self.v("reference.batch", f, line, gid, f"rollout batch {g.rollout_batch_id!r} has no RolloutBatch record")
        size = 0
        for i, mid in enumerate(dict.fromkeys(g.member_ids)):
            if g.unit == w.GROUP_UNIT_SAMPLES:
                pv = self.req.get(mid)
                if pv is None:
                    self.v("group.members", f, line, gid, f"member {mid!r} is no request (unit SAMPLES)")
                    continue
                size += _unpack(pv)[2]
            elif g.unit == w.GROUP_UNIT_TRAJECTORIES:
                tg = self.traj_group.get(mid)
                if tg is None:
                    self.v("group.members", f, line, gid, f"member {mid!r} is no trajectory (unit TRAJECTORIES)")
                    continue
                if tg != gid:
                    self.v("group.members", f, line, gid, f"member trajectory {mid!r} names group {tg!r}")
                size += 1
        if len(set(g.member_ids)) != len(g.member_ids):
            self.v("group.members", f, line, gid, "member listed twice")
        if g.unit and size != g.expected_size:
            unit = "samples" if g.unit == w.GROUP_UNIT_SAMPLES else "trajectories"
            self.v("group.size", f, line, gid, f"{size} {unit} in the group, expected_size {g.expected_size}")
            if size == 1 and g.expected_size > 1:
                self.v("group.singleton", f, line, gid, f"group of 1 while {g.expected_size} expected: was the group "
                       "id set per trajectory instead of per prompt?", WARNING)

    # -- pass 3 (only when needed): cycles among dependencies that do not point to earlier turns
    def cycles(self) -> None:
        if not self.suspicious_traj:
            return
        adj: dict[str, list[str]] = {}
        line_of: dict[str, int] = {}
        for line, rec in self.t.iter_workload():
            if rec.WhichOneof("record") != "request" or not rec.request.dependencies:
                continue
            r = rec.request
            me = self.req.get(r.request_id)
            if me is None or _unpack(me)[0] not in self.suspicious_traj:
                continue
            preds = [d.predecessor_request_id for d in r.dependencies
                     if d.predecessor_request_id in self.req and d.predecessor_request_id != r.request_id]
            if preds:
                adj[r.request_id] = preds
                line_of[r.request_id] = line
        state: dict[str, int] = {}  # 1 on stack, 2 done
        for start in adj:
            if state.get(start):
                continue
            stack: list[tuple[str, Iterator[str]]] = [(start, iter(adj.get(start, ())))]
            state[start] = 1
            path = [start]
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    path.pop()
                    continue
                s = state.get(nxt)
                if s == 1:
                    cyc = path[path.index(nxt):]
                    self.v("dependency.cycle", self.wfile, line_of.get(nxt, 0), nxt,
                           "dependency cycle: " + " -> ".join([*cyc, nxt]))
                elif not s:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(adj.get(nxt, ()))))

    # -- outcomes
    def outcomes(self) -> None:
        f = self.ofile
        seen = {k: set() for k in ("request", "trajectory", "group", "rollout_batch")}
        known = {"request": self.req, "trajectory": self.traj_group, "group": self.group_batch,
                 "rollout_batch": self.batches}
        for line, rec in iter_outcomes(self.t, verify_digest=False):  # verified in check_trace
            self.counts["outcomes"] += 1
            kind = rec.WhichOneof("record")
            if kind is None:
                self.v("record.empty", f, line, "", "OutcomeRecord with no record kind set")
                continue
            msg = getattr(rec, kind)
            rid = getattr(msg, _REC_ID[kind])
            if not self._unique(f"{kind} outcome", f, line, rid, seen[kind]):
                continue
            if rid not in known[kind]:
                self.v("outcome.unmatched", f, line, rid, f"{kind} outcome for {rid!r}, which the workload does not have")
            names: Iterable[str]
            if kind == "request":
                names = ("submit_ns", "queued_ns", "scheduled_ns", "first_token_ns", "completion_ns")
                self._order(f, line, rid, msg, names)
                for s in msg.samples:
                    self._order(f, line, rid, s, ("first_token_ns", "completion_ns"), prefix=f"sample {s.sample_id!r} ")
                    for n in ("first_token_ns", "completion_ns"):
                        if s.HasField(n):
                            self._time(f, line, rid, f"sample {s.sample_id!r} {n}", getattr(s, n))
            elif kind == "trajectory":
                names = ("slot_acquired_ns", "slot_released_ns")
                self._order(f, line, rid, msg, names)
                for i, d in enumerate(msg.tool_durations_ns):
                    self._time(f, line, rid, f"tool_durations_ns[{i}]", d)
            else:
                names = ("completed_ns",) if kind == "group" else ("ready_ns",)
            for n in names:
                if msg.HasField(n):
                    self._time(f, line, rid, n, getattr(msg, n))

    def _order(self, f: str, line: int, rid: str, msg, names: Iterable[str], prefix: str = "") -> None:
        present = [(n, getattr(msg, n)) for n in names if msg.HasField(n)]
        for (a, va), (b, vb) in zip(present, present[1:]):
            if va > vb:
                self.v("time.order", f, line, rid, f"{prefix}{a} = {va} ns after {b} = {vb} ns")


def check_trace(trace_dir: str | Path, *, max_per_rule: int = 200) -> TraceCheck:
    """Check a trace directory: container, manifest, every workload and outcome rule of :data:`RULES`.

    Args:
        trace_dir: the trace directory.
        max_per_rule: violations listed per rule; beyond it one summary violation gives the count.

    Returns:
        TraceCheck with status VALID (no error; warnings allowed), INVALID, or INCOMPLETE (not
        finalized, truncated, digest / size / count mismatch: then the records are not checked).
        Never raises for a bad trace; raises only on I/O errors of the machine.
    """
    out = TraceCheck(trace_dir=str(trace_dir))
    sink = _Sink(max_per_rule)
    try:
        trace = open_trace(trace_dir)
    except IncompleteTraceError as e:
        out.status = TraceCheck.STATUS_INCOMPLETE
        out.violations.append(_from_error(e))
        return out
    except TraceFormatError as e:
        out.status = TraceCheck.STATUS_INVALID
        out.violations.append(_from_error(e))
        return out
    ch = _Checker(trace, sink)
    status = TraceCheck.STATUS_VALID
    try:
        verify_artifact(trace.dir, trace.artifact(ARTIFACT_KIND_OUTCOMES))  # incomplete before any rule
        ch.manifest()
        ch.pass1()
        if not ch.ids["request"]:
            ch.v("trace.no_requests", ch.wfile, 0, "", "the workload holds 0 requests: there is nothing to replay "
                 "(a capture writes a trace only from joined engine requests; finalize it again and read what "
                 "it reports missing)")
        ch.pass2()
        ch.cycles()
        ch.outcomes()
    except IncompleteTraceError as e:
        status = TraceCheck.STATUS_INCOMPLETE
        sink.violations.append(_from_error(e))
    except TraceFormatError as e:
        sink.errors += 1
        sink.violations.append(_from_error(e))
    if status != TraceCheck.STATUS_INCOMPLETE:
        status = TraceCheck.STATUS_INVALID if sink.errors else TraceCheck.STATUS_VALID
    out.status = status
    out.violations.extend(sink.finish())
    for k in ("workload", "outcomes"):
        out.record_counts[k] = ch.counts[k]
    return out


def format_violation(v: Violation) -> str:
    """``file:line record rule: message`` (``warning:`` before the message for warnings)."""
    where = v.file + (f":{v.line}" if v.line else "")
    sev = "warning: " if v.severity == WARNING else ""
    return f"{where or '-'} {v.record_id or '-'} {v.rule}: {sev}{v.message}"
