"""Session 11 attack on the report stage, calibrate --level-to-probe and the gate: each input below was a Python
traceback, or a wrong result written, before its fix. Every one now is a clear error naming the file and what is
wrong (or, in the report, a "not done" line), and nothing is written."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from unirl_replay.cli.main import main
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model
from unirl_replay.report.timing_eval import ProfileUnreadable, profile_spread, read_profile

REPO = Path(__file__).resolve().parents[1]
HOLD = REPO / "results" / "holdout-closed-f26m2"
TRACE = HOLD / "traces" / "grpo-r1"  # has a reference probe; measured on the host of PROFILE
RESULT = HOLD / "grpo" / "r1" / "calibrated" / "replay_result.json"
PROFILE = REPO / "profiles" / "vllm-cpu-tiny-qwen2-20261202-bound-epyc-f26m2-rows-like.npz"  # has reference_points


def _tables_and_prov():
    with np.load(PROFILE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "provenance"}, json.loads(str(z["provenance"]))


def _profile(path: Path, prov: dict) -> Path:
    t, _ = _tables_and_prov()
    np.savez(path, **t, provenance=np.array(json.dumps(prov)))
    return path


def _result_for(tmp_path: Path, profile: Path) -> Path:
    """The bundled replay result of TRACE, as if it had been replayed with ``profile`` (its path and digest)."""
    rr = json.loads(RESULT.read_text())
    rr["timing_model"]["profile_path"] = str(profile)
    rr["timing_model"]["profile_sha256"] = hashlib.sha256(profile.read_bytes()).hexdigest()
    f = tmp_path / "replay_result.json"
    f.write_text(json.dumps(rr))
    return f


# provenance.conditions {"recorded": false} (calibrate --from-raw's "no conditions recorded") skipped the
# RunConditions check, and compare's condition warnings then read the keys beside it unchecked
RECORDED_BESIDE = [
    {"recorded": False, "engine_uptime_ns": "abc"},  # ValueError: could not convert string to float
    {"recorded": False, "worker_threads": ["a", 1]},  # AttributeError: 'list' object has no attribute 'values'
    {"recorded": False, "workerThreads": "abc"},  # AttributeError
    {"recorded": False, "cpuSignature": {"isaFlags": 5, "vendorId": "x"}},  # TypeError: 'int' object is not iterable
    {"recorded": True, "engineUptimeNs": "abc"},
    {"recorded": "no"},
]


@pytest.mark.parametrize("cond", RECORDED_BESIDE, ids=[",".join(sorted(c)) + f"={c['recorded']}" for c in RECORDED_BESIDE])
def test_the_no_conditions_marker_holds_no_other_key(tmp_path, capsys, cond):
    _, p = _tables_and_prov()
    f = _profile(tmp_path / "p.npz", {**p, "conditions": cond})
    for call in (lambda: read_profile(f), lambda: parse_timing_model(f"profile:{f}")):
        with pytest.raises((ProfileUnreadable, TimingModelError), match=r"p\.npz.*provenance\.conditions.*recorded"):
            call()
    rc = main(["compare", str(TRACE), str(_result_for(tmp_path, f)), "--out", str(tmp_path / "c"), "--no-plots"])
    out = capsys.readouterr()
    assert rc == 0 and "Traceback" not in out.err, out.err
    assert "not done" in out.out and "provenance.conditions" in out.out
    # the marker alone is what calibrate writes (a refit from raw data): read as no conditions
    g = _profile(tmp_path / "q.npz", {**p, "conditions": {"recorded": False}})
    assert read_profile(g)[1]["conditions"] == {"recorded": False}


def test_the_profile_spread_skips_unusable_and_zero_repeats(tmp_path, capsys, recwarn):
    """A raw decode repeat with itl_ms null (the schema allows it: an unusable repeat) was float(None), a TypeError in
    compare; a prefill repeat of 0 ms made a median of 0, "IQR/median nan %" and a numpy RuntimeWarning on stderr."""
    _, p = _tables_and_prov()
    nulls = {**p, "raw": {"decode": [{"batch": 1, "length": 1, "kv": 1, "ctx": 1, "itl_ms": None}] * 3,
                          "prefill": [{"isl": 5, "ttft_ms": 0}] * 3}}
    assert "nan" not in profile_spread(nulls)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    f = _profile(tmp_path / "p.npz", nulls)
    assert main(["compare", str(TRACE), str(_result_for(tmp_path, f)), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "RuntimeWarning" not in out.err and "nan %" not in out.out
    # usable repeats are still summarised
    mixed = {"raw": {"decode": [{"batch": 1, "itl_ms": v} for v in (None, 10.0, 11.0, 12.0)]}}
    assert "decode repeats (max-min)/median 18.2 %" in profile_spread(mixed)


def _probe_trace(tmp_path: Path, edit) -> Path:
    d = tmp_path / "trace"
    shutil.copytree(TRACE, d)
    m = json.loads((d / "manifest.json").read_text())  # manifest.json is not digested
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _point(i: int, j: int, **kw):
    def edit(m):
        m["probes"][i]["points"][j].update(kw)
    return edit


PROBE_EDITS = {
    # a median of no repeat: levelled as if measured
    "repeats0": (_point(0, 0, repeats=0), "repeats 0: a median rests on one repeat at least"),
    # repeats other than the count of the per-repeat step times
    "repeats-count": (_point(0, 3, repeats=4), "repeats 4, but 5 repeat_step_ms"),
    # a batched prefill pass of more rows than tokens
    "rows>tokens": (_point(0, 3, batch_size=1_000_000), "a pass of 1000000 rows and 2048 new token(s)"),
    # the same point twice: weighed twice in the levels (decode x0.988 became x1.047)
    "duplicate-point": (lambda m: m["probes"][0]["points"].append(copy.deepcopy(m["probes"][0]["points"][0])),
                        "point 4 (decode): measures the same point as point 0"),
}


@pytest.mark.parametrize("name", sorted(PROBE_EDITS))
def test_a_probe_point_no_probe_writes_is_refused_by_the_gate(tmp_path, capsys, name):
    edit, why = PROBE_EDITS[name]
    d = _probe_trace(tmp_path, edit)
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(d), "--base", str(PROFILE), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "manifest.probe" in err and why in err and "Traceback" not in err, err
    assert not out.exists() and not Path(str(out) + ".provenance.json").exists()
    assert main(["validate", str(d)]) != 0
    got = capsys.readouterr()
    assert why in got.out + got.err and "Traceback" not in got.err


def test_the_bundled_probe_trace_still_levels(tmp_path):
    assert main(["calibrate", "--level-to-probe", str(TRACE), "--base", str(PROFILE),
                 "--out", str(tmp_path / "lev.npz")]) == 0


def _rp(i: int, **kw) -> dict:
    _, p = _tables_and_prov()
    p["reference_points"][i].update(kw)
    return p


BAD_REFERENCE = [
    (_rp(3, prefill_tokens="abc"), "provenance.reference_points.3.prefill_tokens"),  # was ValueError: int('abc')
    (_rp(3, prefill_tokens=[1]), "provenance.reference_points.3.prefill_tokens"),  # was TypeError
    (_rp(0, key=5), "provenance.reference_points.0.key"),  # was read as no reference (another level)
    (_rp(0, median_ms=True), "provenance.reference_points.0.median_ms"),  # was read as 1.0 ms: decode x1.675
    (_rp(0, median_ms=1e308), "provenance.reference_points.0.median_ms"),
    ({**_tables_and_prov()[1], "reference_points": "x"}, "provenance.reference_points"),  # was silently ignored
]


@pytest.mark.parametrize("prov,where", BAD_REFERENCE, ids=[f"{w}-{i}" for i, (_, w) in enumerate(BAD_REFERENCE)])
def test_reference_points_of_the_wrong_type_are_refused(tmp_path, capsys, prov, where):
    base = _profile(tmp_path / "base.npz", prov)
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(TRACE), "--base", str(base), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "base.npz" in err and where in err and "Traceback" not in err, err
    assert not out.exists()
    with pytest.raises(ProfileUnreadable, match=where.replace(".", r"\.")):
        read_profile(base)


def test_a_levelled_profile_no_reader_accepts_is_not_written(tmp_path, capsys):
    """A reference median of 1e-300 ms levelled decode by x1e300: the profile was written (rc 0), and every reader
    then refused it ("decode_itl holds 1.96e+302 ms, above 3600000 ms")."""
    base = _profile(tmp_path / "base.npz", _rp(0, median_ms=1e-300))
    out = tmp_path / "lev.npz"
    assert main(["calibrate", "--level-to-probe", str(TRACE), "--base", str(base), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "levelled decode_itl table holds" in err and "above 3600000 ms" in err and "Traceback" not in err, err
    assert not out.exists() and not Path(str(out) + ".provenance.json").exists()


def _sig_edit(**kw):
    def edit(m):
        m["conditions"]["cpu_signature"].update(kw)
    return edit


_ISA = _tables_and_prov()[1]["conditions"]["cpu_signature"]["isa_flags"]
_CHECKED = _tables_and_prov()[1]["conditions"]["cpu_signature"]["isa_flags_checked"]
BAD_SIGNATURE = {
    # a newline in a signature text forged a line of compare's table ("WARNING forged")
    "isa-newline": (_sig_edit(isa_flags=["avx2\nWARNING forged"]), "not among isa_flags_checked"),
    "microcode-newline": (_sig_edit(microcode="0x1\nWARNING forged"), "microcode '0x1\\nWARNING forged' holds the "
                                                                      "control character U+000A"),
    # a repeated flag made the sorted lists differ: labelled UNVALIDATED (other hardware) against its own host
    "isa-repeated": (_sig_edit(isa_flags=_ISA * 2), "isa_flags lists 'avx2' twice"),
    "isa-unchecked": (_sig_edit(isa_flags=[*_ISA, "zzz"]), "isa_flags holds 'zzz', not among isa_flags_checked"),
    # 200000 flags: a 1.5 MB table
    "isa-many": (_sig_edit(isa_flags=[f"f{i}" for i in range(2000)]), "isa_flags holds 2000 flags (at most 1024)"),
}


@pytest.mark.parametrize("name", sorted(BAD_SIGNATURE))
def test_a_cpu_signature_the_report_cannot_print_or_compare_is_refused(tmp_path, capsys, name):
    edit, why = BAD_SIGNATURE[name]
    d = _probe_trace(tmp_path, edit)
    assert main(["validate", str(d)]) != 0
    got = capsys.readouterr()
    assert "manifest.conditions" in got.out + got.err and why in got.out + got.err, got.out + got.err
    assert main(["compare", str(d), str(RESULT), "--out", str(tmp_path / "c"), "--no-plots"]) == 2
    got = capsys.readouterr()
    assert why in got.err and "Traceback" not in got.err and not (tmp_path / "c").exists()
    # the same signature in a profile's provenance is refused by the profile reader (the same rule)
    _, p = _tables_and_prov()
    m = {"conditions": {"cpu_signature": dict(p["conditions"]["cpu_signature"])}}
    edit(m)
    f = _profile(tmp_path / "p.npz", {**p, "conditions": {**p["conditions"], **m["conditions"]}})
    with pytest.raises(ProfileUnreadable, match=r"provenance\.conditions: cpu_signature\."):
        read_profile(f)


def _label(tmp_path: Path, capsys, edit) -> str:
    d = _probe_trace(tmp_path, edit)
    assert main(["compare", str(d), str(RESULT), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Validation report"))


def test_isa_flags_compare_as_sets_over_the_flags_both_sides_checked(tmp_path, capsys):
    """The capture of a version that looks for one more ISA flag (and has it) ran on the profile's host: it was
    labelled "UNVALIDATED on this host: CALIBRATED on other hardware" (its isa_flags list had one more flag)."""
    more = _sig_edit(isa_flags=[*_ISA, "newflag"], isa_flags_checked=[*_CHECKED, "newflag"])
    assert _label(tmp_path / "a", capsys, more).endswith("(CALIBRATED)")
    assert _label(tmp_path / "b", capsys, _sig_edit(isa_flags=_ISA[::-1])).endswith("(CALIBRATED)")
    # a flag both looked for and only one side has is other hardware
    assert "UNVALIDATED on this host" in _label(tmp_path / "c", capsys, _sig_edit(isa_flags=_ISA[1:]))


def test_a_profile_vendor_id_with_a_newline_is_refused(tmp_path):
    """A trace's vendor_id is an id (rule id.invalid); a profile's was printed as it was into compare's warning."""
    _, p = _tables_and_prov()
    cond = copy.deepcopy(p["conditions"])
    cond["cpu_signature"]["vendor_id"] = "GenuineIntel\nWARNING forged"
    f = _profile(tmp_path / "p.npz", {**p, "conditions": cond})
    with pytest.raises(ProfileUnreadable, match=r"cpu_signature\.vendor_id .* holds the control character U\+000A"):
        read_profile(f)


