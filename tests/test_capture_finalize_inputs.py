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


def _edit_line(path, index, edit):
    import json

    lines = path.read_text().splitlines()
    rec = json.loads(lines[index])
    edit(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


def _set(*keys_value):
    *keys, value = keys_value

    def edit(rec):
        for k in keys[:-1]:
            rec = rec[k]
        rec[keys[-1]] = value
    return edit


# (shard, line, edit, the field the error names): each was a traceback inside the join (s6-f's shard mutation
# fuzzer, 300 mutants per seed: ~1 in 3 ended in TypeError / KeyError / ValueError / AttributeError / IndexError)
SHARD_EDITS = [
    ("engine-h1-21.jsonl", 1, _set("config", 1.5), "config"),                                   # AttributeError
    ("engine-h1-21.jsonl", 1, _set("config", "max_num_seqs", float("nan")), "NaN"),            # ValueError
    ("engine-h1-21.jsonl", 1, _set("config", "block_size", 2**64), "config.block_size"),       # ValueError range
    ("engine-h1-21.jsonl", 1, _set("model", "num_key_value_heads", 2**64), "model.num_key_value_heads"),
    ("engine-h1-21.jsonl", 2, _set("requests", 0, "output_tokens", 1.5), "requests.0.output_tokens"),  # TypeError
    ("engine-h1-21.jsonl", 2, _set("requests", 0, ""), "requests.0"),                          # TypeError
    ("engine-h1-21.jsonl", 2, _set("requests", 0, "per_sample_metrics", [-1, -1]), "per_sample_metrics"),
    ("engine-h1-21.jsonl", 2, _set("requests", 0, "n", 0), "requests.0.n"),                    # IndexError
    ("engine-h1-21.jsonl", 0, _set("versions", -1), "versions"),                               # TypeError
    ("engine-h1-21.jsonl", 0, _set("engine_id", {"a": 1}), "engine_id"),                       # unhashable
    ("worker-h1-11.jsonl", 1, _set("enter", []), "enter"),                                     # TypeError
    ("worker-h1-11.jsonl", 1, _set("exit", {}), "exit"),                                       # KeyError
    ("worker-h1-11.jsonl", 1, _set("enter", "monotonic", 0), "enter.monotonic"),               # None offset
    ("worker-h1-11.jsonl", 1, _set("rollout_ids", -1), "rollout_ids"),                         # TypeError
    ("worker-h1-11.jsonl", 1, _set("sample_ids", 0, 0), "sample_ids.0"),                       # AttributeError
    ("worker-h1-11.jsonl", 1, _set("trajectory_id", "t-1"), "turn"),                           # int(None)
    ("worker-h1-11.jsonl", 0, _set("clock_pair", "monotonic", "x"), "clock_pair.monotonic"),   # TypeError
    ("worker-h1-11.jsonl", 1, _set("kind", []), "kind"),                                       # unhashable
]


@pytest.mark.parametrize("shard,line,edit,where", SHARD_EDITS, ids=[f"{e[0].split('-')[0]}-{e[3]}" for e in SHARD_EDITS])
def test_a_shard_record_of_the_wrong_type_is_a_typed_error_naming_shard_line_and_field(tmp_path, capsys, shard, line,
                                                                                       edit, where):
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _edit_line(raw / shard, line, edit)
    out = tmp_path / "t"
    rc, err = _fin(capsys, raw, out)
    assert rc != 0 and "[capture.shard_record]" in err and f"{shard}:{line + 1}" in err and where in err, err
    assert not out.exists()


def test_a_trajectory_without_its_engine_id_still_finalizes(tmp_path, capsys):
    """The hook writes `engine_id: null` when the engine's runtime pid is unknown (driver_capture.engine_id_of);
    finalize then sorted None among the batch's engine ids (TypeError) for a collect mixing both."""
    from test_capture_finalize import _agentic_raw

    raw = tmp_path / "raw"
    _agentic_raw(raw)
    path = next(p for p in sorted(raw.glob("worker-*.jsonl")) if '"kind": "trajectory"' in p.read_text())
    index = next(i for i, x in enumerate(path.read_text().splitlines()) if '"kind": "trajectory"' in x)
    _edit_line(path, index, _set("engine_id", None))
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0, err


def _first_line_of(raw, kind):
    for path in sorted(raw.glob("*.jsonl")):
        for i, line in enumerate(path.read_text().splitlines()):
            if f'"kind": "{kind}"' in line:
                return path, i
    raise AssertionError(kind)


# the reference probe's records and the marks' snapshots (s6-f's probe fuzzer: ~1 in 4 of 120 mutants a traceback in
# capture/probe.py, window_conditions.py or procfs.py)
PROBE_EDITS = [
    ("probe_generate", _set("probe", 2**64), "probe"),                                        # AttributeError
    ("probe_generate", _set("probe", "point", {"a": 1}), "probe.point"),                      # unhashable
    ("probe_generate", _set("probe", "batch_size", -2**63 - 1), "probe.batch_size"),          # ValueError range
    ("probe_generate", _set("call_monotonic", []), "call_monotonic"),                         # IndexError
    ("probe_generate", _set("requests", 0, "metrics", "x"), "requests.0.metrics"),            # AttributeError
    ("probe_generate", _set("requests", 0, "output_tokens", 0, "1e400"), "requests.0.output_tokens.0"),
    ("probe_start", _set("conditions", "engines", "x"), "conditions.engines"),                # TypeError
    ("window_start", _set("conditions", "monotonic", ""), "conditions.monotonic"),            # ValueError
]


@pytest.mark.parametrize("kind,edit,where", PROBE_EDITS, ids=[e[2] for e in PROBE_EDITS])
def test_a_probe_or_mark_record_of_the_wrong_type_is_a_typed_error(tmp_path, capsys, kind, edit, where):
    from test_capture_conditions import _raw_with_probes

    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    path, index = _first_line_of(raw, kind)
    _edit_line(path, index, edit)
    rc, err = _fin(capsys, raw, tmp_path / "t", "--rollouts", "0:0")
    assert rc != 0 and "[capture.shard_record]" in err and f"{path.name}:{index + 1}" in err and where in err, err


def test_the_wrong_directory_or_an_empty_window_says_what_to_pass(tmp_path, capsys):
    """s16 newcomer: RAW_DIR = the run's UNIRL_REPLAY_TRACE_DIR (shards one level down, as README step 3 sets it)
    asked "was UNIRL_REPLAY_TRACE_DIR set for the run?"; a finalized trace read its outcomes.jsonl as a shard
    ("kind None is not a record kind"); a --rollouts / --policy-version window with nothing in it said only "no
    engine call was recorded in the window". Each now names what to pass."""
    cap = tmp_path / "cap"
    _grpo_raw(cap / "raw")
    rc, err = _fin(capsys, cap, tmp_path / "t")
    assert rc != 0 and "capture.no_shards" in err and f"but {cap / 'raw'} holds some: pass that directory" in err, err
    rc, err = _fin(capsys, cap / "raw", tmp_path / "t", "--rollouts", "5:6")
    assert rc != 0 and "capture.no_requests" in err, err
    assert "engine calls are of rollout ids 0, 1 (e.g. --rollouts 0:1)" in err, err
    rc, err = _fin(capsys, cap / "raw", tmp_path / "t", "--policy-version", "9")
    assert rc != 0 and "engine calls are at policy versions" in err, err
    assert not (tmp_path / "t").exists()
    rc, err = _fin(capsys, cap / "raw", tmp_path / "t")
    assert rc == 0, err
    rc, err = _fin(capsys, tmp_path / "t", tmp_path / "t2")
    assert rc != 0 and "capture.raw_dir" in err and "it is a finalized trace, not a capture's shard directory" in err
    assert "kind None" not in err and not (tmp_path / "t2").exists()


def test_the_max_new_tokens_help_says_the_shards_record_the_engine_s_own():
    """Its help said "not in the shards" while finalize reads each request's SamplingParams.max_tokens from them."""
    from unirl_replay.cli.capture import finalize_command

    (opt,) = [p for p in finalize_command.params if p.name == "max_new_tokens"]
    assert "not in the shards" not in opt.help and "SamplingParams.max_tokens" in opt.help


def test_a_finalize_that_fails_leaves_the_out_directory_as_it_found_it(tmp_path, capsys, monkeypatch):
    """s16 newcomer: --out a directory holding a user's outcomes.jsonl was refused by the trace writer only after
    finalize had written the probes' artifacts there (probes/<engine>-<when>.json left behind); a user's own
    probes/<engine>-<when>.json was replaced silently. Both are refused before anything is written, and a failure
    while writing removes what finalize created."""
    from test_capture_conditions import _raw_with_probes

    from unirl_replay.capture import finalize as F

    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "outcomes.jsonl").write_text("mine\n")
    rc, err = _fin(capsys, raw, busy, "--rollouts", "0:0")
    assert rc != 0 and "capture.out_exists" in err and "already holds outcomes.jsonl" in err, err
    assert sorted(p.name for p in busy.iterdir()) == ["outcomes.jsonl"]
    ok = tmp_path / "ok"
    assert _fin(capsys, raw, ok, "--rollouts", "0:0")[0] == 0
    probe = sorted((ok / "probes").iterdir())[0].name
    mine = tmp_path / "mine"
    (mine / "probes").mkdir(parents=True)
    (mine / "probes" / probe).write_text("mine\n")
    rc, err = _fin(capsys, raw, mine, "--rollouts", "0:0")
    assert rc != 0 and f"already holds probes/{probe}" in err, err
    assert (mine / "probes" / probe).read_text() == "mine\n" and sorted(p.name for p in mine.iterdir()) == ["probes"]

    class Boom(F.TraceWriter):
        def finalize(self, manifest):
            raise OSError("disk full")

    monkeypatch.setattr(F, "TraceWriter", Boom)
    new = tmp_path / "new" / "trace"
    with pytest.raises(OSError, match="disk full"):
        F.finalize(raw, new, rollouts="0:0")
    assert not (tmp_path / "new").exists()
    there = tmp_path / "there"  # a directory that was there, with a file of its own
    there.mkdir()
    (there / "notes.txt").write_text("mine\n")
    with pytest.raises(OSError, match="disk full"):
        F.finalize(raw, there, rollouts="0:0")
    assert sorted(p.name for p in there.iterdir()) == ["notes.txt"]


