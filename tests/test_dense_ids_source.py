"""The dense first-seen ids computed with a key source (the column readers' own copies of the keys:
``WorkloadColumns.key_source``; ``keys`` sorted in place, the numbering pass reading the source) equal
the ids computed from a sorted copy, and HashRemap's, on random keys cut into random parts."""

from __future__ import annotations

import random

import numpy as np
import pytest

from unirl_replay.replay.convert import common
from unirl_replay.replay.convert.common import HashRemap


def _parts(keys: np.ndarray, rnd: random.Random) -> list[np.ndarray]:
    cuts = sorted(rnd.randrange(0, len(keys) + 1) for _ in range(rnd.randrange(0, 6)))
    bounds = [0, *cuts, len(keys)]
    out = [keys[a:b].copy() for a, b in zip(bounds, bounds[1:])]
    for p in out:
        p.flags.writeable = False  # the arrow reader's views of the mapped file are read-only
    return out


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("seed", range(12))
def test_source_ids_equal_copy_ids(monkeypatch, seed, chunk):
    monkeypatch.setattr(common, "_CHUNK", chunk)
    rnd = random.Random(seed)
    n = rnd.choice([0, 1, 2, 17, 300, 2000])
    pool = [rnd.getrandbits(64) for _ in range(rnd.choice([1, 5, 50, 5000]))] + [0, 2**64 - 1]
    vals = [rnd.choice(pool) if rnd.random() < 0.6 else rnd.getrandbits(64) for _ in range(n)]
    keys = np.array(vals, np.uint64)
    parts = _parts(keys, rnd)
    remap = HashRemap()
    want = remap.ids(vals)
    for dtype in (np.uint32, np.int64):
        plain = common._first_seen_ids(keys.copy(), None, dtype)
        src = common._first_seen_ids(keys.copy(), None, dtype, parts)
        assert plain.tolist() == src.tolist() == want


def test_no_repeats_and_all_equal():
    for vals in ([5, 6, 7, 8], [9] * 50):
        keys = np.array(vals, np.uint64)
        got = common._first_seen_ids(keys.copy(), None, np.uint32, [keys[:1].copy(), keys[1:].copy()])
        assert got.tolist() == HashRemap().ids(vals)


def test_fresh_blocks_ignore_the_source():
    keys = np.array([1, 2, 1, 3, 2], np.uint64)
    fresh = np.array([False, True, False, False, False])
    want = common._first_seen_ids(keys.copy(), fresh, np.uint32)
    got = common._first_seen_ids(keys.copy(), fresh, np.uint32, [keys.copy()])
    assert got.tolist() == want.tolist()


def test_readers_set_the_source_and_the_converted_file_is_the_same(tmp_path, monkeypatch):
    """The arrow column reader keeps the copy's source (the binpb one does not); converting with and
    without it writes the same bytes (the bench workload, small)."""
    pytest.importorskip("pyarrow")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_pipeline

    from unirl_replay.contract import trace_io
    from unirl_replay.contract.workload_columns import read_columns
    from unirl_replay.replay.runner import convert_trace

    real = common._first_seen_ids
    for enc in ("binpb", "arrow"):
        d = tmp_path / enc
        bench_pipeline.write_trace(d, 600, enc)
        cols = read_columns(trace_io.open_trace(d))
        if enc == "binpb":  # its key chunks are freed once copied (no second copy held for the checks)
            assert cols.key_source is None
        else:  # the arrow reader's views of the mapped file
            assert np.array_equal(np.concatenate(cols.key_source), cols.keys)
        out = []
        for use in (True, False):
            seen = []

            def spy(keys, fresh, dtype, source=None, use=use):
                seen.append(source is not None)
                return real(keys, fresh, dtype, source if use else None)

            monkeypatch.setattr(common, "_first_seen_ids", spy)
            p = convert_trace(d, tmp_path / f"{enc}-{use}.jsonl")[0]
            out.append(p.read_bytes())
            assert seen == [enc == "arrow"]
        monkeypatch.setattr(common, "_first_seen_ids", real)
        assert out[0] == out[1]
