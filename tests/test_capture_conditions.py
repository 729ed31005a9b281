"""Run conditions and the reference probe of a capture (light env).

* ``capture.procfs`` on this host's real ``/proc``: a child process that burns CPU is found as an
  engine from a shard header, its CPU time, threads and affinity are read, and the
  ``RunConditions`` fields between two snapshots hold them;
* ``capture.probe``: the probe's payloads and the per-point median / quartiles from
  ``probe_generate`` records;
* ``capture finalize`` on hand-built shards (the layout of tests/test_capture_finalize.py) with
  window and probe marks: ``TraceManifest.conditions``, ``TraceManifest.probes`` with their
  calibration-role artifacts, the probe between two windows is the ``after`` of one and the
  ``before`` of the next, and no probe request is ever a window request.
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_capture_finalize import HOST, _eng, _grpo_raw, _load, _t, _valid, _write

from unirl_replay.capture import procfs
from unirl_replay.capture import probe as P
from unirl_replay.capture.finalize import finalize
from unirl_replay.contract import json_profile
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2

BURN = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass\ntime.sleep(30)\n"


@pytest.fixture
def burner():
    proc = subprocess.Popen([sys.executable, "-c", BURN])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")
def test_procfs_reads_an_engine_process_tree_from_its_shard_header(tmp_path, burner):
    raw = tmp_path / "raw"
    raw.mkdir()
    eid = f"vllm:{socket.gethostname()}:{os.getpid()}"
    (raw / f"engine-x-{os.getpid()}.jsonl").write_text(json.dumps(
        {"kind": "process", "role": "engine", "host": socket.gethostname(), "pid": os.getpid(), "engine_id": eid}) + "\n")
    # another host's engine is never read from this host's /proc
    (raw / "engine-y-1.jsonl").write_text(json.dumps(
        {"kind": "process", "role": "engine", "host": "elsewhere", "pid": 1, "engine_id": "vllm:elsewhere:1"}) + "\n")
    assert procfs.engine_pids(raw) == {eid: os.getpid()}
    a = procfs.snapshot(raw)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the child burns 0.4 s of CPU, then sleeps
        tree = procfs.process_tree(burner.pid)
        if tree and tree["cpu_ns"] >= 0.35e9:
            break
        time.sleep(0.05)
    b = procfs.snapshot(raw)
    tree_b = b["engines"][eid]
    pids = [p["pid"] for p in tree_b["processes"]]
    assert pids[0] == os.getpid() and burner.pid in pids  # this process and its descendant
    child = next(p for p in tree_b["processes"] if p["pid"] == burner.pid)
    assert child["threads"] >= 1 and child["affinity"] and child["age_s"] >= 0
    f = procfs.conditions_fields(a, b, hardware={"cpu_model": "m", "cpu_count": 2})
    assert f["engine_process_cpu_ns"][eid] >= 0.3e9  # the child's burn is counted in the engine's tree
    assert f"pid {burner.pid}" in f["worker_threads"][eid] and "threads, affinity" in f["worker_threads"][eid]
    assert f["loadavg_1m_start"] >= 0 and f["loadavg_1m_end"] >= 0
    assert 0 <= f["host_busy_pct"] <= 100 and 0 <= f.get("steal_pct", 0) <= 100
    assert f["duration_ns"] > 0 and f["engine_uptime_ns"] > 0
    assert procfs.process_tree(2**22 + 12345) is None  # a process that is not there: None, not a guess


def test_busy_and_steal_from_two_stat_lines():
    a = [100, 0, 100, 700, 100, 0, 0, 0, 0, 0]
    b = [200, 0, 150, 800, 100, 0, 0, 50, 0, 0]  # +300 ticks: 150 user+system, 100 idle, 50 steal
    assert procfs.busy_steal_pct(a, b) == {"host_busy_pct": pytest.approx(200 / 3), "steal_pct": pytest.approx(50 / 3)}
    assert procfs.busy_steal_pct(a, None) == {} and procfs.busy_steal_pct(a, a) == {}


def test_probe_payloads_are_unique_prompts_of_the_fixed_points():
    rng = random.Random(1)
    dec = P.payloads(("decode", 32, 128, 0), rng, 1000)
    assert len(dec) == 32 and {len(p["input_ids"]) for p in dec} == {112}
    assert len({tuple(p["input_ids"]) for p in dec}) == 32
    assert all(p["sampling_params"]["max_new_tokens"] == 32 and p["sampling_params"]["ignore_eos"] for p in dec)
    pre = P.payloads(("prefill", 0, 0, 512), rng, 1000)
    assert len(pre) == 1 and len(pre[0]["input_ids"]) == 512 and pre[0]["sampling_params"]["max_new_tokens"] == 1
    assert P.DECODE_PROMPT_TOKENS + P.PROBE_DECODE_STEPS / 2 == 128
    from unirl_replay.calibrate import probe as calibrate_probe

    assert calibrate_probe.PROBE_POINTS is P.PROBE_POINTS  # one definition for both stages


def _tag(probe_id, point, rep):
    phase, b, ctx, pre = point
    return {"probe_id": probe_id, "when": "before", "point": P.point_key(point), "repeat": rep, "phase": phase,
            "batch_size": b, "context_tokens": ctx, "prefill_tokens": pre}


def _probe_records(eid, probe_id, t0, level=1.0):
    """probe_generate records: decode step (2 + rep) * level ms at B=1, (10 + rep) * level at B=32; prefill
    (20 + rep) * level ms; batched prefill (8 rows of 256 after a lead row) (80 + rep) * level ms."""
    out, t = [], t0
    for rep in range(P.PROBE_REPEATS):
        for point in P.PROBE_POINTS:
            phase, b = point[0], point[1]
            reqs = []
            if phase == "decode":
                step = ((2 if b == 1 else 10) + rep) * level / 1e3
                for _ in range(b):
                    reqs.append({"prompt_tokens": 112, "output_tokens": [32],
                                 "metrics": {"scheduled_ts": t, "first_token_ts": t + .01,
                                             "last_token_ts": t + .01 + 31 * step}})
            elif b > 1:  # batched prefill: the lead row alone (5 ms), then the b rows in one pass of (80 + rep) ms
                lead = t + 5 * level / 1e3
                reqs.append({"prompt_tokens": 256, "output_tokens": [1],
                             "metrics": {"scheduled_ts": t, "first_token_ts": lead, "last_token_ts": lead}})
                end = lead + (80 + rep) * level / 1e3
                reqs += [{"prompt_tokens": 256, "output_tokens": [1],
                          "metrics": {"scheduled_ts": lead, "first_token_ts": end, "last_token_ts": end}}
                         for _ in range(b)]
            else:
                reqs.append({"prompt_tokens": 512, "output_tokens": [1],
                             "metrics": {"scheduled_ts": t, "first_token_ts": t + (20 + rep) * level / 1e3,
                                         "last_token_ts": t + (20 + rep) * level / 1e3}})
            out.append({"kind": "probe_generate", "engine_id": eid, "probe": _tag(probe_id, point, rep),
                        "pipe_request_id": 1000 + len(out), "call_monotonic": [t, t + .5], "requests": reqs})
            t += 0.5
    return out


def test_probe_points_are_median_and_quartiles_of_the_repeats():
    pts = P.probe_points(_probe_records("e", "p", 0.0))
    assert [(p["phase"], p["batch_size"], p["prefill_tokens"]) for p in pts] == [
        ("decode", 1, 0), ("decode", 32, 0), ("prefill", 0, 512), ("prefill", 8, 2048)]
    b1, b32, pre, bpre = pts
    assert b1["repeats"] == 5 and b1["median_ms"] == pytest.approx(4.0) and b1["p25_ms"] == pytest.approx(3.0)
    assert b1["p75_ms"] == pytest.approx(5.0) and b32["median_ms"] == pytest.approx(12.0)
    assert pre["median_ms"] == pytest.approx(22.0) and pre["context_tokens"] == 0
    # the batched pass: its own step (never the lead row's 5 ms, never the call's span)
    assert bpre["repeats"] == 5 and bpre["median_ms"] == pytest.approx(82.0) and bpre["unusable_repeats"] == 0
    assert bpre["passes"][0] == [8, 2048, pytest.approx(80.0)]
    bad = _probe_records("e", "p", 0.0)
    bad[0]["requests"][0]["metrics"]["last_token_ts"] = None  # one unusable repeat: counted, never guessed
    b1 = P.probe_points(bad)[0]
    assert b1["repeats"] == 4 and b1["unusable_repeats"] == 1


def _rows(*passes):
    """Hand-built engine records of one batched prefill repeat: passes of (rows, scheduled_ts, first_token_ts)."""
    return [{"prompt_tokens": 256, "output_tokens": [1],
             "metrics": {"scheduled_ts": a, "first_token_ts": b, "last_token_ts": b}}
            for n, a, b in passes for _ in range(n)]


def test_batched_prefill_step_is_the_pass_holding_the_most_rows():
    # lead row alone 0.00-0.02 s, then 8 rows scheduled at 0.02 sharing the step that ends at 0.9
    assert P.batched_prefill_pass(_rows((1, 0.0, 0.02), (8, 0.02, 0.9))) == {
        "rows": 8, "tokens": 2048, "ms": pytest.approx(880.0)}
    # 1 + 3 + 5: the 5-row pass (the last), its own scheduled -> first token
    got = P.batched_prefill_pass(_rows((1, 0.0, 0.02), (3, 0.02, 0.3), (5, 0.3, 0.8)))
    assert got["rows"] == 5 and got["tokens"] == 1280 and got["ms"] == pytest.approx(500.0)
    # all 9 in one pass: that pass
    assert P.batched_prefill_pass(_rows((9, 0.0, 1.0)))["rows"] == 9
    # never guessed: a tie, no batched pass, rows of one step scheduled apart, a missing timestamp
    assert P.batched_prefill_pass(_rows((1, 0.0, 0.02), (4, 0.02, 0.4), (4, 0.4, 0.8))) is None
    assert P.batched_prefill_pass(_rows((1, 0.0, 0.1), (1, 0.1, 0.2))) is None
    assert P.batched_prefill_pass(_rows((1, 0.0, 0.02), (7, 0.02, 0.9)) + _rows((1, 0.01, 0.9))) is None
    bad = _rows((1, 0.0, 0.02), (8, 0.02, 0.9))
    bad[3]["metrics"]["scheduled_ts"] = None
    assert P.batched_prefill_pass(bad) is None
    # the point: every usable repeat kept with its own pass size (the race puts 1 or 2 rows in the first step);
    # the point's size = the median-low of the sizes; a repeat with no usable pass is counted, never mixed in
    point = ("prefill", 8, 0, 2048)
    recs = [{"probe": _tag("p", point, rep), "requests": _rows((1, 0.0, 0.02), (8, 0.02, 0.5 + 0.1 * rep))}
            for rep in range(2)]
    recs += [{"probe": _tag("p", point, rep), "requests": _rows((2, 0.0, 0.02), (7, 0.02, 0.4 + 0.1 * rep))}
             for rep in (2, 3)]
    recs.append({"probe": _tag("p", point, 4), "requests": _rows((1, 0.0, 0.02), (4, 0.02, 0.4), (4, 0.4, 0.8))})
    (pt,) = P.probe_points(recs)
    assert (pt["batch_size"], pt["prefill_tokens"], pt["repeats"], pt["unusable_repeats"]) == (7, 1792, 4, 1)
    assert pt["repeat_pass_rows"] == [8, 8, 7, 7] and pt["repeat_pass_tokens"] == [2048, 2048, 1792, 1792]
    assert pt["repeat_step_ms"] == [pytest.approx(x) for x in (480.0, 580.0, 580.0, 680.0)]
    assert pt["median_ms"] == pytest.approx(580.0)
    assert pt["passes"][2] == [7, 1792, pytest.approx(580.0)] and pt["passes"][4] is None


def test_probe_payloads_of_the_batched_prefill_point_are_a_lead_row_and_the_rows():
    pay = P.payloads(("prefill", 8, 0, 2048), random.Random(2), 1000)
    assert len(pay) == 9 and {len(p["input_ids"]) for p in pay} == {256}
    assert len({tuple(p["input_ids"]) for p in pay}) == 9
    assert all(p["sampling_params"]["max_new_tokens"] == 1 for p in pay)
    assert P.point_key(("prefill", 8, 0, 2048)) == "prefill:b8:2048" and P.point_key(("prefill", 0, 0, 512)) == "prefill:512"
    assert ("prefill", 8, 0, 2048) in P.PROBE_POINTS


def _snap(t, load, stat, cpu):
    return {"monotonic": t, "wall": 1.7e9 + t, "loadavg": [load, 1.0, 1.0], "stat": stat, "host": HOST,
            "engines": {_eng(p): {"pid": p, "cpu_ns": cpu[i], "age_s": 300.0 + t,
                                  "processes": [{"pid": p, "comm": "python", "cpu_ns": cpu[i], "threads": 4,
                                                 "affinity": {str(i): 4}, "env": {"VLLM_CPU_OMP_THREADS_BIND": str(i)}}]}
                        for i, p in enumerate((21, 22))}}


def _mark(kind, t, snap, **kw):
    return {"kind": kind, "at": _t(t), "conditions": snap, **kw}


def _raw_with_probes(raw: Path) -> None:
    """grpo_raw (rollout 0 at t=1.0-1.3, rollout 1 at t=2.0-2.3) as two windows; probes at 0.2-0.6
    (before window 0), 1.5-1.9 (between) and 2.6-2.9 (after window 1); engine 22 ran 1.5x slower."""
    _grpo_raw(raw)
    stat0 = [0, 0, 0, 1000, 0, 0, 0, 0, 0, 0]
    drv = [{"kind": "process", "role": "driver", "host": HOST, "pid": 5, "ppid": 1, "boot_id": "boot-1",
            "clock_pair": _t(0.0), "versions": {}, "hardware": {"cpu_count": 2}}]
    for pid, (t0, t1) in (("pa", (0.2, 0.6)), ("pb", (1.5, 1.9)), ("pc", (2.6, 2.9))):
        drv.append(_mark("probe_start", t0, _snap(t0, 1.0, stat0, [0, 0]), when="x", probe_id=pid))
        drv.append(_mark("probe_end", t1, _snap(t1, 1.1, stat0, [10**8, 10**8]), when="x", probe_id=pid))
    for k, (t0, t1) in enumerate(((0.9, 1.4), (1.95, 2.4))):
        drv.append(_mark("window_start", t0, _snap(t0, 1.5 + k, [0, 0, 0, 1000, 0, 0, 0, 0, 0, 0], [0, 5 * 10**8]),
                         rollout_ids=[k], window=k))
        drv.append(_mark("window_end", t1, _snap(t1, 2.5 + k, [300, 0, 100, 1500, 0, 0, 0, 100, 0, 0],
                                                  [4 * 10**8, 8 * 10**8]), rollout_ids=[k], window=k))
    _write(raw, f"driver-{HOST}-5.jsonl", drv)
    for e_pid, level in ((21, 1.0), (22, 1.5)):
        path = raw / f"engine-{HOST}-{e_pid}.jsonl"
        extra = [r for pid, t in (("pa", 0.2), ("pb", 1.5), ("pc", 2.6))
                 for r in _probe_records(_eng(e_pid), pid, t, level)]
        with open(path, "a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in extra))


def test_finalize_fills_conditions_and_probes_and_never_mixes_probe_requests(tmp_path):
    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    out0, out1 = tmp_path / "w0", tmp_path / "w1"
    rep0 = finalize(raw, out0, rollouts="0:0", workload_name="grpo-unit")
    rep1 = finalize(raw, out1, rollouts="1:1", workload_name="grpo-unit")
    for out, rep in ((out0, rep0), (out1, rep1)):
        _valid(out)
        man, wl, oc = _load(out)
        assert rep.complete and man.completeness.complete  # probe requests are not "engine requests with no driver"
        # the window's requests: exactly its rollout's 4 vLLM requests, none of the 2 x 3 x 5 x 43 probe requests
        assert len(wl["request"]) == 4 and all(int(r.request_id.split("#")[1]) < 4 for r in wl["request"])
        assert len(oc["request"]) == 4
        c0 = man.conditions
        assert c0.cache_state == c.CACHE_STATE_KIND_COLD and c0.cpu_count == 2
        assert sorted(c0.engine_process_cpu_ns) == [_eng(21), _eng(22)]
        assert "VLLM_CPU_OMP_THREADS_BIND=" in c0.worker_threads[_eng(21)]
        assert c0.engine_uptime_ns > 0 and c0.duration_ns > 0
        assert c0.host_busy_pct == pytest.approx(50.0) and c0.steal_pct == pytest.approx(10.0)
        assert sorted((p.engine_id, p.when) for p in man.probes) == [
            (_eng(21), "after"), (_eng(21), "before"), (_eng(22), "after"), (_eng(22), "before")]
        for p in man.probes:
            art = json.loads((out / p.artifact_path).read_text())
            assert art["role"] == "calibration" and art["engine_id"] == p.engine_id and art["when"] == p.when
            # the artifact is a ReferenceProbeArtifact (unknown keys refused), with the points' per-repeat detail
            msg = json_profile.parse_json((out / p.artifact_path).read_bytes(), manifest_pb2.ReferenceProbeArtifact)
            assert msg.schema == "unirl-replay.reference-probe/2" and msg.probe_id == art["probe_id"]
            assert [(q.phase, q.batch_size, q.median_ms) for q in msg.points] == [
                (q.phase, q.batch_size, q.median_ms) for q in p.points]
            assert all(statistics.median(q.step_ms) == pytest.approx(q.median_ms) for q in msg.points)
            assert [g.usable for g in msg.points[3].passes] == [True] * 5 and len(msg.requests) == 20
            assert all(t.HasField("scheduled_ts") and t.HasField("first_token_ts") and t.HasField("last_token_ts")
                       and t.output_tokens > 0 for call in msg.requests for t in call.requests)
            assert [(pt.phase, pt.batch_size, pt.prefill_tokens) for pt in p.points] == [
                ("decode", 1, 0), ("decode", 32, 0), ("prefill", 0, 512), ("prefill", 8, 2048)]
            level = 1.5 if p.engine_id == _eng(22) else 1.0
            assert p.points[0].median_ms == pytest.approx(4.0 * level) and p.points[0].repeats == 5
            assert p.points[2].median_ms == pytest.approx(22.0 * level) and p.points[2].prefill_tokens == 512
            assert p.points[3].median_ms == pytest.approx(82.0 * level) and p.points[3].unusable_repeats == 0
            assert p.conditions.engine_process_cpu_ns[p.engine_id] == 10**8 and len(p.conditions.engine_process_cpu_ns) == 1
    m0, m1 = _load(out0)[0], _load(out1)[0]
    assert m0.conditions.loadavg_1m_start == 1.5 and m1.conditions.loadavg_1m_start == 2.5  # each window its own marks
    assert m0.conditions.engine_process_cpu_ns[_eng(22)] == 3 * 10**8
    ids = {(json.loads((d / p.artifact_path).read_text())["probe_id"], p.when, d.name)
           for d, m in ((out0, m0), (out1, m1)) for p in m.probes}
    assert {(i, w) for i, w, d in ids if d == "w0"} == {("pa", "before"), ("pb", "after")}
    assert {(i, w) for i, w, d in ids if d == "w1"} == {("pb", "before"), ("pc", "after")}


def test_levelling_a_profile_to_a_finalized_probe(tmp_path):
    """calibrate --level-to-probe accepts what finalize wrote (the decode level comes out of the probe)."""
    from unirl_replay.calibrate.probe import ProbeError, levels

    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    finalize(raw, tmp_path / "w0", rollouts="0:0", workload_name="grpo-unit")
    man = _load(tmp_path / "w0")[0]
    prov = {"fit": {"prefill": {"coefficients": {"p0": 22.0, "p1": 0.0, "p2": 0.0}},
                    "decode": {"coefficients": {"d0": 0.0, "d1": 0.0, "d2": 1.0}}}}
    lv = levels(list(man.probes), prov)
    # engine 21 at 1x and engine 22 at 1.5x of a prefill of 22 ms: median level of the 4 entries = 1.25
    assert lv["prefill_level"] == pytest.approx(1.25)
    assert len(lv["points"]) == 16
    with pytest.raises(ProbeError):
        levels([], prov)


# --- the contended part of the probe -------------------------------------------------------------------------

def _req(a, b, c, n=32, tokens=112):
    return {"prompt_tokens": tokens, "output_tokens": [n],
            "metrics": {"scheduled_ts": a, "first_token_ts": b, "last_token_ts": c}}


def _ctag(point, rep, rnd, condition="contended", probe_id="p"):
    return {**_tag(probe_id, point, rep), "condition": condition, "round": rnd}


def _load_rec(eid, rnd, first, last, rows=P.LOAD_ROWS, probe_id="p"):
    tag = {"probe_id": probe_id, "when": "before", "point": f"load:b{rows}", "repeat": 0, "phase": "load",
           "batch_size": rows, "context_tokens": 0, "prefill_tokens": 0, "condition": "load", "round": rnd}
    # the lead row's first token comes first; the steady decode starts with the last row's first token
    reqs = [_req(first - 0.5, first - 0.2 if i == 0 else first, last, 400) for i in range(rows)]
    return {"kind": "probe_generate", "engine_id": eid, "probe": tag, "call_monotonic": [first - 0.5, last],
            "pipe_request_id": 1, "requests": reqs}


def test_contended_repeats_are_used_only_inside_every_other_engines_steady_load():
    b1 = ("decode", 1, 128, 0)
    pre = ("prefill", 0, 0, 512)
    recs = [
        {"probe": _ctag(b1, 0, "0:0"), "requests": [_req(2.0, 2.1, 2.1 + 31 * 0.02)]},   # inside: used (20 ms)
        {"probe": _ctag(pre, 0, "0:0"), "requests": [_req(9.9, 10.5, 10.5, 1, 512)]},   # past the load's end
        {"probe": _ctag(b1, 1, "1:0"), "requests": [_req(3.0, 3.1, 3.1 + 31 * 0.03)]},  # round with no load
        {"probe": _ctag(pre, 1, "2:0"), "requests": [_req(20.0, 20.6, 20.6, 1, 512)]},  # load never steady
    ]
    loads = {"e1": [_load_rec("e1", "0:0", 1.0, 10.0),
                    {**_load_rec("e1", "2:0", 19.0, 25.0), "requests": [_req(19.0, 19.5, 19.4, 1)]}]}
    pts, verdicts = P.contended_points(recs, loads)
    assert [(p["phase"], p["repeats"], p["unusable_repeats"]) for p in pts] == [("decode", 1, 1), ("prefill", 0, 2)]
    assert pts[0]["median_ms"] == pytest.approx(20.0) and "median_ms" not in pts[1]
    assert [v["used"] for v in verdicts] == [True, False, False, False]
    assert "not inside" in verdicts[1]["reason"] and "no load record for round 1:0" in verdicts[2]["reason"]
    assert "never decoded steadily" in verdicts[3]["reason"]
    # the steady interval starts at the LAST row's first token (the lead row's earlier one does not count)
    assert P.load_steady(loads["e1"][0]["requests"]) == (1.0, 10.0)
    # three engines: a repeat needs BOTH other engines' loads around it
    two = {"e1": [_load_rec("e1", "0:0", 1.0, 10.0)], "e2": [_load_rec("e2", "0:0", 2.5, 10.0)]}
    pts, verdicts = P.contended_points(recs[:1], two)
    assert (pts[0]["repeats"], pts[0]["unusable_repeats"]) == (0, 1) and not verdicts[0]["used"]
    assert "engine e2's load decoded steadily 2.500..10.000 s" in verdicts[0]["reason"]
    two["e2"] = [_load_rec("e2", "0:0", 2.0, 10.0)]
    assert P.contended_points(recs[:1], two)[0][0]["repeats"] == 1
    # no other engine: nothing is contended, never the isolated points relabelled
    assert P.contended_points(recs, {}) == ([], [])


def test_load_tokens_cover_the_lead_and_the_targets_points_at_the_measured_rate():
    # 10 s of target points, a load that took 5 s for 100 tokens (0.05 s/token): (2 + 2.0 x 10) / 0.05 = 440
    assert P.load_tokens_for(10.0, 5.0, 100) == 441
    assert P.load_tokens_for(1e6, 5.0, 100) == P.MAX_LOAD_TOKENS  # bounded by the engines' max_model_len
    assert P.load_tokens_for(0.0, 1e6, 1) == P.PROBE_DECODE_STEPS
    # the first guess: B=1 step 0.5 s / 32, B=32 step 4 s / 2 / 32; 12 rows: 11/31 of the way from one to the other
    sec, n = P.first_load_rate(0.5, 4.0)
    assert sec / n == pytest.approx(0.5 / 32 + 11 / 31 * (2.0 / 32 - 0.5 / 32))


class _FakeSlot:
    """A rollout engine slot for the DRIVER's round logic only (``probe._contended``): ``launch`` answers what the
    role method returns, from ``answer(mode, round_id, load_tokens)``; the real role method, engine and timestamps
    are test_capture_probe_real's."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def launch(self, method, when, probe_id, seed, mode="isolated", round_id="", repeat=0, load_tokens=0):
        assert method == P.ROLE_METHOD
        self.calls.append((mode, round_id, load_tokens))
        res = self.answer(mode, round_id, load_tokens)
        return type("Done", (), {"result": staticmethod(lambda: res)})()