def _dep_edit(field: str, value: int):
    from tracebuild import agentic_trace

    t = agentic_trace()
    for r in t.workload:
        if r.WhichOneof("record") == "request" and r.request.dependencies:
            d = r.request.dependencies[0]
            if field == "delay_absence":  # no measured delay and a reason no version defines: was replayed as 0 ms
                d.ClearField("external_delay_ns")
            setattr(d, field, value)
            break
    return t


@pytest.mark.parametrize("encoding", ["jsonl", "binpb", "arrow"])
@pytest.mark.parametrize("field,value", [("trigger", 99), ("relation", 99), ("relation", -1), ("delay_absence", 99)])
@pytest.mark.parametrize("vectorised", [False, True])
def test_convert_and_replay_as_a_library_refuse_an_unknown_dependency_enum(tmp_path, monkeypatch, encoding, field,
                                                                           value, vectorised):
    """runner.convert_trace / replay_trace called without the gate: an unknown trigger or relation number was a
    KeyError in the agentic_mooncake converter (every encoding), an unknown delay_absence without a delay was
    converted as a 0 ms wait. Now the support check refuses them with the gate's rule (enum.unknown)."""
    if encoding == "arrow":
        pytest.importorskip("pyarrow")
    from unirl_replay.contract.errors import TraceFormatError
    from unirl_replay.replay import request_checks, runner

    if vectorised:  # the array scan (workloads of >= VECTORISED_MIN_REQUESTS requests) decides as the loop does
        monkeypatch.setattr(request_checks, "VECTORISED_MIN_REQUESTS", 1)
    d = _dep_edit(field, value).write(tmp_path / "t", encoding=encoding)
    with pytest.raises(TraceFormatError, match=rf"dependencies\[0\]\.{field} = {value}: no such value") as e:
        runner.convert_trace(d, tmp_path / "c" / "x.jsonl")
    assert e.value.rule == "enum.unknown" and not (tmp_path / "c" / "x.jsonl").exists()
    with pytest.raises(TraceFormatError, match="enum.unknown"):
        runner.replay_trace(d, "fixed:10,1", work_dir=tmp_path / "w")
    # the known values still convert
    assert runner.convert_trace(_dep_edit("relation", 2).write(tmp_path / "ok", encoding=encoding),
                                tmp_path / "c2" / "x.jsonl")


