"""Cross-language round trip: the C++, Java, Go and TypeScript bindings (bindings/, built by
scripts/check_bindings.sh from buf.gen.bindings.yaml) write traces that `validate` accepts and read
the bundled traces back.

Per language, with its own protobuf runtime and JSON printer / parser:

- ``write``: the interop trace of bindings/README.md, in both encodings: VALID, and its record files
  are byte-identical to the same trace written by Python's TraceWriter (so the digests match too);
- ``copy``: traces/grpo-a and traces/agentic-a, JSONL -> binpb and binpb -> JSONL: the output is
  VALID and byte-identical to the bundled JSONL / Python's binpb of the same records.

Known exceptions (bindings/README.md): ``manifest.json`` is compared as a message, not as bytes,
for the printers whose pretty layout differs from Python's ``json.dumps(indent=2)``
(:data:`MANIFEST_LAYOUT_DIFFERS`); Go's protojson varies its whitespace on purpose, so the Go
program compacts each line with ``json.Compact`` (order and values untouched) before writing.

A missing toolchain fails (with the install command), never skips: ``make test`` installs them
(scripts/install_toolchains.sh).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from unirl_replay.contract import json_profile
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import TraceWriter, open_trace
from unirl_replay.contract.validate import check_trace
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w
from unirl_replay.v1.report_pb2 import TraceCheck

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "bindings"
LANGS = ("cpp", "java", "go", "ts")
BUNDLED = ("grpo-a", "agentic-a")
#: printers whose pretty manifest layout is not Python's json.dumps(indent=2) (compared as messages)
MANIFEST_LAYOUT_DIFFERS = {
    "cpp": "MessageToJsonString(add_whitespace) indents by one space",
    "java": "JsonFormat's pretty printer writes arrays inline",
}


@pytest.fixture(scope="module")
def programs() -> dict[str, list[str]]:
    r = subprocess.run(["scripts/check_bindings.sh"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"scripts/check_bindings.sh failed (scripts/install_toolchains.sh installs the toolchains):\n"
                    f"{r.stdout}{r.stderr}")
    cp = (BUILD / "java" / "classpath").read_text().strip() + ":" + str(BUILD / "java" / "classes")
    return {
        "cpp": [str(BUILD / "cpp" / "interop")],
        "java": ["java", "-cp", cp, "io.unirl_replay.interop.Interop"],
        "go": [str(BUILD / "go" / "interop")],
        "ts": ["node", str(ROOT / "bindings" / "ts" / "dist" / "src" / "interop.js")],
    }


def run(prog: list[str], *args: str | Path) -> None:
    r = subprocess.run([*prog, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{prog} {args}: exit {r.returncode}\n{r.stdout}{r.stderr}"


def interop_trace(d: Path, encoding: str) -> Path:
    """The interop trace of bindings/README.md, written by Python (the reference)."""
    man = m.TraceManifest(
        schema_version="unirl_replay.v1", trace_id="interop",
        producer=m.Producer(name="unirl-replay-interop", version="1"),
        provenance=m.Provenance(unirl_version="0.2.0", inference_backend="vllm", inference_backend_version="0.28.0",
                                simulator_name="ai-dynamo", simulator_version="1.6.1"),
        model=m.ModelIdentity(name="tiny", architecture="qwen2", num_layers=2, hidden_size=64, num_attention_heads=4,
                              num_kv_heads=2, vocab_size=1000),
        engines=[m.EngineConfig(engine_id="e0", worker_ids=["w0"], tp_size=1, block_size_tokens=16, num_kv_blocks=1024,
                                max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096, dtype="float32")],
        hardware=m.Hardware(description="interop", accelerator="cpu", cpu_count=2, memory_bytes=25_000_000_000),
        policy=m.PolicyIdentity(policy_version=0, checkpoint="ckpt"),
        window=m.CaptureWindow(start_unix_ns=1_700_000_000_000_000_000, duration_ns=60_000_000_000,
                               clock_domain=c.CLOCK_DOMAIN_CAPTURE_MONOTONIC),
        privacy=m.Privacy(content=c.CONTENT_POLICY_EXCLUDED, hash_salt_id="salt0", hash_algorithm="test"),
        role=c.WORKLOAD_ROLE_UNLABELLED, workload_name="interop", cache_state=c.CACHE_STATE_KIND_COLD,
        created_at="2026-01-01T00:00:00Z")
    workload = [
        w.WorkloadRecord(request=w.Request(
            request_id="req-0", sample_ids=["req-0/s0", "req-0/s1"], num_samples=2, group_id="g0", rollout_batch_id="b0",
            engine_id="e0", worker_id="w0", policy_version=0, input_tokens=40, output_tokens=[8, 5],
            prefix=c.PrefixBlocks(block_size_tokens=16, block_hashes=[2**64 - 1, 1, 2**53 + 1]),
            arrival=w.Arrival(observed_offset_ns=0), finish_reasons=[c.FINISH_REASON_STOP, c.FINISH_REASON_LENGTH],
            max_output_tokens=8)),
        w.WorkloadRecord(group=w.Group(group_id="g0", rollout_batch_id="b0", unit=w.GROUP_UNIT_SAMPLES, expected_size=2,
                                       member_ids=["req-0"])),
        w.WorkloadRecord(rollout_batch=w.RolloutBatch(rollout_batch_id="b0", group_ids=["g0"],
                                                      readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS, engine_ids=["e0"])),
    ]
    outcomes = [
        o.OutcomeRecord(request=o.RequestOutcome(
            request_id="req-0", submit_ns=0, queued_ns=1000, scheduled_ns=2000, first_token_ns=5_000_000,
            completion_ns=9_000_000, cached_tokens=0,
            samples=[o.SampleTiming(sample_id="req-0/s0", first_token_ns=5_000_000, completion_ns=9_000_000),
                     o.SampleTiming(sample_id="req-0/s1", first_token_ns=5_000_000, completion_ns=7_000_000)])),
        o.OutcomeRecord(group=o.GroupOutcome(group_id="g0", completed_ns=9_000_000)),
        o.OutcomeRecord(rollout_batch=o.BatchOutcome(rollout_batch_id="b0", ready_ns=9_000_000)),
    ]
    with TraceWriter(d, encoding=encoding) as tw:
        for r in workload:
            tw.write_workload(r)
        for r in outcomes:
            tw.write_outcome(r)
        tw.finalize(man)
    return d


def python_copy(src: Path, d: Path, encoding: str) -> Path:
    t = open_trace(src)
    with TraceWriter(d, encoding=encoding) as tw:
        for _, r in t.iter_workload():
            tw.write_workload(r)
        for _, r in iter_outcomes(t):
            tw.write_outcome(r)
        tw.finalize(t.manifest)
    return d


def assert_valid(d: Path) -> None:
    res = check_trace(d, strict=True)
    assert res.status == TraceCheck.STATUS_VALID and not res.violations, \
        [f"{v.file}:{v.line} {v.rule}: {v.message}" for v in res.violations]


def manifest_of(d: Path, *, artifacts: bool = True) -> m.TraceManifest:
    man = json_profile.parse_json((d / "manifest.json").read_bytes(), m.TraceManifest)
    if not artifacts:
        del man.artifacts[:]
        man.ClearField("contract_revision")
    return man


def assert_same_records(got: Path, want: Path, encoding: str) -> None:
    for name in ("workload", "outcomes"):
        a, b = (got / f"{name}.{encoding}").read_bytes(), (want / f"{name}.{encoding}").read_bytes()
        if a != b:
            la, lb = a.splitlines(), b.splitlines()
            first = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
            pytest.fail(f"{got.name}/{name}.{encoding} differs from {want}/{name}.{encoding} at line/chunk {first + 1}:\n"
                        f"got  {la[first][:300] if first < len(la) else b'(end)'}\n"
                        f"want {lb[first][:300] if first < len(lb) else b'(end)'}")


@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
@pytest.mark.parametrize("lang", LANGS)
def test_writer_makes_a_valid_trace_identical_to_python(programs, tmp_path, lang, encoding):
    out = tmp_path / lang
    run(programs[lang], "write", out, encoding)
    assert_valid(out)
    ref = interop_trace(tmp_path / "python", encoding)
    assert_same_records(out, ref, encoding)
    assert manifest_of(out) == manifest_of(ref)  # same digests, sizes, counts, contract_revision, every field
    if lang not in MANIFEST_LAYOUT_DIFFERS:
        assert (out / "manifest.json").read_bytes() == (ref / "manifest.json").read_bytes()


@pytest.mark.parametrize("trace", BUNDLED)
@pytest.mark.parametrize("lang", LANGS)
def test_reads_the_bundled_traces_back(programs, tmp_path, lang, trace):
    src = ROOT / "traces" / trace
    py_binpb = python_copy(src, tmp_path / "py-binpb", "binpb")
    # JSONL in, binpb out: the same bytes as Python's binpb of the same records
    run(programs[lang], "copy", src, tmp_path / "to-binpb", "binpb")
    assert_valid(tmp_path / "to-binpb")
    assert_same_records(tmp_path / "to-binpb", py_binpb, "binpb")
    # binpb in, JSONL out: the bundled JSONL, byte for byte
    run(programs[lang], "copy", py_binpb, tmp_path / "to-jsonl", "jsonl")
    assert_valid(tmp_path / "to-jsonl")
    assert_same_records(tmp_path / "to-jsonl", src, "jsonl")
    assert manifest_of(tmp_path / "to-jsonl", artifacts=False) == manifest_of(src, artifacts=False)


# -- the tool's own outputs, read by the other languages' JSON parsers

#: documents a user hands to other tools: (message type, path relative to the fixture's directory)
OUTPUT_DOCS = (
    ("TraceCheck", "validate-valid.json"), ("TraceCheck", "validate-invalid.json"),
    ("TraceCheck", "validate-incomplete.json"),
    ("ReplayResult", "grpo/replay/replay_result.json"), ("ValidationReport", "grpo/report/validation_report.json"),
    ("ReplayResult", "agentic/bound1/replay_result.json"),
    ("ValidationReport", "agentic/report/validation_report.json"),  # with the UNMODELLED bracket
    ("TraceManifest", "recoded/manifest.json"),
    ("TraceManifest", "probed/w0/manifest.json"),  # conditions, probes with their contended points
    ("ReferenceProbeArtifact", "probed/w0/probes/vllm_h1_21-before.json"),  # with its contended part
    ("ReferenceProbeArtifact", "probed/w0/probes/vllm_h1_22-after.json"),
)
#: the committed holdout outputs: a probe-levelled profile, rebuilt steps, the decomposition, conditions, probes
HOLDOUT = ROOT / "results" / "holdout-closed-xeon"
HOLDOUT_DOCS = (
    ("ReplayResult", HOLDOUT / "grpo" / "r1" / "probe" / "replay_result.json"),
    ("ValidationReport", HOLDOUT / "grpo" / "r1" / "probe" / "validation_report.json"),
    ("TraceManifest", HOLDOUT / "traces" / "grpo-r1" / "manifest.json"),
)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """What `validate --json`, `replay`, `compare` and `recode` write today, on the bundled traces."""
    import shutil
    import sys

    from unirl_replay.cli.main import main

    d = tmp_path_factory.mktemp("outputs")
    cli = [sys.executable, "-c", "import sys; from unirl_replay.cli.main import main; sys.exit(main(sys.argv[1:]))"]
    broken = d / "broken"
    shutil.copytree(ROOT / "traces" / "grpo-a", broken)
    lines = (broken / "workload.jsonl").read_text().splitlines()
    (broken / "workload.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # a record missing: INCOMPLETE
    invalid = interop_trace(d / "invalid-src", "jsonl")
    rec = (invalid / "workload.jsonl").read_text().replace('"engine_id":"e0"', '"engine_id":"nowhere"', 1)
    (invalid / "workload.jsonl").write_text(rec)
    man = (invalid / "manifest.json").read_text()
    import hashlib
    old = next(a for a in manifest_of(invalid).artifacts if a.path == "workload.jsonl")
    man = man.replace(old.sha256, hashlib.sha256(rec.encode()).hexdigest())
    (invalid / "manifest.json").write_text(man.replace(f'"{old.size_bytes}"', f'"{len(rec.encode())}"'))
    for name, trace, want in (("valid", ROOT / "traces" / "grpo-a", 0), ("invalid", invalid, 1),
                              ("incomplete", broken, 3)):
        r = subprocess.run([*cli, "validate", str(trace), "--json"], capture_output=True, text=True, timeout=300)
        assert r.returncode == want, f"validate {name}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        (d / f"validate-{name}.json").write_text(r.stdout)
    grpo = ROOT / "traces" / "grpo-a"
    assert main(["replay", str(grpo), "--timing-model", "fixed:2,1", "--out", str(d / "grpo" / "replay")]) == 0
    assert main(["compare", str(grpo), str(d / "grpo" / "replay" / "replay_result.json"), "--out",
                 str(d / "grpo" / "report"), "--no-plots"]) == 0
    agentic = ROOT / "traces" / "agentic-a"
    for out, allow in (("bound1", "engine_client.inflight_limit"), ("bound2", "engine_client.inflight_limit.as_lanes")):
        assert main(["replay", str(agentic), "--timing-model", "fixed:2,1", "--allow-unmodelled", allow,
                     "--out", str(d / "agentic" / out)]) == 0
    assert main(["compare", str(agentic), str(d / "agentic" / "bound1" / "replay_result.json"), "--bound",
                 str(d / "agentic" / "bound2" / "replay_result.json"), "--out", str(d / "agentic" / "report"),
                 "--no-plots"]) == 0
    assert main(["recode", str(grpo), "--encoding", "binpb", "--out", str(d / "recoded")]) == 0
    from test_capture_conditions import finalized_with_contended_probes  # a capture's shards, finalized

    finalized_with_contended_probes(d / "probed")
    return d


def _same_message(cls, got: Path, want: Path) -> None:
    from google.protobuf import json_format

    a = json_format.Parse(got.read_text(encoding="utf-8"), cls())
    b = json_format.Parse(want.read_text(encoding="utf-8"), cls())
    assert a == b, f"{got} read back differs from {want}"


def _cls(type_name: str):
    from unirl_replay.v1 import manifest_pb2, replay_pb2, report_pb2

    return next(getattr(mod, type_name) for mod in (report_pb2, replay_pb2, manifest_pb2) if hasattr(mod, type_name))


@pytest.mark.parametrize("lang", LANGS)
def test_other_languages_parse_the_tools_outputs(programs, outputs, tmp_path, lang):
    """Every JSON document the tool writes for others to read (TraceCheck, ReplayResult, ValidationReport, the
    manifest) is proto3 JSON the language's own parser takes with unknown fields refused, and what it prints back
    is the same message."""
    docs = [(t, outputs / p) for t, p in OUTPUT_DOCS] + list(HOLDOUT_DOCS)
    for i, (type_name, path) in enumerate(docs):
        assert path.is_file(), path
        out = tmp_path / f"{i}-{type_name}.json"
        run(programs[lang], "parse", type_name, path, out)
        _same_message(_cls(type_name), out, path)


@pytest.mark.parametrize("lang", LANGS)
def test_other_languages_refuse_a_field_the_contract_does_not_have(programs, outputs, tmp_path, lang):
    """The parse above is strict: a key outside the contract fails it (so it proves the documents hold none)."""
    import json

    doc = json.loads((outputs / "grpo" / "replay" / "replay_result.json").read_text())
    doc["not_in_the_contract"] = 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = subprocess.run([*programs[lang], "parse", "ReplayResult", str(bad), str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "not_in_the_contract" in (r.stdout + r.stderr), r.stdout + r.stderr