def _iso(wall_s):
    return {"wall_s": {P.point_key(p): [wall_s] for p in P.PROBE_POINTS}}


def test_a_round_whose_target_missed_its_load_runs_again_with_a_longer_load(monkeypatch):
    monkeypatch.setattr(P.time, "sleep", lambda s: None)

    sec, tokens = P.first_load_rate(1.0, 1.0)  # the driver's first guess of a load's rate, here the true one
    per_token = sec / tokens

    def engine(target):  # a load call runs from 0 s at ``per_token``; contended: ``target(round_id)``
        def answer(mode, rid, n):
            if mode == "load":
                return {"round": rid, "load_tokens": n, "wall_s": per_token * n, "t0_mono": 0.0,
                        "t1_mono": per_token * n}
            assert mode == "contended"
            start, end = target(rid)
            return {"wall_s": {}, "t0_mono": start, "t1_mono": end}
        return answer

    def on_time(rid):
        return P.LOAD_LEAD_S, P.LOAD_LEAD_S + 4.0

    def late_once(rid):  # the first round's points reach the engine 30 s late (a stalled host)
        return (30.0, 34.0) if rid == "0:0" else on_time(rid)

    a, b = _FakeSlot(engine(late_once)), _FakeSlot(engine(on_time))
    out = P._contended([a, b], [_iso(1.0), _iso(1.0)], "after", "p", 0, 1)
    assert [c[1] for c in a.calls if c[0] == "contended"] == ["0:0", "0:0:1"]  # then covered: no third attempt
    assert [c[1] for c in b.calls if c[0] == "contended"] == ["0:1"]
    first, second = [c[2] for c in b.calls if c[0] == "load"]
    assert second > first and per_token * second >= 34.0 + P.LOAD_TAIL_S  # the retry's load covers the 34 s it took
    miss = [r for r in out if "round_miss" in r]
    assert len(miss) == 1 and "ended" in miss[0]["round_miss"]
    assert [r.get("round") for r in out if "load_tokens" in r] == ["0:0", "0:0:1", "0:1"]  # every load kept

    def never(rid):  # never inside: the attempts are bounded, every one kept
        return 0.1, 1e9

    a = _FakeSlot(engine(never))
    out = P._contended([a, _FakeSlot(engine(on_time))], [_iso(1.0), _iso(1.0)], "after", "p", 0, 1)
    assert [c[1] for c in a.calls if c[0] == "contended"] == ["0:0"] + [f"0:0:{k}" for k in range(1, P.ROUND_ATTEMPTS)]
    misses = [r["round_miss"] for r in out if "round_miss" in r]
    assert len(misses) == P.ROUND_ATTEMPTS and all("started 0.10 s" in m for m in misses)


