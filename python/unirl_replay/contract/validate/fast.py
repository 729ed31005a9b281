"""The gate's fast pass: ``validate``'s workload rules proven silent over columns, or no answer.

:func:`workload_clean` answers one question about a trace opened as ``check_trace`` opens it
(``open_trace(..., warn=False, inspect=True)``) and its workload read once as columns
(``workload_columns.read_columns(trace, facts=True)``): would ``check_trace(trace_dir,
outcomes=False)`` report no error? True means CLEAN (the gate passes the trace without the row
rules); False means NOT SURE, and the gate runs ``check_trace`` exactly as before, so every
violation a user sees, its wording and its order, is the row rules' own.

It never says CLEAN where the row rules would report an error (tests/test_gate_fast.py: every
rule's minimal violating example, the mutation fuzzer's mutants, random workloads):

* the manifest rules, the window bound, pass 1 of every record that is not a request (few:
  trajectories, groups, batches, pools, clients, warm-ups), the engine capacity, the rollout
  batches' ``after_batch`` links (``_batch_boundaries``), the slot pools' start orders
  (``_pool_starts``) and the engines of their trajectories (``_pool_engines``), the engines the rollout
  batches' requests ran on (``_batch_engines``) and the proof
  that pass 2 would be silent (``single_pass``) are the checker's own methods, run on a real
  ``_Checker`` with a real sink;
* the request rules of pass 1 (ids, enums, turn index, fan-out, finish reasons, engine
  references, prefix counts and block sizes, arrivals and their units, dependencies, bounds) are
  conditions over the columns, each one the row rule's "no error" condition or stronger; the
  pass-1 state the other rules read (packed request facts, trajectory ordinals and counts, group
  and sample bookkeeping, the single-pass proof's references) is built from the same columns;
* anything it does not cover declines: a request that has no arrival, a dependency that is not on
  an earlier turn of its own trajectory, a duplicate or empty id, a record the column reader
  does not take (then there are no columns), a trace from a newer revision, any unknown field,
  an ``id`` or enum field of ``Request`` other than those below (a contract change: the pass
  declines until it is taught the new field).

Warnings do not matter to the gate (only errors refuse), so the pass does not decide them.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from itertools import chain, repeat

import numpy as np

from unirl_replay.contract.message_guard import MAX_ID_CHARS, _id_plan, _plan
from unirl_replay.contract.validate.checker import _Checker
from unirl_replay.contract.validate.context import _Sink
from unirl_replay.contract.validate.registry import MAX_DEPENDENCIES, MAX_SAMPLES, MAX_TOKENS, SUSPECT_SCALE
from unirl_replay.contract.validate.single_pass import _MASK, note_one, note_triple
from unirl_replay.contract.workload_columns import ARRIVAL_AFTER_DEPENDENCIES, ARRIVAL_NONE, ARRIVAL_OBSERVED, MessageColumns
from unirl_replay.v1 import workload_pb2 as w

__all__ = ["workload_clean", "COVERED_ID_FIELDS", "COVERED_ENUM_FIELDS"]

#: the id fields of ``Request`` (message_guard's ``*_id`` / ``*_ids`` strings) the pass checks
COVERED_ID_FIELDS = frozenset({"request_id", "sample_ids", "trajectory_id", "group_id", "rollout_batch_id",
                               "engine_id", "worker_id", "dependencies.predecessor_request_id"})
#: the enum fields of ``Request`` the pass checks
COVERED_ENUM_FIELDS = frozenset({"finish_reasons", "dependencies.trigger", "dependencies.relation",
                                 "dependencies.delay_absence"})
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")  # = message_guard's


def _paths(plan, desc, prefix: str = "") -> set[str]:
    own, subs = plan(desc)
    out = {prefix + (f[0] if isinstance(f, tuple) else f).name for f in own}
    for f in subs:
        out |= _paths(plan, f.message_type, f"{prefix}{f.name}.")
    return out


def _known(desc, name: str, zero_ok: bool) -> frozenset[int]:
    values = frozenset(desc.fields_by_name[name].enum_type.values_by_number)
    return values if zero_ok else values - {0}


_REQ, _DEP, _TRAJ = w.Request.DESCRIPTOR, w.Dependency.DESCRIPTOR, w.Trajectory.DESCRIPTOR
#: the id fields of ``Trajectory`` the pass checks (it has no enum field)
COVERED_TRAJECTORY_ID_FIELDS = frozenset({"trajectory_id", "group_id", "rollout_batch_id", "engine_id", "worker_id",
                                          "slot_pool_id", "request_ids", "root_sample_id"})
#: the pass applies only while Request's and Trajectory's id and enum fields are exactly the covered ones
_PLAN_MATCHES = (_paths(_id_plan, _REQ) == COVERED_ID_FIELDS and _paths(_plan, _REQ) == COVERED_ENUM_FIELDS
                 and _paths(_id_plan, _TRAJ) == COVERED_TRAJECTORY_ID_FIELDS and not _paths(_plan, _TRAJ))
_FINISH = _known(_REQ, "finish_reasons", False)          # enum.unknown / enum.unspecified
_TRIGGER = _known(_DEP, "trigger", False)
_RELATION = _known(_DEP, "relation", False)
_ABSENCE = _known(_DEP, "delay_absence", True)           # enum.unknown only (0 = measured)
_OTHER_ORDER = (("group", "groups"), ("rollout_batch", "batches"),
                ("slot_pool", "slot_pools"), ("engine_client", "engine_clients"))


def _ids_ok(*columns) -> bool:
    """Every string of every column is a usable id (message_guard.id_problem says None)."""
    for col in columns:
        if col and max(map(len, col)) > MAX_ID_CHARS:
            return False
    s = "".join(chain.from_iterable(columns))
    return (s.isascii() and s.isprintable()) or _CONTROL.search(s) is None


def _top(outs: tuple) -> int:
    return max(outs) if outs else 0


def workload_clean(trace, cols) -> bool:
    """True only when ``check_trace(trace.dir, outcomes=False)`` would report no error (see the
    module doc); False: not sure (the caller runs the row rules)."""
    if cols is None or cols.facts is None or not _PLAN_MATCHES or trace.compat.newer:
        return False
    if trace.compat.foreign_fields or trace.compat.first_line:
        return False
    sink = _Sink(1)
    ch = _Checker(trace, sink)
    ch.manifest()
    ch._window_bound()
    if sink.errors or not cols.requests or len(cols.row) != len(cols.requests) or "" in cols.row:
        return False
    arrays = _requests(ch, cols)
    if arrays is None:
        return False
    ch._sp_init()
    to, tu, rid, tid = arrays
    _sp_requests(ch, cols, rid, tid)
    if not _trajectories(ch, cols, to, tu):
        return False
    for kind, attr in _OTHER_ORDER:  # the records after the requests: what pass 1 knows is complete
        for msg in getattr(cols, attr).values():
            ch.record1(0, kind, msg)
    for msg in cols.warmups:
        ch.record1(0, "cache_warmup", msg)
    ch._engine_capacity()
    ch._batch_boundaries()
    ch._pool_starts()
    ch._pool_engines()
    ch._batch_engines()
    if sink.errors or ch.sp_doubt or not ch.pass2_silent():
        return False
    return not ch.suspicious_traj and sink.errors == 0


def _requests(ch: _Checker, cols):
    """Pass 1's request rules over the columns (None: one may fire), and the state they leave;
    returns each request's trajectory ordinal and turn index (-1: none) as arrays, and the request
    and trajectory ids (workload order)."""
    gf = cols.facts
    if gf.parts and gf.flat_lists and cols.arrays is not None and len(cols.arrays.num_samples) == len(cols.requests):
        return _requests_arrays(ch, cols, cols.arrays)
    if gf.parts:  # the arrow reader's lists, batch by batch
        rid, ns, tid, turn, eid, _pv, inp, outs, akind, obs, deps, bs = (
            tuple(chain.from_iterable(p[k] for p in gf.parts)) for k in range(12))
        preds, trig, rel, delay, absence = (tuple(chain.from_iterable(p[k] for p in gf.dep_parts)) for k in range(5))
    else:
        rid, ns, tid, turn, eid, _pv, inp, outs, akind, obs, deps, bs = zip(*cols.requests)
        flat_deps = list(chain.from_iterable(deps))
        preds, trig, rel, delay, absence = zip(*flat_deps) if flat_deps else ((),) * 5
    cols.by_field = (rid, ns, tid, turn, eid, _pv, inp, outs, akind, obs, deps, bs)  # the support scan's too
    gid, bid, wid, maxout = (gf.values(k) for k in ("group_ids", "batch_ids", "worker_ids", "max_output_tokens"))
    n = len(rid)
    if gf.flat_lists:  # the arrow reader: sample ids / finish reasons flat, with per-request counts
        sflat, fflat = gf.values("sample_flat"), gf.values("finish_flat")
        scount = np.concatenate(gf.sample_counts) if gf.sample_counts else np.zeros(0, np.int64)
        fcount = np.concatenate(gf.finish_counts) if gf.finish_counts else np.zeros(0, np.int64)
        if gf.sample_ids or gf.finish_reasons or int(scount.sum()) != len(sflat) or int(fcount.sum()) != len(fflat):
            return None
    else:
        sids, fins = gf.sample_ids, gf.finish_reasons
        if len(sids) != n or len(fins) != n:
            return None
        sflat, fflat = tuple(chain.from_iterable(sids)), tuple(chain.from_iterable(fins))
        scount = np.fromiter(map(len, sids), np.int64, n)
        fcount = np.fromiter(map(len, fins), np.int64, n)
    if not (len(gid) == len(bid) == len(wid) == len(scount) == len(fcount) == len(maxout) == n):
        return None
    if len(preds) != sum(map(len, deps)):
        return None
    # id.invalid (id.empty / id.duplicate: the reader's row map, checked by the caller); the arrow
    # reader measured the id columns' bytes: all printable ASCII within the length bound is no problem
    if not (gf.ids_printable_ascii and gf.ids_max_bytes <= MAX_ID_CHARS) and \
            not _ids_ok(rid, tid, gid, bid, eid, wid, sflat, preds):
        return None
    # enum.unknown, enum.unspecified (finish reasons, dependency trigger / relation)
    if not (set(fflat) <= _FINISH and set(trig) <= _TRIGGER and set(rel) <= _RELATION
            and set(absence) <= _ABSENCE):
        return None
    # turn.index: turn_index set exactly when trajectory_id is
    if list(map(bool, tid)) != [t is not None for t in turn]:
        return None
    # fanout.count, bound.count
    if min(ns) < 1 or max(ns) > MAX_SAMPLES:
        return None
    ns_a = np.fromiter(ns, np.int64, n)
    if not (np.array_equal(scount, ns_a) and tuple(map(len, outs)) == ns and np.array_equal(fcount, ns_a)):
        return None
    if max(map(len, deps)) > MAX_DEPENDENCIES:
        return None
    # reference.engine, prefix.count, prefix.block_size (no prefix, or block size 0 without hashes: prefix.missing,
    # a warning; hashes with block size 0: prefix.block_size)
    inp_a = np.fromiter(inp, np.int64, n)
    if not _engines_and_prefix_ok(ch.engine_block, cols.offsets, eid, inp_a, np.fromiter(bs, np.int64, n)):
        return None
    # arrival.kind_missing / mixed_missing (pass 2): every request has one; arrival.dependencies
    if ARRIVAL_NONE in akind:
        return None
    if [k == ARRIVAL_AFTER_DEPENDENCIES for k in akind] != list(map(bool, deps)):
        return None
    window = ch.window_ns
    times = [t for t in obs if t is not None]
    measured = [d for d in delay if d is not None]
    for vals in (times, measured):  # units.negative, units.suspect_scale
        if vals and (min(vals) < 0 or (window > 0 and max(vals) > SUSPECT_SCALE * window)):
            return None
    # dependency.delay_absence: exactly one of a measured delay and a reason it is absent
    if any((d is None) == (a == 0) for d, a in zip(delay, absence)):
        return None
    # dependency.duplicate
    if any(len(x) > 1 and len({d[0] for d in x}) != len(x) for x in deps):
        return None
    # bounds: bound.tokens, bound.model_len, bound.max_output_tokens
    # every request has num_samples >= 1 output lengths (checked above): one each -> that one
    tops = np.fromiter(map(operator.itemgetter(0) if ns_a.max() == 1 else _top, outs), np.int64, n)
    if n and (inp_a.max() > MAX_TOKENS or tops.max() > MAX_TOKENS or inp_a.min() < 1):  # request.input_tokens too
        return None
    within = _within_model_len(ch.engines, eid, inp_a, tops)
    if within is None:
        return None
    eix, e_a, seq = within
    if any(m is not None and t > m for m, t in zip(maxout, tops.tolist())):
        return None
    # the state pass 1 leaves (read by the other records' rules, the capacity check and pass 2's proof)
    if len(ch.traj_ord) != 1:
        return None
    names = list(dict.fromkeys(tid))  # TraceState._ord of each in first-seen order: 1, 2, ...
    if "" in names:
        names.remove("")
    if not _ordinals(ch, names):
        return None
    tord = list(map(ch.traj_ord.__getitem__, tid))
    tu = np.fromiter((-1 if u is None else u for u in turn), np.int64, n)
    low = ((tu + 1) << 20) | np.minimum(ns_a, (1 << 20) - 1)  # context._pack without the ordinal (< 2^53)
    ch.req = dict(zip(rid, map(operator.or_, map(operator.lshift, tord, repeat(53, n)), low.tolist())))
    ch.traj_req_count = Counter(tord)
    del ch.traj_req_count[0]
    ch.req_group = {r: g for r, g in zip(rid, gid) if g} if any(gid) else {}
    if max(ns) > 1:  # the sample ids of each request with several (scount = ns: checked above)
        ends = np.cumsum(scount).tolist()
        ch.req_samples = {rid[i]: tuple(sflat[ends[i] - k:ends[i]]) for i, k in enumerate(ns) if k > 1}
        if not _distinct_samples(ch.req_samples):
            return None
    else:
        ch.req_samples = {}
    ch.ids["request"] = set(cols.row)
    ch.observed = len(times)
    ch.max_offset = max(times, default=0)
    _note_longest(ch, eix, e_a, seq, inp_a)
    to = np.fromiter(tord, np.int64, n)
    # dependencies: each on an earlier turn of the request's own trajectory (dependency.no_trajectory,
    # .cycle, .unresolved, .cross_trajectory, turn.dependency_order; and no cycle pass is needed)
    if preds:
        owner = np.repeat(np.arange(n), np.fromiter(map(len, deps), np.int64, n))
        row = cols.row
        pred = np.fromiter(map(row.get, preds, repeat(-1)), np.int64, len(preds))
        if not _earlier_turns(owner, pred, to, tu):
            return None
    return to, tu, rid, tid


def _requests_arrays(ch: _Checker, cols, a):
    """:func:`_requests` computed on the arrow reader's :class:`~unirl_replay.contract.workload_columns.RequestArrays`
    (the same conditions, the same state left; None: one may fire)."""
    gf = cols.facts
    parts = gf.parts
    rid, tid, eid, deps = (tuple(chain.from_iterable(p[k] for p in parts)) for k in (0, 2, 4, 10))
    cols.by_field = tuple(rid if k == 0 else tid if k == 2 else eid if k == 4 else deps if k == 10
                          else tuple(chain.from_iterable(p[k] for p in parts)) for k in range(12))  # the support scan's
    n = len(rid)
    ns_a, inp_a, dcount = a.num_samples, a.input_tokens, a.dep_counts
    scount = np.concatenate(gf.sample_counts) if gf.sample_counts else np.zeros(0, np.int64)
    fcount = np.concatenate(gf.finish_counts) if gf.finish_counts else np.zeros(0, np.int64)
    if gf.sample_ids or gf.finish_reasons or int(scount.sum()) != gf.count("sample_flat") or \
            int(fcount.sum()) != gf.count("finish_flat"):
        return None
    if not (gf.count("group_ids") == gf.count("batch_ids") == gf.count("worker_ids") == len(scount) == len(fcount)
            == gf.count("max_output_tokens") == len(ns_a) == n):
        return None
    nd = int(dcount.sum())
    if not (len(a.dep_pred) == len(a.dep_trigger) == len(a.dep_relation) == len(a.dep_absence) == len(a.dep_delay)
            == nd):
        return None
    # id.invalid (see _requests)
    if not (gf.ids_printable_ascii and gf.ids_max_bytes <= MAX_ID_CHARS):
        preds = tuple(chain.from_iterable(p[0] for p in gf.dep_parts))
        if not _ids_ok(rid, tid, *(gf.values(k) for k in ("group_ids", "batch_ids")), eid, gf.values("worker_ids"),
                       gf.values("sample_flat"), preds):
            return None
    # enum.unknown, enum.unspecified
    if not (np.isin(gf.ints("finish_flat"), list(_FINISH)).all() and np.isin(a.dep_trigger, list(_TRIGGER)).all()
            and np.isin(a.dep_relation, list(_RELATION)).all() and np.isin(a.dep_absence, list(_ABSENCE)).all()):
        return None
    # turn.index: turn_index set exactly when trajectory_id is
    to = a.traj_ord
    if not np.array_equal(to > 0, a.turn_set):
        return None
    # fanout.count, bound.count
    if int(ns_a.min()) < 1 or int(ns_a.max()) > MAX_SAMPLES:
        return None
    if not (np.array_equal(scount, ns_a) and np.array_equal(a.out_counts, ns_a) and np.array_equal(fcount, ns_a)):
        return None
    if int(dcount.max()) > MAX_DEPENDENCIES:
        return None
    # reference.engine, prefix.count, prefix.block_size
    if not _engines_and_prefix_ok(ch.engine_block, cols.offsets, eid, inp_a, a.block_sizes):
        return None
    # arrival.kind_missing / mixed_missing, arrival.dependencies
    kinds = a.arrival_kinds
    if (kinds == ARRIVAL_NONE).any() or not np.array_equal(kinds == ARRIVAL_AFTER_DEPENDENCIES, dcount > 0):
        return None
    window = ch.window_ns
    times = a.observed[kinds == ARRIVAL_OBSERVED]
    measured = a.dep_delay[a.dep_delay_set]
    for vals in (times, measured):  # units.negative, units.suspect_scale
        if len(vals) and (int(vals.min()) < 0 or (window > 0 and int(vals.max()) > SUSPECT_SCALE * window)):
            return None
    # dependency.delay_absence: exactly one of a measured delay and a reason it is absent
    if not np.array_equal(a.dep_delay_set, a.dep_absence == 0):
        return None
    # dependency.duplicate
    if nd and int(dcount.max()) > 1 and any(len(x) > 1 and len({d[0] for d in x}) != len(x) for x in deps):
        return None
    # bounds: bound.tokens, bound.model_len, bound.max_output_tokens (every request has ns >= 1 outputs)
    if int(ns_a.max()) == 1:
        tops = a.out_flat
    else:
        starts = np.zeros(n, np.int64)
        np.cumsum(a.out_counts[:-1], out=starts[1:])
        tops = np.maximum.reduceat(a.out_flat, starts)
    if n and (int(inp_a.max()) > MAX_TOKENS or int(tops.max()) > MAX_TOKENS or int(inp_a.min()) < 1):
        return None
    within = _within_model_len(ch.engines, eid, inp_a, tops)
    if within is None:
        return None
    eix, e_a, seq = within
    if (a.max_output_set & (tops > a.max_output)).any():
        return None
    # the state pass 1 leaves (see _requests)
    if len(ch.traj_ord) != 1:
        return None
    names = a.traj_names
    if not _ordinals(ch, names):
        return None
    tu = np.where(a.turn_set, a.turn, -1)
    low = ((tu + 1) << 20) | np.minimum(ns_a, (1 << 20) - 1)  # context._pack without the ordinal (< 2^53)
    ch.req = dict(zip(rid, map(operator.or_, map(operator.lshift, to.tolist(), repeat(53, n)), low.tolist())))
    tc = np.bincount(to, minlength=len(names) + 1).tolist()
    ch.traj_req_count = Counter(dict(zip(range(1, len(tc)), tc[1:])))
    ch.req_group = {r: g for r, g in zip(rid, gf.values("group_ids")) if g} if gf.any_nonempty("group_ids") else {}
    if int(ns_a.max()) > 1:
        sflat = gf.values("sample_flat")
        ends = np.cumsum(scount).tolist()
        ch.req_samples = {rid[i]: tuple(sflat[ends[i] - k:ends[i]]) for i, k in enumerate(ns_a.tolist()) if k > 1}
        if not _distinct_samples(ch.req_samples):
            return None
    else:
        ch.req_samples = {}
    ch.ids["request"] = set(cols.row)
    ch.observed = len(times)
    ch.max_offset = int(times.max()) if len(times) else 0
    _note_longest(ch, eix, e_a, seq, inp_a)
    # dependencies: each on an earlier turn of the request's own trajectory (see _requests)
    if nd:
        owner = np.repeat(np.arange(n), dcount)
        if not _earlier_turns(owner, a.dep_pred, to, tu):
            return None
    return to, tu, rid, tid


def _distinct_samples(req_samples: dict) -> bool:
    """Rule ``fanout.sample_ids``: each request's sample ids (those of n > 1; one id is distinct) are distinct."""
    return all(len(set(s)) == len(s) for s in req_samples.values())


