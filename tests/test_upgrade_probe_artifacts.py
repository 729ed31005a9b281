"""scripts/upgrade_probe_artifacts.py: a reference-probe artifact of schema /1 (before ReferenceProbeArtifact) is
rewritten as the message losslessly, on the committed holdouts' artifacts (they were all /1 until upgraded)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from unirl_replay.contract import json_profile
from unirl_replay.v1 import manifest_pb2 as m

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("upgrade_probe_artifacts", ROOT / "scripts" / "upgrade_probe_artifacts.py")
up = importlib.util.module_from_spec(spec)
spec.loader.exec_module(up)

#: artifacts with and without a contended part, and a batched-prefill point with an unusable pass
SAMPLES = sorted((ROOT / "results").rglob("probes/*.json"))


def test_every_committed_artifact_is_the_message():
    assert len(SAMPLES) >= 100
    for p in SAMPLES:
        art = json_profile.parse_json(p.read_bytes(), m.ReferenceProbeArtifact)
        assert art.schema == "unirl-replay.reference-probe/2" and art.engine_id and art.requests, p


def test_a_legacy_artifact_is_upgraded_losslessly_in_place(tmp_path):
    picked = [p for p in SAMPLES if b"contended_method" in p.read_bytes()][:2] + SAMPLES[:2]
    for i, p in enumerate(picked):
        art = json_profile.parse_json(p.read_bytes(), m.ReferenceProbeArtifact)
        legacy = up._back(art)  # what the /1 writer wrote for the same facts
        assert legacy["schema"] == up.LEGACY and isinstance(legacy["requests"][0]["requests"][0], list)
        assert up.upgrade(legacy) == art
        d = tmp_path / f"t{i}" / "probes"
        d.mkdir(parents=True)
        (d / "e-before.json").write_text(json.dumps(legacy))
    assert up.main([str(tmp_path)]) == 0
    for i, p in enumerate(picked):
        got = json_profile.parse_json((tmp_path / f"t{i}" / "probes" / "e-before.json").read_bytes(),
                                      m.ReferenceProbeArtifact)
        assert got == json_profile.parse_json(p.read_bytes(), m.ReferenceProbeArtifact)
    assert up.main([str(tmp_path)]) == 0  # already /2: left as they are