def test_round_miss_judges_only_by_the_call_times_it_has():
    load = {"t0_mono": 10.0, "t1_mono": 30.0}
    assert P.round_miss({"t0_mono": 12.0, "t1_mono": 25.0}, [load]) is None
    got = P.round_miss({"t0_mono": 12.0, "t1_mono": 29.8}, [load])
    assert "ended -0.20 s" in got["reason"] and got["span_s"] == pytest.approx(19.8)
    assert "started 0.50 s" in P.round_miss({"t0_mono": 10.5, "t1_mono": 20.0}, [load])["reason"]
    # two loads: both must hold the target; the span runs from the earlier one's start
    assert P.round_miss({"t0_mono": 12.0, "t1_mono": 25.0}, [load, {"t0_mono": 5.0, "t1_mono": 24.0}])["span_s"] == 20.0
    for bad in ({}, {"t0_mono": None, "t1_mono": 1.0}, {"t0_mono": float("nan"), "t1_mono": 1.0},
                {"t0_mono": True, "t1_mono": 1.0}):
        assert P.round_miss({**{"t0_mono": 12.0, "t1_mono": 25.0}, **bad}, [load]) is None  # nothing to judge by
    assert P.round_miss({"t0_mono": 12.0, "t1_mono": 25.0}, []) is None


