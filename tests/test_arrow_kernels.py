"""``columnar.kernels()`` (pyarrow.compute's kernels called through ``call_function``) gives what
``pyarrow.compute`` itself gives: the arrow column reader and the array row writer produce the same
columns and the same converted bytes with either; and ``unirl-replay convert`` of an arrow trace no
longer imports ``pyarrow.compute``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from unirl_replay.contract import columnar  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_each_kernel_equals_pyarrow_compute():
    import pyarrow.compute as pc

    k = columnar.kernels()
    s = pa.array(["a", "b.c", None, "1e5", 'q"'], pa.string())
    i = pa.array([3, None, 7, 0, 12], pa.int64())
    m = pa.array([True, False, True, False, True])
    assert k.cast(i, pa.string()).equals(pc.cast(i, pa.string()))
    assert k.cast(pa.array([0.1, 2.0, 1e300, -3.5]), pa.string()).equals(pc.cast(pa.array([0.1, 2.0, 1e300, -3.5]),
                                                                                 pa.string()))
    assert k.take(s, pa.array([4, 0, 0, 2])).equals(pc.take(s, pa.array([4, 0, 0, 2])))
    with pytest.raises(IndexError):
        k.take(s, pa.array([5]))  # bounds checked, as Array.take
    assert k.fill_null(i, 0).equals(i.fill_null(0))
    assert k.is_valid(s).equals(s.is_valid())
    assert k.all(m).as_py() == pc.all(m).as_py() and k.all(pa.array([True, None])).as_py() is True
    for pat in (".", "e", "q"):
        assert k.match_substring(s, pat).equals(pc.match_substring(s, pat))
    assert k.match_substring_regex(s, r"^[ !#-\[\]-~]*$").equals(pc.match_substring_regex(s, r"^[ !#-\[\]-~]*$"))
    assert k.if_else(m, s, "x").equals(pc.if_else(m, s, "x"))
    assert k.replace_with_mask(s, m, pa.array(["1", "2", "3"])).equals(pc.replace_with_mask(s, m,
                                                                                           pa.array(["1", "2", "3"])))
    assert k.utf8_lpad(s, 6, "0").equals(pc.utf8_lpad(s, width=6, padding="0"))
    lists = pa.ListArray.from_arrays(pa.array(np.array([0, 2, 2, 5], np.int32)), s)
    assert k.binary_join(lists, ",").equals(pc.binary_join(lists, ","))
    assert k.binary_join_element_wise("[", s, "]", "").equals(pc.binary_join_element_wise("[", s, "]", ""))
    assert k.list_parent_indices(lists).equals(pc.list_parent_indices(lists))


@pytest.mark.parametrize("enc", ["arrow", "binpb"])
def test_convert_same_bytes_with_pyarrow_compute(tmp_path, monkeypatch, enc):
    import pyarrow.compute as pc

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_pipeline

    from unirl_replay.replay.convert import arrow_rows
    from unirl_replay.replay.runner import convert_trace

    d = tmp_path / "t"
    bench_pipeline.write_trace(d, 900, enc)
    monkeypatch.setattr(arrow_rows, "MIN_REQUESTS", 0)
    ours = convert_trace(d, tmp_path / "a.jsonl")[0].read_bytes()
    monkeypatch.setattr(columnar, "kernels", lambda: pc)
    theirs = convert_trace(d, tmp_path / "b.jsonl")[0].read_bytes()
    assert ours == theirs


def test_cli_convert_of_an_arrow_trace_does_not_import_pyarrow_compute(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_pipeline

    d = tmp_path / "t"
    bench_pipeline.write_trace(d, 9000, "arrow")  # above arrow_rows.MIN_REQUESTS: the array writer
    code = ("import sys; from unirl_replay.cli.main import main\n"
            f"try:\n    main(['convert', {str(d)!r}, '--out', {str(tmp_path / 'o.jsonl')!r}])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'pyarrow' in sys.modules\n"
            "print('pyarrow.compute' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
