"""The only module that imports ``dynamo.*`` (ai-dynamo 1.6.1, AISimulate core).

:class:`DynamoSimulator` is the :class:`~unirl_replay.replay.simulators.Simulator` of the installed
ai-dynamo (spec ``dynamo``, the default); :func:`run_upstream` runs the upstream offline replay on
one input file and returns its per-request rows and summary unchanged (ms, upstream field names);
mapping back to the contract is :mod:`unirl_replay.replay.runner`'s job.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import MissingEnvironmentError
from unirl_replay.replay.simulators import Identity, SimulatorJob, SimulatorRun, SimulatorSpecError

SIMULATOR_NAME = "ai-dynamo"
COMPONENTS = ("ai-dynamo-runtime",)
#: What to do without the ``replay`` extra. Not `pip install "<wheel>[replay]"`: ai-dynamo 1.6.1 declares
#: aisimulate==0.13.0, a stub pip cannot build (it downloads from an unreachable vendor index); uv drops it through
#: an override, as pyproject's [tool.uv] override-dependencies does for ``make env`` (README, Capturing step 1).
REPLAY_EXTRA_HINT = ("in a checkout run `make env` (it installs the `replay` extra into .venv); an installed unirl-replay "
                     "needs its `replay` extra, installed with uv (ai-dynamo declares an aisimulate stub pip cannot "
                     "build): put the line `aisimulate; sys_platform == 'never'` in overrides.txt and run "
                     "`uv pip install --python ENV/bin/python --overrides overrides.txt "
                     "\"unirl_replay-<version>-py3-none-any.whl[replay]\"` (README, Capturing step 1)")
#: What ``run_upstream`` returns (the interface's run record).
UpstreamRun = SimulatorRun


def _import_replay():
    # upstream's Rust logger prints an INFO line per profile load to the terminal; it reads DYN_LOG once,
    # when it starts: warnings and errors only unless the user chose a level
    os.environ.setdefault("DYN_LOG", "warn")
    try:
        from dynamo.replay import run_trace_replay
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise MissingEnvironmentError(
            f"the upstream simulator ai-dynamo==1.6.1 is not importable ({e}): {REPLAY_EXTRA_HINT}") from e
    return run_trace_replay


def simulator_versions() -> tuple[str, dict[str, str]]:
    """(ai-dynamo version, {component: version}) read from the installed distributions.

    Raises:
        MissingEnvironmentError: ai-dynamo is not installed.
    """
    try:
        version = importlib.metadata.version(SIMULATOR_NAME)
    except importlib.metadata.PackageNotFoundError as e:
        raise MissingEnvironmentError(f"ai-dynamo==1.6.1 is not installed: {REPLAY_EXTRA_HINT}") from e
    comps = {}
    for c in COMPONENTS:
        try:
            comps[c] = importlib.metadata.version(c)
        except importlib.metadata.PackageNotFoundError:
            comps[c] = ""
    return version, comps


def run_upstream(trace_file: str | Path, *, trace_format: str, engine_args: dict,
                 agentic_lanes: int | None = None, trace_block_size: int | None = None,
                 execution_model: str | None = None, per_request: bool = True) -> UpstreamRun:
    """Run ``dynamo.replay.run_trace_replay`` on one file with one worker.

    Args:
        trace_file: the upstream input (from :meth:`Conversion.write`).
        trace_format: ``"agentic_mooncake"`` or ``"mooncake"``.
        engine_args: ``{"engine": {...}}`` (see :func:`unirl_replay.replay.convert.common.engine_args`).
        agentic_lanes: trajectory lanes (agentic only), None = unlimited.
        trace_block_size: mooncake hash block size (tokens).
        execution_model: the agentic target model name (required by upstream for agentic).
        per_request: ask for per-request rows (``capture_per_request``).

    Raises:
        MissingEnvironmentError: ai-dynamo is not installed.
        Exception: whatever upstream raises on input it refuses (callers check input first).
    """
    run = _import_replay()
    kw: dict[str, Any] = {}
    if trace_format == "agentic_mooncake":
        kw["execution_model"] = execution_model
        kw["agentic_lanes"] = agentic_lanes
    if trace_block_size is not None:
        kw["trace_block_size"] = trace_block_size
    t0 = time.perf_counter_ns()
    report = run(str(trace_file), extra_engine_args=engine_args, num_workers=1,
                 router_mode="round_robin", trace_format=trace_format,
                 capture_per_request=per_request, **kw)
    wall = time.perf_counter_ns() - t0
    return UpstreamRun(per_request=report.per_request if per_request else None,
                       summary=dict(report.summary), wall_ns=wall)


class DynamoSimulator:
    """The installed ai-dynamo's ``dynamo.replay`` behind the simulator interface."""

    timing_types = ("fixed", "polynomial", "external")

    def identity(self) -> Identity:
        version, comps = simulator_versions()
        return Identity(SIMULATOR_NAME, version, comps)

    def run(self, job: SimulatorJob) -> SimulatorRun:
        eargs = {"engine": {**job.engine, "timing_model": job.timing_model}}
        return run_upstream(job.trace_file, trace_format=job.trace_format, engine_args=eargs,
                            agentic_lanes=job.lanes,
                            trace_block_size=job.block_size if job.trace_format == "mooncake" else None,
                            execution_model=job.execution_model, per_request=job.per_request)


def adapter(version: str | None = None, **_options: Any) -> DynamoSimulator:
    """The adapter for spec ``dynamo[==VERSION]``: only the installed revision runs in-process
    (other ai-dynamo revisions run through ``unirl-replay conformance --simulator ai-dynamo==X``)."""
    sim = DynamoSimulator()
    if version is not None:
        have = sim.identity().version
        if have != version:
            raise SimulatorSpecError(
                f"ai-dynamo=={version} is not the installed revision ({have}); replay runs the installed "
                "one (spec `dynamo`); other revisions: `unirl-replay conformance --simulator ai-dynamo==X`")
    return sim
