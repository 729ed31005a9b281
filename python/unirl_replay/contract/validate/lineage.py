"""Lineage rules: trajectories and their turns, GRPO groups, rollout batches, slot pools."""

from __future__ import annotations

from array import array
from collections import Counter

from unirl_replay.contract.validate.context import TraceState, _unpack
from unirl_replay.contract.validate.registry import WARNING
from unirl_replay.v1 import workload_pb2 as w


class LineageRules(TraceState):
    def _lineage1(self, kind: str, line: int, msg, rid: str, fresh: bool) -> None:
        f = self.wfile
        if kind == "trajectory":
            if fresh:
                g, b, names = msg.group_id, msg.rollout_batch_id, self.names
                self.traj_group[rid] = names.setdefault(g, g)
                be = (b, msg.engine_id)
                self.traj_batch[rid] = names.setdefault(be, be)  # type: ignore[arg-type]
                o = self._ord(rid)
                if msg.slot_pool_id and msg.HasField("start_order"):
                    self._note_start(msg.slot_pool_id, msg.start_order, line, o)
                if msg.slot_pool_id and msg.engine_id in self.engine_block:  # (undeclared: reference.engine)
                    self._pool_engine(msg.slot_pool_id, msg.engine_id, line, o)
            if msg.engine_id:  # optional: "Engine all its requests go to (when set ...)"
                self._engine(f, line, rid, msg.engine_id)
            if msg.slot_pool_id and not msg.HasField("start_order"):
                self.v("trajectory.start_order", f, line, rid, f"holds a slot of pool {msg.slot_pool_id!r} but has no "
                       "start_order: a pool grants its slots in the order the worker started its trajectories")
        elif kind == "group":
            if fresh:
                self.group_batch[rid] = msg.rollout_batch_id
                self.group_line[rid] = line
                self.group_unit[rid] = msg.unit
                if msg.unit == w.GROUP_UNIT_SAMPLES:
                    for mid in msg.member_ids:
                        self.member_group.setdefault(mid, rid)
            self._enum(f, line, rid, "unit", msg.unit)
            if msg.HasField("resumed_from_rollout_batch_id"):
                prev = msg.resumed_from_rollout_batch_id
                if not prev or prev == msg.rollout_batch_id:
                    self.v("group.resumed_from", f, line, rid, f"resumed_from_rollout_batch_id is {prev!r}, "
                           + ("empty" if not prev else "the group's own rollout batch") + ": a group resumed in "
                           "this batch names the earlier batch it resumed from (not resumed: leave it out)")
        elif kind == "rollout_batch":
            self.batches.add(rid)
            if fresh:
                self.batch_rule[rid] = (msg.readiness_rule, msg.required_groups, len(msg.group_ids))
                if msg.engine_ids:
                    self.batch_engines[rid] = (frozenset(msg.engine_ids), line)
            self._enum(f, line, rid, "readiness_rule", msg.readiness_rule)
            n, req = len(msg.group_ids), msg.required_groups
            if msg.readiness_rule == w.BATCH_READINESS_RULE_FIRST_N_GROUPS and not 1 <= req <= n:
                self.v("batch.required_groups", f, line, rid, f"required_groups {req} not in [1, {n}]")
            elif msg.readiness_rule == w.BATCH_READINESS_RULE_ALL_GROUPS and req not in (0, n):
                self.v("batch.required_groups", f, line, rid, f"ALL_GROUPS with required_groups {req} != {n}")
            for e in msg.engine_ids:
                self._engine(f, line, rid, e)
            if msg.HasField("after_batch"):
                self._boundary1(line, rid, msg.after_batch, fresh)
        elif kind == "slot_pool":
            self.pools.add(rid)
            if fresh:
                self.pool_engines[rid] = frozenset(msg.engine_ids)
            if msg.trajectory_slots == 0:
                self.v("slot_pool.slots", f, line, rid, "trajectory_slots is 0")
            for e in msg.engine_ids:
                self._engine(f, line, rid, e)
    def _note_start(self, pool: str, order: int, line: int, ordinal: int) -> None:
        """A trajectory (by ordinal, at ``line``) holding a slot of ``pool`` at ``order``: for :meth:`_pool_starts`."""
        rows = self.pool_starts.get(pool)
        if rows is None:
            rows = self.pool_starts[pool] = (array("I"), array("q"), array("q"))
        rows[0].append(order)
        rows[1].append(line)
        rows[2].append(ordinal)

    def _pool_starts(self) -> None:
        """After pass 1: no two trajectories of one slot pool share a start_order (rule ``slot_pool.start_order``:
        the pool grants its slots in start order, one trajectory at each position). Each repeat is reported at the
        later trajectory in file order, naming the first one with that order."""
        found = []
        names = self.traj_names
        for pool, (orders, lines, ords) in self.pool_starts.items():
            n = len(orders)
            if n < 2 or all(a < b for a, b in zip(orders, orders[1:])):  # a writer's usual order: no repeat
                continue
            import numpy as np

            o = np.frombuffer(orders, np.uint32)
            idx = np.argsort(o, kind="stable")  # by order, then file order
            so = o[idx]
            new_run = np.concatenate(([True], so[1:] != so[:-1]))
            run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))  # each position's run's first
            for k in np.flatnonzero(~new_run).tolist():
                i, first = int(idx[k]), int(idx[run_start[k]])
                found.append((lines[i], i, pool, names[ords[i]], int(so[k]), names[ords[first]], lines[first]))
        for line, _, pool, tid, order, other, other_line in sorted(found):
            self.v("slot_pool.start_order", self.wfile, line, tid, f"start_order {order} in slot pool {pool!r} is "
                   f"also trajectory {other!r}'s" + (f" (line {other_line})" if other_line else "") + ": a pool "
                   "grants its slots in start order, one trajectory at each position")

    def _pool_engine(self, pool: str, engine: str, line: int, ordinal: int) -> None:
        """A trajectory (by ordinal, at ``line``) on ``engine`` holding a slot of ``pool``: rule ``slot_pool.engines``
        now when the pool's record was read, else after pass 1 (:meth:`_pool_engines`)."""
        engines = self.pool_engines.get(pool)
        if engines is None:
            rows = self.pool_waiting.get((pool, engine))
            if rows is None:
                rows = self.pool_waiting[(pool, engine)] = (array("q"), array("q"))
            rows[0].append(line)
            rows[1].append(ordinal)
        elif engines and engine not in engines:
            self._off_pool(line, self.traj_names[ordinal], pool, engine, engines)

    def _off_pool(self, line: int, tid: str, pool: str, engine: str, engines: frozenset[str]) -> None:
        self.v("slot_pool.engines", self.wfile, line, tid, f"engine_id {engine!r}, but its slot pool {pool!r} lists "
               f"engines {sorted(engines)} (SlotPool.engine_ids: the engines whose trajectories draw from it)")

    def _pool_engines(self) -> None:
        """After pass 1: the trajectories read before their pool's record (:meth:`_pool_engine`), in file order."""
        found = []
        names = self.traj_names
        for (pool, engine), (lines, ords) in self.pool_waiting.items():
            engines = self.pool_engines.get(pool)
            if engines and engine not in engines:  # (no record: reference.slot_pool; none listed: any engine)
                found.extend((lines[i], ords[i], pool, engine, engines) for i in range(len(lines)))
        for line, o, pool, engine, engines in sorted(found, key=lambda x: x[:2]):
            self._off_pool(line, names[o], pool, engine, engines)

    def _note_batch_engine(self, batch: str, engine: str, line: int, rid: str) -> None:
        """A request (``rid`` at ``line``) of rollout batch ``batch`` ran on ``engine`` (for :meth:`_batch_engines`)."""
        seen = self.batch_req_engines.get(batch)
        if seen is None:
            self.batch_req_engines[batch] = {engine: (line, rid)}
        elif engine not in seen:
            seen[engine] = (line, rid)

    def _batch_engines(self) -> None:
        """After pass 1: a rollout batch listing engines (``engine_ids`` non-empty) lists every engine its requests
        ran on (rule ``batch.engines``), reported at the batch, one engine at a time, in file order. An engine the
        manifest does not declare (``reference.engine`` at the request) is not reported here a second time."""
        found = []
        known = self.engine_block
        for bid, (listed, line) in self.batch_engines.items():
            for engine, (rline, rid) in self.batch_req_engines.get(bid, {}).items():
                if engine not in listed and engine in known:
                    found.append((line, rline, bid, engine, rid, listed))
        for line, rline, bid, engine, rid, listed in sorted(found, key=lambda x: x[:2]):
            first = f"request {rid!r}" + (f" (line {rline})" if rline else "") if rid else "a request"
            self.v("batch.engines", self.wfile, line, bid, f"engine_ids {sorted(listed)} does not list engine "
                   f"{engine!r}, which {first} of this batch ran on (RolloutBatch.engine_ids: the engines its "
                   "requests went to)")

    def _boundary1(self, line: int, rid: str, ab: w.BatchBoundary, fresh: bool) -> None:
        """A rollout batch's ``after_batch`` on its own: it names a batch, not this one, with a gap >= 0;
        the batch it names is looked up when every batch is known (:meth:`_batch_boundaries`)."""
        f, prev = self.wfile, ab.previous_rollout_batch_id
        self._time(f, line, rid, "after_batch.driver_gap_ns", ab.driver_gap_ns)
        if not prev:
            self.v("batch.boundary_empty", f, line, rid, "after_batch is present but its previous_rollout_batch_id is "
                   "empty: name the batch this one waited for, or leave after_batch out (open loop)")
        elif prev == rid:
            self.v("batch.boundary_self", f, line, rid, f"after_batch.previous_rollout_batch_id {prev!r} is this batch "
                   "itself: a batch cannot wait for its own ready event")
        elif fresh:
            self.batch_after[rid] = (prev, line)

    def _batch_boundaries(self) -> None:
        """After pass 1 (every batch known): each ``after_batch`` names a batch of the trace, and the links
        have no cycle (each batch has at most one link: following them from any batch ends, or loops)."""
        f, after = self.wfile, self.batch_after
        if not after:
            return
        for rid, (prev, line) in after.items():
            if prev not in self.batches:
                self.v("batch.boundary_unknown", f, line, rid, f"after_batch.previous_rollout_batch_id {prev!r} has "
                       "no RolloutBatch record in this trace")
        done: set[str] = set()
        for start in after:  # record order: a cycle is reported once, at its first batch in the file
            path: dict[str, None] = {}
            b = start
            while b in after and b not in done and b not in path:
                path[b] = None
                b = after[b][0]
            if b in path:  # back on this walk: the batches from b on form a cycle
                cyc = list(path)[list(path).index(b):]
                first = min(cyc, key=lambda x: after[x][1])
                k = cyc.index(first)
                cyc = cyc[k:] + cyc[:k]
                self.v("batch.boundary_cycle", f, after[first][1], first, "after_batch links form a cycle: "
                       + " -> ".join([*cyc, first]) + " (each batch would wait for the next one's ready event)")
            done.update(path)

    def _lineage_agreement(self, line: int, r: w.Request) -> None:
        """A request's group / batch agree with the group (SAMPLES) or trajectory that lists it."""
        f, rid = self.wfile, r.request_id
        listed_by = self.member_group.get(rid)
        if listed_by is not None and listed_by != r.group_id:
            self.v("group.request_mismatch", f, line, rid, f"listed by group {listed_by!r}, but its group_id is "
                   f"{r.group_id!r}")
        elif r.group_id and self.group_unit.get(r.group_id) == w.GROUP_UNIT_SAMPLES and listed_by is None:
            # an intermediate request of a multi-level lineage (workload.proto, Group.expected_size) is no member:
            # it reaches its group through the dependencies of the group's leaves; decided after pass 2
            self.unlisted[rid] = (line, r.group_id)
        if r.dependencies and r.group_id:
            g, members, units = r.group_id, self.member_group, self.group_unit
            for d in r.dependencies:  # edges into requests of the same SAMPLES group that it does not list
                p = d.predecessor_request_id
                if members.get(p) is None and self.req_group.get(p) == g and units.get(g) == w.GROUP_UNIT_SAMPLES:
                    self.lineage_edges.append((p, rid))
        gb = self.group_batch.get(r.group_id) if r.group_id else None
        if gb is not None and gb != r.rollout_batch_id:
            self.v("group.request_mismatch", f, line, rid, f"rollout_batch_id {r.rollout_batch_id!r}, but its group "
                   f"{r.group_id!r} is in rollout batch {gb!r}")
        if r.trajectory_id and r.trajectory_id in self.traj_group:
            tg, (tb, te) = self.traj_group[r.trajectory_id], self.traj_batch.get(r.trajectory_id, ("", ""))
            if tg != r.group_id or tb != r.rollout_batch_id:
                self.v("group.request_mismatch", f, line, rid, f"group {r.group_id!r} / batch {r.rollout_batch_id!r}, "
                       f"but its trajectory {r.trajectory_id!r} is in group {tg!r} / batch {tb!r}")
            if te and te != r.engine_id:
                self.v("trajectory.engine", f, line, rid, f"engine_id {r.engine_id!r}, but its trajectory "
                       f"{r.trajectory_id!r} names engine {te!r} (Trajectory.engine_id: the engine all its requests go to)")

    def _intermediates(self) -> None:
        """After pass 2: a request naming a SAMPLES group that does not list it is refused unless a member of that
        group waits for it, directly or through other such requests of the group (the intermediate levels of a
        multi-level lineage: workload.proto, ``Group.expected_size``)."""
        unlisted = self.unlisted
        if not unlisted:
            return
        ok: set[str] = set()
        stack: list[str] = []
        waiting: dict[str, list[str]] = {}  # an unlisted request -> the unlisted requests of its group it waits for
        members = self.member_group
        for p, s in self.lineage_edges:
            if p not in unlisted:
                continue
            if members.get(s) == unlisted[p][1]:
                if p not in ok:
                    ok.add(p)
                    stack.append(p)
            else:
                waiting.setdefault(s, []).append(p)
        while stack:
            for p in waiting.get(stack.pop(), ()):
                if p not in ok:
                    ok.add(p)
                    stack.append(p)
        for rid, (line, gid) in unlisted.items():
            if rid not in ok:
                self.v("group.request_mismatch", self.wfile, line, rid, f"group_id {gid!r} (unit SAMPLES) does not "
                       "list this request, and no request it lists waits for it (an intermediate request of a "
                       "multi-level lineage reaches its group through its leaves' dependencies)")

    def _trajectory2(self, line: int, t: w.Trajectory) -> None:
        f, tid = self.wfile, t.trajectory_id
        o = self.traj_ord.get(tid, -1)
        first = t.first_turn_index  # > 0: resumed here (partial / async rollout); see the proto
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
            if p_traj != o or p_turn != i + first:
                self.v("turn.order", f, line, tid, f"request_ids[{i}] = {r!r} has trajectory "
                       f"{self.traj_names[p_traj]!r} turn {p_turn}; expected {tid!r} turn {i + first}")
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
                first = self.member_group.get(mid)
                if first != gid:  # its samples would count toward two groups (the first listing is checked
                    # against the request's group_id by _lineage_agreement)
                    self.v("group.members", f, line, gid, f"member request {mid!r} is listed by group {first!r} "
                           "too: a request belongs to one group")
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

    def _batch2(self, line: int, b: w.RolloutBatch, group_in_batches: Counter[str]) -> None:
        f = self.wfile
        for gid in b.group_ids:
            if gid not in self.group_batch:
                self.v("reference.group", f, line, b.rollout_batch_id, f"member group {gid!r} has no Group record")
                continue
            group_in_batches[gid] += 1
            if self.group_batch[gid] != b.rollout_batch_id:
                self.v("batch.membership", f, line, b.rollout_batch_id, f"lists group {gid!r}, whose "
                       f"rollout_batch_id is {self.group_batch[gid]!r}")
    def _batch_membership(self, group_in_batches: Counter[str]) -> None:
        f = self.wfile
        # reported in file order (group_line's own order is that of a dict, not of the flat table: first named)
        bad = [(gline, gid, k) for gid, gline in self.group_line.items() if (k := group_in_batches[gid]) != 1]
        for gline, gid, k in sorted(bad):
            self.v("batch.membership", f, gline, gid, f"group is listed by {k} rollout batches; exactly 1 required")
