"""validate's compact tables (contract/validate/strtable.py) against the dicts they replace: the same answers
for every operation the rule groups use, on random keys (unicode, lone surrogates, empty, long, near-equal),
across index growth, and on keys built to share hash slots."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirl_replay.contract.validate.strtable import (IntColumn, NamesView, NoIntern, OrdColumn, OrdInt, OrdPair,
                                                     OrdSet, OrdView, PackedMap, PairList, SampleColumn, SideColumn,
                                                     SideInt, StrTable)

KEYS = st.one_of(st.text(max_size=12), st.sampled_from(["", "a", "a\x00", "\ud800", "\udfff", "é", "e\u0301",
                                                        "r" * 300, "req-0", "req-00"]))
VALUES = st.integers(min_value=-(1 << 70), max_value=1 << 70)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(KEYS, VALUES), max_size=300), st.lists(KEYS, max_size=50))
def test_packed_map_is_a_dict(pairs, probes):
    m, d = PackedMap(), {}
    for k, v in pairs:
        m[k] = v
        d[k] = v
        assert m[k] == v and len(m) == len(d)
    assert list(m.items()) == list(d.items()) and list(m) == list(d) and list(m.values()) == list(d.values())
    assert m == d and dict(m) == d
    for k in probes + [k for k, _ in pairs]:
        assert (k in m) == (k in d) and m.get(k) == d.get(k) and m.get(k, "x") == d.get(k, "x")
        if k not in d:
            with pytest.raises(KeyError):
                m[k]
    assert 3 not in m and m.get(None) is None  # a non-str is never a key


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(KEYS, st.integers(min_value=0, max_value=(1 << 60)))))
def test_marks_are_undone(pairs):
    m = PackedMap()
    for k, v in pairs:
        m[k] = v
    before = list(m.items())
    for i, (k, v) in enumerate(m.items()):
        if i % 2:
            m[k] = ~v
    m.unmark_all()
    assert list(m.items()) == before


def test_table_numbers_in_first_added_order_and_grows():
    t = StrTable([""])
    keys = [f"traj-{i}" for i in range(70_000)] + ["é", "\ud800", "x" * 1000]
    for k in keys:
        t.add(k)
    assert len(t) == len(keys) + 1 and t.find("") == 0
    assert all(t.find(k) == i + 1 and t.key(i + 1) == k for i, k in enumerate(keys))
    assert t.add("traj-5") == 6 and len(t) == len(keys) + 1  # an existing id keeps its number
    assert t.find("traj-70000") == -1 and t.find("traj-") == -1
    assert list(t) == [""] + keys
    with pytest.raises(IndexError):
        t.key(len(t))
    with pytest.raises(TypeError):
        t.add(b"bytes")  # type: ignore[arg-type]


def test_keys_sharing_one_hash_are_told_apart_by_their_bytes(monkeypatch):
    import unirl_replay.contract.validate.strtable as mod
    monkeypatch.setattr(mod, "hash", lambda k: 42, raising=False)
    t = StrTable()
    keys = ["a", "b", "ab", "", "é", "\ud800"] + [str(i) for i in range(40)]
    for k in keys:
        t.add(k)
    assert [t.find(k) for k in keys] == list(range(len(keys))) and t.find("zz") == -1


def test_views_columns_and_counters():
    t = StrTable([""])
    ords, names = OrdView(t), NamesView(t)
    grp, bat = OrdColumn(t), OrdColumn(t)
    grp["t1"] = "g0"
    bat["t1"] = ("b0", "e0")
    grp["t2"] = "g0"
    assert ords.get("t1") == 1 and ords["t2"] == 2 and ords.get("t3", -1) == -1 and "" in ords and len(ords) == 3
    assert names[2] == "t2" and names == ["", "t1", "t2"]
    assert grp["t1"] == "g0" and grp.get("t3") is None and "t2" in grp and "t2" not in bat and len(grp) == 2
    assert list(grp.items()) == [("t1", "g0"), ("t2", "g0")] and list(bat.keys()) == ["t1"]
    assert bat.get("t2", ("", "")) == ("", "") and bat.at(1) == ("b0", "e0") and not bat.has(2)
    s = grp.setdefault("t4", set())
    s.add(1)
    assert grp["t4"] == {1} and grp.setdefault("t4", set()) is s
    grp["t4"] = "g1"
    assert grp["t4"] == "g1" and 4 not in grp.extra and len(grp) == 3
    c = IntColumn()
    c[5] += 1
    c[5] += 1
    assert c.get(5, 0) == 2 and c.get(-1, 0) == 0 and c.get(99, 0) == 0 and c[0] == 0
    assert c.get(5) == Counter({5: 2}).get(5)
    p = PairList()
    p.append((1, 2))
    p.extend([(3, 4), (5, 6)])
    assert list(p) == [(1, 2), (3, 4), (5, 6)] and len(p) == 3


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(KEYS, st.booleans(), st.sampled_from(["g0", "g1", ""]))))
def test_side_column_is_a_dict_over_the_request_table(rows):
    req, d = PackedMap(), {}
    side = SideColumn(req)
    for k, grouped, g in rows:
        req[k] = 1
        if grouped:
            side[k] = g
            d[k] = g
    order = {k: i for i, k in enumerate(req)}
    assert list(side.items()) == sorted(d.items(), key=lambda kv: order[kv[0]])
    assert len(side) == len(d) and bool(side) == bool(d)
    for k, _, _ in rows:
        assert side.get(k, "-") == d.get(k, "-") and (k in side) == (k in d)
    with pytest.raises(KeyError):
        side["not-a-request"] = "g0"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(KEYS, st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)), max_size=200),
       st.lists(st.tuples(KEYS, st.integers(min_value=0, max_value=(1 << 64) - 1)), max_size=200),
       st.lists(KEYS, max_size=30), st.lists(KEYS, max_size=30))
def test_ord_int_is_a_dict_and_a_counter(signed, unsigned, named_first, probes):
    """OrdInt (group_line, group_unit; sp_group_hash and sp_group_batches as Counters) against a dict / Counter,
    with keys of the shared table named before they are set (its iteration: in the table's order)."""
    t = StrTable(named_first)
    plain, ctr = OrdInt(t), OrdInt(t, counter=True, unsigned=True)
    d, c = {}, Counter()
    for k, v in signed:
        plain[k] = v
        d[k] = v
    for k, v in unsigned:
        ctr[k] = (ctr[k] + v) & ((1 << 64) - 1)
        c[k] = (c[k] + v) & ((1 << 64) - 1)
    order = {k: i for i, k in enumerate(t)}
    assert list(plain.items()) == sorted(d.items(), key=lambda kv: order[kv[0]]) and len(plain) == len(d)
    assert dict(ctr.items()) == dict(c) and sorted(ctr.values()) == sorted(c.values()) and len(ctr) == len(c)
    for k in [*probes, *d, *c, 3, None]:
        assert plain.get(k, "-") == d.get(k, "-") and (k in plain) == (k in d)
        assert ctr[k] == c[k] and (k in ctr) == (k in c)
        if k not in d:
            with pytest.raises(KeyError):
                plain[k]


SAMPLES = st.lists(KEYS, min_size=0, max_size=5).map(tuple)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(KEYS, st.booleans(), SAMPLES), max_size=200), st.lists(KEYS, max_size=30))
def test_sample_column_is_a_dict_of_tuples(rows, probes):
    """SampleColumn (req_samples) against a dict of tuples: the same samples back, in order, for keys of
    the request table; a key outside it refused; a request's samples entered once."""
    req, col, d = PackedMap(), None, {}
    col = SampleColumn(req)
    for k, has, samples in rows:
        if k in d or k in req:
            continue
        req[k] = 1
        if has:
            col[k] = samples
            d[k] = samples
    assert dict(col.items()) == d and len(col) == len(d) and set(col) == set(d)
    for k in [*probes, *d, 7]:
        assert col.get(k, "-") == d.get(k, "-") and (k in col) == (k in d)
    for k in d:
        assert col[k] == d[k]
        with pytest.raises(ValueError):
            col[k] = ("again",)
    with pytest.raises(KeyError):
        col["\x00not-a-request"] = ("s",)