def _ordinals(ch: _Checker, names) -> bool:
    """Number the trajectory ids ``names`` 1, 2, ... (``TraceState._ord`` in that order); False when they are
    not distinct non-empty ids (then the numbers would not be those the arrays were built with)."""
    for name in names:
        ch._ord(name)
    return len(ch.traj_ord) == len(names) + 1


def _sp_requests(ch: _Checker, cols, rid, tid) -> None:
    """``SinglePassRules._sp_request`` of every request (each has an arrival, each dependency is
    ordered: checked by :func:`_requests`), its bookkeeping only."""
    gf = cols.facts
    gh, grb, tl = ch.sp_group_hash, ch.sp_group_req_batches, ch.sp_traj_lineage
    eid = cols.engine_ids
    if not gf.any_nonempty("group_ids") and not gf.any_nonempty("batch_ids"):  # no groups, no batches named
        tids = set(tid)
        tids.discard("")
        for t, e in dict.fromkeys(zip(tid, eid)):
            if t:
                note_triple(tl, t, ("", "", e))
        ch.sp_traj_refs.update(tids)
        return
    gid, bid = gf.values("group_ids"), gf.values("batch_ids")
    if any(gid):
        for r, g, b in zip(rid, gid, bid):
            if g:
                gh[g] = (gh[g] + hash((r, g))) & _MASK
                note_one(grb, g, b)
    tids = set(tid)
    tids.discard("")
    for t, g, b, e in dict.fromkeys(zip(tid, gid, bid, eid)):
        if t:
            note_triple(tl, t, (g, b, e))
        if b:  # batch.engines: decided by the checker's _batch_engines (the batches come later)
            ch._note_batch_engine(b, e, 0, "")
    ch.sp_traj_refs.update(tids)
    ch.sp_group_refs.update(set(gid) - {""})
    ch.sp_batch_refs.update(set(bid) - {""})


