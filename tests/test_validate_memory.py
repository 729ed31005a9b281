"""validate without a table per request or the whole arrow file in memory (issue 17, flat memory):
the same TraceCheck as the previous state and reader, on every broken trace of test_validate, shuffled,
in every encoding; the arrow record stream batch by batch gives the records and errors of the table.

The previous path, for comparison: the id sets as plain sets (``context.KeysOf`` /
``outcomes.OutcomeIdsSeen``), ``SinglePassRules._sp_request`` as it was (a set of pairs per
trajectory), and ``trace_io._iter_arrow`` reading the whole table (``columnar.read_table``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_validate import CASES
from tracebuild import agentic_trace, grpo_trace, request_outcome
from unirl_replay.contract import columnar, trace_io
from unirl_replay.contract.validate import check_trace, checker, context, outcomes, single_pass
from unirl_replay.contract.validate.checker import _Checker
from unirl_replay.contract.validate.context import _Sink
from unirl_replay.contract.validate.examples import EXAMPLES, materialize
from unirl_replay.contract.trace_io import open_trace

pa = pytest.importorskip("pyarrow")

from test_columnar import HOSTILE, outcome, reseal  # noqa: E402


class _OldSeen(set):
    def __init__(self, req):
        super().__init__()

    def restore(self):
        pass


def _old_sp_request(self, r):
    """``SinglePassRules._sp_request`` before this change (a set of (group, batch) pairs per trajectory)."""
    arrival = r.arrival
    if not (r.HasField("arrival") and arrival.WhichOneof("kind")):
        self.sp_doubt = True
        return
    tid = r.trajectory_id
    gid, bid = r.group_id, r.rollout_batch_id
    if gid:
        self.sp_group_hash[gid] = (self.sp_group_hash[gid] + hash((r.request_id, gid))) & single_pass._MASK
        self.sp_group_req_batches.setdefault(gid, set()).add(bid)
    if tid:
        self.sp_traj_refs.add(tid)
        self.sp_traj_lineage.setdefault(tid, set()).add((gid, bid, r.engine_id))  # (the engine: trajectory.engine)
    if r.group_id:
        self.sp_group_refs.add(r.group_id)
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
    my_traj, my_turn, _ = context._unpack(me)
    if not my_traj or my_turn is None:
        self.sp_doubt = True
        return
    for d in deps:
        p = d.predecessor_request_id
        pv = self.req.get(p)
        if pv is None or p == rid:
            self.sp_doubt = True
            return
        p_traj, p_turn, _ = context._unpack(pv)
        if p_traj != my_traj or p_turn is None or p_turn >= my_turn:
            self.sp_doubt = True
            return


def _old_iter_arrow(f, cls, file, compat, inspect, on_error=None):
    skipped: list[str] = []
    table = columnar.read_table(f, cls, file, skipped)
    if skipped and compat is not None:
        if compat.newer:
            compat.note(file, 1, skipped)
        elif inspect:
            compat.foreign(file, 1, skipped)
    yield from columnar.messages_of(table, cls, file, on_error=on_error)


def old_check(d, **kw):
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(context, "COMPACT_FROM_RECORDS", 1 << 62)  # the dicts
        mp.setattr(context, "KeysOf", lambda d: set())
        mp.setattr(outcomes, "OutcomeIdsSeen", _OldSeen)
        mp.setattr(single_pass.SinglePassRules, "_sp_request", _old_sp_request)
        mp.setitem(trace_io._READERS, "arrow", _old_iter_arrow)
        return check_trace(d, **kw)
    finally:
        mp.undo()


def compact_check(d, **kw):
    """check_trace with the flat-array tables of a large workload (context.COMPACT_FROM_RECORDS)."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(context, "COMPACT_FROM_RECORDS", 0)
        return check_trace(d, **kw)
    finally:
        mp.undo()


def same(parts, d, enc):
    new = check_trace(parts.write(d, enc))
    old = old_check(d)
    assert new == old
    assert compact_check(d) == old
    checker.TWO_PASSES = True  # the reference pass 2 reads the state too
    try:
        assert check_trace(d) == old_check(d)
        assert compact_check(d) == old
    finally:
        checker.TWO_PASSES = False
    return new