def _contended_records(eid, other, probe_id, t0, level):
    """One contended round per point for ``eid`` (step = level x the isolated records' repeat 0) inside a load
    on ``other`` from t0 - 1 to t0 + 10 s."""
    out = [_load_rec(other, f"0:{eid}", t0 - 1.0, t0 + 10.0, probe_id=probe_id)]
    for rec in _probe_records(eid, probe_id, t0, level)[:len(P.PROBE_POINTS)]:
        rec["probe"].update(condition="contended", round=f"0:{eid}")
        out.append(rec)
    return out


def finalized_with_contended_probes(tmp_path: Path) -> Path:
    """A finalized 2-engine window (rollout 0) whose before probe "pa" also ran its contended part (engine 21 at
    1.3x while 22 loads, and the reverse); its after probe has none. Returns the trace directory."""
    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    for e_pid, o_pid in ((21, 22), (22, 21)):
        recs = _contended_records(_eng(e_pid), _eng(o_pid), "pa", 0.3 if e_pid == 21 else 0.45, 1.3)
        by = {}
        for r in recs:
            by.setdefault(r["engine_id"], []).append(r)
        for eid, rs in by.items():
            with open(raw / f"engine-{HOST}-{eid.rsplit(':', 1)[1]}.jsonl", "a") as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in rs))
    out = tmp_path / "w0"
    finalize(raw, out, rollouts="0:0", workload_name="grpo-unit")
    return out


