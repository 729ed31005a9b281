"""The fast conversion path writes exactly the bytes of the straightforward one: rows built from the
messages with a per-prompt HashRemap, each JSON-encoded with separators=(",", ":"). Random
workloads with fan-out, dependencies (measured, by-construction zero, dispatch / join), ids with
"#s" and non-ASCII, warm-ups, prompts without hashes, two engines; chunk sizes forced small so
every chunk boundary of the vectorised remap and writer is crossed."""

from __future__ import annotations

import json
import random

import pytest
from replay_build import c, dep, engine, index, manifest, pool, req, traj, warmup

from unirl_replay.replay.convert import agentic_mooncake, common, mooncake
from unirl_replay.replay.convert.common import HashRemap, ns_to_ms, prompt_ids, sequence_id
from unirl_replay.replay.support import check_supported

DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def reference_agentic(plan, ix, lead_ms=0.0, digest="") -> str:
    """The converter as it was before the fast path (dict rows, HashRemap, json per row)."""
    bs = plan.engine.block_size_tokens
    remap = HashRemap()
    rows = []
    for w in plan.warmups:
        key = common.WARMUP_PREFIX + w.warmup_id
        rows.append({"request_id": key, "play_id": key, "session_id": key, "model": agentic_mooncake.MODEL,
                     "input_length": w.input_tokens, "output_length": 0, "hash_ids": prompt_ids(w, remap, bs),
                     "not_before_ms": 0.0})
    origin = common.origin_of(plan.requests)
    memo: dict[str, float] = {}
    order = [rid for play in plan.play_order for rid in plan.plays[play]]
    ordinal = {rid: k for k, rid in enumerate(order)}
    width = common.ordinal_width(len(order))

    def bound(rid):  # earliest arrival the root's recorded arrival and the measured waits allow
        if rid not in memo:
            r = ix.by_id[rid]
            if not r.dependencies:
                memo[rid] = 0.0 if plan.lanes is not None else lead_ms + ns_to_ms(r.arrival.observed_offset_ns - origin)
            else:
                memo[rid] = max(bound(d.predecessor_request_id)
                                + (ns_to_ms(d.external_delay_ns) if d.HasField("external_delay_ns") else 0.0)
                                for d in r.dependencies)
        return memo[rid]

    pw = common.ordinal_width(len(plan.play_order))
    for pk, play in enumerate(plan.play_order):
        # lanes mode: upstream grants lanes in play-id string order, so the start ordinal comes first
        wp = f"{pk:0{pw}d}|{play}" if plan.lanes is not None else play
        for rid in plan.plays[play]:
            r = ix.by_id[rid]
            hids = prompt_ids(r, remap, bs)
            deps = []
            for d in r.dependencies:
                p = ix.by_id[d.predecessor_request_id]
                delay = ns_to_ms(d.external_delay_ns) if d.HasField("external_delay_ns") else 0.0
                for s in range(p.num_samples):
                    deps.append({"request_id": sequence_id(p.request_id, s, p.num_samples,
                                                           ordinal[p.request_id], width),
                                 "trigger": agentic_mooncake._TRIGGER[d.trigger], "delay_ms": delay,
                                 "relation": agentic_mooncake._RELATION[d.relation]})
            nb = lead_ms + ns_to_ms(r.arrival.observed_offset_ns - origin) if not deps else bound(rid)
            for s in range(r.num_samples):
                row = {"request_id": sequence_id(rid, s, r.num_samples, ordinal[rid], width),
                       "play_id": wp, "session_id": wp,
                       "model": agentic_mooncake.MODEL, "input_length": r.input_tokens,
                       "output_length": r.output_tokens[s], "hash_ids": hids, "not_before_ms": nb}
                if deps:
                    row["dependencies"] = deps
                rows.append(row)
    return "".join(DUMPS(x) + "\n" for x in [agentic_mooncake.header(bs, digest), *rows])


