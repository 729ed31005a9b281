"""The reference probe and run conditions in a real capture (reference env for the engine run).

* light: ``capture grpo|agentic --windows K --probe`` passes both to the harness, and with K > 1
  prints one ``capture finalize --rollouts`` per window;
* reference (marked ``reference``): the session's real 2-engine GRPO capture (``real_capture`` in
  tests/conftest.py, shared with test_capture_real and test_capture_privacy; the two engines' start
  and the probes are most of its minutes): two windows with the probe before, between and after; each finalized
  window has exactly its own requests (none of the probe's), both engines' probes before and after
  it (the middle probe shared), probe points with `--probe-repeats` repeats (3 in CI) measured by vLLM's timestamps (the
  batched prefill point: a real multi-row pass, every repeat accounted for), the
  window's conditions with every engine's CPU time, threads and affinity, and a profile can be
  levelled to it;
* reference, the contended part (``--probe-contended N``): every contended repeat of every probe is
  accounted for (used, or unusable with its reason), each used repeat's measured interval lies inside
  the other engine's steady load decode by the artifact's own vLLM timestamps (recomputed here), most
  repeats are usable, and a profile can be levelled to the contended points. The session's grpo
  capture (tests/conftest.py) runs with ``--probe-contended 1``; a capture without the contended part
  skips this test with the reason; :func:`check_contended` also checks the holdout's smoke capture.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_capture_real import needs_ref

from unirl_replay.capture import probe as P
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.contract.validate import check_trace, format_violation
from unirl_replay.v1.report_pb2 import TraceCheck

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "profiles" / "vllm-cpu-tiny-qwen2-20261130b.npz"


def test_windows_and_probe_reach_the_harness_and_each_window_gets_a_finalize_command(tmp_path, monkeypatch):
    fake = tmp_path / "python"
    log = tmp_path / "argv"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n"
                    "echo '{\"windows\": [\"0:1\", \"2:3\"], \"rollouts\": \"0:1\"}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UNIRL_REPLAY_REF_PYTHON", str(fake))
    from unirl_replay.cli.main import cli

    res = CliRunner().invoke(cli, ["capture", "grpo", "--out", str(tmp_path / "t"), "--windows", "2", "--probe",
                                   "--workload-name", "w", "--role", "holdout"])
    assert res.exit_code == 0, res.output
    argv = log.read_text().split()
    assert argv[argv.index("--windows") + 1] == "2" and "--probe" in argv
    assert re.search(r"window 0: .*capture finalize \S+/raw --out \S+-w0 --rollouts 0:1 --workload-name w", res.output)
    assert re.search(r"window 1: .*--rollouts 2:3", res.output)


@needs_ref
@pytest.mark.reference
def test_a_real_two_window_capture_records_probes_and_conditions_and_keeps_probe_requests_out(tmp_path,
                                                                                             real_capture):
    from unirl_replay.calibrate.probe import level_profile
    from unirl_replay.capture.finalize import finalize

    # the session's GRPO capture (tests/conftest.py): `capture grpo --batches 1 --windows 2 --probe`, one
    # overhead pair after the last probe; shared with test_capture_real and test_capture_privacy
    cap = real_capture("grpo")
    assert cap.windows == 2
    raw = cap.raw
    probe_gens = [json.loads(line) for f in raw.glob("engine-*.jsonl") for line in f.read_text().splitlines()
                  if '"probe_generate"' in line]
    own = [g for g in probe_gens if g["probe"].get("condition") is None]  # the probe's points (both engines at once)
    assert len(own) == 2 * 3 * cap.probe_repeats * 4  # 2 engines x 3 probes x --probe-repeats x 4 points
    # the rest is the contended part (tests/conftest.py: --probe-contended 1; test_a_real_contended_probe_... checks
    # it): each engine's points measured while the other runs its load
    assert {g["probe"]["condition"] for g in probe_gens if g not in own} <= {"contended", "load"}
    ids = {}
    for k in (0, 1):
        d = tmp_path / f"w{k}"
        rep = finalize(raw, d, rollouts=f"{k}:{k}", role="holdout", workload_name="probe-ci",
                       max_output_tokens=cap.max_new_tokens)
        res = check_trace(d)
        assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]
        assert rep.complete, rep.lines()
        t = open_trace(d)
        m = t.manifest
        reqs = [r.request for _, r in t.iter_workload() if r.WhichOneof("record") == "request"]
        # the prompts (4), scattered over the 2 engines: one vLLM request (n=2) each, none of the probe's 43 per
        # repeat, none of the overhead pair's
        n = cap.prompts_per_batch
        assert len(reqs) == n and all(r.num_samples == cap.samples and r.sample_ids[0].startswith(f"r{k}:")
                                      for r in reqs)
        assert sum(1 for _, o in iter_outcomes(t) if o.WhichOneof("record") == "request") == n
        engines = sorted(e.engine_id for e in m.engines)
        assert sorted((p.engine_id, p.when) for p in m.probes) == sorted(
            (e, w) for e in engines for w in ("before", "after"))
        for p in m.probes:
            assert [(pt.phase, pt.batch_size, pt.prefill_tokens) for pt in p.points[:3]] == [
                ("decode", 1, 0), ("decode", 32, 0), ("prefill", 0, 512)]
            assert all(pt.repeats == cap.probe_repeats and 0 < pt.p25_ms <= pt.median_ms <= pt.p75_ms
                       for pt in p.points[:3])
            # the batched prefill point: a real multi-row pass (the rows vLLM put in one step, 256 tokens each),
            # its repeats all accounted for; its step is longer than the isolated 512-token row's
            bp = p.points[3]
            assert bp.phase == "prefill" and 2 <= bp.batch_size <= 9 and bp.prefill_tokens == 256 * bp.batch_size
            assert bp.repeats + bp.unusable_repeats == cap.probe_repeats, (bp.repeats, bp.unusable_repeats)
            assert bp.repeats >= max(1, cap.probe_repeats - 2), (bp.repeats, bp.unusable_repeats)
            # every usable repeat with its own pass size (which rows reach vLLM's first step is a race)
            assert len(bp.repeat_step_ms) == len(bp.repeat_pass_tokens) == len(bp.repeat_pass_rows) == bp.repeats
            assert all(n == 256 * k and k >= 2 for n, k in zip(bp.repeat_pass_tokens, bp.repeat_pass_rows))
            assert 0 < bp.p25_ms <= bp.median_ms <= bp.p75_ms
            if bp.prefill_tokens > 512:
                assert bp.median_ms > p.points[2].median_ms
            art = probe_artifact(d, p)
            assert art.role == "calibration" and len(art.requests) == cap.probe_repeats * len(P.PROBE_POINTS)
            assert art.method.startswith(f"{cap.probe_repeats} repeats of:")
            ids[(k, p.engine_id, p.when)] = art.probe_id
            assert p.conditions.engine_process_cpu_ns[p.engine_id] > 0
        c = m.conditions
        assert sorted(c.engine_process_cpu_ns) == engines and all(v > 0 for v in c.engine_process_cpu_ns.values())
        assert all("VLLM_CPU_OMP_THREADS_BIND=" in c.worker_threads[e] and "threads, affinity" in c.worker_threads[e]
                   for e in engines)
        assert c.HasField("loadavg_1m_start") and c.HasField("host_busy_pct") and c.engine_uptime_ns > 0
        if k == 0 and BASE.exists():
            _, prov = level_profile(BASE, m, tmp_path / "levelled.npz", levelling="two_term")
            pl = prov["probe_levelled"]
            assert pl["decode_level"] > 0 and pl["prefill_level"] > 0 and pl["levelling"] == "two_term"
            assert pl["decode"]["applied"]["method"] in ("two_term", "scalar")  # scalar: refused, reason recorded
            assert [q["tokens"] for q in pl["prefill"]["by_tokens"]["points"]][0] == 512
            assert len(pl["prefill"]["by_tokens"]["points"]) == 2
    for e in {key[1] for key in ids}:
        assert ids[(0, e, "after")] == ids[(1, e, "before")]  # the probe between the windows serves both
        assert ids[(0, e, "before")] != ids[(1, e, "after")]


def probe_artifact(trace_dir: Path, entry):
    """The artifact a ReferenceProbe entry names, read as the contract's ReferenceProbeArtifact (unknown keys refused)."""
    from unirl_replay.contract import json_profile
    from unirl_replay.v1 import manifest_pb2

    return json_profile.parse_json((trace_dir / entry.artifact_path).read_bytes(), manifest_pb2.ReferenceProbeArtifact)