def test_finalize_keeps_the_contended_points_apart_from_the_probes_points(tmp_path):
    out = finalized_with_contended_probes(tmp_path)
    _valid(out)
    man = _load(out)[0]
    before = {p.engine_id: p for p in man.probes if p.when == "before"}
    after = {p.engine_id: p for p in man.probes if p.when == "after"}
    for eid, p in before.items():
        level = 1.5 if eid == _eng(22) else 1.0
        # the probe's points are unchanged (5 repeats each, their own level); the contended ones are their own
        assert [pt.repeats for pt in p.points] == [5, 5, 5, 5]
        assert p.points[0].median_ms == pytest.approx(4.0 * level)
        assert [(pt.phase, pt.batch_size, pt.repeats, pt.unusable_repeats) for pt in p.contended_points] == [
            ("decode", 1, 1, 0), ("decode", 32, 1, 0), ("prefill", 0, 1, 0), ("prefill", 8, 1, 0)]
        assert p.contended_points[0].median_ms == pytest.approx(2.0 * 1.3)  # repeat 0's 2 ms at 1.3x
        assert "12 rows" in p.contended_load
        art = json.loads((out / p.artifact_path).read_text())
        assert len(art["requests"]) == 20 and len(art["contended_requests"]) == 4
        assert all(v["used"] for v in art["contended_verdicts"]) and art["contended_loads"]
    assert all(not p.contended_points and not p.contended_load for p in after.values())