def random_workload(seed: int, two_engines: bool, lanes: bool, warm: bool):
    rnd = random.Random(seed)
    shared = [rnd.getrandbits(64) for _ in range(6)] + [0, 2**64 - 1]
    msgs, engines = [], ["e0", "e1"] if two_engines else ["e0"]
    for t in range(rnd.randrange(1, 12)):
        tid = rnd.choice([f"t{t}", f"t{t}#s1", f"tråj{t}", f'q"{t}\\'])
        eng = rnd.choice(engines)
        rids = []
        for k in range(rnd.randrange(1, 5)):
            rid = f"{tid}-{k}" + rnd.choice(["", "#s0", "é"])
            inp = rnd.randrange(1, 40)
            hashes = [rnd.choice(shared) if rnd.random() < 0.6 else rnd.getrandbits(64) for _ in range(-(-inp // 4))]
            out = tuple(rnd.randrange(1, 9) for _ in range(rnd.choice([1, 1, 2, 3])))
            deps = ()
            if rids:
                kind = rnd.random()
                if kind < 0.3:
                    d = dep(rids[-1], absence=c.DELAY_ABSENCE_NONE_BY_CONSTRUCTION)
                elif kind < 0.5:
                    d = dep(rids[-1], rnd.uniform(0, 50), trigger=c.DEPENDENCY_TRIGGER_DISPATCH,
                            relation=c.DEPENDENCY_RELATION_SPAWN)
                else:
                    d = dep(rids[-1], rnd.choice([0.0, 1.5, rnd.uniform(0, 300)]))
                deps = [d] + ([dep(rids[0], 2.0, relation=c.DEPENDENCY_RELATION_JOIN)] if len(rids) > 1
                              and rnd.random() < 0.3 else [])
            r = req(rid, inp=inp, out=out, traj=tid, turn=k, eng=eng, hashes=hashes, deps=deps,
                    at_ms=None if deps else rnd.uniform(0, 1000))
            msgs.append(r)
            rids.append(rid)
        msgs.append(traj(tid, rids, eng=eng, pool="p" if lanes else "", order=t if lanes else None))
    if lanes:
        msgs.append(pool("p", 3))
    if warm:
        msgs.append(warmup("w0", 9, shared[:3]))
        msgs.append(warmup("w1", 4, [rnd.getrandbits(64)]))
    rnd.shuffle(msgs)  # workload order differs from file (play) order
    return index(*msgs), manifest(*(engine(e) for e in engines),
                                  cache=c.CACHE_STATE_KIND_WARM_DECLARED if warm else c.CACHE_STATE_KIND_COLD)


@pytest.mark.parametrize("chunks", [(1, 1), (3, 2), (1 << 20, 1 << 14)])
@pytest.mark.parametrize("seed", range(12))
def test_fast_agentic_file_is_byte_identical(tmp_path, monkeypatch, seed, chunks):
    monkeypatch.setattr(common, "_CHUNK", chunks[0])
    monkeypatch.setattr(agentic_mooncake, "CHUNK", chunks[1])
    ix, mf = random_workload(seed, two_engines=seed % 3 == 1, lanes=seed % 3 == 2, warm=seed % 4 == 0 and seed % 3 != 2)
    plans, _ = check_supported(ix, {e.engine_id: e for e in mf.engines}, cache_state=mf.cache_state)
    assert all(p.facts is not None for p in plans.values())  # the one-pass checks recorded them
    for eid, plan in plans.items():
        for lead in (0.0, 12.25):
            conv = agentic_mooncake.convert_engine(plan, ix, lead_ms=lead, digest="d")
            got = conv.write(tmp_path / f"{eid}.jsonl").read_bytes()
            assert got == reference_agentic(plan, ix, lead, "d").encode()
            # the dict rows (produce) agree with the fast text too
            assert got.decode().splitlines()[1:] == [DUMPS(r) for r in conv.rows]
        # without recorded facts (converters read the messages) the file is the same
        plan.facts = None
        conv = agentic_mooncake.convert_engine(plan, ix, digest="d")
        assert conv.write(tmp_path / "nf.jsonl").read_bytes() == reference_agentic(plan, ix, 0.0, "d").encode()


@pytest.mark.parametrize("seed", range(6))
def test_mooncake_file_matches_hash_remap(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(common, "_CHUNK", 2)
    rnd = random.Random(seed)
    shared = [rnd.getrandbits(64) for _ in range(4)]
    msgs = []
    for i in range(30):
        inp = rnd.randrange(1, 30)
        r = req(f"r{i}", inp=inp, out=(rnd.randrange(1, 5),) * rnd.choice([1, 2]), at_ms=rnd.uniform(0, 100),
                hashes=[rnd.choice(shared) if rnd.random() < 0.5 else rnd.getrandbits(64) for _ in range(-(-inp // 4))])
        msgs.append(r)
    ix = index(*msgs)
    plans, _ = check_supported(ix, {"e0": engine()}, trace_format="mooncake")
    conv = mooncake.convert_engine(plans["e0"], ix)
    remap = HashRemap()
    origin = common.origin_of(plans["e0"].requests)
    want = []
    for r in plans["e0"].requests:
        hids = prompt_ids(r, remap, 4)
        for s in range(r.num_samples):
            want.append(DUMPS({"timestamp": ns_to_ms(r.arrival.observed_offset_ns - origin),
                               "input_length": r.input_tokens, "output_length": r.output_tokens[s],
                               "hash_ids": hids}))
    assert conv.write(tmp_path / "m.jsonl").read_text().splitlines() == want


def test_prefix_caching_off_fresh_ids_and_warmup_identical(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "_CHUNK", 2)
    ix = index(req("a", inp=9, at_ms=0, hashes=[1, 2, 3]), req("b", inp=5, at_ms=1, hashes=[1, 2]),
               req("c", inp=7, at_ms=2, hashes=[2, 1]))
    ix.by_id["b"].ClearField("prefix")
    plans, _ = check_supported(ix, {"e0": engine(pc=False)})
    conv = agentic_mooncake.convert_engine(plans["e0"], ix)
    got = conv.write(tmp_path / "x.jsonl").read_text()
    assert got == reference_agentic(plans["e0"], ix)
    assert [json.loads(x)["hash_ids"] for x in got.splitlines()[1:]] == [[0, 1, 2], [3, 4], [1, 0]]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_dense_prompt_ids_chunked_equals_hash_remap(monkeypatch, chunk):
    monkeypatch.setattr(common, "_CHUNK", chunk)
    for seed in range(20):
        rnd = random.Random(seed)
        pool_ = [rnd.getrandbits(64) for _ in range(rnd.choice([1, 5, 50]))] + [0, 2**64 - 1]
        prompts = []
        for i in range(rnd.randrange(0, 60)):
            inp = rnd.randrange(1, 40)
            r = req(f"r{i}", inp=inp, hashes=[rnd.choice(pool_) if rnd.random() < 0.5 else rnd.getrandbits(64)
                                              for _ in range(-(-inp // 4))])
            if rnd.random() < 0.15:
                r.ClearField("prefix")
            prompts.append(r)
        remap = HashRemap()
        want = [prompt_ids(p, remap, 4) for p in prompts]
        ids, off = common.dense_prompt_ids(prompts, 4)
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(prompts))] == want