def _trajectories(ch: _Checker, cols, to: np.ndarray, tu: np.ndarray) -> bool:
    """``record1`` of every Trajectory record (``_unique``, ``_good_ids``, ``_lineage1`` with its
    ``trajectory.start_order``, ``_sp_trajectory``: there are no enums) over their fields, after the
    requests (each pool slot's start order and engine noted for ``_pool_starts`` and ``_pool_engines``:
    ``slot_pool.start_order``, ``slot_pool.engines``); False: a rule may fire, or the single-pass proof would
    doubt."""
    trajs = cols.trajectories
    if not trajs:
        return True
    if "" in trajs:  # id.empty (a duplicate: the column reader declined)
        return False
    ids = list(trajs)
    if isinstance(trajs, MessageColumns):  # the arrow reader's: the fields without the messages
        col = trajs.column
        gid, bid, eid, pool, rids = (col("group_id"), col("rollout_batch_id"), col("engine_id"), col("slot_pool_id"),
                                     col("request_ids"))
        if None in ids or None in gid or None in bid or None in eid or None in pool or None in rids:
            return False  # a null where a message holds a value (its default): not this pass's case
        wid, root, first = col("worker_id"), col("root_sample_id"), col("first_turn_index")
        if None in wid or None in root:
            return False
        starts = col("start_order")
    else:
        msgs = list(trajs.values())
        gid = [m.group_id for m in msgs]
        bid = [m.rollout_batch_id for m in msgs]
        eid = [m.engine_id for m in msgs]
        pool = [m.slot_pool_id for m in msgs]
        rids = [m.request_ids for m in msgs]
        wid, root, first = [m.worker_id for m in msgs], [m.root_sample_id for m in msgs], [m.first_turn_index
                                                                                          for m in msgs]
        starts = [m.start_order if m.HasField("start_order") else None for m in msgs]
    unordered = [p for p, o in zip(pool, starts) if p and o is None]
    if unordered:
        return False  # trajectory.start_order: a trajectory holding a pool slot without its start order
    flat = list(chain.from_iterable(rids))
    if any(first):
        return False  # a resumed trajectory: the single-pass proof doubts (pass 2 decides)
    if not _ids_ok(ids, gid, bid, eid, wid, pool, root, flat):
        return False
    if not set(eid) - {""} <= ch.engine_block.keys():  # reference.engine (Trajectory.engine_id: when set)
        return False
    ch.ids["trajectory"] = set(ids)
    ch.traj_group.update(zip(ids, gid))
    names = ch.names
    ch.traj_batch.update((t, names.setdefault(be, be)) for t, be in zip(ids, zip(bid, eid)))
    for t in ids:
        ch._ord(t)
    for t, p, o, e in zip(ids, pool, starts, eid):  # slot_pool.start_order, slot_pool.engines: decided by the
        if p:                                       # checker's _pool_starts, _pool_engines (the pools come later)
            ch._note_start(p, o, 0, ch.traj_ord[t])
            if e:
                ch._pool_engine(p, e, 0, ch.traj_ord[t])
    ch.sp_group_refs.update(g for g in gid if g)
    ch.sp_batch_refs.update(b for b in bid if b)
    ch.sp_pool_refs.update(p for p in pool if p)
    lens = np.fromiter(map(len, rids), np.int64, len(rids))
    ords = np.fromiter((ch.traj_ord[t] for t in ids), np.int64, len(ids))
    # request_ids[i] is a request of this trajectory, turn i (the proof's condition; pass 2's turn.order)
    if flat:
        row = cols.row
        idx = np.fromiter(map(row.get, flat, repeat(-1)), np.int64, len(flat))
        if (idx < 0).any():
            return False
        ends = np.cumsum(lens)
        pos = np.arange(len(flat)) - np.repeat(ends - lens, lens)
        if not (np.array_equal(to[idx], np.repeat(ords, lens)) and np.array_equal(tu[idx], pos)):
            return False
    ch.sp_claims.extend(zip(ords.tolist(), lens.tolist()))
    return True