def test_capture_refuses_probe_counts_it_cannot_run(tmp_path, monkeypatch):
    import subprocess

    from click.testing import CliRunner

    from unirl_replay.cli import capture as capture_cli
    from unirl_replay.cli.main import cli

    started = []  # a refusal must come before the reference driver (real engines) is started

    def no_driver(argv, **kw):
        started.append(argv)
        return subprocess.CompletedProcess(argv, 1, stdout="")

    monkeypatch.setattr(capture_cli.subprocess, "run", no_driver)
    for args, flag in ((["--probe", "--probe-repeats", "0"], "--probe-repeats"),
                       (["--probe", "--probe-repeats", str(P.MAX_PROBE_REPEATS + 1)], "--probe-repeats"),
                       (["--probe-repeats", "3"], "--probe-repeats"),  # without --probe: nothing would run it
                       (["--probe", "--probe-contended", "-1"], "--probe-contended"),
                       (["--probe-contended", "1"], "--probe-contended"),
                       # one engine: no other engine to load, so no contended repeat could run, yet the manifest
                       # would have said reference_probe.contended_repeats = 2
                       (["--probe", "--probe-contended", "2", "--engines", "1"], "--probe-contended")):
        res = CliRunner().invoke(cli, ["capture", "grpo", "--out", str(tmp_path / "t"), *args])
        assert res.exit_code == 2 and flag in res.output and "Traceback" not in res.output, (args, res.output)
        assert not (tmp_path / "t").exists() and not started, (args, started)
    res = CliRunner().invoke(cli, ["capture", "grpo", "--out", str(tmp_path / "t"), "--probe", "--probe-contended",
                                   "2", "--engines", "1"])
    assert "2 or more engines" in res.output and "--engines 1" in res.output, res.output