@pytest.mark.parametrize("enc", ["binpb", "arrow", "jsonl"])
@pytest.mark.parametrize("rule,record_id,builder,mutate", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_broken_traces_same_report(rule, record_id, builder, mutate, enc, tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "MESSAGE_ROWS", 2)  # several slices and batches in the small traces
    monkeypatch.setattr(columnar, "BATCH_ROWS", 3)
    t = builder()
    mutate(t)
    res = same(t, tmp_path / "t", enc)
    assert any(v.rule == rule for v in res.violations), (rule, res.violations)


#: examples too large to read three times here (a 64 MiB line, a 256 MiB manifest: test_rule_examples reads them)
_LARGE = {"jsonl.line_too_long", "json.file_too_large"}


@pytest.mark.parametrize("rule", [r for r in EXAMPLES if r not in _LARGE])
def test_rule_examples_same_report(rule, tmp_path, monkeypatch):
    """Every rule's minimal violating example (contract/validate/examples.py): the same report from the flat
    tables as from the dicts and the previous reader, and with the reference pass 2."""
    monkeypatch.setattr(columnar, "MESSAGE_ROWS", 2)
    monkeypatch.setattr(columnar, "BATCH_ROWS", 3)
    d = materialize(EXAMPLES[rule], tmp_path / "t")
    old = old_check(d)
    assert check_trace(d) == old
    assert compact_check(d) == old
    monkeypatch.setattr(checker, "TWO_PASSES", True)
    assert check_trace(d) == old and compact_check(d) == old


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(case=st.sampled_from([None, *range(len(CASES))]), seed=st.integers(0, 2**32 - 1),
       builder=st.sampled_from([grpo_trace, agentic_trace]), enc=st.sampled_from(["binpb", "arrow"]),
       dups=st.integers(0, 3))
def test_shuffled_traces_same_report(case, seed, builder, enc, dups, tmp_path_factory):
    rng = random.Random(seed)
    if case is None:
        t = builder()
    else:
        t = CASES[case][2]()
        CASES[case][3](t)
    rng.shuffle(t.workload)
    ids = [r.request_id for r in t.requests()] or ["x"]
    for _ in range(dups):  # outcomes of the same request twice, of unknown ids twice
        t.add(request_outcome(rng.choice(ids + ["ghost"]), rng.randrange(3)))
    same(t, tmp_path_factory.mktemp("t"), enc)


@pytest.mark.parametrize("compact", [False, True])
def test_outcome_pass_leaves_the_request_table_as_it_was(compact, tmp_path, monkeypatch):
    monkeypatch.setattr(context, "COMPACT_FROM_RECORDS", 0 if compact else 1 << 62)
    t = grpo_trace()
    t.add(request_outcome(t.requests()[0].request_id, 0))  # a duplicate outcome
    d = t.write(tmp_path / "t", "binpb")
    ch = _Checker(open_trace(d, warn=False, inspect=True), _Sink(200))
    ch.manifest()
    ch.pass1()
    assert ch.compact == compact
    before = dict(ch.req)
    assert isinstance(ch.ids["request"], context.KeysOf) and set(ch.ids["request"]) == set(before)
    assert isinstance(ch.ids["trajectory"], context.KeysOf) and set(ch.ids["trajectory"]) == set(ch.traj_group)
    ch.outcomes()
    assert ch.req == before and min(before.values()) >= 0
    assert [v.rule for v in ch.v.violations if v.rule == "id.duplicate"] == ["id.duplicate"]


# -- the arrow record stream: batch by batch = the table ------------------------------------------

@pytest.mark.parametrize("rows,msg_rows", [(3, 2), (4, 4), (1 << 14, 1 << 12), (2, 5)])
def test_batches_give_the_table_records(rows, msg_rows, tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "BATCH_ROWS", rows)
    monkeypatch.setattr(columnar, "MESSAGE_ROWS", msg_rows)
    d = agentic_trace(trajectories=3, turns=3).write(tmp_path / "t", "arrow")
    from unirl_replay.v1 import outcomes_pb2, workload_pb2
    for name, cls in (("workload.arrow", workload_pb2.WorkloadRecord), ("outcomes.arrow", outcomes_pb2.OutcomeRecord)):
        with open(d / name, "rb") as f:
            old = list(columnar.messages_of(columnar.read_table(f, cls, name), cls, name))
        with open(d / name, "rb") as f:
            new = list(columnar.messages_of_batches(columnar.read_batches(f, cls, name), cls, name))
        assert new == old and len(new) > 1


@pytest.fixture
def arrow_trace(tmp_path):
    return agentic_trace(trajectories=2, turns=2).write(tmp_path / "t", "arrow")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_same_error_and_report(arrow_trace, name):
    """Every hostile file of test_columnar: the same error from the stream as from the table, and
    the same validate report."""
    reseal(arrow_trace, "workload.arrow", HOSTILE[name](arrow_trace), count=1)

    def read(reader):
        def go():
            t = open_trace(arrow_trace)
            return [r for _, r in t.iter_workload()]
        mp = pytest.MonkeyPatch()
        try:
            if reader is not None:
                mp.setitem(trace_io._READERS, "arrow", reader)
            return outcome(go)
        finally:
            mp.undo()
    got = read(None)
    assert got == read(_old_iter_arrow)
    assert got[0] == "TraceFormatError"
    assert check_trace(arrow_trace) == old_check(arrow_trace)


@pytest.mark.parametrize("turn", [0, 1, 2])
@pytest.mark.parametrize("field,value", [("group_id", "g1"), ("rollout_batch_id", "b1"), ("group_id", "")])
def test_a_trajectory_naming_two_lineages_is_reported(turn, field, value, tmp_path):
    """One request of a trajectory names another group / batch than its trajectory's others: the
    one-pass proof (one pair kept per trajectory until a second appears) must doubt, and pass 2 report it."""
    t = agentic_trace(trajectories=2, turns=3, group_size=1)
    setattr(t.request(f"traj-0/t{turn}"), field, value)
    res = same(t, tmp_path / "t", "binpb")
    assert any(v.rule == "group.request_mismatch" and v.record_id == f"traj-0/t{turn}" for v in res.violations), \
        res.violations


@pytest.mark.parametrize("enc", ["binpb", "arrow"])
def test_group_tables_numbered_in_another_order_report_in_file_order(enc, tmp_path):
    """The flat group tables number a group id when a record first names it (here the requests, in the
    reverse of the Group records' order): the per-group findings still come in file order, as with the
    dicts (batch.membership of two groups no batch lists; group.size; an unknown and a later member)."""
    t = grpo_trace(prompts=4)
    reqs = [x for x in t.workload if x.WhichOneof("record") == "request"]
    rest = [x for x in t.workload if x.WhichOneof("record") != "request"]
    t.workload[:] = reqs[::-1] + rest  # group ids first named g3, g2, g1, g0; Group records g0 .. g3
    for x in t.workload:
        kind = x.WhichOneof("record")
        if kind == "rollout_batch":
            del x.rollout_batch.group_ids[:]
            x.rollout_batch.group_ids.extend(["g1"])
        elif kind == "group" and x.group.group_id == "g2":
            x.group.member_ids.extend(["no-such-request", "req-0"])
    res = same(t, tmp_path / "t", enc)
    membership = [v.record_id for v in res.violations if v.rule == "batch.membership"]
    assert membership == ["g0", "g2", "g3"], res.violations
    assert [v.rule for v in res.violations if v.record_id == "g2"].count("group.members") == 2


def test_group_outcomes_numbered_in_another_order_report_in_file_order(tmp_path):
    """outcome.completion_order of groups whose outcomes come in another order than their ids were first
    named (the flat tables' order): file order, the same report as with the dicts; ties: the first request."""
    t = grpo_trace(prompts=4)
    outs = [x for x in t.outcomes if x.WhichOneof("record") == "group"]
    for x in outs:
        x.group.completed_ns = 1  # before every request's completion
    rest = [x for x in t.outcomes if x.WhichOneof("record") != "group"]
    t.outcomes[:] = rest + outs[::-1]  # g3 .. g0, after the requests' outcomes
    res = same(t, tmp_path / "t", "arrow")
    late = [v.record_id for v in res.violations if v.rule == "outcome.completion_order" and v.record_id.startswith("g")]
    assert late == ["g3", "g2", "g1", "g0"], res.violations


def test_slot_findings_of_trajectories_in_another_order_report_in_file_order(tmp_path):
    """A trajectory's slot acquired after its first submit and released before its last completion
    (outcome.completion_order), for trajectory outcomes in the reverse of their ordinals' order and one of
    a trajectory the workload lacks: the same report from the flat per-trajectory rows as from the dicts."""
    t = agentic_trace(trajectories=3)
    outs = [x for x in t.outcomes if x.WhichOneof("record") == "trajectory"]
    for x in outs:
        x.trajectory.slot_acquired_ns += 10**9
        x.trajectory.slot_released_ns = 1  # (time.order too)
    t.outcomes[:] = [x for x in t.outcomes if x.WhichOneof("record") != "trajectory"] + outs[::-1]
    ghost = type(outs[0])()
    ghost.trajectory.trajectory_id = "ghost"
    ghost.trajectory.slot_acquired_ns = 5
    t.outcomes.append(ghost)
    res = same(t, tmp_path / "t", "arrow")
    slot = [(v.record_id, v.message.split(" = ")[0]) for v in res.violations if v.rule == "outcome.completion_order"]
    tids = [x.trajectory.trajectory_id for x in outs[::-1]]
    assert slot == [(tid, n) for tid in tids for n in ("slot_acquired_ns", "slot_released_ns")], res.violations


def _forked_trace():
    """grpo_trace with UniRL's fork ids (``Sample.fork``: ``P/0 .. P/{n-1}``): req-0's samples fork its
    group's root id (the flat table keeps no bytes for them), req-1's fork another parent (its bytes once),
    req-2's are ids of no such shape; every sample timed."""
    t = grpo_trace(prompts=3, samples=3)
    for k, r in enumerate(t.requests()):
        parent = r.group_id if k == 0 else f"{r.request_id}:parent"
        r.sample_ids[:] = [f"{parent}/{j}" for j in range(3)] if k < 2 else [f"x{j}" for j in range(3)]
        oc = t.outcome(r.request_id)
        for s in r.sample_ids:
            oc.samples.add(sample_id=s, first_token_ns=oc.first_token_ns, completion_ns=oc.completion_ns)
    return t


def _drop_first_timing(oc):
    del oc.samples[0]


@pytest.mark.parametrize("rid", ["req-0", "req-1", "req-2"])
@pytest.mark.parametrize("mutate,found", [
    (None, None),
    (lambda oc, s: oc.samples.add(sample_id=s[0][:-1] + "00"), "is not among"),   # P/00: near-equal, not P/0
    (lambda oc, s: oc.samples.add(sample_id=s[0][:-1] + "3"), "is not among"),    # P/3: one past the last
    (lambda oc, s: oc.samples.add(sample_id=s[1]), "timed twice"),
    (lambda oc, s: _drop_first_timing(oc), "missing"),
    (lambda oc, s: setattr(oc.samples[2], "completion_ns", oc.completion_ns + 1), "after the request's"),
], ids=["valid", "near-equal", "past-the-last", "twice", "partial", "late"])
@pytest.mark.parametrize("enc", ["binpb", "arrow"])
def test_forked_sample_ids_same_report(rid, mutate, found, enc, tmp_path):
    t = _forked_trace()
    samples = list(t.request(rid).sample_ids)
    if mutate is not None:
        mutate(t.outcome(rid), samples)
    res = same(t, tmp_path / "t", enc)
    got = [v for v in res.violations if v.rule == "outcome.samples"]
    if found is None:
        assert not [v for v in res.violations if v.severity == v.SEVERITY_ERROR], res.violations
    else:
        assert [v.record_id for v in got] == [rid] and found in got[0].message, got
