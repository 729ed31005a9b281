"""Cached, isolated simulator environments (one virtual environment per simulator build).

A simulator build other than the one installed in the running environment is installed once into
its own virtual environment with uv (``<cache>/<dist>-<version>/``), from PyPI by exact pin, and
reused from then on; the running environment never changes and never imports it. The conformance
runner makes its ai-dynamo revisions here (``.cache/conformance/``), the ``aisimulate`` adapter its
dev builds (``.cache/simulators/``).

An environment is complete only when its ``.complete`` marker exists; a failed install removes the
half-made directory, so a later call starts clean. Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from unirl_replay.contract.errors import MissingEnvironmentError

#: Root of the checkout (``python/unirl_replay/replay/simulators/environments.py`` -> ``.``).
REPO_ROOT = Path(__file__).resolve().parents[4]
#: Default home of the simulator environments.
CACHE_ROOT = REPO_ROOT / ".cache"
MARKER = ".complete"
#: A simulator version as a pin and an environment directory name carry it: PEP 440-like digits, dots and
#: letters (``1.6.1``, ``0.13.0.dev202610270000000085``, ``1.3.0.post1``), never a path character.
VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9A-Za-z]+)*(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?")


def valid_version(version: str) -> bool:
    """Whether ``version`` may name a simulator revision (:data:`VERSION_RE`)."""
    return bool(VERSION_RE.fullmatch(version or ""))


def uv_binary() -> str:
    """The uv executable (on PATH, or the one ``scripts/bootstrap.sh`` put in ``.cache/uv``)."""
    for cand in (shutil.which("uv"), str(REPO_ROOT / ".cache/uv/bin/uv")):
        if cand and Path(cand).exists():
            return cand
    raise MissingEnvironmentError("uv is needed to install other simulator builds; run `make env` first")


def env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def is_complete(env_dir: Path) -> bool:
    return (env_dir / MARKER).exists() and env_python(env_dir).exists()


def dir_size_bytes(path: Path) -> int:
    """Bytes of all regular files under ``path`` (symlinks not followed)."""
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _uv_pip(uv: str, py: Path, args: Sequence[str], log: Callable[[str], None]) -> tuple[int, str]:
    """``uv pip install`` with its progress lines passed to ``log``; (exit status, output tail)."""
    # --no-config: a checkout's [tool.uv] settings (this project's drops the name `aisimulate`) must
    # not change what a simulator environment gets.
    cmd = [uv, "pip", "install", "--no-config", "--python", str(py), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(py.parents[1]))
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            tail = (tail + [line])[-30:]
            log(f"  uv: {line}")
    return proc.wait(), "\n".join(tail)


def ensure_env(env_dir: Path, *, label: str, no_deps: Sequence[str], deps: Sequence[str] = (),
               log: Callable[[str], None] = lambda m: None, hint: str = "") -> Path:
    """The Python of a complete environment at ``env_dir``; made on first use.

    Args:
        env_dir: the environment's directory (its name should carry the exact pin).
        label: what is installed, for messages (e.g. ``aisimulate==0.13.0.dev…``).
        no_deps: exact pins installed with ``--no-deps`` (the simulator wheels).
        deps: their runtime dependencies, installed after (resolved by uv).
        log: progress messages (one line each).
        hint: appended to the error when the install fails.

    Raises:
        MissingEnvironmentError: the install failed (the directory is removed again).
    """
    env_dir = Path(env_dir)
    if ".." in env_dir.parts or not env_dir.name:  # a version like `0/../../x` must never reach a user's directory
        raise MissingEnvironmentError(f"{env_dir}: an environment directory is one name under the cache, no '..'")
    py = env_python(env_dir)
    if is_complete(env_dir):
        return py
    if os.path.lexists(env_dir) and not (env_dir / "pyvenv.cfg").is_file():
        raise MissingEnvironmentError(f"{env_dir} exists and is not a Python environment: it is never cleared or "
                                      "removed to make one; move it away")
    uv = uv_binary()
    t0 = time.monotonic()
    log(f"installing {label} into {env_dir} (first use; cached for later runs)")
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([uv, "venv", "-q", "--clear", "--python", sys.executable, str(env_dir)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(env_dir, ignore_errors=True)
        raise MissingEnvironmentError(f"could not create {env_dir}: {r.stderr.strip()[-400:]}")
    for step, args in (("simulator wheels (no deps)", ["--no-deps", *no_deps]), ("dependencies", list(deps))):
        if not args or args == ["--no-deps"]:
            continue
        log(f"{label}: installing {step}: {' '.join(a for a in args if a != '--no-deps')}")
        rc, tail = _uv_pip(uv, py, args, log)
        if rc != 0:
            shutil.rmtree(env_dir, ignore_errors=True)  # no half-made environment is left behind
            raise MissingEnvironmentError(f"could not install {label} ({step}): {tail[-600:]}"
                                          + (f"\n{hint}" if hint else ""))
    (env_dir / MARKER).write_text(label + "\n")
    log(f"{label}: ready in {time.monotonic() - t0:.1f} s, {dir_size_bytes(env_dir) / 1e6:.0f} MB at {env_dir}")
    return py
