"""replay.mapback (bulk row mapping, one-call PredictedRequest) equals the runner's per-row twins."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from replay_build import engine, group, index, pool, req, traj
from replay_build import w as wpb
from unirl_replay.replay import derive, mapback
from unirl_replay.v1 import replay_pb2
from unirl_replay.replay.convert import agentic_mooncake
from unirl_replay.replay.runner import _predicted
from unirl_replay.replay.support import check_supported


@st.composite
def workloads(draw):
    n_traj = draw(st.integers(1, 4))
    msgs, rids = [], []
    for t in range(n_traj):
        tid = f"t{t}" if draw(st.booleans()) else f"t{t}#s1"
        turns = []
        for k in range(draw(st.integers(1, 3))):
            rid = draw(st.sampled_from([f"{tid}-{k}", f"{tid}#s{k}", f"{tid}-{k}#s0"]))
            if rid in rids:
                rid = f"{tid}-{k}-{len(rids)}"
            samples = draw(st.integers(1, 3))
            msgs.append(req(rid, inp=8, out=(2,) * samples, traj=tid, turn=k, at_ms=float(t) if not k else None,
                            deps=() if not k else [__import__("replay_build").dep(turns[-1], 1.0)]))
            turns.append(rid)
            rids.append(rid)
        msgs.append(traj(tid, turns, pool="p", order=t))
    msgs.append(pool("p", 2))
    return msgs, rids


def _row(rng, sid):
    row = {"request_id": sid, "arrival_time_ms": rng.uniform(0, 100)}
    for key in ("first_admit_ms", "first_token_ms", "terminal_time_ms"):
        if rng.random() < 0.8:
            row[key] = rng.uniform(0, 200)
    if rng.random() < 0.8:
        row["terminal_status"] = rng.choice(["completed", "completed", "cancelled"])
    if rng.random() < 0.7:
        row["reused_input_tokens"] = rng.choice([0, 4, None])
    return row


@settings(max_examples=100, deadline=None)
@given(w=workloads(), seed=st.integers(0, 2**32 - 1), shift=st.floats(0, 50), offset=st.integers(0, 10**12))
def test_mapping_back_equals_the_reference(w, seed, shift, offset):
    msgs, rids = w
    ix = index(*msgs)
    plans, _ = check_supported(ix, {"e0": engine()})
    conv = agentic_mooncake.convert_engine(plans["e0"], ix)
    rng = random.Random(seed)
    r0 = rids[0]
    ids = list(conv.sequences) + ["ghost", "warmup:x", r0, f"{r0}#s0", f"000000|{r0}#s9", f"000000|{r0}#s01",
                                  f"000000|{r0}#s", f"999999|{r0}", f"00000|{r0}", f"0000000|{r0}", f"00000a|{r0}",
                                  f"٠٠٠٠٠٠|{r0}"]
    ids += [f"000000|{sid}" for sid in list(conv.sequences)[:2]]  # prefixed twice
    rows = [_row(rng, sid) for sid in ids if rng.random() < 0.9]
    rows += [_row(rng, rng.choice(ids)) for _ in range(rng.randrange(3))]  # duplicates: the later row wins
    rng.shuffle(rows)
    ref = {conv.sequences[r["request_id"]]: r for r in rows if r["request_id"] in conv.sequences}
    got = mapback.map_rows(conv.sequences, rows)
    assert got == ref and all(got[k] is ref[k] for k in ref)
    for r in plans["e0"].requests:
        want = _predicted(r, ref, "e0", shift, offset)
        have = mapback.predicted_request(r.request_id, r.num_samples, got, "e0", shift, offset)
        assert have == want
        assert have.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    # values + add_predicted (what the runner builds the result from) = the same messages
    ids = [r.request_id for r in plans["e0"].requests]
    vals = mapback.predicted_values(got, ids, ix.num_samples(), shift, offset)
    res = replay_pb2.ReplayResult()
    for q in ids:
        mapback.add_predicted(res.requests, q, "e0", vals[q])
    want = [_predicted(r, ref, "e0", shift, offset) for r in plans["e0"].requests]
    assert list(res.requests) == want
    assert [m.SerializeToString(deterministic=True) for m in res.requests] == \
        [m.SerializeToString(deterministic=True) for m in want]
    # derive from values = derive from messages
    pred = dict(zip(ids, want))
    by_traj = {}
    for r in plans["e0"].requests:
        by_traj.setdefault(r.trajectory_id, []).append(r.request_id)
    trajs = derive.derive_trajectories(pred, ix.trajectories.values(), by_traj)
    out = replay_pb2.ReplayResult()
    ends = derive.derive_trajectories_values(vals, ix.trajectories.values(), by_traj, out.trajectories)
    assert list(out.trajectories) == trajs
    groups = [group("g-all", ids, len(ids)), group("g-many", ids[:2], 99), group("g-t", list(by_traj), len(by_traj),
                                                                                 unit=wpb.GROUP_UNIT_TRAJECTORIES),
              group("g-ghost", [*ids[:1], "ghost"], 2)]
    want_g = derive.derive_groups(groups, pred, {t.trajectory_id: t for t in trajs}, ix.by_id)
    got_g = derive.derive_groups_values(groups, vals, ends, ix.num_samples(), out.groups)
    assert list(out.groups) == want_g and list(got_g) == [g.group_id for g in want_g]


def test_paused_gc_restores_the_collector():
    import gc

    import pytest

    from unirl_replay.contract.gc_pause import paused_gc

    assert gc.isenabled()

    @paused_gc()
    def step(fail):
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
        if fail:
            raise ValueError("boom")

    step(False)
    assert gc.isenabled()
    with pytest.raises(ValueError):
        step(True)
    assert gc.isenabled()
    gc.disable()
    try:
        step(False)
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()


_ODD = [None, 0, 7, -3, 2**62, 2**70, True, False, 1.5, -0.0, float("nan"), float("inf"), 1e300, "12", [1.0]]


_KEYS = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "terminal_time_ms", "terminal_status",
         "reused_input_tokens")


def _odd_row(rng, plain, full=False):
    """An upstream-like row: plain finite numbers when ``plain``, else sometimes odd values;
    ``full``: every key present (None when unset), as upstream writes its rows."""
    row = _odd_row_sparse(rng, plain)
    if full:
        row = {"request_id": "x", **{k: row.get(k) for k in _KEYS}, "output_length": 3}
    return row


def _odd_row_sparse(rng, plain):
    def num(lo, hi):
        if not plain and rng.random() < 0.05:
            return rng.choice(_ODD)
        return rng.choice([rng.uniform(lo, hi), float(rng.randrange(0, 10**6)), rng.randrange(0, 10**6),
                           round(rng.uniform(lo, hi), 3)])
    row = {}
    if plain or rng.random() < 0.98:
        row["arrival_time_ms"] = num(0, 1e5)
    for key in ("first_admit_ms", "first_token_ms", "terminal_time_ms"):
        if rng.random() < 0.85:
            row[key] = num(0, 2e5)
    if rng.random() < 0.9:
        row["terminal_status"] = rng.choice(["completed", "completed", "completed", "cancelled"])
    if rng.random() < 0.8:
        row["reused_input_tokens"] = rng.choice([0, 16, None, 3.7] if plain else [0, 16, None, 3.7, "8", "x"])
    return row


def _outcome(f, *a):
    try:
        return "ok", f(*a)
    except Exception as e:  # the bulk path must raise what the reference raises
        return "raised", type(e), str(e)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 400), plain=st.booleans(), full=st.booleans(),
       shift=st.sampled_from([0.0, 12.5, 1e-3, 3.3e4]), offset=st.sampled_from([0, 7, 10**12, -5, 2**62, 2**63]))
def test_bulk_predicted_values_equal_the_per_request_values(seed, n, plain, full, shift, offset):
    rng = random.Random(seed)
    ids = [f"r{i}" for i in range(n)]
    samples = {rid: rng.choice([1, 1, 1, 1, 2, 3]) for rid in ids}
    rows = {}
    for rid in ids:
        for s in range(samples[rid]):
            if rng.random() < 0.97:
                rows[(rid, s)] = _odd_row(rng, plain, full)
    want = _outcome(mapback.predicted_values, rows, ids, samples, shift, offset)
    got = _outcome(mapback.predicted_values_bulk, rows, ids, samples, shift, offset)
    assert got[:2] == want[:2] and (got[0] == "ok" or got[2] == want[2])
    if want[0] == "ok":
        w, g = want[1], got[1]
        assert list(g) == list(w)
        assert all(type(a) is type(b) for k in w if w[k] is not None for a, b in zip(g[k], w[k]))
        assert g == w


def test_bulk_predicted_values_take_the_bulk_path():
    rng = random.Random(3)
    ids = [f"r{i}" for i in range(500)]
    samples = dict.fromkeys(ids, 1)
    for full in (False, True):
        rows = {(rid, 0): _odd_row(rng, True, full) for rid in ids}
        cols = mapback._bulk_columns([rows[(rid, 0)] for rid in ids], 2.5, 10**9)
        assert cols is not None  # plain rows: numpy, not the fallback
        assert mapback.predicted_values_bulk(rows, ids, samples, 2.5, 10**9) == \
            mapback.predicted_values(rows, ids, samples, 2.5, 10**9)


def test_map_rows_with_ids_that_are_not_strings_fail_as_the_reference():
    import pytest

    ix = index(req("a", inp=8, out=(2,), traj="t", turn=0, at_ms=0.0), traj("t", ["a"], pool="p", order=0),
               pool("p", 1))
    plans, _ = check_supported(ix, {"e0": engine()})
    seqs = agentic_mooncake.convert_engine(plans["e0"], ix).sequences
    good = {"request_id": next(iter(seqs)), "arrival_time_ms": 1.0}
    for bad in (5, None, 1.5):
        rows = [good, {"request_id": bad}]
        with pytest.raises(TypeError):
            {seqs[r["request_id"]]: r for r in rows if r["request_id"] in seqs}
        with pytest.raises(TypeError):
            mapback.map_rows(seqs, rows)
    with pytest.raises(KeyError):
        mapback.map_rows(seqs, [good, {"arrival_time_ms": 1.0}])
    assert mapback.map_rows(seqs, iter([good])) == {("a", 0): good}


def test_bulk_predicted_values_one_odd_value_among_plain_rows():
    """One odd value in otherwise plain rows (the random test usually meets several at once)."""
    rng = random.Random(5)
    ids = [f"r{i}" for i in range(200)]
    samples = dict.fromkeys(ids, 1)
    for full in (False, True):
        for key in _KEYS:
            for odd in _ODD:
                rows = {(rid, 0): _odd_row(rng, True, full) for rid in ids}
                rows[(ids[77], 0)][key] = odd
                want = _outcome(mapback.predicted_values, rows, ids, samples, 1.5, 10**6)
                got = _outcome(mapback.predicted_values_bulk, rows, ids, samples, 1.5, 10**6)
                assert got[:2] == want[:2] and (got[0] == "ok" or got[2] == want[2]), (key, odd)
                if want[0] == "ok":
                    assert got[1] == want[1]
                    assert all(type(a) is type(b) for k in want[1] if want[1][k] is not None
                               for a, b in zip(got[1][k], want[1][k]))


def _chain_workload(n_traj: int, turns: int, fan: int = 1, rev: bool = False):
    from replay_build import dep
    msgs = []
    for t in range(n_traj):
        tid = f"t{t}"
        ids = []
        for k in range(turns):
            rid = f"{tid}-{k}"
            msgs.append(req(rid, inp=8, out=(2,) * (fan if (t, k) == (0, 0) else 1), traj=tid, turn=k,
                            at_ms=float(t) if not k else None, deps=() if not k else [dep(ids[-1], 1.0)]))
            ids.append(rid)
        msgs.append(traj(tid, ids, pool="p", order=n_traj - t if rev else t))  # rev: file order != workload order
    msgs.append(pool("p", 4))
    return index(*msgs)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_traj=st.integers(1, 40), turns=st.integers(1, 4),
       fan=st.sampled_from([1, 1, 1, 2]), change=st.sampled_from(
           ["none", "none", "shuffle", "drop", "duplicate", "extra", "warm", "odd", "no_id", "ghost_id", "head",
            "short", "sep", "rest", "rest"]),
       plain=st.booleans(), rev=st.booleans(), shift=st.sampled_from([0.0, 12.5, 3.3e4]),
       offset=st.sampled_from([0, 10**12, -5, 2**63]))
def test_mapped_values_equal_mapping_then_values(seed, n_traj, turns, fan, change, plain, rev, shift, offset):
    """predicted_values_mapped = predicted_values_bulk(map_rows(...)): rows in file order (the
    positional path) and every way they can differ from it."""
    rng = random.Random(seed)
    ix = _chain_workload(n_traj, turns, fan, rev)
    plans, _ = check_supported(ix, {"e0": engine()})
    conv = agentic_mooncake.convert_engine(plans["e0"], ix)
    seqs = conv.sequences
    rows = [dict(_odd_row(rng, plain, True), request_id=sid) for sid in seqs]
    if change == "shuffle" and len(rows) > 1:
        rows[0], rows[-1] = rows[-1], rows[0]
    elif change == "drop":
        rows.pop(rng.randrange(len(rows)))
    elif change == "duplicate":
        rows.insert(rng.randrange(len(rows)), dict(rng.choice(rows)))
    elif change == "extra":
        rows.append(dict(rows[0], request_id="not-a-sequence"))
    elif change == "warm":
        rows[rng.randrange(len(rows))]["request_id"] = "warmup:x"
    elif change == "odd":
        rows[rng.randrange(len(rows))][rng.choice(_KEYS)] = rng.choice(_ODD)
    elif change == "no_id":
        del rows[rng.randrange(len(rows))]["request_id"]
    elif change == "ghost_id":
        rows[rng.randrange(len(rows))]["request_id"] = 7
    elif change in ("head", "short", "sep"):  # an id edited where the positional check compares it
        row = rows[rng.randrange(len(rows))]
        sid, w = row["request_id"], seqs.width
        row["request_id"] = (sid[:w - 1] + ("1" if sid[w - 1] == "0" else "0") + sid[w:] if change == "head"
                             else sid[:w - 2] if change == "short" else sid[:w] + ":" + sid[w + 1:])
    elif change == "rest" and len(rows) > 1:  # the first row's head with another request's id
        w = seqs.width
        rows[0]["request_id"] = rows[0]["request_id"][:w + 1] + rows[-1]["request_id"][w + 1:]
    ids = plans["e0"].ids()
    samples = dict(zip(ix.request_ids(), (ix.num_samples()[q] for q in ix.request_ids())))
    want = _outcome(lambda: mapback.predicted_values_bulk(mapback.map_rows(seqs, rows), ids, samples, shift, offset))
    got = _outcome(mapback.predicted_values_mapped, seqs, rows, ids, samples, shift, offset)
    assert got[:2] == want[:2] and (got[0] == "ok" or got[2] == want[2])
    if want[0] == "ok":
        assert got[1] == want[1]
        assert all(type(a) is type(b) for k in want[1] if want[1][k] is not None
                   for a, b in zip(got[1][k], want[1][k]))
    all_ids = list(ix.request_ids())
    cols = _outcome(mapback.predicted_columns, seqs, rows, all_ids, samples, shift, offset)
    assert cols[0] == "ok"  # never raises: on any doubt None
    if cols[1] is not None:  # the columns are the values of the dict, request by request, same types
        assert want[0] == "ok" and len(ids) == len(all_ids) and all(len(c) == len(all_ids) for c in cols[1])
        for k, q in enumerate(all_ids):
            v = tuple(c[k] for c in cols[1])
            assert v == want[1][q] and all(type(a) is type(b) for a, b in zip(v, want[1][q]))
    positional = mapback._positional(seqs, rows, samples)
    if change == "none" and fan == 1 and not rev and len(rows) >= mapback._BULK_MIN and -2**62 < offset < 2**62 \
            and plain:
        assert cols[1] is not None  # the converter's rows in workload order: columns
    if change == "none" and fan == 1:
        assert sorted(positional) == sorted(ix.request_ids())  # the positional path is taken on the converter's rows
        assert (positional == list(ix.request_ids())) == (not rev or n_traj == 1)
    elif change in ("shuffle", "drop", "duplicate", "extra", "warm", "no_id", "ghost_id", "head", "short",
                    "sep") or change == "rest" and len(rows) > 1 or fan > 1:
        assert positional is None or change == "shuffle" and len(rows) == 1


def test_mapped_values_for_requests_outside_the_file():
    ix = _chain_workload(30, 3, rev=True)
    plans, _ = check_supported(ix, {"e0": engine()})
    seqs = agentic_mooncake.convert_engine(plans["e0"], ix).sequences
    rng = random.Random(1)
    rows = [dict(_odd_row(rng, True, True), request_id=sid) for sid in seqs]
    ids = plans["e0"].ids()
    samples = {q: 1 for q in ix.request_ids()} | {"ghost": 1, "ghost2": 2}
    for extra in ([], ["ghost"], ["ghost", "ghost2"], ids[:1]):
        want = mapback.predicted_values_bulk(mapback.map_rows(seqs, rows), ids + extra, samples, 0.5, 10)
        assert mapback.predicted_values_mapped(seqs, rows, ids + extra, samples, 0.5, 10) == want
    assert mapback._positional(seqs, rows, samples) is not None


def test_heads_are_the_ordinal_prefixes():
    for n in (0, 1, 9, 10, 11, 999, 1000, 1001, 123457):
        for w in (1, 2, 3, 6, 7):
            assert mapback._heads(n, w) == "".join(f"{k:0{w}d}|" for k in range(n)), (n, w)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_traj=st.integers(0, 30), n_req=st.integers(0, 120),
       none_rate=st.sampled_from([0.0, 0.0, 0.05, 0.5]), lonely=st.sampled_from([0.0, 0.2, 1.0]))
def test_trajectories_from_columns_equal_the_values_path(seed, n_traj, n_req, none_rate, lonely):
    """derive_trajectories_columns = derive_trajectories_values on the same requests: requests
    naming trajectories, no trajectory, an unknown one or the id ""; trajectories no request names
    (their own request_ids: known, unknown, none); completions absent; int64 extremes."""
    rng = random.Random(seed)
    tids = [f"t{k}" for k in range(n_traj)] + ([""] if rng.random() < 0.3 else [])
    rng.shuffle(tids)
    ids = [f"r{k}" for k in range(n_req)]
    named = [t for t in tids if rng.random() >= lonely]
    choices = named + ["", "ghost"]
    of = [rng.choice(choices) for _ in ids]
    big = 2**63 - 1
    arrival = [rng.choice([0, -big - 1, big, rng.randrange(-10**15, 10**15)]) for _ in ids]
    completion = [None if rng.random() < none_rate else rng.choice([0, big, -big - 1, rng.randrange(-10**15, 10**15)])
                  for _ in ids]
    trajectories = {t: wpb.Trajectory(trajectory_id=t, request_ids=rng.sample(ids + ["nope"], min(3, len(ids) + 1))
                                      if rng.random() < 0.8 else []) for t in tids}
    values = {q: (a, None, None, e, 0) for q, a, e in zip(ids, arrival, completion)}
    by_traj: dict = {}
    for q, t in zip(ids, of):
        if t:
            by_traj.setdefault(t, []).append(q)
    want, got = replay_pb2.ReplayResult(), replay_pb2.ReplayResult()
    built = []
    ends_want = derive.derive_trajectories_values(values, trajectories.values(), by_traj, want.trajectories)
    ends_got = derive.derive_trajectories_columns(trajectories, of, arrival, completion,
                                                  lambda: built.append(1) or values, got.trajectories)
    assert ends_got == ends_want
    assert list(ends_got) == list(ends_want)
    assert got.SerializeToString() == want.SerializeToString()
    assert [t.HasField("start_ns") for t in got.trajectories] == [t.HasField("start_ns") for t in want.trajectories]
    assert not built or any(t not in by_traj for t in tids)  # the values are built only for a lonely trajectory


def _two_replays(run, monkeypatch, real, out):
    """``run()`` twice on the same upstream answers (the real upstream called the first time only):
    once with the bulk paths forced on every size (positional mapping, the column writer), once
    with them off (the composition map_rows + predicted_values_bulk and encode(to_dict), main's
    paths); returns the two written results (bytes) and the first result."""
    from unirl_replay.replay import runner
    from unirl_replay.contract import json_write
    from unirl_replay.replay.simulators import dynamo

    answers = []

    def recording(*a, **k):
        answers.append(real(*a, **k))
        return answers[-1]
    monkeypatch.setattr(dynamo, "run_upstream", recording)
    monkeypatch.setattr(json_write, "_ROWS_MIN", 0)
    monkeypatch.setattr(mapback, "_BULK_MIN", 1)
    first = run()
    a = runner.write_result(out / "fast", first).read_bytes()
    replayed = iter(answers)
    monkeypatch.setattr(dynamo, "run_upstream", lambda *a, **k: next(replayed))
    monkeypatch.setattr(json_write, "_ROWS_MIN", 10**9)
    monkeypatch.setattr(mapback, "_positional", lambda *a: None)
    b = runner.write_result(out / "slow", run()).read_bytes()
    assert next(replayed, None) is None
    return a, b, first


def test_whole_replay_writes_the_same_bytes_with_and_without_the_bulk_paths(tmp_path, monkeypatch):
    """Real upstream: two bundled traces and a 180-request chain workload replayed and written
    with the positional mapping and the column writer forced on every size, and with both off;
    the same replay_result.json bytes."""
    import pytest

    pytest.importorskip("dynamo.replay")
    from pathlib import Path

    from replay_build import manifest
    from unirl_replay.replay import runner
    from unirl_replay.replay.simulators import dynamo

    real_upstream = dynamo.run_upstream

    root = Path(__file__).resolve().parents[1] / "traces"
    cases = [(lambda: runner.replay_trace(root / "grpo-a", "fixed:20,2")),
             (lambda: runner.replay_trace(root / "agentic-a", "fixed:20,2",
                                          unmodelled=("engine_client.inflight_limit",))),
             (lambda: runner.replay_workload(_chain_workload(60, 3, rev=True), manifest(), "fixed:20,2")),
             (lambda: runner.replay_workload(_chain_workload(70, 3), manifest(), "fixed:20,2"))]
    taken = []
    columns = []
    real_columns = runner._columns_result
    monkeypatch.setattr(runner, "_columns_result", lambda *a: columns.append(1) or real_columns(*a))
    real_positional = mapback._positional
    monkeypatch.setattr(mapback, "_positional", lambda *a: taken.append(real_positional(*a)) or taken[-1])
    for k, run in enumerate(cases):
        a, b, res = _two_replays(run, monkeypatch, real_upstream, tmp_path / str(k))
        assert len(res.requests) >= 16
        assert a == b
        monkeypatch.setattr(mapback, "_positional", lambda *a: taken.append(real_positional(*a)) or taken[-1])
    assert any(t is not None for t in taken)  # the positional path ran on real upstream rows
    assert columns  # and the per-request part from columns (runner._columns_result) in the fast replays


class _RowsSimulator:
    """A simulator answering the converter's file with rows in file order, their values random
    (some not completed, some fields absent): what the upstream can answer, without running it."""

    timing_types = ("fixed",)

    def __init__(self, seed: int, odd: float):
        self.rng, self.odd = random.Random(seed), odd

    def identity(self):
        from unirl_replay.replay.simulators import Identity
        return Identity("fake", "0")

    def run(self, job):
        import json

        from unirl_replay.replay.simulators import SimulatorRun
        rows = []
        with open(job.trace_file) as f:
            for line in f:
                rec = json.loads(line)
                if "request_id" not in rec:
                    continue  # the header
                rng = self.rng
                a = round(rng.uniform(0, 1e4), 3)
                row = {"request_id": rec["request_id"], "arrival_time_ms": a, "first_admit_ms": a + 1.0,
                       "first_token_ms": a + 2.5, "terminal_time_ms": a + rng.uniform(3, 900),
                       "terminal_status": "completed", "reused_input_tokens": rng.choice([0, 4, 8])}
                if rng.random() < self.odd:
                    key = rng.choice(["first_admit_ms", "first_token_ms", "terminal_time_ms", "terminal_status"])
                    row[key] = "cancelled" if key == "terminal_status" else None
                rows.append(row)
        return SimulatorRun(per_request=rows, summary={"completed_requests": len(rows)}, wall_ns=1)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_traj=st.integers(22, 40), odd=st.sampled_from([0.0, 0.1, 0.6]),
       lonely=st.booleans())
def test_columns_result_equals_the_values_path(tmp_path_factory, seed, n_traj, odd, lonely):
    """runner._columns_result (the positional case) writes what the values-dict path writes:
    requests (incomplete ones, absent fields), makespan, notes, trajectories (one no request
    names), groups of samples and of trajectories, batches."""
    from replay_build import batch, dep, manifest
    from unirl_replay.replay import runner

    msgs, tids, ids = [], [], []
    for t in range(n_traj):
        tid = f"t{t}"
        rids = []
        for k in range(3):
            rid = f"{tid}-{k}"
            msgs.append(req(rid, inp=8, out=(2,), traj=tid, turn=k, at_ms=float(t) if not k else None,
                            deps=() if not k else [dep(rids[-1], 1.0)]))
            rids.append(rid)
        msgs.append(traj(tid, rids, pool="p", order=t))
        tids.append(tid)
        ids += rids
    if lonely:
        msgs.append(traj("t-lonely", ids[:2], pool="p", order=n_traj))
    msgs += [group("g-s", ids[:6], 6, batch="b"), group("g-t", tids[:4], 4, unit=wpb.GROUP_UNIT_TRAJECTORIES, batch="b"),
             group("g-big", ids[:3], 9), batch("b", ["g-s", "g-t"]),
             batch("b1", ["g-s", "g-t", "g-big"], rule=wpb.BATCH_READINESS_RULE_FIRST_N_GROUPS, n=2),
             pool("p", 4)]
    out = tmp_path_factory.mktemp("cols")
    taken = []
    real = runner._columns_result

    def spy(*a):
        taken.append(1)
        return real(*a)
    runner._columns_result, saved = spy, runner._columns_result
    try:
        fast = runner.replay_workload(index(*msgs), manifest(), "fixed:20,2", simulator=_RowsSimulator(seed, odd))
    finally:
        runner._columns_result = saved
    saved = mapback.predicted_columns
    mapback.predicted_columns = lambda *a: None
    try:
        slow = runner.replay_workload(index(*msgs), manifest(), "fixed:20,2", simulator=_RowsSimulator(seed, odd))
    finally:
        mapback.predicted_columns = saved
    assert taken  # the columns path ran on the first replay (3 * n_traj >= mapback._BULK_MIN rows)
    a = runner.write_result(out / "fast", fast).read_bytes()
    b = runner.write_result(out / "slow", slow).read_bytes()
    assert a == b
    assert fast.SerializeToString(deterministic=True) == slow.SerializeToString(deterministic=True)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_traj=st.integers(22, 100), odd=st.sampled_from([0.0, 0.1, 0.6]))
def test_a_handover_keeps_the_rows_and_writes_the_same_bytes(tmp_path_factory, seed, n_traj, odd):
    """replay_workload(handover=h): the rows of the upstream's answer are kept in h (without one they are
    freed when it returns: the library keeps nothing) and its request columns are those of the result, so
    write_result(handover=h) writes the requests from them (taken: spied) and the same bytes as from the
    messages, on rows with incomplete requests and absent fields, short and long results."""
    import weakref

    from fake_upstream import FakeUpstream
    from replay_build import manifest
    from unirl_replay.contract import json_write
    from unirl_replay.replay import runner

    work = _chain_workload(n_traj, 3)
    out = tmp_path_factory.mktemp("handover")
    plain_sim = FakeUpstream(seed, odd)
    plain = runner.replay_workload(work, manifest(), "fixed:20,2", simulator=plain_sim)
    assert plain_sim.answers[0]() is None  # no handover: the rows were freed on return
    sim = FakeUpstream(seed, odd)
    h = runner.Handover()
    res = runner.replay_workload(work, manifest(), "fixed:20,2", simulator=sim, handover=h)
    assert sim.answers[0]() is not None and len(h.upstream) == 1
    assert res.SerializeToString(deterministic=True) == plain.SerializeToString(deterministic=True)
    ids, eid, cols = h.requests
    assert ids == [r.request_id for r in res.requests] and eid == "e0"
    used = []
    real = json_write._given_columns
    json_write._given_columns = lambda *a: used.append(real(*a)) or used[-1]
    try:
        a = runner.write_result(out / "h", res, handover=h).read_bytes()
    finally:
        json_write._given_columns = real
    b = runner.write_result(out / "plain", plain).read_bytes()
    assert a == b
    assert used == [] if len(ids) < json_write._ROWS_MIN else used and used[0] is not None
    ref = weakref.ref(h.upstream[0]["e0"][1])
    del h
    assert ref() is None  # dropping the handover frees the rows


def test_a_handover_without_request_columns_writes_from_the_messages(tmp_path):
    """Two engines (no positional columns): the handover keeps the rows, has no request columns, and
    write_result(handover=...) writes what write_result without one writes."""
    from fake_upstream import FakeUpstream
    from replay_build import engine, manifest
    from unirl_replay.replay import runner

    msgs = [req(f"a{k}", at_ms=float(k)) for k in range(70)] + [req(f"b{k}", at_ms=float(k), eng="e1")
                                                                for k in range(70)]
    h = runner.Handover()
    res = runner.replay_workload(index(*msgs), manifest(engine("e0"), engine("e1")), "fixed:20,2",
                                 simulator=FakeUpstream(3), handover=h)
    plain = runner.replay_workload(index(*msgs), manifest(engine("e0"), engine("e1")), "fixed:20,2",
                                   simulator=FakeUpstream(3))
    assert h.requests is None and len(h.upstream[0]) == 2
    assert (runner.write_result(tmp_path / "h", res, handover=h).read_bytes()
            == runner.write_result(tmp_path / "p", plain).read_bytes())


def _heads_and_rests_by_strings(got, order, w):
    return [s[w + 1:] for s in got] == order and "".join([s[:w + 1] for s in got]) == mapback._heads(len(got), w)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.sampled_from("ab|0 é"), max_size=4), min_size=1, max_size=12), st.integers(1, 3),
       st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["drop", "head", "rest", "extra", "swap"])), max_size=2))
def test_heads_and_rests_is_the_string_comparison(order, w, edits):
    """mapback._heads_and_rests (the joined ids compared in numpy) answers as the per-string comparison it
    replaces wherever it answers (ASCII ids), on exact upstream ids and edited ones."""
    heads = mapback._heads(len(order), w)
    per = len(heads) // len(order) if len(str(len(order) - 1)) <= w else None
    got = [f"{k:0{w}d}{mapback.ORDINAL_SEP}{r}" for k, r in enumerate(order)]
    for k, how in edits:
        k %= len(got)
        s = got[k]
        got[k] = {"drop": s[:-1], "head": "9" + s[1:], "rest": s + "x", "extra": s[:w] + "|" + s[w:],
                  "swap": got[(k + 1) % len(got)]}[how]
    fast = mapback._heads_and_rests(got, order, w)
    if "".join(got).isascii():
        assert fast is not None
    if fast is not None:
        assert fast == _heads_and_rests_by_strings(got, order, w)
    if not edits and per == w + 1:
        assert fast in (None, True)