def check_contended(raw: Path, out_dirs: list[Path], repeats: int, probe_repeats: int = 5) -> dict:
    """The contended part of a real capture: its raw records and the finalized windows ``out_dirs``.

    Returns counts (used / unusable repeats); raises AssertionError on anything that does not hold.
    """
    from unirl_replay.calibrate.probe import level_profile
    from unirl_replay.capture import probe as P

    gens = [json.loads(line) for f in raw.glob("engine-*.jsonl") for line in f.read_text().splitlines()
            if '"probe_generate"' in line]
    engines = {g["engine_id"] for g in gens}
    probes = {g["probe"]["probe_id"] for g in gens}
    cont = [g for g in gens if g["probe"].get("condition") == "contended"]
    loads = [g for g in gens if g["probe"].get("condition") == "load"]
    # per probe: each engine in turn is the target of `repeats` rounds of every point, the other engine loads; a
    # round that missed its load ran again as <repeat>:<engine>:<attempt> (at most ROUND_ATTEMPTS in all)
    rounds: dict = {}
    for g in cont:
        rounds.setdefault((g["probe"]["probe_id"], g["engine_id"], g["probe"]["round"]), []).append(g["probe"]["point"])
    assert all(sorted(pts) == sorted(P.point_key(q) for q in P.PROBE_POINTS) for pts in rounds.values()), rounds
    per_target: dict = {}
    for pid, eid, rnd in rounds:
        per_target.setdefault((pid, eid, rnd.split(":")[0]), []).append(rnd)
    assert len(per_target) == len(probes) * len(engines) * repeats, per_target
    assert all(1 <= len(rs) <= P.ROUND_ATTEMPTS for rs in per_target.values()), per_target
    load_rounds = sorted((g["probe"]["probe_id"], g["probe"]["round"]) for g in loads)
    assert load_rounds == sorted((pid, rnd) for pid, _, rnd in rounds for _ in range(len(engines) - 1)), load_rounds
    assert all(len(g["requests"]) == P.LOAD_ROWS for g in loads)
    records_of = {(pid, eid): 0 for pid, eid, _ in rounds}
    for g in cont:
        records_of[(g["probe"]["probe_id"], g["engine_id"])] += 1
    used = unusable = 0
    for d in out_dirs:
        m = open_trace(d).manifest
        for p in m.probes:
            assert "12 rows" in p.contended_load
            art = probe_artifact(d, p)
            assert len(art.requests) == probe_repeats * len(P.PROBE_POINTS)  # the probe's own, never mixed
            assert all(pt.repeats == probe_repeats for pt in p.points[:3])
            assert art.method.startswith(f"{probe_repeats} repeats of:")
            verdicts = art.contended_verdicts
            assert len(verdicts) == records_of[(art.probe_id, p.engine_id)], (len(verdicts), records_of)
            # the driver judged each round as finalize does (the replies carry vLLM's timestamps): a round ran again
            # only when a repeat of it is unusable, and one that did not (short of the last attempt) is all used
            attempts: dict = {}
            for v in verdicts:
                parts = v.round.split(":")
                attempts.setdefault(parts[0], {}).setdefault(int(parts[2]) if len(parts) == 3 else 0, []).append(v.used)
            for rep, by_attempt in attempts.items():
                last = max(by_attempt)
                assert sorted(by_attempt) == list(range(last + 1)), by_attempt
                for k, flags in by_attempt.items():
                    if k < last:
                        assert not all(flags), (p.engine_id, rep, k, verdicts)
                    elif k < P.ROUND_ATTEMPTS - 1:
                        assert all(flags), (p.engine_id, rep, k, verdicts)
            steady = {}
            for eid, rs in art.contended_loads.items():
                for r in rs.calls:  # recomputed from the artifact's own vLLM timestamps of every load row
                    assert all(q.HasField("first_token_ts") and q.HasField("last_token_ts") for q in r.requests), r
                    firsts, lasts = [q.first_token_ts for q in r.requests], [q.last_token_ts for q in r.requests]
                    steady[(eid, r.round)] = (max(firsts), min(lasts)) if max(firsts) < min(lasts) else None
            for v in verdicts:
                if v.used:
                    a, b = v.interval
                    spans = [s for (e, rnd), s in steady.items() if rnd == v.round]
                    assert spans and all(s and s[0] - 1e-6 <= a and b <= s[1] + 1e-6 for s in spans), (v, spans)
                    used += 1
                else:
                    assert v.reason
                    unusable += 1
            by_point = {(pt.phase, pt.batch_size > 1 if pt.phase == "prefill" else pt.batch_size): pt
                        for pt in p.contended_points}
            for pt in p.contended_points:
                assert pt.repeats >= 1 and 0 < pt.p25_ms <= pt.median_ms <= pt.p75_ms
            assert sum(pt.repeats + pt.unusable_repeats for pt in p.contended_points) <= len(verdicts)
            assert by_point, f"no contended point usable in {d.name} {p.engine_id} {p.when}: {verdicts}"
        if BASE.exists():
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                _, prov = level_profile(BASE, m, Path(tmp) / "contended.npz", probe_condition="contended")
            assert prov["probe_levelled"]["variant"] == "CALIBRATED+PROBE contended"
            assert prov["probe_levelled"]["decode_level"] > 0 and prov["probe_levelled"]["prefill_level"] > 0
    return {"used": used, "unusable": unusable}


@needs_ref
@pytest.mark.reference
def test_a_real_contended_probe_measures_each_engine_inside_the_others_load(tmp_path, real_capture):
    from unirl_replay.capture.finalize import finalize

    cap = real_capture("grpo")
    first = next((json.loads(line) for f in cap.raw.glob("engine-*.jsonl") for line in f.read_text().splitlines()
                  if '"condition": "contended"' in line or '"condition":"contended"' in line), None)
    if first is None:
        pytest.skip("the session's grpo capture (tests/conftest.py) ran without the probe's contended part: it needs "
                    "`--probe-contended 1` to measure it")
    repeats = 1 + max(json.loads(line)["probe"]["repeat"] for f in cap.raw.glob("engine-*.jsonl")
                      for line in f.read_text().splitlines() if '"contended"' in line and '"probe_generate"' in line)
    outs = []
    for k in range(cap.windows):
        d = tmp_path / f"w{k}"
        finalize(cap.raw, d, rollouts=f"{k}:{k}", role="holdout", workload_name="probe-ci",
                 max_output_tokens=cap.max_new_tokens)
        outs.append(d)
    check_contended(cap.raw, outs, repeats, cap.probe_repeats)