PARENTS = st.one_of(KEYS, st.sampled_from(["r0:prompt:0:sample:0", "g0", "g0/1", "", "/", "\ud800"]))


def _forked(parent: str, n: int, tweak: int) -> tuple[str, ...]:
    """UniRL's fork ids of ``parent`` (``P/0 .. P/{n-1}``), one of them near-equal when ``tweak`` > 0."""
    ids = [f"{parent}/{j}" for j in range(n)]
    if tweak and ids:
        k = tweak % len(ids)
        ids[k] = [ids[k] + "0", ids[k][:-1] + "0" + ids[k][-1], f"{parent}/{k + 1}", f"{parent}//{k}",
                  f"{parent}x/{k}"][tweak % 5]
    return tuple(ids)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(KEYS, PARENTS, st.integers(0, 12), st.integers(0, 6), st.booleans()), max_size=150),
       st.lists(PARENTS, max_size=10))
def test_sample_column_forked_ids_are_exact(rows, groups):
    """UniRL's fork ids (P/0 .. P/{n-1}) stored as P (in the group table or not) come back exactly; ids
    that only look like them (a wrong index, an extra character, a gap) are kept id by id: the same
    answers as a dict of tuples either way."""
    req, names = PackedMap(), StrTable(groups)
    col, d = SampleColumn(req, names), {}
    for k, parent, n, tweak, grouped in rows:
        if k in req:
            continue
        req[k] = 1
        if grouped:
            names.add(parent)
        d[k] = col_in = _forked(parent, n, tweak)
        col[k] = col_in
    assert dict(col.items()) == d and len(col) == len(d)
    for k in d:
        assert col[k] == d[k] and col.get(k) == d[k]
    derived = sum(1 for f in col.form if f != 0)
    assert derived == sum(1 for t in d.values() if t and t == _forked(t[0][:-2], len(t), 0)
                          and t[0].endswith("/0"))


