"""capture finalize on hand-made records (light env): the raw -> contract mapping, rule by rule.

Each case states the raw input and the expected record fields side by side, in the compact form
below; :func:`_write` lays them out as the per-process shards the hooks write (one engine process,
one process hosting its client) and finalizes them. Times in the raw records are monotonic seconds;
the window starts at T0 (a ``window_start`` mark).
"""

from __future__ import annotations

import json
from pathlib import Path

from unirl_replay.capture.finalize import finalize
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1.report_pb2 import TraceCheck
from unirl_replay.contract.validate import check_trace, format_violation

T0 = 1000.0
PID = 42
CFG = {"block_size": 16, "num_gpu_blocks": 100, "enable_prefix_caching": False, "max_num_seqs": 8,
       "max_num_batched_tokens": 256, "enable_chunked_prefill": True, "max_model_len": 512, "dtype": "torch.bfloat16",
       "tensor_parallel_size": 1}


def _t(t: float) -> dict:
    return {"wall": 1.7e9 + t, "monotonic": t}


def _metrics(q, s, f, l):
    return {"type": "RequestStateStats", "arrival_time": 1.7e9, "queued_ts": q, "scheduled_ts": s,
            "first_token_ts": f, "last_token_ts": l, "num_generation_tokens": 3}


def _ereq(pos, n, prompt, outs, metrics, per=None):
    return {"position": pos, "vllm_request_id": str(pos), "n": n, "prompt_tokens": prompt, "output_tokens": outs,
            "finish_reasons": ["stop"] * (n - 1) + ["length"], "num_cached_tokens": 0, "metrics": metrics,
            "per_sample_metrics": per, "prefix_hashes": list(range(1, -(-prompt // 16) + 1))}


def _meta(mode: str, **kw) -> dict:
    return {"mode": mode, "trace_id": "t", "workload_name": f"{mode}-unit", "role": "calibration",
            "created_at": "2026-11-30T00:00:00Z", "producer_version": "0",
            "window": {"start_wall": 1.7e9, "start_monotonic": T0, "end_monotonic": T0 + 10},
            "provenance": {"unirl": "0.2.0", "vllm": "0.28.0", "packages": {"python": "3.12.1"}},
            "model": {"name": "m", "architecture": "qwen2", "num_layers": 1}, "checkpoint": "c",
            "hardware": {"description": "h", "accelerator": "cpu", "cpu_count": 2}, "salt_id": "0" * 16,
            "hash_algorithm": "x", "overhead": None, "samples": 2, "group_size": 2, "per_worker_inflight": 2,
            "max_new_tokens": 8, "labels": {}, **kw}


EID = f"vllm:h:{PID}"


def _rollouts(ids):
    return sorted({int(str(x).split(":", 1)[0][1:]) for x in ids})


def _write(tmp: Path, driver: list, engine: list, meta: dict) -> Path:
    raw = tmp / "raw"
    raw.mkdir(parents=True)
    proc = {"kind": "process", "host": "h", "boot_id": "b", "clock_pair": _t(T0),
            "versions": {"unirl": "0.2.0", "vllm": "0.28.0"}}
    drv = [dict(proc, role="driver", pid=1),
           {"kind": "window_start", "at": _t(T0)}, {"kind": "window_end", "at": _t(T0 + 10)}]
    for r in driver:
        r = dict(r)
        overhead = r.pop("phase", "window") != "window"
        if r["kind"] == "driver_generate":
            r.update(kind="engine_call", call_id=f"c{r.pop('call_index')}", engine_id=EID,
                     rollout_ids=[99] if overhead else _rollouts(r["sample_ids"]))
            r.pop("engine_runtime_pid")
        elif r["kind"] == "trajectory":
            r.update(engine_id=EID, rollout_ids=_rollouts([r["group"]]))
        elif r["kind"] == "collect":
            r.update(collect_id=f"k{r.pop('batch_index')}", enter=_t(T0), group_size=meta["group_size"],
                     capacities=[meta["per_worker_inflight"]], current_version=0)
            for g in r["groups"]:
                g["rollout_ids"] = _rollouts(g["roots"])
        drv.append(r)
    eng = [dict(proc, role="engine", pid=PID, engine_id=EID),
           {"kind": "engine_config", "engine_id": EID, "config": CFG, "model": {"model_type": "qwen2"}}]
    for r in engine:
        r = dict(r, engine_id=EID)
        r.pop("pid")
        r["requests"] = [dict(q, vllm_request_id=f"{r['pipe_request_id']}.{q['position']}") for q in r["requests"]]
        eng.append(r)
    end = {"kind": "process_end"}
    (raw / "driver-h-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*drv, end]))
    (raw / f"engine-h-{PID}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*eng, end]))
    out = tmp / "trace"
    finalize(raw, out, rollouts="0", role=meta["role"], max_output_tokens=meta["max_new_tokens"])
    res = check_trace(out)
    assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]
    return out


def _load(d: Path):
    t = open_trace(d)
    wl = {}
    for _, r in t.iter_workload():
        k = r.WhichOneof("record")
        wl.setdefault(k, []).append(getattr(r, k))
    oc = {}
    for _, r in iter_outcomes(t):
        k = r.WhichOneof("record")
        oc.setdefault(k, []).append(getattr(r, k))
    return t.manifest, wl, oc


def _gen(call, pipe, ids, enter, exit_, traj=None, turn=None, phase="window"):
    return {"kind": "driver_generate", "call_index": call, "engine_runtime_pid": PID, "pipe_request_id": pipe,
            "sample_ids": ids, "output_version": 3, "trajectory_id": traj, "turn": turn, "enter": _t(enter),
            "exit": _t(exit_), "phase": phase}


def test_grpo_fanout_times_groups_batch(tmp_path):
    ids = ["r0:p0:s0/0", "r0:p0:s0/1", "r0:p1:s0/0", "r0:p1:s0/1"]
    per = [{"queued_ts": T0 + .010, "scheduled_ts": T0 + .011, "first_token_ts": T0 + .020, "last_token_ts": T0 + .050},
           {"queued_ts": T0 + .012, "scheduled_ts": T0 + .013, "first_token_ts": T0 + .025, "last_token_ts": T0 + .090}]
    engine = [{"kind": "engine_generate", "pid": PID, "pipe_request_id": 7, "pipe_recv_monotonic": T0 + .005,
               "requests": [_ereq(0, 2, 40, [3, 8], _metrics(0, 0, 0, T0 + .090), per),
                            _ereq(1, 2, 16, [1, 2], None)]},
              {"kind": "engine_generate", "pid": PID, "pipe_request_id": 9, "requests": [_ereq(0, 2, 5, [1, 1], None)]}]
    driver = [_gen(0, 7, ids, T0 + .001, T0 + .200),
              _gen(1, 9, ids[:2], T0 + 1, T0 + 2, phase="overhead")]  # overhead-pair call: not in the trace
    m, wl, oc = _load(_write(tmp_path, driver, engine, _meta("grpo")))
    r0, r1 = wl["request"]
    # request 0 served the first n=2 sample ids, request 1 the next two; one group per root prompt
    assert list(r0.sample_ids) == ids[:2] and list(r1.sample_ids) == ids[2:]
    assert (r0.group_id, r1.group_id) == ("r0:p0:s0", "r0:p1:s0")
    assert r0.arrival.observed_offset_ns == r1.arrival.observed_offset_ns == 1_000_000  # the call submits all
    assert list(r0.finish_reasons) == [c.FINISH_REASON_STOP, c.FINISH_REASON_LENGTH]
    assert len(r0.prefix.block_hashes) == 3 and r0.prefix.block_size_tokens == 16 and r0.policy_version == 3
    assert [g.member_ids for g in wl["group"]] == [[f"{EID}#7.0"], [f"{EID}#7.1"]]
    o0, o1 = oc["request"]
    # n>1: per-child stats are the truth: queued/scheduled/first = min, completion = max
    assert (o0.queued_ns, o0.scheduled_ns, o0.first_token_ns, o0.completion_ns) == (10_000_000, 11_000_000,
                                                                                    20_000_000, 90_000_000)
    assert [s.completion_ns for s in o0.samples] == [50_000_000, 90_000_000]
    # metrics None: times absent (never 0) with the reason
    assert not o1.HasField("completion_ns") and "metrics unavailable" in o1.unavailable_reason
    (g0, g1) = oc["group"]
    assert g0.completed_ns == 90_000_000 and not g1.HasField("completed_ns")
    assert oc["rollout_batch"][0].ready_ns == 200_000_000
    assert m.engines[0].dtype == "bfloat16" and m.policy.policy_version == 3
    assert m.completeness.complete  # the overhead-pair call is outside the window (rollout 99), not lost


def test_agentic_dependencies_delays_slots_and_first_n(tmp_path):
    def traj(tid, root, start, end):
        return {"kind": "trajectory", "trajectory_id": tid, "group": root, "slot_hold": {"start": _t(start), "end": _t(end)},
                "phase": "window"}

    driver = [
        traj("traj-0", "r0:p0:s0", T0 + .0, T0 + .5), traj("traj-1", "r0:p0:s0", T0 + .01, T0 + .3),
        _gen(0, 1, ["r0:p0:s0/0"], T0 + .001, T0 + .05, "traj-0", 0),
        _gen(1, 2, ["r0:p0:s0/0"], T0 + .02, T0 + .08, "traj-1", 0),
        _gen(2, 3, ["r0:p0:s0/0/0/0"], T0 + .20, T0 + .25, "traj-0", 1),
        _gen(3, 4, ["r0:p0:s0/0/0/0"], T0 + .15, T0 + .20, "traj-1", 1),
        {"kind": "env_step", "trajectory_id": "traj-0", "turn": 0, "duration_s": 0.1, "phase": "window"},
        {"kind": "env_step", "trajectory_id": "traj-0", "turn": 1, "duration_s": 0.0, "phase": "window"},
        {"kind": "collect", "batch_index": 0, "n": 1, "exit": _t(T0 + .6), "phase": "window",
         "groups": [{"roots": ["r0:p0:s0"], "trajectory_ids": ["traj-0", "traj-1"]}]},
    ]
    m1 = _metrics(T0 + .003, T0 + .004, T0 + .010, T0 + .040)
    engine = [{"kind": "engine_generate", "pid": PID, "pipe_request_id": 1, "requests": [_ereq(0, 1, 20, [4], m1)]},
              {"kind": "engine_generate", "pid": PID, "pipe_request_id": 2, "requests": [_ereq(0, 1, 20, [4], None)]},
              {"kind": "engine_generate", "pid": PID, "pipe_request_id": 3,
               "requests": [_ereq(0, 1, 40, [2], _metrics(T0 + .21, T0 + .205, T0 + .22, T0 + .23))]},
              {"kind": "engine_generate", "pid": PID, "pipe_request_id": 4,
               "requests": [_ereq(0, 1, 40, [2], _metrics(T0 + .16, T0 + .17, T0 + .18, T0 + .19))]}]
    m, wl, oc = _load(_write(tmp_path, driver, engine, _meta("agentic")))
    (pool,), (client,) = wl["slot_pool"], wl["engine_client"]
    assert pool.trajectory_slots == 2 and client.inflight_request_limit == 1
    by_traj = {t.trajectory_id: t for t in wl["trajectory"]}
    assert [by_traj[t].start_order for t in ("traj-0", "traj-1")] == [0, 1]
    reqs = {r.request_id: r for r in wl["request"]}
    t0_turn1 = reqs[by_traj["traj-0"].request_ids[1]]
    (d,) = t0_turn1.dependencies
    # measured: next driver enter (0.200 s) - previous vLLM last token (0.040 s)
    assert d.external_delay_ns == 160_000_000 and d.trigger == c.DEPENDENCY_TRIGGER_COMPLETION
    assert t0_turn1.arrival.HasField("after_dependencies") and t0_turn1.turn_index == 1
    # previous turn has no completion (metrics None): NOT measured, never 0 (field-pitfalls 1, 11)
    (d1,) = reqs[by_traj["traj-1"].request_ids[1]].dependencies
    assert not d1.HasField("external_delay_ns") and d1.delay_absence == c.DELAY_ABSENCE_NOT_MEASURED
    assert reqs[by_traj["traj-1"].request_ids[0]].arrival.observed_offset_ns == 20_000_000
    outs = {o.request_id: o for o in oc["request"]}
    # queued after scheduled (vLLM re-queue, field-pitfalls 7): queued dropped, said why
    o = outs[t0_turn1.request_id]
    assert not o.HasField("queued_ns") and o.scheduled_ns == 205_000_000 and "pitfalls 7" in o.unavailable_reason
    tout = {t.trajectory_id: t for t in oc["trajectory"]}
    assert list(tout["traj-0"].tool_durations_ns) == [100_000_000, 0]
    assert (tout["traj-0"].slot_acquired_ns, tout["traj-0"].slot_released_ns) == (0, 500_000_000)
    (g,), (b,) = wl["group"], wl["rollout_batch"]
    assert g.unit == 2 and list(g.member_ids) == ["traj-0", "traj-1"] and g.expected_size == 2
    assert b.readiness_rule == 2 and b.required_groups == 1
    assert oc["group"][0].completed_ns == 500_000_000 and oc["rollout_batch"][0].ready_ns == 600_000_000
