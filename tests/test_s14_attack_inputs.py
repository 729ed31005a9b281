"""Session 14 attack on the less-trodden inputs (grid job directories, conformance cases, capture shards,
calibrate --level-to-probe, ...): each input below was a Python traceback, a wrong result written silently or a
user's file lost before its fix; every one now is a clear error naming the file and the rule it broke."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unirl_replay.cli.main import main
from unirl_replay.grid.spec import GridSpecError, expand, load_spec

REPO = Path(__file__).resolve().parents[1]
GRPO = REPO / "traces" / "grpo-a"


NESTED = [
    # the second job's directory is the first one's upstream/ folder: keep_upstream false deleted its result
    ([{"path": str(GRPO), "name": "grpo-a/fixed/upstream"}, {"path": str(GRPO)}], "inside the directory of the job"),
    ([{"path": str(GRPO)}, {"path": str(GRPO), "name": "grpo-a/fixed/x"}], "inside the directory of the job"),
    ([{"path": str(GRPO), "name": "grid.json"}], "where the grid writes grid.json"),
    ([{"path": str(GRPO), "name": "GRID.md"}], "where the grid writes GRID.md"),
]


@pytest.mark.parametrize("traces,why", NESTED, ids=["in-upstream", "in-job", "grid.json", "GRID.md"])
def test_a_job_directory_inside_another_jobs_or_the_grids_files_is_a_bad_spec(tmp_path, capsys, traces, why):
    import json

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": traces, "timing_models": [{"name": "fixed", "spec": "fixed:10,1"}],
                                "compare": False, "keep_upstream": False, "layout": "{trace}/{timing_model}"}))
    with pytest.raises(GridSpecError, match=why) as e:
        expand(load_spec(spec))
    assert e.value.rule == "grid.spec.layout"
    rc = main(["grid", str(spec), "--out", str(tmp_path / "out"), "--backend", "sequential", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "g.json" in err and why in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_sibling_job_directories_with_a_common_prefix_still_expand(tmp_path):
    import json

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [{"path": str(GRPO)}, {"path": str(GRPO), "name": "grpo-a-2"}],
                                "timing_models": ["fixed:10,1", {"name": "fixed-10-1x", "spec": "fixed:10,2"}],
                                "layout": "{trace}/{timing_model}"}))
    assert [j.job_id for j in expand(load_spec(spec))] == ["grpo-a/fixed-10-1", "grpo-a/fixed-10-1x",
                                                           "grpo-a-2/fixed-10-1", "grpo-a-2/fixed-10-1x"]


def _case(tmp_path: Path, name: str = "agentic_chain_waits") -> Path:
    import shutil

    d = tmp_path / "corpus" / "cases" / "c"
    shutil.copytree(REPO / "conformance" / "cases" / name, d)
    return d


@pytest.mark.parametrize("body,rule", [(b"{bad", "json.parse"), (b"\xff\xfe", "json.parse"),
                                       (b'{"requests": NaN}', "json.nan")], ids=["not-json", "not-utf8", "nan"])
@pytest.mark.parametrize("which", ["replay_result.json", "converted.json"])
def test_an_expected_file_that_is_no_json_is_an_error_naming_it(tmp_path, capsys, body, rule, which):
    d = _case(tmp_path)
    (d / "expected" / which).write_bytes(body)
    rc = main(["conformance", "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert f"{which} [{rule}]" in err, err


BAD_CASES = [
    ({"trace": 5}, "trace must be a non-empty string"),  # a TypeError traceback
    ({"ops": []}, "ops must be a non-empty list"),  # checked nothing and passed
    ({"ops": ["replay", "replay"]}, "ops names one entry twice"),
    ({"pin_request_fields": "request_id"}, "pin_request_fields must be a non-empty list"),  # pinned its characters
    ({"pin_request_fields": ["arrival"]}, "pin_request_fields: unknown ['arrival']"),
    ({"allow_unmodelled": "engine_client.inflight_limit"}, "allow_unmodelled must be a list"),
    ({"format": "bogus"}, "unknown format"),  # an executor KeyError, reported as the simulator's failure
    ({"timing_model": 5}, "timing_model must be a non-empty string"),  # an executor AttributeError
    ({"rule": 5}, "rule must be one line"),
    ({"rule": "a\nb"}, "rule must be one line"),  # broke the matrix's table
    ({"expect_rejection": "x"}, "expect_rejection must be"),
    ({"expect_rejection": {}}, "expect_rejection must be"),
    ({"pin_request_field": ["request_id"]}, "unknown keys ['pin_request_field']"),  # silently the default
]


@pytest.mark.parametrize("edit,why", BAD_CASES, ids=[f"{next(iter(e))}={e[next(iter(e))]!r}" for e, _ in BAD_CASES])
def test_a_case_json_field_of_the_wrong_kind_is_refused_naming_the_case(tmp_path, capsys, edit, why):
    import json

    d = _case(tmp_path)
    spec = json.loads((d / "case.json").read_text())
    (d / "case.json").write_text(json.dumps({**spec, **edit}))
    rc = main(["conformance", "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "running" not in err, err
    assert "case.json [conformance.case]" in err and why in err, err


def test_every_bundled_case_json_is_still_a_case():
    from unirl_replay.conformance.corpus import load_corpus

    assert len(load_corpus(REPO / "conformance")) == len(list((REPO / "conformance" / "cases").glob("*/case.json")))


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_shard_line_nested_beyond_the_recursion_limit_is_an_unreadable_line(tmp_path, capsys, where):
    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    shard = raw / "worker-h1-11.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    lines = shard.read_text().splitlines()
    lines.insert(len(lines) if where == "last" else 2, deep)
    shard.write_text("\n".join(lines) + "\n")
    rc = main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")])
    cap = capsys.readouterr()
    err = cap.out + cap.err
    assert rc == 0 and "Traceback" not in err, err
    assert "missing shard_line: 1 (worker-h1-11.jsonl: unreadable lines [" in err, err
    assert "INCOMPLETE" in err


HOLD_TRACE = REPO / "results" / "holdout-closed-f26m2" / "traces" / "grpo-r1"
HOLD_PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261202-bound-epyc-f26m2-rows-like.npz"


@pytest.mark.parametrize("edit,why", [
    ({"batch_size": 0}, "are a batched prefill point's"),  # read as an isolated 2048-token point: prefill x0.956
    ({"batch_size": 1}, "are a batched prefill point's"),
    ({"phase": "decode", "context_tokens": 128}, "are a batched prefill point's"),
    ({"prefill_tokens": 512}, "are not the median-low 8 / 2048"),
    ({"batch_size": 4}, "are not the median-low 8 / 2048"),
], ids=["batch-0", "batch-1", "decode", "tokens", "rows"])
def test_a_batched_prefill_point_whose_size_is_not_its_repeats_is_refused(tmp_path, capsys, edit, why):
    """The gate checked the per-repeat pass sizes one by one but not the point's own size against them (the
    capture writes their median-low): calibrate --level-to-probe levelled such a probe into a profile."""
    import json
    import shutil

    t = tmp_path / "t"
    shutil.copytree(HOLD_TRACE, t)
    m = json.loads((t / "manifest.json").read_text())
    pt = m["probes"][0]["points"][3]
    assert pt["phase"] == "prefill" and pt["batch_size"] == 8 and pt["repeat_pass_rows"]
    pt.update(edit)
    (t / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "o.npz"
    rc = main(["calibrate", "--level-to-probe", str(t), "--base", str(HOLD_PROFILE), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "manifest.probe" in err and "point 3 (" in err and why in err and "Traceback" not in err, err
    assert not out.exists()


def test_the_bundled_probe_traces_batched_points_are_their_repeats_median_low(tmp_path, capsys):
    out = tmp_path / "o.npz"
    assert main(["calibrate", "--level-to-probe", str(HOLD_TRACE), "--base", str(HOLD_PROFILE), "--out", str(out)]) == 0
    assert out.exists()


@pytest.mark.parametrize("top,own,want", [(False, None, False), (False, True, True), (True, False, False),
                                          (None, None, True)])
def test_the_grid_specs_top_level_plots_is_every_traces_default(tmp_path, top, own, want):
    """`plots: false` at the top of a spec (a documented key) was accepted and ignored: every job wrote its plots."""
    import json

    trace = {"path": str(GRPO), **({} if own is None else {"plots": own})}
    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [trace], "timing_models": ["fixed:10,1"],
                                **({} if top is None else {"plots": top})}))
    assert [t.plots for t in load_spec(spec).traces] == [want]
    (job,) = expand(load_spec(spec))
    assert job.trace.plots is want


def test_a_grid_specs_top_level_plots_of_another_type_is_refused(tmp_path):
    import json

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [str(GRPO)], "timing_models": ["fixed:10,1"], "plots": "no"}))
    with pytest.raises(GridSpecError, match="plots must be true or false"):
        load_spec(spec)


def test_a_grid_repeat_that_does_not_exist_is_a_bad_spec(tmp_path, capsys):
    """A missing `repeats` directory ran every replay of the trace and failed each job's compare (exit 1) where a
    missing trace path is a bad spec (exit 2, nothing run)."""
    import json

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [{"path": str(GRPO), "repeats": ["no-such-run"]}],
                                "timing_models": ["fixed:10,1", "polynomial"]}))
    rc = main(["grid", str(spec), "--out", str(tmp_path / "out"), "--backend", "sequential", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "grid.spec.trace_missing" in err and "no-such-run" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


BROKEN_ANSWERS = [
    ({"status": "ok"}, "without converted"),  # KeyError: 'converted'
    ({"status": "ok", "replay_result": 5}, "replay_result is no object"),  # TypeError: argument of type 'int'
    ({"status": "ok", "replay_result": {"requests": [5]}}, "requests is no list of objects"),
    ({"status": "ok", "replay_result": {"requests": 5}}, "requests is no list of objects"),
    ({"status": "rejected", "error": 5}, "a rejection's error is no object"),
    ({"status": "fine"}, 'status "fine" is none of ok, rejected, error'),
]


@pytest.mark.parametrize("answer,why", BROKEN_ANSWERS, ids=[str(a)[:40] for a, _ in BROKEN_ANSWERS])
def test_a_foreign_executors_answer_of_another_shape_is_an_error_cell(tmp_path, capsys, answer, why):
    import json
    import sys

    d = _case(tmp_path)
    if "replay_result" in answer:  # the replay op alone (a convert answer of that shape lacks converted first)
        spec = json.loads((d / "case.json").read_text())
        (d / "case.json").write_text(json.dumps({**spec, "ops": ["replay"]}))
    ex = tmp_path / "ex.py"
    ex.write_text("import json, sys\n"
                  "print(json.dumps({'protocol': 'unirl_replay.conformance.v1', 'executor': 'x'}))\n"
                  "for line in sys.stdin:\n"
                  f"    print(json.dumps({{**json.loads({json.dumps(json.dumps(answer))}), 'id': json.loads(line)['id']}}))\n")
    rc = main(["conformance", "--corpus", str(tmp_path / "corpus"), "--executor", f"{sys.executable} {ex}"])
    cap = capsys.readouterr()
    assert rc == 1 and "Traceback" not in cap.err, cap.err
    assert "1 error" in cap.out and why in cap.out and "breaks unirl_replay.conformance.v1" in cap.out, cap.out


def test_an_expected_failures_list_that_is_no_utf8_is_an_error_naming_it(tmp_path, capsys):
    _case(tmp_path)
    xf = tmp_path / "corpus" / "expected_failures"
    xf.mkdir()
    from unirl_replay.conformance import runner

    (xf / f"{runner.installed_revision().replace('==', '-')}.txt").write_bytes(b"c\xff\n")
    rc = main(["conformance", "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert ".txt [conformance.expected_failures]: not UTF-8 text (byte 1" in err, err


def test_a_path_of_a_user_with_no_home_is_an_error_not_a_runtime_error(tmp_path, capsys):
    """``~nouser/...`` (expanduser: "Could not determine home directory") was a RuntimeError traceback in an aic
    timing model and in any path of a grid spec."""
    import json

    rc = main(["replay", str(GRPO), "--timing-model", "aic:h200_sxm:~no-such-user-s14/m", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "names no user's home directory" in err, err
    assert not (tmp_path / "r").exists()
    for body in ({"traces": ["~no-such-user-s14/t"], "timing_models": ["polynomial"]},
                 {"traces": [str(GRPO)], "timing_models": ["profile:~no-such-user-s14/p.npz"]}):
        spec = tmp_path / "g.json"
        spec.write_text(json.dumps(body))
        with pytest.raises(GridSpecError, match="names no user's home directory") as e:
            load_spec(spec)
        assert e.value.rule == "grid.spec.path"


@pytest.mark.parametrize("body,why", [
    ("1: a\nfoo: b\n", "unknown keys [1, 'foo']"),
    (f"traces: [{{path: {GRPO}, 1: x, z: y}}]\ntiming_models: [polynomial]\n", "unknown trace keys [1, 'z']"),
], ids=["top", "trace"])
def test_unknown_yaml_keys_of_mixed_types_are_a_bad_spec(tmp_path, capsys, body, why):
    """A YAML spec's unknown keys of a number and a string: sorting them was a TypeError traceback."""
    spec = tmp_path / "g.yaml"
    spec.write_text(body)
    rc = main(["grid", str(spec), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "grid.spec.unknown_key" in err and why in err and "Traceback" not in err, err


@pytest.mark.parametrize("salt", [b"zz", b"abc", b"\xff" * 32], ids=["not-hex", "odd", "not-ascii"])
def test_a_raw_salt_that_is_no_hex_text_is_an_error_naming_it(tmp_path, capsys, salt):
    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    (raw / ".salt").write_bytes(salt)
    rc = main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err and ".salt [capture.salt]" in err, err
    assert not (tmp_path / "t").exists()


def test_a_raw_salt_the_capture_wrote_still_finalizes(tmp_path, capsys):
    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    (raw / ".salt").write_text("0123456789abcdef0123456789abcdef")
    assert main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")]) == 0


OVERHEAD = {"kind": "overhead_pairs", "pairs": 3, "method": "m", "overhead_ratio": 0.1, "instrumented_wall_ns": 11,
            "plain_wall_ns": 10}


@pytest.mark.parametrize("rec,where", [
    ({"kind": "overhead_pairs", "pairs": 3}, "(record)"),                  # KeyError: 'method'
    ({**OVERHEAD, "pairs": "x"}, "pairs"),                                 # ValueError: invalid literal for int()
    ({**OVERHEAD, "pairs": -3}, "pairs"),                                  # ValueError: Value out of range
    ({**OVERHEAD, "overhead_ratio": "NaN"}, "overhead_ratio"),             # an invalid trace written
    ({**OVERHEAD, "overhead_ratio": -5}, "overhead_ratio"),
    ({**OVERHEAD, "plain_wall_ns": -1}, "plain_wall_ns"),
    ("hardware", "hardware.accelerator_count"),                            # ValueError: Value out of range: -1
], ids=["no-method", "pairs-str", "pairs-neg", "ratio-nan-str", "ratio-below-1", "wall-neg", "accelerator-count"])
def test_a_shard_value_finalize_reads_is_typed_by_the_record_schema(tmp_path, capsys, rec, where):
    import json

    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    shard = raw / "engine-h1-21.jsonl"
    lines = shard.read_text().splitlines()
    if rec == "hardware":
        first = json.loads(lines[0])
        first["hardware"]["accelerator_count"] = -1
        lines[0], line = json.dumps(first), 1
    else:
        lines.append(json.dumps(rec))
        line = len(lines)
    shard.write_text("\n".join(lines) + "\n")
    rc = main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err, err
    assert f"engine-h1-21.jsonl:{line} [capture.shard_record]" in err and f": {where}" in err, err
    assert not (tmp_path / "t").exists()


def test_the_drivers_overhead_pairs_record_still_finalizes(tmp_path, capsys):
    import json

    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    with open(raw / "worker-h1-11.jsonl", "a") as f:
        f.write(json.dumps({**OVERHEAD, "per_pair_ratio": [0.1], "loadavg_before": [1.0, 1.0, 1.0]}) + "\n")
    assert main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")]) == 0
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert m["capture_overhead"]["pairs"] == 3


def test_a_rollouts_window_of_a_huge_range_is_read_as_its_range(tmp_path):
    """--rollouts 0:99999999999 built the set of every id in it: a MemoryError (without a memory limit, the machine's
    memory) before a shard was read. Run under a 3 GB address-space limit, in its own process."""
    import os
    import subprocess
    import sys

    from test_capture_finalize import _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from unirl_replay.cli.main import main; sys.exit(main(sys.argv[1:]))")
    for rollouts, out in (("0:99999999999", "t"), ("0:0,1:99999999999", "u")):
        p = subprocess.run([sys.executable, "-c", code, "capture", "finalize", str(raw), "--out", str(tmp_path / out),
                            "--rollouts", rollouts], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(x for x in sys.path if x)})
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert (tmp_path / "t" / "workload.jsonl").read_bytes() == (tmp_path / "u" / "workload.jsonl").read_bytes()
    assert main(["capture", "finalize", str(raw), "--out", str(tmp_path / "v"), "--rollouts", "0:0"]) == 0
    assert len((tmp_path / "v" / "workload.jsonl").read_bytes()) < len((tmp_path / "t" / "workload.jsonl").read_bytes())


@pytest.mark.parametrize("affinity", ["0-99999999999", "9" * 5000, "3-1"], ids=["huge-range", "5000-digits", "backwards"])
def test_a_worker_threads_cpu_list_no_kernel_writes_is_text_of_another_shape(affinity):
    """compare reads RunConditions.worker_threads (a trace's or a profile's, editable text) for a process bound to
    cores others share: a CPU list 0-99999999999 was built id by id (a MemoryError), 5000 digits a ValueError."""
    from unirl_replay.report.conditions import shared_cores

    good = "pid 1 python: 7 threads, affinity 0-1 x7; pid 2 VLLM::Worker: 4 threads, affinity 0 x4"
    assert shared_cores(good) == "pid 2 VLLM::Worker is bound to CPU 0, where pid 1 python (7 threads) may also run"
    assert shared_cores(good.replace("affinity 0-1 x7", f"affinity {affinity} x7")) is None
    assert shared_cores(good.replace("affinity 0-1 x7", f"affinity 0-1 x{'7' * 5000}")) is None
    assert shared_cores(good.replace("7 threads", f"{'7' * 5000} threads")) is None


@pytest.mark.parametrize("phase,key", [("prefill", "ttft_ms"), ("decode", "itl_ms")])
def test_a_fitted_profile_no_reader_accepts_is_not_written(tmp_path, capsys, phase, key):
    """calibrate --from-raw with repeats of 1e300 ms wrote its profile (rc 0), which replay and compare then refused
    ("prefill_ttft_ms holds 1e+300 ms, above 3600000 ms"): the writer checked the tables more loosely than the
    readers (the probe levelling alone had the readers' bound)."""
    import json

    from test_calibrate import synthetic_raw
    from tracebuild import grpo_trace

    d = grpo_trace(prompts=1, samples=2).write(tmp_path / "t")
    raw = synthetic_raw()
    for r in raw[phase]:
        r[key] = 1e300
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    out = tmp_path / "p.npz"
    rc = main(["calibrate", "--like", str(d), "--from-raw", str(tmp_path / "raw.json"), "--out", str(out),
               "--workload-name", "cal-x"])
    err = capsys.readouterr().err
    assert rc == 2 and "above 3600000 ms (1 hour)" in err and "Traceback" not in err, err
    assert not out.exists() and not out.with_name(out.name + ".provenance.json").exists()


@pytest.mark.parametrize("layout,why", [
    ("{trace}/{timing_model}{trace:>9999999999}", "{trace:>9999999999} is not a plain placeholder"),  # MemoryError
    ("{trace}/{timing_model}{trace.__class__}", "{trace.__class__} is not a plain placeholder"),  # "<class 'str'>"
    ("{trace}/{timing_model}{trace!r}", "{trace!r} is not a plain placeholder"),
    ("{trace}/{timing_model}{timing_model[0]}", "{timing_model[0]} is not a plain placeholder"),
    ("{trace}/{timing_model}" + "x" * 300, "longer than 255 bytes"),  # each job failed: File name too long
], ids=["width", "attribute", "conversion", "index", "name-max"])
def test_a_layout_that_is_more_than_placeholders_is_a_bad_spec(tmp_path, capsys, layout, why):
    import json

    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({"traces": [str(GRPO)], "timing_models": ["fixed:10,1"], "layout": layout}))
    with pytest.raises(GridSpecError, match=re.escape(why)) as e:
        expand(load_spec(spec))
    assert e.value.rule == "grid.spec.layout"
    rc = main(["grid", str(spec), "--out", str(tmp_path / "out"), "--backend", "sequential", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "Traceback" not in err, err