def test_a_profile_path_too_long_to_look_up_is_not_found(tmp_path, capsys):
    """A replay result's profile_path of 5000 characters: Path.is_file raised ENAMETOOLONG and compare failed as a
    whole ("error: aaaa...: File name too long", rc 2) where any other missing profile is a "not done" line."""
    rr = json.loads(RESULT.read_text())
    rr["timing_model"]["profile_path"] = "a" * 5000
    f = tmp_path / "replay_result.json"
    f.write_text(json.dumps(rr))
    assert main(["compare", str(TRACE), str(f), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "not done: profile 'aaaa" in out and "not found here" in out


def test_a_lone_surrogate_quoted_back_in_a_parse_error_is_no_traceback(tmp_path, capsys):
    """outcomes.jsonl with "tool_durations_ns": "\\ud800" (valid JSON, a lone UTF-16 surrogate): the parser's message
    quotes the value, and putting it into the Violation (a protobuf string) raised UnicodeEncodeError in validate and
    every gated command. The message now writes the surrogate as its escape."""
    d = tmp_path / "t"
    shutil.copytree(REPO / "traces" / "agentic-a", d)
    p = d / "outcomes.jsonl"
    lines = p.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"trajectory"' in line and "tool_durations_ns" in line)
    doc = json.loads(lines[i])
    doc["trajectory"]["tool_durations_ns"] = "\ud800"
    lines[i] = json.dumps(doc)  # ASCII: the escape \ud800
    p.write_text("\n".join(lines) + "\n")
    m = json.loads((d / "manifest.json").read_text())
    for a in m["artifacts"]:
        b = (d / a["path"]).read_bytes()
        a["sha256"], a["size_bytes"] = hashlib.sha256(b).hexdigest(), str(len(b))
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["validate", str(d)]) == 1
    out = capsys.readouterr().out
    assert f"outcomes.jsonl:{i + 1}" in out and "json.profile" in out and "\\ud800" in out, out
    assert main(["compare", str(d), str(RESULT), "--out", str(tmp_path / "c"), "--no-plots"]) == 2
    assert "\\ud800" in capsys.readouterr().err and not (tmp_path / "c").exists()


@pytest.mark.parametrize("kind,path,value", [
    ("engine_generate", ("requests", 0, "n"), 1.0),  # TypeError: slice indices must be integers
    ("engine_generate", ("requests", 0, "prompt_tokens"), 12.0),  # TypeError into a protobuf uint32
    ("engine_generate", ("requests", 0, "output_tokens", 0), 5.0),
    ("window_start", ("conditions", "cpu_signature", "cpu_family"), 26.0),  # TypeError in signature_message
])
def test_a_shard_integer_written_as_a_float_is_a_typed_error(tmp_path, capsys, kind, path, value):
    """JSON Schema's "integer" accepts 26.0: a shard with it passed the record check and finalize met a float where an
    int goes (a traceback). The hooks write Python ints; the record check now reads "integer" as they write it."""
    from test_capture_conditions import _raw_with_probes

    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    shard, index = next((p, i) for p in sorted(raw.glob("*.jsonl"))
                        for i, line in enumerate(p.read_text().splitlines()) if f'"kind": "{kind}"' in line)
    lines = shard.read_text().splitlines()
    rec = json.loads(lines[index])
    if path[1] == "cpu_signature":
        rec["conditions"]["cpu_signature"] = {"vendor_id": "AuthenticAMD", "cpu_family": 26}
    o = rec
    for k in path[:-1]:
        o = o[k]
    o[path[-1]] = value
    lines[index] = json.dumps(rec)
    shard.write_text("\n".join(lines) + "\n")
    out = tmp_path / "t"
    rc = main(["capture", "finalize", str(raw), "--out", str(out), "--rollouts", "0:0"])
    err = capsys.readouterr().err
    assert rc != 0 and "[capture.shard_record]" in err and f"{shard.name}:{index + 1}" in err, err
    assert f"{value} is not of type 'integer'" in err and "Traceback" not in err and not out.exists()


def test_unirl_counts_copied_as_unirl_holds_them_may_be_integral_floats():
    """group_size / capacities are copied from UniRL's own objects: 8.0 is read (int()), 8.5 is not."""
    from unirl_replay.capture.shard_records import record_problem

    at = {"monotonic": 1.0}
    base = {"kind": "collect", "collect_id": 0, "n": 1, "enter": at, "exit": at,
            "groups": [{"roots": ["r0"], "trajectory_ids": ["t0"]}]}  # (the keys the join reads: required)
    assert record_problem({**base, "group_size": 8.0, "capacities": [2.0, 4]}) is None
    assert "group_size" in record_problem({**base, "group_size": 8.5})


@pytest.mark.parametrize("name,body,why", [
    ("deep.yaml", b"traces: " + b"[" * 5000 + b"]" * 5000 + b"\n", "YAML nested too deeply"),  # was RecursionError
    ("latin1.yaml", b"traces:\n  - path: caf\xe9\n", "not UTF-8 text (byte 21 is b'\\xe9')"),  # was UnicodeDecodeError
    ("bom16.json", '{"traces": []}'.encode("utf-16"), "not UTF-8 text"),
])
def test_a_grid_spec_that_is_no_text_or_too_deep_is_a_bad_spec(tmp_path, capsys, name, body, why):
    spec = tmp_path / name
    spec.write_bytes(body)
    assert main(["grid", str(spec), "--out", str(tmp_path / "g"), "--backend", "sequential", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "[grid.spec.parse]" in err and why in err and name in err and "Traceback" not in err, err
    assert not (tmp_path / "g").exists()


def test_a_conformance_case_rejected_where_a_result_is_expected_says_so(tmp_path, capsys):
    """A case whose trace the gate refuses (here an unknown trigger number) was reported as "convert: e0: missing"
    (the first expected row the rejection lacks); it now names the rejection and its rule."""
    case = tmp_path / "cases" / "agentic_chain_waits"
    shutil.copytree(REPO / "conformance" / "cases" / "agentic_chain_waits", case)
    p = case / "trace" / "workload.jsonl"
    lines = p.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"dependencies"' in line)
    doc = json.loads(lines[i])
    doc["request"]["dependencies"][0]["trigger"] = 99
    lines[i] = json.dumps(doc)
    p.write_text("\n".join(lines) + "\n")
    m = json.loads((case / "trace" / "manifest.json").read_text())
    for a in m["artifacts"]:
        b = (case / "trace" / a["path"]).read_bytes()
        a["sha256"], a["size_bytes"] = hashlib.sha256(b).hexdigest(), str(len(b))
    (case / "trace" / "manifest.json").write_text(json.dumps(m))
    assert main(["conformance", "--corpus", str(tmp_path)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    assert "convert: rejected (TraceRejectedError, rule enum.unknown) where the case expects a result" in text, text
    assert "e0: missing" not in text and "Traceback" not in out.err


def test_the_reading_of_passes_of_no_measured_length_is_no_zero_division():
    """A first pass scheduled at its first token (scheduled_ns == first_token_ns, a valid trace) has real_ms 0: with
    the shorter half of the prefill passes such, the prompt-length reading divided by a median of 0
    (ZeroDivisionError in compare's profile check)."""
    from unirl_replay.report import profile_check as pc
    from unirl_replay.v1 import report_pb2 as vpb

    es = vpb.EngineSteps(engine_id="e0")
    for k in range(8):
        first = k < 4
        es.intervals.add(segment=k, phase=pc.PH_FIRST if first else pc.PH_PREFILL, real_ms=0.0 if first else 10.0 + k,
                         model_ms=5.0, prefill_tokens=100 + k * (1 if first else 1000))
    assert "grows with prompt length" not in pc.reading(pc.phase_ratios([es]), [es])
    dec = vpb.EngineSteps(engine_id="e0")
    for k in range(8):
        dec.intervals.add(segment=0, phase=pc.PH_DECODE, real_ms=0.0, model_ms=5.0, decode_sequences=1 + 8 * k)
    assert pc.reading(pc.phase_ratios([dec]), [dec])


def _lineage_edit(kind: str, field: str, value: int):
    from tracebuild import grpo_trace

    t = grpo_trace()
    for r in t.workload:
        if r.WhichOneof("record") == kind:
            setattr(getattr(r, kind), field, value)
            break
    return t


@pytest.mark.parametrize("encoding", ["jsonl", "binpb", "arrow"])
@pytest.mark.parametrize("kind,field,value", [("group", "unit", 99), ("group", "unit", -3),
                                              ("rollout_batch", "readiness_rule", 7)])
def test_convert_and_replay_as_a_library_refuse_an_unknown_group_unit_or_readiness_rule(tmp_path, encoding, kind,
                                                                                      field, value):
    """runner.convert_trace / replay_trace called without the gate: a group unit or batch readiness rule number no
    v1 enum defines was converted and replayed, its group derived as one of samples and its batch never made ready
    (derive reads both by number). The support check now refuses them with the gate's rule (enum.unknown)."""
    if encoding == "arrow":
        pytest.importorskip("pyarrow")
    from unirl_replay.contract.errors import TraceFormatError
    from unirl_replay.replay import runner

    d = _lineage_edit(kind, field, value).write(tmp_path / "t", encoding=encoding)
    with pytest.raises(TraceFormatError, match=rf"{field} = {value}: no such value") as e:
        runner.convert_trace(d, tmp_path / "c" / "x.jsonl")
    assert e.value.rule == "enum.unknown" and not (tmp_path / "c" / "x.jsonl").exists()
    with pytest.raises(TraceFormatError, match="enum.unknown"):
        runner.replay_trace(d, "fixed:10,1", work_dir=tmp_path / "w")
    # the trace as built converts
    assert runner.convert_trace(_lineage_edit(kind, field, 1).write(tmp_path / "ok", encoding=encoding),
                                tmp_path / "c2" / "x.jsonl")


def test_a_replay_with_a_profile_of_other_hardware_says_unvalidated_in_its_result(tmp_path, capsys):
    """CALIBRATED means a profile measured on the trace's own engine configuration (replay.proto). A replay of a
    capture from other hardware (here: another CPU family in the capture's signature) wrote
    `calibration: CALIBRATED` into replay_result.json; only `compare` relabelled it. The replay stage now writes
    UNVALIDATED with a note naming the difference, and the report's label says measured on other hardware."""
    from unirl_replay.replay import runner
    from unirl_replay.v1 import replay_pb2

    spec = f"profile:{PROFILE}"
    same = runner.replay_trace(TRACE, spec, unmodelled=["engine_client.inflight_limit"])
    assert same.timing_model.calibration == replay_pb2.CALIBRATION_STATUS_CALIBRATED
    assert not any("other hardware" in n for n in same.notes)
    d = _probe_trace(tmp_path, _sig_edit(cpu_family=_tables_and_prov()[1]["conditions"]["cpu_signature"]
                                         ["cpu_family"] + 1))
    other = runner.replay_trace(d, spec, unmodelled=["engine_client.inflight_limit"])
    assert other.timing_model.calibration == replay_pb2.CALIBRATION_STATUS_UNVALIDATED
    note = next(n for n in other.notes if n.startswith("timing model UNVALIDATED for this capture"))
    assert f"profile {PROFILE.name} is CALIBRATED on other hardware (CPU signature" in note, note
    # the predicted times are the same replay: only the label changed
    assert [r.completion_ns for r in other.requests] == [r.completion_ns for r in same.requests]
    out = tmp_path / "r"
    assert main(["replay", str(d), "--timing-model", spec, "--allow-unmodelled", "engine_client.inflight_limit",
                 "--out", str(out)]) == 0
    assert json.loads((out / "replay_result.json").read_text())["timing_model"]["calibration"] == \
        "CALIBRATION_STATUS_UNVALIDATED"
    capsys.readouterr()
    assert main(["compare", str(d), str(out), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
    text = capsys.readouterr().out
    label = next(line for line in text.splitlines() if line.startswith("Validation report"))
    assert "(UNVALIDATED on this host: measured on other hardware)" in label, label
    assert "CALIBRATED)" not in label