def _engines_and_prefix_ok(blocks: dict, offsets, eid, inp_a: np.ndarray, bs_a: np.ndarray) -> bool:
    """Rules ``reference.engine``, ``prefix.count`` and ``prefix.block_size`` over a trace's request columns:
    every engine id known (``blocks``: engine id -> its block size), and each request with a block size holds
    exactly ceil(input tokens / block size) prefix hashes (``offsets``: the hashes' column offsets) at its
    engine's block size, and each request without one (block size 0) holds none. False: some request may break one; the per-record rules decide and word it."""
    engines = set(eid)
    if not engines <= blocks.keys():
        return False
    has = bs_a > 0
    if has.any() or int(offsets[-1]):
        n = len(bs_a)
        counts = np.diff(offsets)
        if len(counts) != n:
            return False
        if counts[~has].any():
            return False  # hashes with block size 0: prefix.block_size, an error
    if has.any():
        b = bs_a[has]
        if not np.array_equal(counts[has], -(-inp_a[has] // b)):
            return False
        eb = (np.full(n, blocks[next(iter(engines))], np.int64) if len(engines) == 1
              else np.fromiter((blocks[e] for e in eid), np.int64, n))
        if not np.array_equal(eb[has], b):
            return False
    return True


def _within_model_len(engines_by_id: dict, eid, inp_a: np.ndarray, tops: np.ndarray
                      ) -> tuple[dict, np.ndarray, np.ndarray] | None:
    """Rule ``bound.model_len`` over the columns: input tokens + the longest output of each request within its
    engine's ``max_model_len`` (unset: :data:`MAX_TOKENS`). ``eid`` holds only known engines (checked first).

    Returns ``(engine id -> index, each request's engine index, each request's tokens)`` when every request is
    within, for the state the pass leaves; None when one may not be (the per-record rules decide)."""
    engines = sorted(set(eid))
    n = len(inp_a)
    lens = np.array([engines_by_id[e].max_model_len or MAX_TOKENS for e in engines], np.int64)
    eix = {e: k for k, e in enumerate(engines)}
    e_a = np.zeros(n, np.int64) if len(engines) == 1 else np.fromiter((eix[e] for e in eid), np.int64, n)
    seq = inp_a + tops
    if (seq > lens[e_a]).any():
        return None
    return eix, e_a, seq


def _note_longest(ch, eix: dict, e_a: np.ndarray, seq: np.ndarray, inp_a: np.ndarray) -> None:
    """The state pass 1 leaves for the capacity check: per engine, its longest request (prompt + longest output)
    and its longest prompt, in tokens, capped at :data:`MAX_TOKENS`."""
    seq_c = np.minimum(seq, MAX_TOKENS)
    prm_c = np.minimum(inp_a, MAX_TOKENS)
    for e, k in eix.items():
        sel = e_a == k
        ch.longest[e] = int(seq_c[sel].max())
        ch.longest_prompt[e] = int(prm_c[sel].max())


def _earlier_turns(owner: np.ndarray, pred: np.ndarray, to: np.ndarray, tu: np.ndarray) -> bool:
    """Each dependency (``owner`` request row -> ``pred`` predecessor row, -1: unresolved) on a known other request,
    an earlier turn (``tu``) of the owner's own trajectory (``to``: trajectory ordinal, 0 none)."""
    if (pred < 0).any() or (pred == owner).any():
        return False
    return bool((to[owner] != 0).all() and (to[pred] == to[owner]).all() and (tu[pred] >= 0).all()
                and (tu[pred] < tu[owner]).all())

