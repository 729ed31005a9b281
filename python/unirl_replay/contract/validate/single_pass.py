"""One pass over the workload: pass-1 bookkeeping that proves the reference pass would be silent.

The second workload pass (``_Checker.pass2``: references, dependency turn order, trajectory and
group membership, batch membership) exists because a record may name one that comes later in the
file. Most traces name only earlier records (writers emit requests before their trajectory,
groups and batches), so while pass 1 reads each record, the checks below resolve what they can
against what pass 1 has registered so far (those values never change afterwards) and collect
the ids they name. At the end of pass 1, :meth:`SinglePassRules.pass2_silent` is True only
when every reference resolved and every pass-2 rule holds: then pass 2 would report nothing and
change no state (its one side effect, ``suspicious_traj`` for the cycle pass, stays empty), and
it is skipped. Any doubt (a forward reference, an unresolved id, a rule that may fire, a
duplicate record) and the checker runs pass 2 exactly as before, so the report is the same
either way (``tests/test_validate_single_pass.py`` compares both on shuffled, broken traces).
"""

from __future__ import annotations

from collections import Counter

from unirl_replay.contract.validate.context import TraceState, _unpack
from unirl_replay.contract.validate.strtable import OrdColumn, OrdInt, PairList
from unirl_replay.v1 import workload_pb2 as w