def test_sample_column_holds_no_bytes_for_a_groups_forks():
    """The batch GRPO shape (a request's samples are its group's root id / j): no sample bytes kept."""
    req, names = PackedMap(), StrTable()
    col = SampleColumn(req, names)
    for i in range(100):
        g = f"r0:prompt:{i}:sample:0"
        names.add(g)
        req[f"req-{i}"] = 0
        col[f"req-{i}"] = [f"{g}/{j}" for j in range(4)]
    req["other"] = 0
    col["other"] = ["a/0", "a/1"]  # P not a group: its bytes once
    req["plain"] = 0
    col["plain"] = ["x", "y"]
    assert len(col.blob) == len("a") + len("xy")
    assert col["req-7"] == tuple(f"r0:prompt:7:sample:0/{j}" for j in range(4))
    assert col["other"] == ("a/0", "a/1") and col["plain"] == ("x", "y")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["req", "member", "both"]), KEYS, st.sampled_from(["g0", "g1", "é"])),
                max_size=200), st.lists(KEYS, max_size=30))
def test_side_column_with_a_value_table_and_other_keys_is_a_dict(ops, probes):
    """SideColumn as member_group (values numbered in the group table; ids no request has, or not yet, kept
    in ``other``) against a dict: the same answers, setdefault included; items: the map's keys, then others."""
    req, groups = PackedMap(), StrTable()
    side, d = SideColumn(req, groups, other=True), {}
    for op, k, g in ops:
        if op in ("req", "both") and k not in req:
            req[k] = 0
        if op in ("member", "both"):
            assert side.setdefault(k, g) == d.setdefault(k, g)
    assert dict(side.items()) == d and len(side) == len(d) and bool(side) == bool(d)
    assert sorted(side.values()) == sorted(d.values())
    for k in [*probes, *d, 1]:
        assert side.get(k, "-") == d.get(k, "-") and (k in side) == (k in d)
    assert set(groups) >= {v for k, v in d.items() if k in req and k not in side.other}
    assert NoIntern().setdefault("g", "g") == "g" and len(NoIntern()) == 0


I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(KEYS, I64, I64), max_size=200), st.lists(st.tuples(KEYS, st.booleans(), I64), max_size=200),
       st.lists(KEYS, max_size=30), st.lists(KEYS, max_size=30))
def test_outcome_tables_are_dicts_and_sets(pairs, reqs, named_first, probes):
    """OrdPair (group_done), OrdSet (the group outcomes seen) and SideInt (req_done) against a dict / set."""
    t = StrTable(named_first)
    pair, members, d, s = OrdPair(t), OrdSet(t), {}, set()
    for k, a, b in pairs:
        pair[k] = (a, b)
        d[k] = (a, b)
        members.add(k)
        s.add(k)
    order = {k: i for i, k in enumerate(t)}
    assert list(pair.items()) == sorted(d.items(), key=lambda kv: order[kv[0]]) and len(pair) == len(d)
    assert bool(pair) == bool(d) and sorted(members, key=order.get) == sorted(s, key=order.get) and len(members) == len(s)
    req, di = PackedMap(), {}
    side = SideInt(req)
    for k, done, v in reqs:
        req[k] = 0
        if done:
            side[k] = v
            di[k] = v
    assert dict(side.items()) == di and len(side) == len(di)
    for k in [*probes, *d, *di, 5]:
        assert pair.get(k, "-") == d.get(k, "-") and (k in pair) == (k in d) and (k in members) == (k in s)
        assert side.get(k, "-") == di.get(k, "-") and (k in side) == (k in di)
    with pytest.raises(KeyError):
        side["\x00not-a-request"] = 1


def test_the_fuzzers_mutants_get_the_same_report_from_both_tables(tmp_path, monkeypatch):
    """Every trace the mutation fuzzer writes (tests/fuzzlib.py), validated with the dicts and with the flat
    arrays of a large workload (context.COMPACT_FROM_RECORDS): the same TraceCheck, violation for violation."""
    import fuzzlib

    from unirl_replay.contract.validate import check_trace, context

    compared, differ = [], []

    def both(d, **kw):
        monkeypatch.setattr(context, "COMPACT_FROM_RECORDS", 1 << 62)
        dicts = check_trace(d, **kw)
        monkeypatch.setattr(context, "COMPACT_FROM_RECORDS", 0)
        flat = check_trace(d, **kw)
        monkeypatch.setattr(context, "COMPACT_FROM_RECORDS", 1 << 62)
        compared.append(d)
        if flat != dicts:
            differ.append((str(d), dicts, flat))
        return dicts

    monkeypatch.setattr(fuzzlib, "check_trace", both)
    fuzzlib.fuzz(60, seed=29, work=tmp_path, replay_every=1 << 30)
    assert len(compared) >= 60 and not differ, differ[:1]