# s16 attack: shard values the hooks never write that passed the shard schema and were a traceback inside the join
# (a time of 1e14 s overflowed int64 ns: ValueError "Value out of range" out of protobuf; a trajectory without its
# group: KeyError)
TIME_EDITS = [
    ("worker-h1-11.jsonl", 0, _set("clock_pair", "wall", 1e15), "clock_pair.wall"),
    ("worker-h1-11.jsonl", 0, _set("clock_pair", "monotonic", -1e14), "clock_pair.monotonic"),
    ("worker-h1-11.jsonl", 1, _set("exit", "monotonic", 1e14), "exit.monotonic"),
    ("engine-h1-21.jsonl", 2, _set("requests", 0, "metrics", "first_token_ts", -1e14), "metrics.first_token_ts"),
]


@pytest.mark.parametrize("shard,line,edit,where", TIME_EDITS, ids=[e[3] for e in TIME_EDITS])
def test_a_time_past_int64_nanoseconds_is_a_typed_error(tmp_path, capsys, shard, line, edit, where):
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _edit_line(raw / shard, line, edit)
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc != 0 and "[capture.shard_record]" in err and f"{shard}:{line + 1}" in err and where in err, err
    assert not (tmp_path / "t").exists()


def _agentic_lines(raw, kind):
    return [(p, i) for p in sorted(raw.glob("*.jsonl")) for i, x in enumerate(p.read_text().splitlines())
            if f'"kind": "{kind}"' in x]


