"""Outcome rules: measured records match the workload, times in order and in range."""

from __future__ import annotations

from typing import Iterable

from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.validate.context import _REC_ID, TraceState


class OutcomeRules(TraceState):
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
