"""The mutation fuzzer in the default suite: a few hundred seeded mutants (``make fuzz``: thousands).

Pass: no crash (only typed errors), exit codes in the documented sets, no accepted mutant whose
mutation breaks a contract rule, every later stage run on every accepted mutant.
"""

from __future__ import annotations

import json
import os

import fuzzlib

N = int(os.environ.get("UNIRL_FUZZ_MUTANTS", "240"))


def test_seeded_mutants_never_crash_nor_are_silently_accepted(tmp_path):
    tally = fuzzlib.fuzz(N, seed=13, work=tmp_path)
    assert sum(tally.mutants.values()) >= N * 0.9
    assert set(tally.mutants) >= {"byte", "json", "semantic", "manifest", "filesystem"}
    assert not tally.failures, fuzzlib.report(tally)
    # the accepted mutants really went through the later stages
    assert sum(v for (c, s, o), v in tally.outcome.items() if s.startswith("convert_") and o == "ok") > 0


def test_the_fuzzer_detects_crashes_and_silent_accepts(tmp_path):
    from tracebuild import grpo_trace

    d = grpo_trace().write(tmp_path / "t")  # a valid trace, claimed to break a rule: must be flagged
    tally = fuzzlib.Tally()
    fuzzlib.run_stages(tally, "semantic", "claims_breaking", True, "grpo", d, tmp_path / "s", replay=False)
    assert tally.outcome[("semantic", "validate", "SILENT_ACCEPT")] == 1 and tally.failures

    def boom():
        raise ValueError("not a typed error")

    tally = fuzzlib.Tally()
    fuzzlib._run(tally, "byte", "x", "seed", "validate", boom)
    assert tally.outcome[("byte", "validate", "CRASH")] == 1


def test_count_and_size_mutations_edit_one_artifact(tmp_path):
    """record_count_off / size_off change the artifact they draw (attack-s7: the artifact was drawn twice, so
    1 draw in 2 wrote the other artifact's count + 1 into it: on traces/grpo-a, 35 workload and 34 outcome
    records, the workload's count stayed 35 and `make fuzz` --seed 71 reported a silent accept)."""
    import random
    import shutil

    seed = next(s for s in fuzzlib.seeds(tmp_path / "seeds") if s.name == "grpo-a")
    for name in ("record_count_off", "size_off"):
        fn = next(m[3] for m in fuzzlib.MUTATIONS if m[1] == name)
        for k in range(8):
            d = tmp_path / f"{name}{k}"
            shutil.copytree(seed.dir, d)
            before = json.loads((d / "manifest.json").read_text())["artifacts"]
            fn(d, seed, random.Random(k))
            after = json.loads((d / "manifest.json").read_text())["artifacts"]
            changed = [(a, b) for a, b in zip(before, after) if a != b]
            key = "record_count" if name == "record_count_off" else "size_bytes"
            assert len(changed) == 1 and int(changed[0][1][key]) != int(changed[0][0].get(key, 0)), (name, k)