def test_agentic_shard_edits_that_were_tracebacks(tmp_path, capsys):
    """A trajectory record without its group (KeyError), an env step of 1e14 s (ValueError out of range)."""
    from test_capture_finalize import _agentic_raw

    for kind, edit, where in (("trajectory", lambda r: r.pop("group"), "'group' is a required property"),
                              ("env_step", _set("duration_s", 1e14), "duration_s")):
        raw = tmp_path / kind
        _agentic_raw(raw)
        path, index = _agentic_lines(raw, kind)[0]
        _edit_line(path, index, edit)
        rc, err = _fin(capsys, raw, tmp_path / f"t-{kind}")
        assert rc != 0 and "[capture.shard_record]" in err and f"{path.name}:{index + 1}" in err and where in err, err


def test_process_records_without_a_clock_pair_are_refused_or_read_from_another_shard(tmp_path, capsys):
    """The window start's process record without its clock_pair was a KeyError; another shard's pair (one host
    boot) places it; none at all is refused (capture.clock_pair), never a start at the Unix epoch."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _edit_line(raw / "worker-h1-11.jsonl", 0, lambda r: r.pop("clock_pair"))
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0, err
    for p in sorted(raw.glob("*.jsonl")):
        _edit_line(p, 0, lambda r: r.pop("clock_pair", None))
    rc, err = _fin(capsys, raw, tmp_path / "t2")
    assert rc != 0 and "[capture.clock_pair]" in err, err
    assert not (tmp_path / "t2").exists()


def test_worker_shards_without_a_process_record_get_distinct_worker_ids(tmp_path, capsys):
    """Two worker shards whose process record is gone were both worker 'worker:None:None': two slot pools of one id,
    an invalid trace written. Each is named by its shard."""
    from test_capture_finalize import _agentic_raw

    raw = tmp_path / "raw"
    _agentic_raw(raw)
    for p in sorted(raw.glob("worker-*.jsonl")):
        p.write_text("\n".join(p.read_text().splitlines()[1:]) + "\n")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0 and "valid trace" in err, err


def test_a_trajectory_in_two_collects_is_refused(tmp_path, capsys):
    """Two collects returning one trajectory (a driver shard copied, a collect record twice) joined it to the later
    batch alone: the earlier batch lost that group silently and kept its measured ready time (a VALID, complete trace),
    or duplicate groups were written and validate refused the trace."""
    import json

    from test_capture_finalize import _agentic_raw

    raw = tmp_path / "raw"
    _agentic_raw(raw)
    drv = raw / "driver-h1-10.jsonl"
    lines = drv.read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if '"kind": "collect"' in x)
    col = json.loads(lines[k])
    second = dict(col, collect_id="k2", enter={"wall": 1.7e9 + 4.1, "monotonic": 4.1},
                  exit={"wall": 1.7e9 + 4.2, "monotonic": 4.2}, groups=[col["groups"][0]])
    lines[k:k + 1] = [json.dumps(col), json.dumps(second)]  # group 0 in both collects
    drv.write_text("\n".join(lines) + "\n")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc != 0 and "[capture.duplicate]" in err and "is collected twice" in err, err
    assert not (tmp_path / "t").exists()
    _agentic_raw(raw)  # the same collect line twice
    lines = drv.read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if '"kind": "collect"' in x)
    drv.write_text("\n".join([*lines[:k + 1], lines[k], *lines[k + 1:]]) + "\n")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc != 0 and "[capture.duplicate]" in err, err


def test_a_lost_submit_never_starts_the_window_after_a_trajectory_took_its_slot(tmp_path, capsys):
    """Without the batch's submit record the window started at the first engine call, after the trajectories took
    their slots: a negative slot_acquired_ns written, then refused by validate (units.negative)."""
    from test_capture_finalize import _agentic_raw

    raw = tmp_path / "raw"
    _agentic_raw(raw)
    drv = raw / "driver-h1-10.jsonl"
    drv.write_text("\n".join(x for x in drv.read_text().splitlines() if '"kind": "submit"' not in x) + "\n")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0 and "valid trace" in err, err


def test_two_different_engine_records_of_one_pipe_request_are_refused(tmp_path, capsys):
    """Two engine_generate records for one (engine, pipe request) with other vLLM requests: the later one won,
    silently; now refused (capture.duplicate). The same record twice (a line repeated) is still harmless."""
    import json

    from test_capture_finalize import HOST, _grpo_raw

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    eng = raw / f"engine-{HOST}-21.jsonl"
    lines = eng.read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if '"engine_generate"' in x)
    twin = json.loads(lines[k])
    eng.write_text("\n".join([*lines[:k + 1], lines[k], *lines[k + 1:]]) + "\n")  # the same line twice
    rc, err = _fin(capsys, raw, tmp_path / "same")
    assert rc == 0 and "valid trace" in err, err
    twin["requests"][0]["vllm_request_id"] = "999"
    eng.write_text("\n".join([*lines[:k + 1], json.dumps(twin), *lines[k + 1:]]) + "\n")
    rc, err = _fin(capsys, raw, tmp_path / "other")
    assert rc != 0 and "[capture.duplicate]" in err and "two different engine records" in err, err
    assert not (tmp_path / "other").exists()


def test_a_finalize_refusal_reads_as_every_verb_s(tmp_path, capsys):
    """`capture finalize` refused with click's 'Error:' and exit 1; every other verb's refusal is 'error:', exit 2."""
    from unirl_replay.cli.main import main

    (tmp_path / "raw").mkdir()
    rc = main(["capture", "finalize", str(tmp_path / "raw"), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "[capture.no_shards]" in err and "Error:" not in err, err


# s17 attack (D1): a key the join reads without a default, missing, or null where the join turns it into a number or
# iterates it, passed the shard schema and was a KeyError / TypeError traceback inside the join (an engine record
# without its pipe_request_id or a request without its vllm_request_id, an env step without its turn, a collect
# without its n or with "n": null, a submit's "rollout_ids": null, a collected group without its trajectory_ids).
# The schema now says which keys each kind needs (shard_records.required_fields); each is dropped, and set to null
# where null is refused, on the first record of its kind in a fixture that finalizes cleanly.
def _required_cases():
    from unirl_replay.capture.shard_records import SCHEMAS, required_fields

    where = {"process": "grpo", "process_end": "grpo", "engine_config": "grpo", "engine_generate": "grpo",
             "engine_call": "grpo", "rollout_generate": "grpo", "overhead_pairs": "grpo", "trajectory": "agentic",
             "env_step": "agentic", "submit": "agentic", "collect": "agentic", "window_start": "probes",
             "window_end": "probes", "probe_start": "probes", "probe_end": "probes", "probe_generate": "probes"}
    cases = []
    for kind in SCHEMAS:
        for path, nullable in required_fields(kind):
            if kind not in where:  # a kind with required keys and no fixture here: add one to `where`
                raise AssertionError(f"no fixture for shard record kind {kind!r} ({path} is required)")
            cases.append((where[kind], kind, path, "drop", False))
            cases.append((where[kind], kind, path, "null", nullable))
    # conditional: an engine call / env step of a trajectory needs its turn
    for kind in ("engine_call", "env_step"):
        cases += [("agentic", kind, "turn", "drop", False), ("agentic", kind, "turn", "null", False)]
    # optional, but iterated when there (s.get("rollout_ids", [])): never null
    cases += [("agentic", "submit", "rollout_ids", "null", False),
              ("agentic", "collect", "groups.*.rollout_ids", "null", False)]
    return cases


REQUIRED_CASES = _required_cases()


def _fixture(kind: str, raw):
    from test_capture_conditions import _raw_with_probes
    from test_capture_finalize import _agentic_raw, _driver_generates

    if kind == "grpo":
        _grpo_raw(raw)
        _driver_generates(raw)
        with open(raw / "driver-h1-10.jsonl", "a") as fh:  # the reference driver's measured overhead pairs
            fh.write('{"kind": "overhead_pairs", "pairs": 1, "method": "paired", "overhead_ratio": 0.01, '
                     '"instrumented_wall_ns": 1010, "plain_wall_ns": 1000}\n')
        return []
    if kind == "agentic":
        _agentic_raw(raw)
        return []
    _raw_with_probes(raw)
    return ["--rollouts", "0:0"]


def _mutate_path(rec, path: str, how: str) -> None:
    from test_capture_finalize import _t

    *parents, last = path.split(".")
    for k in parents:
        if k == "*":
            rec = rec[0]
            continue
        if k not in rec:  # the record does not carry this optional object: give it one the hooks write
            rec[k] = {"clock_pair": _t(0.0)}[k]
        rec = rec[k]
    assert last in rec, (path, rec)
    if how == "drop":
        del rec[last]
    else:
        rec[last] = None


@pytest.mark.parametrize("fixture,kind,path,how,accepted", REQUIRED_CASES,
                         ids=[f"{c[1]}-{c[2]}-{c[3]}" for c in REQUIRED_CASES])
def test_a_shard_record_without_a_key_the_join_reads_is_a_typed_error(tmp_path, capsys, fixture, kind, path, how,
                                                                      accepted):
    raw = tmp_path / "raw"
    args = _fixture(fixture, raw)
    lines = [(p, i) for p in sorted(raw.glob("*.jsonl")) for i, x in enumerate(p.read_text().splitlines())
             if f'"kind": "{kind}"' in x and (kind not in ("engine_call", "env_step") or path != "turn"
                                               or '"trajectory_id": "t' in x)]
    assert lines, kind
    shard, index = lines[0]
    _edit_line(shard, index, lambda r: _mutate_path(r, path, how))
    out = tmp_path / "t"
    rc, err = _fin(capsys, raw, out, *args)
    if accepted:  # null is what the hook writes when it does not know the value: joined, or reported as lost
        assert rc == 0 and "valid trace" in err, err
        return
    assert rc == 2 and err.startswith("error: ") and "[capture.shard_record]" in err, err
    assert f"{shard.name}:{index + 1}" in err and path.rsplit(".", 1)[-1] in err, err
    assert not out.exists()


def _ctl_id(raw):
    """A sample id with a control character (the trace's request sample ids: id.invalid)."""
    _edit_line(raw / "worker-h1-11.jsonl", 1, _set("sample_ids", 1, "r0:prompt:0:sample:0/\x1b[2J"))


def test_a_finalized_trace_that_does_not_validate_is_removed_and_refused(tmp_path, capsys):
    """s17 attack (D2): finalize wrote a trace validate refuses, printed "trace written (complete)" and "nothing
    missing", then exited 1 with click's "Error: ... not valid" and left manifest, workload and outcomes in --out.
    Now the violations are printed, the refusal reads as every verb's (error:, exit 2) and what finalize wrote is
    removed (a new --out whole; in a directory that was there, only finalize's files); --no-validate keeps it."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _ctl_id(raw)
    out = tmp_path / "new" / "t"
    rc, err = _fin(capsys, raw, out)
    assert rc == 2 and "id.invalid" in err and "error: " in err and "Error:" not in err, err
    assert "is not valid (STATUS_INVALID" in err and "trace written" not in err, err
    assert not (tmp_path / "new").exists()
    there = tmp_path / "there"
    there.mkdir()
    (there / "notes.txt").write_text("mine\n")
    rc, err = _fin(capsys, raw, there)
    assert rc == 2 and "id.invalid" in err, err
    assert sorted(p.name for p in there.iterdir()) == ["notes.txt"]
    rc, err = _fin(capsys, raw, tmp_path / "kept", "--no-validate")
    assert rc == 0 and (tmp_path / "kept" / "manifest.json").exists(), err


@pytest.mark.parametrize("fixture,shard,line,edit,rule,why", [
    # the manifest's engine block size and every prefix's (manifest.engine, prefix.block_size)
    ("grpo", "engine-h1-21.jsonl", 1, _set("config", "block_size", 0), "capture.shard_record", "config.block_size"),
    ("grpo", "engine-h1-21.jsonl", 1, lambda r: r["config"].pop("block_size"), "capture.shard_record", "block_size"),
    # RolloutBatch.required_groups (batch.required_groups)
    ("agentic", "driver-h1-10.jsonl", 2, _set("n", 0), "capture.shard_record", "n: 0 is less than the minimum of 1"),
    # one output token count and finish reason per sample (fanout.count)
    ("grpo", "engine-h1-21.jsonl", 2, _set("requests", 0, "output_tokens", [3]), "capture.fanout", "n=2 samples"),
    ("grpo", "engine-h1-21.jsonl", 2, _set("requests", 0, "finish_reasons", []), "capture.fanout", "0 finish reasons"),
], ids=["block_size-0", "block_size-absent", "collect-n-0", "output_tokens-count", "finish_reasons-count"])
def test_shard_values_that_made_an_invalid_trace_are_refused_before_writing(tmp_path, capsys, fixture, shard, line,
                                                                            edit, rule, why):
    raw = tmp_path / "raw"
    _fixture(fixture, raw)
    _edit_line(raw / shard, line, edit)
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 2 and f"[{rule}]" in err and why in err and "not valid" not in err, err
    assert not (tmp_path / "t").exists()


def test_requests_of_an_engine_without_its_engine_config_are_reported_lost(tmp_path, capsys):
    """s17 attack (D2): an engine shard without its engine_config line wrote a trace whose requests name an engine
    the manifest lacks (reference.engine), reported "nothing missing". Its requests are lost, with the reason."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    eng = raw / "engine-h1-21.jsonl"
    eng.write_text("\n".join(x for x in eng.read_text().splitlines() if '"engine_config"' not in x) + "\n")
    out = tmp_path / "t"
    rc = main(["capture", "finalize", str(raw), "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0 and "valid trace" in cap.err and "Traceback" not in cap.err, cap.err
    assert "missing engine_request: 4" in cap.out and "vllm:h1:21: no engine_config record" in cap.out, cap.out
    assert "nothing missing" not in cap.out and "INCOMPLETE" in cap.out
    from test_capture_finalize import _load

    man, wl, _ = _load(out)
    assert {r.engine_id for r in wl["request"]} == {"vllm:h1:22"} and not man.completeness.complete


def test_a_shard_that_is_not_a_regular_file_is_refused_without_being_opened(tmp_path, capsys):
    """s17 attack (D3): a FIFO named *.jsonl in RAW_DIR made finalize block for ever (read_bytes on the FIFO); a
    directory so named, or a link to nothing, was an OSError traceback. Each is refused, naming it; a link to a
    regular shard is read as that shard."""
    import os
    import threading

    raw = tmp_path / "raw"
    _grpo_raw(raw)
    fifo = raw / "stale-h1-99.jsonl"
    os.mkfifo(fifo)
    got = {}

    def run():
        got["rc"] = main(["capture", "finalize", str(raw), "--out", str(tmp_path / "t")])

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(60)
    if th.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        th.join(10)
        pytest.fail("finalize blocked on a FIFO shard")
    err = capsys.readouterr().err
    assert got["rc"] == 2 and "[artifact.not_regular]" in err and str(fifo) in err and "Traceback" not in err, err
    assert not (tmp_path / "t").exists()
    fifo.unlink()
    (raw / "dir.jsonl").mkdir()
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 2 and "[artifact.not_regular]" in err and "dir.jsonl" in err, err
    (raw / "dir.jsonl").rmdir()
    (raw / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 2 and "[artifact.unreadable]" in err and "gone.jsonl" in err, err
    (raw / "gone.jsonl").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (raw / "worker-h1-12.jsonl").rename(elsewhere / "worker-h1-12.jsonl")
    (raw / "worker-h1-12.jsonl").symlink_to(elsewhere / "worker-h1-12.jsonl")
    rc, err = _fin(capsys, raw, tmp_path / "t")
    assert rc == 0 and "valid trace" in err, err


def test_the_weights_digest_never_opens_a_file_that_is_not_regular(tmp_path):
    """A FIFO named *.safetensors in the model directory the engine config names blocked finalize for ever (the
    weights digest opened it): no digest then (never a partial one), and the FIFO is never opened."""
    import hashlib
    import os
    import threading

    from unirl_replay.capture.finalize import _weights_sha256

    (tmp_path / "a.safetensors").write_bytes(b"weights")
    assert _weights_sha256(str(tmp_path)) == hashlib.sha256(b"weights").hexdigest()
    os.mkfifo(tmp_path / "b.safetensors")
    got = []
    t = threading.Thread(target=lambda: got.append(_weights_sha256(str(tmp_path))), daemon=True)
    t.start()
    t.join(20)
    assert got == [""], "blocked on the FIFO" if not got else got
    assert _weights_sha256(str(tmp_path / "absent")) == ""