def test_the_driver_refuses_contended_repeats_with_one_engine(tmp_path, capsys):
    from unirl_replay.reference import rollout_driver

    with pytest.raises(SystemExit) as e:
        rollout_driver.main(["grpo", "--out", str(tmp_path / "t"), "--probe", "--probe-contended", "2",
                             "--engines", "1"])
    assert e.value.code == 2 and "2 or more engines" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_the_probe_method_text_says_the_repeats_it_ran():
    assert P.method_words().startswith(f"{P.PROBE_REPEATS} repeats of: decode")
    assert P.method_words(3).startswith("3 repeats of: decode") and P.method_words(3)[1:] == P.METHOD[1:]
    with pytest.raises(ValueError, match="1..50 repeats"):
        P.run(object(), "before", repeats=0)


def test_round_miss_with_the_replies_timestamps_is_the_finalize_verdict():
    target = {"t0_mono": 12.0, "t1_mono": 25.0, "intervals": {"decode:b1:ctx128": [[13.0, 14.0]]}}
    load = {"t0_mono": 10.0, "t1_mono": 30.0, "steady": [11.0, 29.0]}
    assert P.round_miss(target, [load]) is None
    late = {**load, "steady": [13.5, 29.0]}  # the load's prefill ran past the target's first token
    got = P.round_miss(target, [late], names=["slot 1"])
    want = P.repeat_miss((13.0, 14.0), {"slot 1": (13.5, 29.0)}, "")
    assert want and got["reason"] == f"decode:b1:ctx128: {want}" and got["steady_lead_s"] == pytest.approx(3.5)
    # the call times alone would have passed it: the timestamps decide when the replies carry them
    assert P.round_miss({k: v for k, v in target.items() if k != "intervals"}, [late]) is None
    assert "never decoded steadily" in P.round_miss(target, [{**load, "steady": None}])["reason"]
    assert "missing" in P.round_miss({**target, "intervals": {"prefill:512": [None]}}, [load])["reason"]


