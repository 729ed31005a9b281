"""An independent validator over the published JSON Schemas: ajv (node) in strict mode.

ajv compiles every schema/*.schema.json with ``strict: true``; then it checks every JSON record of
the bundled traces (each line of workload.jsonl / outcomes.jsonl and manifest.json: all valid) and
the invalid records of tests/test_schema.py plus broken manifests (all invalid), and agrees with the
Python ``jsonschema`` validator on each. ajv comes from npm (bindings/ts/package-lock.json) and is
built by scripts/check_bindings.sh; a missing toolchain fails, never skips.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from test_bindings_interop import HOLDOUT_DOCS, OUTPUT_DOCS, outputs  # noqa: F401 (a fixture)
from test_schema import BAD_WORKLOAD, VALIDATORS

from unirl_replay.contract import jsonschema_gen

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "bindings" / "ts" / "dist" / "src" / "schema_check.js"


@pytest.fixture(scope="module")
def ajv():
    r = subprocess.run(["scripts/check_bindings.sh"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"scripts/check_bindings.sh failed (scripts/install_toolchains.sh installs the toolchains):\n"
                    f"{r.stdout}{r.stderr}")

    def run(cases: list[tuple[str, object]], tmp: Path) -> list[dict]:
        p = tmp / "cases.jsonl"
        p.write_text("".join(json.dumps({"schema": s, "instance": i}) + "\n" for s, i in cases))
        r = subprocess.run(["node", str(CHECK), str(ROOT / "schema"), str(p)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        out = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(out) == len(cases)
        return out
    return run


def test_every_schema_compiles_under_ajv_strict_mode(ajv):
    r = subprocess.run(["node", str(CHECK), str(ROOT / "schema")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"{len(jsonschema_gen.TOP_LEVEL)} schemas compile under ajv strict mode" in r.stdout


def _bundled_cases() -> list[tuple[str, object]]:
    cases = []
    for trace in ("grpo-a", "agentic-a"):
        d = ROOT / "traces" / trace
        cases.append(("trace_manifest.schema.json", json.loads((d / "manifest.json").read_text())))
        for name, schema in (("workload.jsonl", "workload_record.schema.json"),
                             ("outcomes.jsonl", "outcome_record.schema.json")):
            cases += [(schema, json.loads(line)) for line in (d / name).read_text().splitlines()]
    return cases


def test_bundled_traces_are_valid_for_ajv(ajv, tmp_path):
    cases = _bundled_cases()
    assert len(cases) > 300
    for (schema, inst), res in zip(cases, ajv(cases, tmp_path)):
        assert res["valid"], (schema, json.dumps(inst)[:200], res["errors"])
        assert VALIDATORS[schema].is_valid(inst)


def _bad_manifests() -> list[tuple[str, object]]:
    good = json.loads((ROOT / "traces" / "grpo-a" / "manifest.json").read_text())
    out = []
    for change in (lambda m: m.update(schema_version="unirl_replay.v2"),
                   lambda m: m["artifacts"][0].update(sha256=m["artifacts"][0]["sha256"].upper()),
                   lambda m: m["artifacts"][0].update(size_bytes="007"),
                   lambda m: m["artifacts"][0].update(record_count="18446744073709551616"),
                   lambda m: m["window"].update(durationNs="1"),
                   lambda m: m.pop("artifacts"),
                   lambda m: m["window"].update(clock_domain=1),
                   lambda m: m["hardware"].update(cpu_count="2"),
                   lambda m: m.update(labels=None)):
        bad = json.loads(json.dumps(good))
        change(bad)
        out.append(("trace_manifest.schema.json", bad))
    return out


def test_invalid_records_are_invalid_for_ajv_and_jsonschema(ajv, tmp_path):
    cases = [("workload_record.schema.json", b) for b, _ in BAD_WORKLOAD] + _bad_manifests()
    for (schema, inst), res in zip(cases, ajv(cases, tmp_path)):
        assert not res["valid"] and res["errors"], (schema, json.dumps(inst)[:300])
        assert not VALIDATORS[schema].is_valid(inst), json.dumps(inst)[:300]


SCHEMA_OF = {"ReplayResult": "replay_result.schema.json", "ValidationReport": "validation_report.schema.json",
             "TraceCheck": "trace_check.schema.json", "TraceManifest": "trace_manifest.schema.json",
             "ReferenceProbeArtifact": "reference_probe_artifact.schema.json"}


def test_the_tools_outputs_are_valid_for_ajv_and_jsonschema(ajv, outputs, tmp_path):  # noqa: F811 (the fixture)
    """What validate --json, replay, compare, recode and capture finalize (probe artifacts) write today, and the
    committed holdout outputs, against the published schemas (the bindings test reads the same documents)."""
    docs = [(t, outputs / p) for t, p in OUTPUT_DOCS] + list(HOLDOUT_DOCS)
    cases = [(SCHEMA_OF[t], json.loads(p.read_text())) for t, p in docs]
    assert {s for s, _ in cases} == set(SCHEMA_OF.values())
    for (schema, inst), res, (_, path) in zip(cases, ajv(cases, tmp_path), docs):
        assert res["valid"], (path, res["errors"][:3])
        assert VALIDATORS[schema].is_valid(inst), path
