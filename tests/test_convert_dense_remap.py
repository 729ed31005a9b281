"""The vectorised hash remap gives exactly what HashRemap gives prompt by prompt (first-seen dense
ids, fresh ids for prompts without hashes), and streamed rows equal materialised rows."""

from __future__ import annotations

import random

from replay_build import dep, index, manifest, req, traj, warmup

from unirl_replay.replay.convert import agentic_mooncake
from unirl_replay.replay.convert.common import HashRemap, dense_prompt_ids, prompt_ids
from unirl_replay.replay.support import check_supported


def test_dense_prompt_ids_equals_hash_remap():
    rnd = random.Random(7)
    pool = [rnd.getrandbits(64) for _ in range(40)] + [0, 2**64 - 1]
    prompts = [warmup("w", 8, [pool[0], pool[1]])]
    for i in range(300):
        inp = rnd.randrange(0, 30)
        r = req(f"r{i}", inp=inp, hashes=[rnd.choice(pool) for _ in range(-(-inp // 4))])
        if rnd.random() < 0.2:
            r.ClearField("prefix")
        prompts.append(r)
    remap = HashRemap()
    want = [prompt_ids(p, remap, 4) for p in prompts]
    ids, offsets = dense_prompt_ids(prompts, 4)
    assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(prompts))] == want
    assert dense_prompt_ids([], 4)[0].tolist() == []


def test_streamed_file_equals_materialised_rows(tmp_path):
    import json

    ix = index(req("a0", out=(2, 3), traj="A", turn=0), req("a1", traj="A", turn=1, deps=[dep("a0", 4)]),
               traj("A", ["a0", "a1"]), req("o", at_ms=2, prefix_key="a0"))
    plans, _ = check_supported(ix, {"e0": manifest().engines[0]})
    conv = agentic_mooncake.convert_engine(plans["e0"], ix)
    lines = [json.loads(x) for x in conv.write(tmp_path / "x.jsonl").read_text().splitlines()]
    assert lines[1:] == conv.rows and len(conv.sequences) == 4
    assert conv.sequences["000000|a0#s1"] == ("a0", 1) and "000000|a0" not in conv.sequences
    assert "000000|a0#s2" not in conv.sequences and "a0#s1" not in conv.sequences
