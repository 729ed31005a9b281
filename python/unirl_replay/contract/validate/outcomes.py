"""Outcome rules: measured records match the workload, times in order and in range."""

from __future__ import annotations

from typing import Iterable

from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.validate.context import _REC_ID, OutcomeIdsSeen, TraceState
from unirl_replay.contract.validate.strtable import IntRows, OrdPair, OrdSet, PackedMap, SideInt
from unirl_replay.v1 import workload_pb2 as w


class OutcomeRules(TraceState):
    def outcomes(self) -> None:
        f = self.ofile
        seen = {k: set() for k in ("request", "trajectory", "group", "rollout_batch")}
        seen["request"] = seen_req = OutcomeIdsSeen(self.req)  # type: ignore[assignment]  # no table per request
        if self.compact:  # a group outcome per prompt in a GRPO trace: its ids numbered in group_table
            seen["group"] = OrdSet(self.group_table)  # type: ignore[assignment]
        try:
            self._outcomes(f, seen)
        finally:
            seen_req.restore()

    def _outcomes(self, f: str, seen: dict) -> None:
        known = {"request": self.req, "trajectory": self.traj_group, "group": self.group_batch,
                 "rollout_batch": self.batches}
        in_group = self.req_group  # only a grouped request's completion is read (_completion_order)
        # request id (of a group) -> measured completion; group id -> (completed_ns, line): the flat tables
        # (strtable) when the state is (a request table the gate's fast pass filled is a dict)
        flat = self.compact and isinstance(self.req, PackedMap)
        req_done: dict[str, int] | SideInt = SideInt(self.req) if flat else {}  # type: ignore[arg-type]
        group_done: dict[str, tuple[int, int]] | OrdPair = OrdPair(self.group_table) if self.compact else {}
        batch_ready: dict[str, tuple[int, int]] = {}
        # the batches that wait for another (after_batch): per batch, its earliest measured submit
        # (submit_ns, line, request id); a request reaches its batch through its group (few entries)
        after = self.batch_after
        group_batch = self.group_batch if after else {}
        first_submit: dict[str, tuple[int, int, str]] = {}
        # a trajectory holds its slot from its first request's submit to its last request's completion (workload.proto
        # Trajectory): per trajectory ordinal, its earliest submit and latest completion (request id each); the slots
        # (flat: IntRows by trajectory ordinal, the request by its number in the request table, the slot times of
        # the trajectories the workload has; a slot outcome of any other has no requests to compare with)
        traj_span: dict[int, list] | IntRows = IntRows(len(self.traj_names), 4) if flat else {}
        slots: dict[str, tuple[int | None, int | None, int]] | IntRows = (IntRows(len(self.traj_names), 3) if flat
                                                                            else {})  # trajectory id -> (acquired, released, line)
        req = self.req
        for line, rec in iter_outcomes(self.t, verify_digest=False, on_error=self.skip):  # verified in check_trace
            self.counts["outcomes"] += 1
            kind = rec.WhichOneof("record")
            if kind is None:
                self.v("record.empty", f, line, "", "OutcomeRecord with no record kind set")
                continue
            msg = getattr(rec, kind)
            rid = getattr(msg, _REC_ID[kind])
            self._good_ids(f, line, rid, msg)
            if not self._unique(f"{kind} outcome", f, line, rid, seen[kind]):
                continue
            if rid not in known[kind]:
                self.v("outcome.unmatched", f, line, rid, f"{kind} outcome for {rid!r}, which the workload does not have")
            names: Iterable[str]
            if kind == "request":
                names = ("submit_ns", "queued_ns", "scheduled_ns", "first_token_ns", "completion_ns")
                self._order(f, line, rid, msg, names)
                missing = [n for n in names if n != "queued_ns" and not msg.HasField(n)]  # queued: engine-side, optional
                if missing and not msg.unavailable_reason:
                    self.v("outcome.missing_reason", f, line, rid, f"{', '.join(missing)} not measured and no "
                           "unavailable_reason says why (a missing time is never a silent gap)")
                if msg.HasField("completion_ns") and rid in in_group:
                    req_done[rid] = msg.completion_ns
                if msg.HasField("cached_tokens") and msg.cached_tokens:
                    inp = self.req_input.get(rid)
                    if inp is not None and msg.cached_tokens > inp:
                        self.v("outcome.cached_tokens", f, line, rid, f"cached_tokens = {msg.cached_tokens} but the "
                               f"request has {inp} input tokens (Request.input_tokens): the prefix cache serves at "
                               "most the prompt")
                pv = self.req.get(rid)  # marked seen (bit-inverted) by _unique
                o = 0 if pv is None else (pv if pv >= 0 else ~pv) >> 53
                if o and flat:
                    if msg.HasField("submit_ns") and ((t0 := traj_span.get(o, 0)) is None or msg.submit_ns < t0):
                        traj_span.set(o, 0, msg.submit_ns)
                        traj_span.set(o, 1, req.find(rid))
                    if msg.HasField("completion_ns") and ((t1 := traj_span.get(o, 2)) is None or msg.completion_ns > t1):
                        traj_span.set(o, 2, msg.completion_ns)
                        traj_span.set(o, 3, req.find(rid))
                elif o and (msg.HasField("submit_ns") or msg.HasField("completion_ns")):
                    span = traj_span.get(o)
                    if span is None:
                        span = traj_span[o] = [None, "", None, ""]
                    if msg.HasField("submit_ns") and (span[0] is None or msg.submit_ns < span[0]):
                        span[0], span[1] = msg.submit_ns, rid
                    if msg.HasField("completion_ns") and (span[2] is None or msg.completion_ns > span[2]):
                        span[2], span[3] = msg.completion_ns, rid
                if group_batch and msg.HasField("submit_ns"):
                    b = group_batch.get(in_group.get(rid, ""))
                    if b in after and (b not in first_submit or msg.submit_ns < first_submit[b][0]):
                        first_submit[b] = (msg.submit_ns, line, rid)
                self._samples(f, line, rid, msg)
                for s in msg.samples:
                    self._order(f, line, rid, s, ("first_token_ns", "completion_ns"), prefix=f"sample {s.sample_id!r} ")
                    for n in ("first_token_ns", "completion_ns"):
                        if s.HasField(n):
                            self._time(f, line, rid, f"sample {s.sample_id!r} {n}", getattr(s, n))
            elif kind == "trajectory":
                names = ("slot_acquired_ns", "slot_released_ns")
                self._order(f, line, rid, msg, names)
                if flat:
                    to = self.traj_ord.get(rid, 0)
                    if to:
                        for k, n in enumerate(("slot_acquired_ns", "slot_released_ns")):
                            if msg.HasField(n):
                                slots.set(to, k, getattr(msg, n))
                        slots.set(to, 2, line)
                else:
                    slots[rid] = (msg.slot_acquired_ns if msg.HasField("slot_acquired_ns") else None,
                                  msg.slot_released_ns if msg.HasField("slot_released_ns") else None, line)
                for i, d in enumerate(msg.tool_durations_ns):
                    self._time(f, line, rid, f"tool_durations_ns[{i}]", d)
            else:
                names = ("completed_ns",) if kind == "group" else ("ready_ns",)
                if kind == "group" and msg.HasField("completed_ns"):
                    group_done[rid] = (msg.completed_ns, line)
                elif kind == "rollout_batch" and msg.HasField("ready_ns"):
                    batch_ready[rid] = (msg.ready_ns, line)
            for n in names:
                if msg.HasField(n):
                    self._time(f, line, rid, n, getattr(msg, n))

        self._completion_order(req_done, group_done, batch_ready)
        self._slot_order(traj_span, slots)
        self._boundary_order(first_submit, batch_ready)

    def _slot_order(self, traj_span: dict[int, list], slots: dict[str, tuple[int | None, int | None, int]]) -> None:
        """A trajectory's slot is acquired no later than its first request's submit and released no earlier than
        its last request's completion (it holds the slot through its tool waits, workload.proto Trajectory)."""
        f, ords = self.ofile, self.traj_ord
        if isinstance(slots, IntRows):  # flat (trajectory ordinals): the same pairs, in file order below
            key, names, sp = self.req.keys_.key, self.traj_names, traj_span  # type: ignore[union-attr]

            def who(o: int, k: int) -> str:
                e = sp.get(o, k)  # type: ignore[union-attr]
                return key(e) if e is not None else ""

            pairs = ((names[o], (slots.get(o, 0), slots.get(o, 1), slots.get(o, 2)),
                      (sp.get(o, 0), who(o, 1), sp.get(o, 2), who(o, 3)))  # type: ignore[union-attr]
                     for o in range(len(slots)) if slots.get(o, 2) is not None)
        else:
            pairs = ((tid, slot, traj_span.get(ords.get(tid, 0) or -1)) for tid, slot in slots.items())
        found = []
        for tid, (acquired, released, line), span in pairs:
            if span is None:
                continue
            submit, first, done, last = span
            if acquired is not None and submit is not None and acquired > submit:
                found.append((line, 0, tid, f"slot_acquired_ns = {acquired} ns after its request {first!r} was "
                              f"submitted ({submit} ns): a trajectory holds its slot from its first request's submit"))
            if released is not None and done is not None and released < done:
                found.append((line, 1, tid, f"slot_released_ns = {released} ns before its request {last!r} completed "
                              f"({done} ns): a trajectory holds its slot to its last request's completion"))
        for line, _, tid, message in sorted(found):  # file order (a flat table's: trajectory ordinals)
            self.v("outcome.completion_order", f, line, tid, message)

    def _samples(self, f: str, line: int, rid: str, msg) -> None:
        """Per-sample timings name the request's samples, each at most once, all or none, and lie
        inside the request's own submit .. completion (the request's times are min / max over them)."""
        if not msg.samples:
            return
        known = self.req_samples.get(rid)
        if known is None:
            if rid in self.req:  # n = 1: the request's own times are the sample's
                self.v("outcome.samples", f, line, rid, f"{len(msg.samples)} per-sample timings for a request "
                       "with num_samples 1 (per-sample timings are for n > 1)")
            return
        seen: set[str] = set()
        for s in msg.samples:
            if s.sample_id not in known:
                self.v("outcome.samples", f, line, rid, f"sample {s.sample_id!r} is not among the request's "
                       "sample_ids")
            elif s.sample_id in seen:
                self.v("outcome.samples", f, line, rid, f"sample {s.sample_id!r} timed twice")
            seen.add(s.sample_id)
            late = [(n, getattr(s, n)) for n in ("first_token_ns", "completion_ns") if s.HasField(n)]
            for n, v in late:
                if msg.HasField("completion_ns") and v > msg.completion_ns:
                    self.v("outcome.samples", f, line, rid, f"sample {s.sample_id!r} {n} = {v} ns after the "
                           f"request's completion_ns = {msg.completion_ns} ns")
                if msg.HasField("submit_ns") and v < msg.submit_ns:
                    self.v("outcome.samples", f, line, rid, f"sample {s.sample_id!r} {n} = {v} ns before the "
                           f"request's submit_ns = {msg.submit_ns} ns")
            if s.HasField("first_token_ns") and msg.HasField("first_token_ns") and s.first_token_ns < msg.first_token_ns:
                self.v("outcome.samples", f, line, rid, f"sample {s.sample_id!r} first_token_ns = {s.first_token_ns} "
                       f"ns before the request's first_token_ns = {msg.first_token_ns} ns (the request's is the min)")
        absent = [x for x in known if x not in seen]
        if absent and len(seen & set(known)) > 0:
            self.v("outcome.samples", f, line, rid, f"timings for {len(seen & set(known))} of {len(known)} samples; "
                   f"missing {absent[:3]} (all samples or none)")
        elif not absent:  # every sample timed: the request's first token is their earliest, its completion their last
            for n, pick, word, sign in (("first_token_ns", min, "earliest", -1), ("completion_ns", max, "last", 1)):
                vals = [getattr(s, n) for s in msg.samples if s.HasField(n)]  # (the other way round: reported above)
                if msg.HasField(n) and len(vals) == len(msg.samples) and sign * (getattr(msg, n) - pick(vals)) > 0:
                    self.v("outcome.samples", f, line, rid, f"the request's {n} = {getattr(msg, n)} ns, but its "
                           f"samples' {word} {n} is {pick(vals)} ns (the request's is the {word} of its samples')")

    def _completion_order(self, req_done: dict[str, int], group_done: dict[str, tuple[int, int]],
                          batch_ready: dict[str, tuple[int, int]]) -> None:
        """A group completes when its last request does; a batch is ready when the groups its
        readiness rule waits for are (ALL_GROUPS: all; FIRST_N_GROUPS: the first N)."""
        f = self.ofile
        # per group: its last request's completion and that request (its number in the request table when
        # the tables are flat, its id otherwise)
        req = self.req
        flat = isinstance(group_done, OrdPair) and isinstance(req, PackedMap)
        last: dict[str, tuple[int, str]] | OrdPair = OrdPair(self.group_table) if flat else {}
        for rid, gid in self.req_group.items():
            t = req_done.get(rid)
            if t is not None and gid in group_done:
                cur = last.get(gid)
                if cur is None or t > cur[0]:
                    last[gid] = (t, req.find(rid) if flat else rid)  # type: ignore[union-attr]
        late = []
        for gid, (t, line) in group_done.items():
            cur = last.get(gid)
            if cur is not None and t < cur[0]:
                late.append((line, gid, t, cur))
        for line, gid, t, (lt, who) in sorted(late):  # in file order (a flat table's order: first named)
            who = req.keys_.key(who) if flat else who  # type: ignore[union-attr]
            self.v("outcome.completion_order", f, line, gid, f"group completed_ns = {t} ns before its request "
                   f"{who!r} completed ({lt} ns)")
        by_batch: dict[str, list[int]] = {}
        for gid, (t, _) in group_done.items():
            b = self.group_batch.get(gid)
            if b:
                by_batch.setdefault(b, []).append(t)
        for bid, (t, line) in batch_ready.items():
            rule, required, n = self.batch_rule.get(bid, (0, 0, 0))
            times = sorted(by_batch.get(bid, []))
            if rule == w.BATCH_READINESS_RULE_FIRST_N_GROUPS:
                need = required
            elif rule == w.BATCH_READINESS_RULE_ALL_GROUPS and len(times) == n:
                need = n
            else:
                continue
            if 1 <= need <= len(times) and t < times[need - 1]:
                self.v("outcome.completion_order", f, line, bid, f"batch ready_ns = {t} ns before the {need} group(s) "
                       f"its readiness rule waits for had completed ({times[need - 1]} ns)")

    def _boundary_order(self, first_submit: dict[str, tuple[int, int, str]],
                        batch_ready: dict[str, tuple[int, int]]) -> None:
        """A batch that waited for another (``after_batch``) has no request submitted before that
        batch's measured ready event (``driver_gap_ns`` is measured from it, and is >= 0)."""
        f = self.ofile
        for bid, (prev, _) in self.batch_after.items():
            if bid not in first_submit or prev not in batch_ready:
                continue
            t, line, rid = first_submit[bid]
            ready = batch_ready[prev][0]
            if t < ready:
                self.v("outcome.batch_boundary", f, line, rid, f"submit_ns = {t} ns, {ready - t} ns before rollout "
                       f"batch {prev!r} was ready (ready_ns = {ready} ns), but this request's batch {bid!r} has "
                       f"after_batch {prev!r}: it was submitted before the batch it waited for was ready")

    def _order(self, f: str, line: int, rid: str, msg, names: Iterable[str], prefix: str = "") -> None:
        present = [(n, getattr(msg, n)) for n in names if msg.HasField(n)]
        for (a, va), (b, vb) in zip(present, present[1:]):
            if va > vb:
                self.v("time.order", f, line, rid, f"{prefix}{a} = {va} ns after {b} = {vb} ns")
