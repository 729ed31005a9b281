"""One grid job, as a worker runs it: the same calls as the sequential commands, into the job's directory.

A replay job is the gate + ``replay_trace`` + ``write_result`` (what ``unirl-replay replay`` does) and then
``compare_to_dir`` (what ``unirl-replay compare`` does), both into ``<out_root>/<job_id>/``. A
conformance job runs some corpus cases on one simulator revision through the conformance runner.

:func:`run_job` never raises: a failure (a typed error, a bug, a missing environment) is a result
with ``status: "failed"`` and the error, so the other jobs still finish. It returns a small
JSON-ready dict (identity, digests, headline errors, timings); the bulky outputs stay on disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.grid.spec import ConformanceJob, ReplayJob

OK, FAILED = "ok", "failed"


def result_digests(result) -> tuple[str, str]:
    """(sha256 of the ReplayResult without ``simulator_wall_ns``, sha256 of its per-request rows).

    Deterministic protobuf serialization: equal digests mean equal results, request by request.
    """
    r = type(result)()
    r.CopyFrom(result)
    r.ClearField("simulator_wall_ns")  # wall time of the simulator process varies run to run
    whole = hashlib.sha256(r.SerializeToString(deterministic=True)).hexdigest()
    h = hashlib.sha256()
    for req in r.requests:
        b = req.SerializeToString(deterministic=True)
        h.update(len(b).to_bytes(8, "little") + b)
    return whole, h.hexdigest()


def headline(report) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """MAPE % and signed bias % of the demo's headline metrics (None where not compared)."""
    from unirl_replay.demo.run import HEADLINES
    from unirl_replay.report.compare import LEVEL_NAMES

    by_key = {(LEVEL_NAMES.get(m.level), m.metric): m for m in report.metrics}
    mape, bias = {}, {}
    for level, metric in HEADLINES:
        m = by_key.get((level, metric))
        k = f"{level}.{metric}"
        mape[k] = round(m.mape_pct, 2) if m is not None and m.HasField("mape_pct") else None
        bias[k] = round(m.signed_bias_pct, 2) if m is not None and m.HasField("signed_bias_pct") else None
    return mape, bias


#: What a rejection's "pass --allow-unmodelled RULE" is in a spec (the message is the replay command's).
SPEC_OPT_IN_HINT = ("in a grid spec that opt-in is the trace's `allow_unmodelled: [RULE]` (the rule the message "
                    "names; labelled UNMODELLED), not a command-line flag")


def _error(e: BaseException) -> dict[str, Any]:
    err: dict[str, Any] = {"type": type(e).__name__, "message": str(e)}
    rule = getattr(e, "rule", "")
    if rule:
        err["rule"] = rule
    if isinstance(e, UnirlReplayError) and "--allow-unmodelled" in str(e):
        err["hint"] = SPEC_OPT_IN_HINT
    if not isinstance(e, UnirlReplayError):  # a bug, not a user error: keep where it happened
        err["traceback"] = "".join(traceback.format_exception(e))[-2000:]
    return err


def _base(job) -> dict[str, Any]:
    out = {"index": job.index, "job_id": job.job_id, "kind": job.kind, "host": socket.gethostname(),
           "pid": os.getpid()}
    ray = sys.modules.get("ray")  # inside a Ray task: which node ran it (Ray is never imported here)
    if ray is not None and ray.is_initialized():
        out["node"] = ray.get_runtime_context().get_node_id()
    return out


def run_job(job: ReplayJob | ConformanceJob, out_root: str) -> dict[str, Any]:
    """Run one job; never raises (see the module docstring)."""
    t0 = time.perf_counter()
    res = _base(job)
    try:
        if isinstance(job, ReplayJob):
            res.update(_replay(job, Path(out_root) / job.job_id))
        else:
            res.update(_conformance(job))
        res["status"] = OK
    except BaseException as e:  # noqa: BLE001 - reported as this job's result
        if isinstance(e, KeyboardInterrupt):
            raise
        res["status"] = FAILED
        res["error"] = _error(e)
    res["wall_s"] = round(time.perf_counter() - t0, 3)
    return res


def _replay(job: ReplayJob, dest: Path) -> dict[str, Any]:
    from unirl_replay.contract.gate import gate
    from unirl_replay.replay.runner import RESULT_FILE, replay_trace, write_result

    gate(job.trace.path, "replay")  # as `unirl-replay replay`: nothing validate rejects reaches upstream

    kw: dict[str, Any] = {"trace_format": job.trace_format, "unmodelled": job.trace.allow_unmodelled,
                          "work_dir": dest / "upstream", "simulator": job.simulator}
    t0 = time.perf_counter()
    result = replay_trace(job.trace.path, job.timing_model.spec, **kw)
    write_result(dest, result)
    if not job.keep_upstream:
        import shutil

        shutil.rmtree(dest / "upstream", ignore_errors=True)
    whole, reqs = result_digests(result)
    out: dict[str, Any] = {
        "trace": job.trace.name, "simulator": job.simulator, "timing_model": job.timing_model.name,
        "replay_result": f"{job.job_id}/{RESULT_FILE}", "replay_sha256": whole, "requests_sha256": reqs,
        "requests": len(result.requests), "simulator_version": result.simulator.version,
        "makespan_ns": result.makespan_ns if result.HasField("makespan_ns") else None,
        "unmodelled": [c.rule for c in result.unmodelled_constraints],
        "replay_s": round(time.perf_counter() - t0, 3)}
    if job.compare:
        from unirl_replay.report.outputs import REPORT_FILE, compare_to_dir

        t1 = time.perf_counter()
        report = compare_to_dir(job.trace.path, dest / RESULT_FILE, dest, repeats=job.trace.repeats,
                                batch_id=job.trace.batch, plots_too=job.trace.plots)
        out["mape_pct"], out["bias_pct"] = headline(report)
        out["label"] = report.label
        out["report"] = f"{job.job_id}/{REPORT_FILE}"
        out["compare_s"] = round(time.perf_counter() - t1, 3)
    return out


@contextmanager
def _env_lock(cache_dir: Path, revision: str):
    """One installer per simulator environment at a time (shards of one revision may start together)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{revision.replace('==', '-')}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _conformance(job: ConformanceJob) -> dict[str, Any]:
    from unirl_replay.conformance import runner
    from unirl_replay.conformance.corpus import load_corpus

    log: list[str] = []
    root = Path(job.corpus)
    cases = load_corpus(root, list(job.cases))
    cache = Path(job.cache_dir)
    t0 = time.perf_counter()
    with _env_lock(cache, job.revision):
        runner.revision_python(job.revision, cache, log.append)  # installs once, cached; no-op when present
    env_s = time.perf_counter() - t0
    run = runner.run_revision(root, cases, job.revision, cache, log.append)
    errors = [c.detail for c in run.results.values() if c.status == runner.ERROR]
    if errors and len(errors) == len(run.results):  # the executor itself failed: a failed job
        raise UnirlReplayError(f"{job.revision}: {errors[0]}")
    return {"revision": run.revision, "executor": run.executor,
            "cells": {name: {"status": c.status, "detail": c.detail} for name, c in run.results.items()},
            "env_s": round(env_s, 3), "log": log}
