"""The mutation fuzzer in the default suite: a few hundred seeded mutants (``make fuzz``: thousands).

Pass: no crash (only typed errors), exit codes in the documented sets, no accepted mutant whose
mutation breaks a contract rule, every later stage run on every accepted mutant.
"""

from __future__ import annotations

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