def test_reply_rows_without_the_timestamps_give_no_verdict():
    assert P.reply_requests([{"token_ids": [1]}]) is None and P.reply_requests([]) is None
    rows = P.reply_requests([{P.REPLY_KEY: {"first_token_ts": 1.0, "last_token_ts": 2.0}}])
    assert P.load_steady(rows) == (1.0, 2.0)


def test_a_load_slower_to_decode_steadily_than_the_lead_lengthens_the_next_lead(monkeypatch):
    slept = []
    monkeypatch.setattr(P.time, "sleep", slept.append)
    clock = {"t": 0.0}

    def answer(mode, rid, n):  # every load starts at the clock and decodes steadily 3.5 s later, for 60 s
        if mode == "load":
            return {"round": rid, "load_tokens": n, "wall_s": 60.0, "t0_mono": clock["t"], "t1_mono": clock["t"] + 60,
                    "steady": [clock["t"] + 3.5, clock["t"] + 60]}
        start = clock["t"] + slept[-1]  # the target's points start when the driver's lead is over
        out = {"wall_s": {}, "t0_mono": start, "t1_mono": start + 4.0,
               "intervals": {P.point_key(p): [[start + 0.1, start + 1.0]] for p in P.PROBE_POINTS}}
        clock["t"] += 100.0
        return out

    a, b = _FakeSlot(answer), _FakeSlot(answer)
    out = P._contended([a, b], [_iso(1.0), _iso(1.0)], "after", "p", 0, 1)
    assert [c[1] for c in a.calls if c[0] == "contended"] == ["0:0", "0:0:1"]
    assert slept == [P.LOAD_LEAD_S, pytest.approx(P.LEAD_MARGIN * 3.5), pytest.approx(P.LEAD_MARGIN * 3.5)]
    assert [r["lead_s"] for r in out if "intervals" in r] == slept  # each round says the lead it had
    assert sum("round_miss" in r for r in out) == 1


def test_two_engine_ids_with_one_safe_file_name_keep_two_probe_artifacts():
    """``vllm:h1:21`` and ``vllm_h1_21`` both make ``vllm_h1_21`` as a file name: each keeps its own artifact."""
    from unirl_replay.capture.window_conditions import window_probes
    from unirl_replay.v1 import manifest_pb2 as m

    stat0 = [0, 0, 0, 1000, 0, 0, 0, 0, 0, 0]
    a, b = "vllm:h1:21", "vllm_h1_21"
    recs = {"probe_start": [_mark("probe_start", 0.2, _snap(0.2, 1.0, stat0, [0, 0]), when="x", probe_id="pa")],
            "probe_end": [_mark("probe_end", 0.6, _snap(0.6, 1.1, stat0, [0, 0]), when="x", probe_id="pa")],
            "probe_generate": _probe_records(a, "pa", 0.2) + _probe_records(b, "pa", 0.2, level=2.0)}
    entries, artifacts = window_probes(recs, 1.0, 2.0, m.Hardware(cpu_model="x", cpu_count=2), [a, b])
    paths = [e.artifact_path for e in entries]
    assert [e.engine_id for e in entries] == [a, b] and len(set(paths)) == 2 and set(paths) == set(artifacts)
    assert [artifacts[p].engine_id for p in paths] == [a, b]
    assert artifacts[paths[1]].points[0].median_ms == pytest.approx(2 * artifacts[paths[0]].points[0].median_ms)


def test_an_engine_id_too_long_for_a_file_name_keeps_a_bounded_probe_artifact_name():
    from unirl_replay.capture.window_conditions import window_probes
    from unirl_replay.v1 import manifest_pb2 as m

    stat0 = [0, 0, 0, 1000, 0, 0, 0, 0, 0, 0]
    eid = "vllm:" + "h" * 1000 + ":21"
    recs = {"probe_start": [_mark("probe_start", 0.2, _snap(0.2, 1.0, stat0, [0, 0]), when="x", probe_id="pa")],
            "probe_end": [_mark("probe_end", 0.6, _snap(0.6, 1.1, stat0, [0, 0]), when="x", probe_id="pa")],
            "probe_generate": _probe_records(eid, "pa", 0.2)}
    (entry,), artifacts = window_probes(recs, 1.0, 2.0, m.Hardware(cpu_model="x", cpu_count=2), [eid])
    name = entry.artifact_path.split("/", 1)[1]
    assert len(name.encode()) < 120 and set(artifacts) == {entry.artifact_path}


def test_a_probe_inside_the_window_is_said_not_dropped_silently(tmp_path):
    """Without --rollouts the window holds both rollouts, and the probe run between them lies inside it: it is
    neither the window's before nor its after probe, which finalize now says (it dropped it without a word)."""
    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    rep = finalize(raw, tmp_path / "all", workload_name="grpo-unit")
    assert any("reference probe(s) ran inside the window (e.g. pb" in x for x in rep.warnings), rep.warnings
    rep = finalize(raw, tmp_path / "w0", rollouts="0:0", workload_name="grpo-unit")
    assert not any("inside the window" in x for x in rep.warnings), rep.warnings
