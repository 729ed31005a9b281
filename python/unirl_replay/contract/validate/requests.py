"""Request rules: turn index, fan-out, finish reasons, engine, prefix hashes, arrivals and units."""

from __future__ import annotations

from unirl_replay.contract.validate.context import TraceState, _pack
from unirl_replay.contract.validate.registry import SUSPECT_SCALE, WARNING
from unirl_replay.v1 import workload_pb2 as w


class RequestRules(TraceState):
    # first pass: per-record shape
    def _request1(self, line: int, r: w.Request, fresh: bool) -> None:
        f, rid = self.wfile, r.request_id
        has_turn = r.HasField("turn_index")
        if fresh:
            o = self._ord(r.trajectory_id) if r.trajectory_id else 0
            self.req[rid] = _pack(o, r.turn_index if has_turn else None, r.num_samples)
            self.req_input[rid] = r.input_tokens
            if o:
                self.traj_req_count[o] += 1
            if r.group_id:
                g = r.group_id
                self.req_group[rid] = self.names.setdefault(g, g)
            if r.num_samples > 1:
                self.req_samples[rid] = tuple(r.sample_ids)
            if r.rollout_batch_id:
                self._note_batch_engine(r.rollout_batch_id, r.engine_id, line, rid)
        self._request_bounds(line, r)
        if bool(r.trajectory_id) != has_turn:
            self.v("turn.index", f, line, rid, "turn_index must be set exactly when trajectory_id is set "
                   f"(trajectory_id={r.trajectory_id!r}, turn_index {'set' if has_turn else 'absent'})")
        if r.input_tokens < 1:
            self.v("request.input_tokens", f, line, rid, "input_tokens is 0: a request has at least one prompt token "
                   "(len(prompt_token_ids); vLLM takes no empty prompt)")
        n = r.num_samples
        lens = (len(r.sample_ids), len(r.output_tokens), len(r.finish_reasons))
        if n < 1 or any(x != n for x in lens):
            self.v("fanout.count", f, line, rid, f"num_samples={n}, sample_ids={lens[0]}, output_tokens={lens[1]}, "
                   f"finish_reasons={lens[2]}: all must be equal and >= 1")
        sids = r.sample_ids
        if len(sids) > 1 and len(set(sids)) != len(sids):
            dup = _first_repeat(sids)
            self.v("fanout.sample_ids", f, line, rid, f"sample id {dup!r} is listed {list(sids).count(dup)} times in "
                   f"sample_ids ({len(set(sids))} distinct of {len(sids)}): each sample has its own id")
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
        self._dependencies1(line, r)

    # second pass: arrivals and references
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
        self._lineage_agreement(line, r)
        self._dependencies2(line, r)


def _first_repeat(ids) -> str:
    """The first id of ``ids`` that an earlier one equals ("" when they are distinct)."""
    seen: set[str] = set()
    for s in ids:
        if s in seen:
            return s
        seen.add(s)
    return ""
