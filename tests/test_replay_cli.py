"""CLI `replay` / `convert` on a trace directory, and timing-model specs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from replay_build import dep, manifest, record, req, traj

from unirl_replay.cli.main import main
from unirl_replay.contract.errors import MissingEnvironmentError  # noqa: F401  (documented error type)
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model
from unirl_replay.contract.trace_io import TraceWriter
from unirl_replay.v1 import replay_pb2


def write_trace(d, msgs, mf=None):
    with TraceWriter(d) as tw:
        for m in msgs:
            tw.write_workload(record(m))
        tw.finalize(mf or manifest())
    return d


MSGS = [req("r0", out=(3,), traj="t", turn=0), req("r1", traj="t", turn=1, deps=[dep("r0", 50)]),
        traj("t", ["r0", "r1"]), req("solo", out=(2, 2), at_ms=10, prefix_key="s")]


def test_replay_command_writes_result_keyed_by_request_id(tmp_path):
    pytest.importorskip("dynamo.replay")
    trace = write_trace(tmp_path / "trace", MSGS)
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--timing-model", "fixed:100,10", "--out", str(out)]) == 0
    doc = json.loads((out / "replay_result.json").read_text())
    assert [r["request_id"] for r in doc["requests"]] == ["r0", "r1", "solo"]
    assert doc["simulator"]["name"] == "ai-dynamo" and doc["simulator"]["version"] == "1.6.1"
    assert doc["timing_model"]["calibration"] == "CALIBRATION_STATUS_FIXED"
    assert doc["workload_sha256"] and doc["engines"][0]["engine_id"] == "e0"
    assert (out / "upstream" / "e0.agentic_mooncake.jsonl").is_file()


def test_convert_command(tmp_path):
    trace = write_trace(tmp_path / "trace", MSGS)
    out = tmp_path / "in.jsonl"
    assert main(["convert", str(trace), "--format", "agentic_mooncake", "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["schema"] == "dynamo.agentic_mooncake"
    assert [x["request_id"] for x in lines[1:]] == ["000000|r0", "000001|r1", "000002|solo#s0", "000002|solo#s1"]


def test_unsupported_trace_exits_2_with_message(tmp_path, capsys):
    bad = [req("a", traj="t", turn=0, policy=1), req("b", traj="t", turn=1, policy=2, deps=[dep("a", 1)]),
           traj("t", ["a", "b"])]
    trace = write_trace(tmp_path / "trace", bad)
    assert main(["replay", str(trace), "--timing-model", "fixed:1,1", "--out", str(tmp_path / "o")]) == 2
    assert "unsupported [resume.cross_policy]" in capsys.readouterr().err


def test_timing_model_specs(tmp_path):
    tm, up = parse_timing_model("polynomial")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_UNCALIBRATED and up == {"type": "polynomial"}
    tm, up = parse_timing_model("fixed:12.5,3")
    assert (tm.prefill_ms, tm.decode_ms, tm.calibration) == (12.5, 3.0, replay_pb2.CALIBRATION_STATUS_FIXED)
    assert up == {"type": "fixed", "prefill_ms": 12.5, "decode_ms": 3.0}
    arrays = dict(prefill_isl=np.array([1.0, 100.0]), prefill_ttft_ms=np.array([1.0, 5.0]),
                  decode_active_kv_tokens=np.array([1.0, 1000.0]), decode_context_length=np.array([1.0, 500.0]),
                  decode_itl=np.ones((2, 2)))
    np.savez(tmp_path / "p.npz", **arrays)
    tm, up = parse_timing_model(f"profile:{tmp_path / 'p.npz'}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_UNCALIBRATED and len(tm.profile_sha256) == 64
    assert up["provider"] == "dynamo_profile"
    np.savez(tmp_path / "m.npz", **arrays,
             provenance=np.array(json.dumps({"measured": True, "calibration_workloads": ["cal-a"]})))
    tm, _ = parse_timing_model(f"profile:{tmp_path / 'm.npz'}")
    assert tm.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED and list(tm.calibration_workloads) == ["cal-a"]
    for bad in ("fixed:1", "fixed:0,1", "nope", f"profile:{tmp_path / 'missing.npz'}"):
        with pytest.raises(TimingModelError):
            parse_timing_model(bad)


# --- the program's exit: the upstream's rows left to the process exit (cli.main.run) ---------------------------

def _chain_trace(d, n_traj=100, encoding="binpb"):
    """n_traj trajectories x 3 turns (300 requests by default: the columns paths of the mapping and of the
    JSON writer) in one slot pool, in ``encoding`` (binpb: the gate's fast pass reads it as columns)."""
    from replay_build import pool
    msgs = []
    for t in range(n_traj):
        rids = []
        for k in range(3):
            rid = f"t{t}-{k}"
            msgs.append(req(rid, inp=8, out=(2,), traj=f"t{t}", turn=k, at_ms=float(t) if not k else None,
                            deps=() if not k else [dep(rids[-1], 1.0)]))
            rids.append(rid)
        msgs.append(traj(f"t{t}", rids, pool="p", order=t))
    msgs.append(pool("p", 8))
    with TraceWriter(d, encoding) as tw:
        for m in msgs:
            tw.write_workload(record(m))
        tw.finalize(manifest())
    return d


_DRIVER = """
import atexit, sys
sys.path.insert(0, {tests!r})
from fake_upstream import FakeUpstream
from unirl_replay.cli import main as cli
from unirl_replay.replay import runner

runner.get_simulator = lambda spec: FakeUpstream(huge_cached={huge!r})


class Teardown:  # the interpreter's teardown calls this when it clears this module (open bound now: builtins go)
    def __del__(self, open=open, path={deleted!r}):
        with open(path, "w") as f:
            f.write("freed")


keep = Teardown()
real_main = cli.main


def main(argv=None):  # an atexit callback registered after run()'s runs, as on any exit
    atexit.register(lambda: open({later!r}, "w").write("ran"))
    return real_main(argv)


cli.main = main
sys.argv = ["unirl-replay", *{args!r}]
cli.run()
"""


def _program(tmp_path, args, huge=False):
    """``unirl-replay ARGS`` (cli.main.run) in a fresh process answered by the fake upstream, TMPDIR an empty
    directory: (the process, whether the teardown ran, whether the later atexit callback ran, what is left in
    TMPDIR)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    deleted, later = tmp_path / "deleted", tmp_path / "later"
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER.format(tests=tests, huge=huge, deleted=str(deleted), later=str(later), args=list(args)))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env={**os.environ, "TMPDIR": str(tmp)})
    return p, deleted.exists(), later.exists(), sorted(os.listdir(tmp))


def _tree(d):
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else None for p in sorted(d.rglob("*"))}


def test_the_program_leaves_the_rows_to_the_exit_and_writes_what_main_writes(tmp_path, monkeypatch, capsys):
    """`unirl-replay replay` as the program: the same exit code, output, replay_result.json bytes, upstream
    files and marker as `main([...])` in-process; nothing left in TMPDIR; atexit callbacks registered later
    ran; the interpreter's teardown was skipped (the rows are left to the process exit)."""
    from fake_upstream import FakeUpstream
    from unirl_replay.cli import main as cli
    from unirl_replay.replay import runner

    trace = _chain_trace(tmp_path / "trace")
    fake = FakeUpstream()
    monkeypatch.setattr(runner, "get_simulator", lambda spec: fake)
    args = ["replay", str(trace), "--timing-model", "fixed:20,2"]
    assert main([*args, "--out", str(tmp_path / "in")]) == 0
    shown = capsys.readouterr()
    assert cli.left_to_exit() is None  # in-process: nothing is left to the exit ...
    assert fake.answers and fake.answers[0]() is None  # ... and the rows were freed when the command returned
    p, torn_down, later, left = _program(tmp_path, [*args, "--out", str(tmp_path / "prog")])
    assert p.returncode == 0, p.stderr
    assert p.stdout.replace(str(tmp_path / "prog"), "OUT") == shown.out.replace(str(tmp_path / "in"), "OUT")
    assert p.stderr == shown.err
    got, want = _tree(tmp_path / "prog"), _tree(tmp_path / "in")
    assert got == want and "replay_result.json" in got and "upstream/e0.agentic_mooncake.jsonl" in got
    doc = json.loads(got["replay_result.json"])
    assert len(doc["requests"]) == 300 and doc["simulator"]["name"] == "fake"
    assert later and not torn_down and left == []


def test_the_program_fails_as_main_fails(tmp_path, capsys):
    """Errors through the program: an unsupported trace exits 2 with its message (no output directory left),
    an exception out of the command exits 1 with its traceback and Python's own exit; TMPDIR empty."""
    bad = [req("a", traj="t", turn=0, policy=1), req("b", traj="t", turn=1, policy=2, deps=[dep("a", 1)]),
           traj("t", ["a", "b"])]
    trace = write_trace(tmp_path / "trace", bad)
    assert main(["replay", str(trace), "--timing-model", "fixed:1,1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    p, torn_down, later, left = _program(tmp_path, ["replay", str(trace), "--timing-model", "fixed:1,1", "--out",
                                                    str(tmp_path / "p")])
    assert (p.returncode, p.stderr, p.stdout) == (2, err, "") and "unsupported [resume.cross_policy]" in err
    assert not (tmp_path / "p").exists() and later and not torn_down and left == []
    chain = _chain_trace(tmp_path / "chain", n_traj=30)
    (tmp_path / "x").mkdir()
    p, torn_down, later, left = _program(tmp_path / "x", ["replay", str(chain), "--timing-model", "fixed:1,1",
                                                          "--out", str(tmp_path / "q")], huge=True)
    assert p.returncode == 1 and "Traceback" in p.stderr and "ValueError" in p.stderr
    assert not (tmp_path / "q").exists() and later and torn_down and left == []


def test_replay_reads_the_workload_once_with_the_gate_s_columns(tmp_path, monkeypatch):
    """`replay` hands the columns the gate's fast pass read to the runner (not read, nor its digest checked,
    again): the same replay_result.json bytes as with the gate's fast pass off (the runner reads the trace
    itself then)."""
    from fake_upstream import FakeUpstream
    from unirl_replay.contract import gate, trace_io
    from unirl_replay.replay import runner

    trace = _chain_trace(tmp_path / "trace", n_traj=40)
    monkeypatch.setattr(runner, "get_simulator", lambda spec: FakeUpstream(5))
    reads, opens = [], []
    real_read, real_open = runner.read_columns, trace_io.open_trace
    monkeypatch.setattr(runner, "read_columns", lambda *a, **k: reads.append(1) or real_read(*a, **k))
    monkeypatch.setattr(trace_io, "open_trace", lambda *a, **k: opens.append(k.get("verify_digests", True))
                        or real_open(*a, **k))
    args = ["replay", str(trace), "--timing-model", "fixed:20,2", "--out"]
    assert main([*args, str(tmp_path / "once")]) == 0
    assert reads == [] and opens[-1] is False  # the runner opened the trace without checking its digest again
    monkeypatch.setattr(gate, "FAST", False)
    assert main([*args, str(tmp_path / "twice")]) == 0
    assert reads == [1] and opens[-1] is True
    assert _tree(tmp_path / "once") == _tree(tmp_path / "twice")


_POOL_DRIVER = """
import sys
from unirl_replay.cli.main import main
code = main(sys.argv[1:])
import pyarrow
print("POOL", pyarrow.default_memory_pool().backend_name)
sys.exit(code)
"""


def test_the_cli_uses_the_system_arrow_allocator_unless_told_otherwise_with_the_same_bytes(tmp_path):
    """main() makes Arrow allocate with malloc (``ARROW_DEFAULT_MEMORY_POOL=system``: less CPU on this machine)
    unless the user set the variable; a converted arrow trace is byte-identical under either allocator."""
    import os
    import subprocess
    import sys

    pytest.importorskip("pyarrow")
    import unirl_replay.v1.outcomes_pb2  # noqa: F401  (an arrow trace's schema reads its descriptor)
    trace = _chain_trace(tmp_path / "trace", encoding="arrow")
    script = tmp_path / "pool.py"
    script.write_text(_POOL_DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    files = {}
    for pool in (None, "mimalloc", "jemalloc"):
        (tmp_path / f"out-{pool}").mkdir()
        out = tmp_path / f"out-{pool}" / "upstream.jsonl"
        p = subprocess.run([sys.executable, str(script), "convert", str(trace), "--out", str(out)],
                           capture_output=True, text=True, env=env if pool is None else {**env,
                                                                                       "ARROW_DEFAULT_MEMORY_POOL": pool})
        assert p.returncode == 0, p.stderr
        backend = p.stdout.split("POOL ")[-1].strip()
        if pool is None:
            assert backend == "system"
        elif pool == "mimalloc" or backend == pool:  # a pyarrow built without jemalloc falls back
            assert backend == pool
        files[pool] = _tree(out.parent)  # the file and its sidecar
    assert len(files[None]) == 2 and files[None]["upstream.jsonl"].count(b"\n") == 301  # header + 300 rows
    assert files[None] == files["mimalloc"] == files["jemalloc"]


def test_an_aggregate_only_replay_says_it_has_no_makespan_never_nan(tmp_path, capsys):
    """mooncake rows carry no request ids: two requests alike in arrival and lengths cannot be told apart, so the
    result is aggregate-only, with no makespan to print."""
    pytest.importorskip("dynamo.replay")
    trace = write_trace(tmp_path / "trace", [req("a", out=(2,), at_ms=0), req("b", out=(2,), at_ms=0)])
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--format", "mooncake", "--timing-model", "fixed:10,2", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "nan" not in said and "no makespan (no per-request predicted times" in said, said
    assert "makespan_ns" not in json.loads((out / "replay_result.json").read_text())


def test_the_printed_line_carries_the_timing_model_s_honesty_label(tmp_path, capsys):
    """s16 newcomer: `replay` printed `16 requests, makespan 732.065 ms (ai-dynamo 1.6.1)` for a FIXED, an
    UNCALIBRATED and a CALIBRATED model alike; its one line now names the model and its status as every report
    title does, and the dropped constraints."""
    pytest.importorskip("dynamo.replay")
    from pathlib import Path

    trace = write_trace(tmp_path / "trace", MSGS)
    arrays = dict(prefill_isl=np.array([1.0, 100.0]), prefill_ttft_ms=np.array([1.0, 5.0]),
                  decode_active_kv_tokens=np.array([1.0, 1000.0]), decode_context_length=np.array([1.0, 500.0]),
                  decode_itl=np.ones((2, 2)))
    np.savez(tmp_path / "plain.npz", **arrays)  # no provenance: not a measured profile
    np.savez(tmp_path / "measured.npz", **arrays,
             provenance=np.array(json.dumps({"measured": True, "calibration_workloads": ["cal-a"]})))
    for spec, want in (("fixed:100,10", "(ai-dynamo 1.6.1 | fixed prefill 100 ms / decode 10 ms (FIXED))"),
                       ("polynomial", "(ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED))"),
                       (f"profile:{tmp_path / 'plain.npz'}", "(ai-dynamo 1.6.1 | profile plain.npz (UNCALIBRATED))"),
                       (f"profile:{tmp_path / 'measured.npz'}", "(ai-dynamo 1.6.1 | profile measured.npz (CALIBRATED))")):
        out = tmp_path / spec.replace(":", "_").replace(",", "_").replace("/", "_")
        assert main(["replay", str(trace), "--timing-model", spec, "--out", str(out)]) == 0
        printed = capsys.readouterr().out.strip()
        assert printed.endswith(" ms " + want), printed
    agentic = Path(__file__).resolve().parents[1] / "traces" / "agentic-a"
    assert main(["replay", str(agentic), "--timing-model", "polynomial", "--out", str(tmp_path / "a"),
                 "--allow-unmodelled", "engine_client.inflight_limit"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.endswith("(ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED) | UNMODELLED: "
                            "engine_client.inflight_limit)"), printed
    # a CALIBRATED profile of another host's CPU than the capture's: UNVALIDATED, said as compare says it
    repo = Path(__file__).resolve().parents[1]
    xeon = repo / "results" / "holdout-closed-xeon" / "traces" / "grpo-r1"
    amd = repo / "profiles" / "vllm-cpu-tiny-qwen2-20261203-bound-epyc-f25m1.npz"
    assert main(["replay", str(xeon), "--timing-model", f"profile:{amd}", "--out", str(tmp_path / "x")]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(f"(ai-dynamo 1.6.1 | profile {amd.name} (UNVALIDATED on this host: measured on other "
                            "hardware))"), printed


def test_replay_over_an_earlier_result_names_the_compare_report_left_beside_it(tmp_path, capsys):
    """replay --out D, compare --out D/report, replay --out D again: the report is of the old result (it stayed,
    unnamed); replay now says so (and removes nothing)."""
    pytest.importorskip("dynamo.replay")
    trace = write_trace(tmp_path / "trace", MSGS)
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--timing-model", "fixed:100,10", "--out", str(out)]) == 0
    assert "still holds compare's report" not in capsys.readouterr().err
    from unirl_replay.contract import out_dir

    (out / "report").mkdir()
    (out / "report" / "table.txt").write_text("old")
    out_dir.record(out / "report", ["table.txt"], "compare")
    assert main(["replay", str(trace), "--timing-model", "fixed:50,5", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "still holds compare's report of an earlier replay result (report/)" in err, err
    assert (out / "report" / "table.txt").read_text() == "old"