class SinglePassRules(TraceState):
    def _sp_init(self) -> None:
        self.sp_doubt = False
        self.sp_traj_refs: set[str] = set()
        self.sp_group_refs: set[str] = set()
        self.sp_batch_refs: set[str] = set()
        self.sp_pool_refs: set[str] = set()
        self.sp_claims: list[tuple[int, int]] | PairList = PairList() if self.compact else []  # (ordinal, len(request_ids))
        c, gt = self.compact, self.group_table
        self.sp_group_batches: Counter[str] | OrdInt = OrdInt(gt, counter=True) if c else Counter()
        # lineage agreement (group.request_mismatch): per group id, a sum of hash((request id, group))
        # over the requests naming it, compared at the end with the same sum over the members its
        # SAMPLES group lists (its keys: the groups requests name); the batches named by its requests
        # (one batch id, a set once they name more: note_one); per trajectory, the (group, batch)
        # pairs its requests name. Memory: one entry per group / trajectory, not per request.
        self.sp_group_hash: Counter[str] | OrdInt = OrdInt(gt, counter=True, unsigned=True) if c else Counter()
        self.sp_group_req_batches: dict[str, str | set[str]] | OrdColumn = OrdColumn(gt) if c else {}
        # (a trajectory's (group, batch, engine) triples: one tuple while its requests name one, a set once they
        # name more; keyed by the trajectory's ordinal, the triples interned)
        self.sp_traj_lineage: dict | OrdColumn = OrdColumn(self.traj_table) if self.compact else {}

    def _sp_request(self, r: w.Request) -> None:
        arrival = r.arrival
        if not (r.HasField("arrival") and arrival.WhichOneof("kind")):
            self.sp_doubt = True
            return
        tid = r.trajectory_id
        gid, bid = r.group_id, r.rollout_batch_id
        if gid:  # (the groups named: the keys of sp_group_hash, see pass2_silent)
            self.sp_group_hash[gid] = (self.sp_group_hash[gid] + hash((r.request_id, gid))) & _MASK
            note_one(self.sp_group_req_batches, gid, bid)
        if tid:  # (the trajectories named: the keys of sp_traj_lineage, see pass2_silent)
            note_triple(self.sp_traj_lineage, tid, (gid, bid, r.engine_id))
        if r.rollout_batch_id:
            self.sp_batch_refs.add(r.rollout_batch_id)
        deps = r.dependencies
        if not deps:
            return
        rid = r.request_id
        me = self.req.get(rid)
        if not tid or me is None:
            self.sp_doubt = True
            return
        my_traj, my_turn, _ = _unpack(me)
        if not my_traj or my_turn is None:
            self.sp_doubt = True
            return
        req = self.req
        for d in deps:
            p = d.predecessor_request_id
            pv = req.get(p)
            if pv is None or p == rid:
                self.sp_doubt = True
                return
            p_traj, p_turn, _ = _unpack(pv)
            if p_traj != my_traj or p_turn is None or p_turn >= my_turn:
                self.sp_doubt = True
                return

    def _sp_trajectory(self, t: w.Trajectory, fresh: bool) -> None:
        if not fresh:
            self.sp_doubt = True
            return
        for val, refs in ((t.group_id, self.sp_group_refs), (t.rollout_batch_id, self.sp_batch_refs),
                          (t.slot_pool_id, self.sp_pool_refs)):
            if val:
                refs.add(val)
        o = self.traj_ord.get(t.trajectory_id, -1)
        ids = t.request_ids
        req = self.req
        first = t.first_turn_index  # request_ids[i] is turn first + i (pass 2's turn.order)
        for i, r in enumerate(ids, first):
            pv = req.get(r)
            if pv is None:
                self.sp_doubt = True
                return
            p_traj, p_turn, _ = _unpack(pv)
            if p_traj != o or p_turn != i:
                self.sp_doubt = True
                return
        self.sp_claims.append((o, len(ids)))

    def _sp_group(self, g: w.Group, fresh: bool) -> None:
        if not fresh:
            self.sp_doubt = True
            return
        gid = g.group_id
        if g.rollout_batch_id:
            self.sp_batch_refs.add(g.rollout_batch_id)
        members = list(g.member_ids)
        if len(set(members)) != len(members):
            self.sp_doubt = True
            return
        size = 0
        unit = g.unit
        if unit == w.GROUP_UNIT_SAMPLES:
            for mid in members:
                pv = self.req.get(mid)
                if pv is None or self.member_group.get(mid) != gid:  # another group listed it first
                    self.sp_doubt = True
                    return
                size += _unpack(pv)[2]
        elif unit == w.GROUP_UNIT_TRAJECTORIES:
            for mid in members:
                if self.traj_group.get(mid) != gid:
                    self.sp_doubt = True
                    return
                size += 1
        if unit and size != g.expected_size:
            self.sp_doubt = True

    def _sp_batch(self, b: w.RolloutBatch) -> None:
        bid = b.rollout_batch_id
        for gid in b.group_ids:
            if self.group_batch.get(gid) != bid:
                self.sp_doubt = True
                return
            self.sp_group_batches[gid] += 1

    def pass2_silent(self) -> bool:
        """True when pass 2 would report nothing and leave ``suspicious_traj`` empty."""
        if self.sp_doubt:
            return False
        tg, gb = self.traj_group, self.group_batch
        if not (all(t in tg for t in self.sp_traj_refs) and all(t in tg for t in self.sp_traj_lineage)
                and all(g in gb for g in self.sp_group_refs) and self.sp_batch_refs <= self.batches
                and self.sp_pool_refs <= self.pools):
            return False
        counts = self.traj_req_count
        if any(counts.get(o, 0) != n for o, n in self.sp_claims):
            return False
        sgb = self.sp_group_batches
        if self.compact:  # the group tables share group_table: compared by key number, no string made
            if not (all(map(gb.has, self.sp_group_hash.ordinals()))
                    and all(sgb.at(e, 0) == 1 for e in self.group_line.ordinals())):
                return False
        elif not (all(g in gb for g in self.sp_group_hash) and all(sgb[gid] == 1 for gid in self.group_line)):
            return False
        return self._sp_lineage_agrees()

    def _sp_lineage_agrees(self) -> bool:
        """Would ``LineageRules._lineage_agreement`` (pass 2) be silent for every request?"""
        listed: Counter[str] | OrdInt = OrdInt(self.group_table, counter=True, unsigned=True) if self.compact \
            else Counter()
        for rid, g in self.member_group.items():
            listed[g] = (listed[g] + hash((rid, g))) & _MASK
        req_side, grb, gbt = self.sp_group_hash, self.sp_group_req_batches, self.group_batch
        # (no test for a group that requests name and no SAMPLES group lists members of: it agrees
        # unless it is a SAMPLES group, checked below; every group a member list names is a key of listed)
        if self.compact:  # by key number in group_table, as pass2_silent
            unit = self.group_unit
            if any(listed.at(e) != req_side.at(e, 0) for e in listed.ordinals()):
                return False  # a member naming another group, or a request its SAMPLES group does not list
            if any(unit.at(e) == w.GROUP_UNIT_SAMPLES and not listed.has(e) and req_side.at(e, 0)
                   for e in unit.ordinals()):
                return False  # a request its SAMPLES group (which lists none) does not list
            pairs = ((grb.at(e), gbt.at(e)) for e in grb.ordinals())
        else:
            if any(listed[g] != req_side[g] for g in listed):
                return False
            if any(u == w.GROUP_UNIT_SAMPLES and g not in listed and req_side[g] for g, u in self.group_unit.items()):
                return False
            pairs = ((batches, gbt.get(g)) for g, batches in grb.items())
        for batches, gb in pairs:  # the batches a group's requests name: its Group record's
            if gb is not None and (batches != gb if batches.__class__ is str else batches != {gb}):
                return False
        tg, tbe = self.traj_group, self.traj_batch
        for t, seen in self.sp_traj_lineage.items():
            if t in tg:
                tb, te = tbe.get(t, ("", ""))
                want = (tg[t], tb)
                triples = {seen} if seen.__class__ is tuple else seen
                if {x[:2] for x in triples} != {want}:  # group.request_mismatch
                    return False
                if te and {x[2] for x in triples} != {te}:  # trajectory.engine: its requests on the engine it names
                    return False
        return True


def note_one(tl: dict | OrdColumn, key: str, value: str) -> None:
    """Enter ``value`` in ``key``'s entry of ``tl``: the one value so far, or a set once they differ
    (``sp_group_req_batches``: the batch ids a group's requests name, nearly always one)."""
    seen = tl.get(key)
    if seen is None:
        tl[key] = value
    elif seen.__class__ is str:
        if seen != value:
            tl[key] = {seen, value}
    else:
        seen.add(value)


def note_triple(tl: dict | OrdColumn, tid: str, triple: tuple[str, str, str]) -> None:
    """Enter a request's (group, batch, engine) in its trajectory's entry of ``sp_traj_lineage``:
    the one triple so far, or a set once they differ."""
    seen = tl.get(tid)  # None, the one triple so far, or a set of several
    if seen is None:
        tl[tid] = triple
    elif seen.__class__ is tuple:
        if seen != triple:
            tl[tid] = {seen, triple}
    else:
        seen.add(triple)


_MASK = (1 << 64) - 1
