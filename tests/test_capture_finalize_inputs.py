"""`unirl-replay capture finalize` with careless arguments: each refused before a trace is written, never a
traceback, a silently empty window, a label that silently lost, or a trace among the run's shards."""

from __future__ import annotations

import pytest

from test_capture_finalize import _grpo_raw
from unirl_replay.cli.main import main


def _fin(capsys, raw, out, *args) -> tuple[int, str]:
    rc = main(["capture", "finalize", str(raw), "--out", str(out), *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


@pytest.mark.parametrize("args,why", [
    (["--max-new-tokens", "-5"], "--max-new-tokens"),             # was ValueError: Value out of range: -5
    (["--max-new-tokens", "99999999999999"], "--max-new-tokens"),
    (["--rollouts", "3:1"], "ends before it starts"),             # was an empty window
    (["--label", "k=1", "--label", "k=2"], "given twice"),        # was last-one-wins
    (["--trace-id", "a\x1bb"], "control character"),              # was an invalid trace written, then refused
])
def test_bad_finalize_arguments(tmp_path, capsys, args, why):
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    out = tmp_path / "t"
    rc, err = _fin(capsys, raw, out, *args)
    assert rc != 0 and why in err, err
    assert not out.exists()


def test_a_trace_is_never_written_among_the_shards(tmp_path, capsys):
    """--out RAW_DIR wrote workload.jsonl / outcomes.jsonl next to the shards; the next finalize of that
    directory read them as shards (an INCOMPLETE trace)."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    before = sorted(p.name for p in raw.iterdir())
    for out in (raw, raw / "trace"):
        rc, err = _fin(capsys, raw, out)
        assert rc != 0 and "capture.out_in_raw" in err, err
    assert sorted(p.name for p in raw.iterdir()) == before
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0, err


def test_cpu_percentages_stay_within_0_and_100_when_a_counter_steps_back():
    """/proc/stat's iowait can decrease between two reads (a known Linux quirk) and steal can on some
    hypervisors: busy came out above 100 % (or steal below 0), which validate's manifest.conditions now refuses
    in the finalized trace. The percentages are clamped where they are computed."""
    from unirl_replay.capture.procfs import busy_steal_pct

    a = [100, 0, 100, 1000, 500, 0, 0, 50]
    b = [300, 0, 300, 1010, 400, 0, 0, 45]  # iowait 500 -> 400, steal 50 -> 45: busy was 129 %, steal -1.6 %
    r = busy_steal_pct(a, b)
    assert r == {"host_busy_pct": 100.0, "steal_pct": 0.0}
