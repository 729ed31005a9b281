"""Shared state of one validation run and the helpers every rule group uses.

``TraceState`` holds what the passes over the workload learn (ids per kind, a compact int per
request: trajectory ordinal, turn index and fan-out), the violation sink and small checks used by
several groups (times and their units, engine references, prefix hashes, unique ids, enums).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from pathlib import Path

from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.contract.message_guard import bad_ids, unknown_enums
from unirl_replay.contract.trace_io import Trace
from unirl_replay.contract.validate.registry import ERROR, RULES, SUSPECT_SCALE, WARNING
from unirl_replay.contract.validate.strtable import (IntColumn, NamesView, NoIntern, OrdColumn, OrdInt, OrdView,
                                                     PackedMap, SampleColumn, SideColumn, SideInt, StrTable)
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_OUTCOMES, ARTIFACT_KIND_WORKLOAD, TraceManifest
from unirl_replay.v1.report_pb2 import Violation


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


#: a workload of at least this many records keeps validate's per-request and per-trajectory tables as flat
#: arrays (``strtable``): flat memory at a million requests, at more CPU per lookup than a dict
COMPACT_FROM_RECORDS = 250_000

_REC_ID = {"request": "request_id", "trajectory": "trajectory_id", "group": "group_id",
           "rollout_batch": "rollout_batch_id", "slot_pool": "pool_id", "engine_client": "engine_id",
           "cache_warmup": "warmup_id"}


class KeysOf:
    """The keys of a dict as the id set ``_unique`` asks and adds to, where the caller enters every
    fresh id in that dict right after (``add`` does nothing: the dict's entry is the set's)."""

    __slots__ = ("d",)

    def __init__(self, d: dict):
        self.d = d

    def __contains__(self, k) -> bool:
        return k in self.d

    def add(self, k) -> None:
        pass

    def __len__(self) -> int:
        return len(self.d)

    def __iter__(self):
        return iter(self.d)


class OutcomeIdsSeen:
    """The request ids of the outcomes read so far (``_unique``'s set), without a second table of
    every id: an id the workload has is marked in ``req`` itself (its packed value, never negative,
    stored bit-inverted: negative = seen), any other id in a small set; :meth:`restore` puts ``req``
    back as it was."""

    __slots__ = ("req", "other")

    def __init__(self, req):
        self.req = req
        self.other: set[str] = set()

    def __contains__(self, k) -> bool:
        v = self.req.get(k)
        return k in self.other if v is None else v < 0

    def add(self, k) -> None:
        v = self.req.get(k)
        if v is None:
            self.other.add(k)
        elif v >= 0:
            self.req[k] = ~v

    def restore(self) -> None:
        req = self.req
        if isinstance(req, PackedMap):
            req.unmark_all()
            return
        for k, v in req.items():
            if v < 0:
                req[k] = ~v


class TraceState:
    """What one validation run knows so far; base of every rule group."""

    def __init__(self, trace: Trace, sink: _Sink):
        self.t = trace
        self.v = sink
        m: TraceManifest = trace.manifest
        self.m = m
        self.wfile = trace.artifact(ARTIFACT_KIND_WORKLOAD).path
        self.ofile = trace.artifact(ARTIFACT_KIND_OUTCOMES).path
        self.window_ns = m.window.duration_ns if m.HasField("window") else 0
        self.engine_block = {e.engine_id: e.block_size_tokens for e in m.engines}
        self.engines = {e.engine_id: e for e in m.engines}
        # pass-1 state: ids per kind, compact request info. A workload of COMPACT_FROM_RECORDS records or
        # more keeps its tables with an entry per request or per trajectory as flat arrays read as the dicts
        # they replace (strtable: about 56 bytes a request, not about 150; their lookups cost more CPU than
        # a dict's, so a smaller trace keeps the dicts). Both give the same answers (tests/test_strtable.py).
        wl = trace.artifact(ARTIFACT_KIND_WORKLOAD)
        self.compact = compact = wl.record_count >= COMPACT_FROM_RECORDS
        self.req: dict[str, int] | PackedMap = PackedMap() if compact else {}  # request_id -> packed facts
        self.traj_table = StrTable([""])      # (compact) trajectory ids, as named by requests or records, numbered
        self.traj_ord: dict[str, int] | OrdView = OrdView(self.traj_table) if compact else {"": 0}  # id -> ordinal
        self.traj_names: list[str] | NamesView = NamesView(self.traj_table) if compact else [""]  # ordinal -> id
        self.traj_req_count: Counter[int] | IntColumn = IntColumn() if compact else Counter()  # ordinal -> requests
        # (compact) group ids, as named by requests, trajectories, groups and batches, numbered: the group tables'
        # keys and the group ids the request and trajectory tables hold (a GRPO trace has a group per prompt)
        self.group_table = StrTable()
        # Trajectory record id -> its group_id
        self.traj_group: dict[str, str] | OrdColumn = OrdColumn(self.traj_table, self.group_table) if compact else {}
        if compact:
            self._ord = self.traj_table.add  # type: ignore[method-assign]
        # Group record id -> its rollout_batch_id; -> its line; -> its unit
        self.group_batch: dict[str, str] | OrdColumn = OrdColumn(self.group_table) if compact else {}
        self.group_line: dict[str, int] | OrdInt = OrdInt(self.group_table) if compact else {}
        self.batches: set[str] = set()
        self.pools: set[str] = set()
        self.ids: dict[str, set[str]] = {k: set() for k in _REC_ID}
        # a request id is fresh (``_unique``) exactly when ``_request1`` then enters it in ``req``: the
        # id set of requests is ``req``'s keys, not a second table of every id (memory at 1M requests);
        self.ids["request"] = KeysOf(self.req)  # type: ignore[assignment]
        self.ids["trajectory"] = KeysOf(self.traj_group)  # type: ignore[assignment]  # likewise (_lineage1)
        self.ids["group"] = KeysOf(self.group_batch)  # type: ignore[assignment]  # likewise (_lineage1)
        # one str object per distinct group / batch id named by the per-request and per-trajectory
        # maps below (each field read makes a new str: one per request otherwise); the flat tables
        # number their values themselves
        self.names: dict[str, str] | NoIntern = NoIntern() if compact else {}
        self.observed = self.missing_arrivals = 0
        self.max_offset = 0
        self.suspicious_traj: set[int] = set()
        self.counts = Counter()
        # lineage agreement and outcome checks (one small entry per request / record)
        # request id -> its group_id (when set)
        self.req_group: dict[str, str] | SideColumn = SideColumn(self.req, self.group_table) if compact else {}
        # request id -> its input_tokens (outcome.cached_tokens; uint32: 5 bytes a request when flat)
        self.req_input: dict[str, int] | SideInt = SideInt(self.req, "I") if compact else {}
        # request id -> sample ids (n > 1 only)
        self.req_samples: dict[str, tuple[str, ...]] | SampleColumn = SampleColumn(self.req, self.group_table) if compact else {}
        # request id listed by a SAMPLES group -> that group (an id no request has kept too)
        self.member_group: dict[str, str] | SideColumn = (SideColumn(self.req, self.group_table, other=True) if compact
                                                          else {})
        # pass 2: requests naming a SAMPLES group that does not list them -> (line, group), and the dependency edges
        # (predecessor, successor) into such requests from requests of the same group (few: multi-level lineage)
        self.unlisted: dict[str, tuple[int, str]] = {}
        self.lineage_edges: list[tuple[str, str]] = []
        # Trajectory record id -> (its rollout_batch_id, its engine_id): one shared tuple per distinct pair (few)
        self.traj_batch: dict[str, tuple[str, str]] | OrdColumn = OrdColumn(self.traj_table) if compact else {}
        self.group_unit: dict[str, int] | OrdInt = OrdInt(self.group_table) if compact else {}  # Group record id -> unit
        self.batch_rule: dict[str, tuple[int, int, int]] = {}  # batch -> (readiness rule, required, groups)
        self.batch_after: dict[str, tuple[str, int]] = {}  # batch with after_batch -> (previous batch, line)
        # slot pool id -> its trajectories' (start_order, line, trajectory ordinal), each in a flat array in file
        # order (slot_pool.start_order; few pools, 16 bytes a trajectory holding a pool slot)
        self.pool_starts: dict[str, tuple[array, array, array]] = {}
        # slot pool id -> its engine_ids (slot_pool.engines); (pool, engine) -> the lines and ordinals of the
        # trajectories naming both before that pool's record (decided after pass 1; a writer puts pools first)
        self.pool_engines: dict[str, frozenset[str]] = {}
        self.pool_waiting: dict[tuple[str, str], tuple[array, array]] = {}
        # batch.engines: rollout batch id -> (its engine_ids, line) when it lists any; batch id -> each engine its
        # requests ran on -> the first such request (line, id): one entry per distinct (batch, engine) pair (few)
        self.batch_engines: dict[str, tuple[frozenset[str], int]] = {}
        self.batch_req_engines: dict[str, dict[str, tuple[int, str]]] = {}
        self.longest: Counter[str] = Counter()  # engine id -> longest sequence (input + output tokens)
        self.longest_prompt: Counter[str] = Counter()  # engine id -> longest prompt

    # -- helpers
    def _ord(self, tid: str) -> int:
        o = self.traj_ord.get(tid)
        if o is None:
            o = self.traj_ord[tid] = len(self.traj_names)  # type: ignore[index]
            self.traj_names.append(tid)  # type: ignore[union-attr]
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
            if has_prefix and prefix.block_hashes:  # hashes of an unknown block size: none can be matched
                eb = self.engine_block.get(engine_id)
                engine = f" (engine {engine_id!r} block size {eb})" if eb is not None else ""
                self.v("prefix.block_size", f, line, rid, f"{len(prefix.block_hashes)} prefix block hashes with "
                       f"block_size_tokens 0{engine}: the block size they were computed with is missing")
                return
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

    def _good_ids(self, file: str, line: int, rid: str, msg) -> None:
        """Every id field of a record (its own id, references, sample / worker ids) is a usable id."""
        for where in bad_ids(msg):
            self.v("id.invalid", file, line, rid.encode("unicode_escape").decode()[:120], where)

    def _known_enums(self, file: str, line: int, rid: str, msg) -> None:
        for where in unknown_enums(msg):
            self.v("enum.unknown", file, line, rid, f"{where}: no such value in unirl_replay.v1 (v1 readers "
                   "reject unknown enum numbers)")
