"""Run conditions of a measurement on this host (``manifest.RunConditions``), numpy-free.

A calibration sweep records the same ``RunConditions`` message a capture window records
(``TraceManifest.conditions``), as JSON in the profile provenance (key ``conditions``, the
project's JSON profile: snake_case keys, 64-bit integers as strings), so ``compare`` can tell
whether the two ran the engine under the same conditions (report/conditions.py).

What is measured between :func:`snapshot` calls: the 1-minute load at both ends, host-wide CPU
busy and steal from ``/proc/stat`` (% of all CPU time), the host's CPU signature (``/proc/cpuinfo``,
:func:`unirl_replay.capture.procfs.cpu_signature`), and the CPU time (user + system) of the
child processes that finished in between (``RUSAGE_CHILDREN``: the calibration driver and the
vLLM engine processes it started and reaped), and the engine's threads and affinity as its processes
held them while the sweep ran (``worker_threads``, from the driver's sampled process tree, in the
capture's words: :func:`unirl_replay.capture.procfs.threads_text`). The ``/proc`` reading is the capture's own
(:mod:`unirl_replay.capture.procfs`), so a sweep and a capture window measure the same way.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from unirl_replay.capture import procfs
from unirl_replay.contract.json_profile import to_dict
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import manifest_pb2 as mpb


def snapshot() -> dict[str, Any]:
    """Host counters now (monotonic time, load, /proc/stat, children's CPU time)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"t": time.monotonic(), "load": load, "stat": procfs.proc_stat_cpu(), "children_cpu_s": ru.ru_utime + ru.ru_stime,
            "cpu_signature": procfs.cpu_signature()}


def run_conditions(start: dict[str, Any], end: dict[str, Any], *, hardware: dict[str, Any] | None = None,
                   process_label: str = "calibration driver + engine", engine_uptime_s: float | None = None,
                   process_tree: dict[str, Any] | None = None) -> mpb.RunConditions:
    """``RunConditions`` between two :func:`snapshot` s.

    ``process_tree``: the sweep's driver tree as sampled while it ran (``calibrate.driver.run_driver``'s
    ``observed``); its threads and affinity go to ``worker_threads[process_label]``.
    """
    c = mpb.RunConditions(cache_state=cpb.CACHE_STATE_KIND_COLD)
    hw = hardware or {}
    c.cpu_model = str(hw.get("cpu_model", ""))
    c.cpu_count = int(hw.get("cpu_count") or os.cpu_count() or 0)
    if start.get("load") is not None:
        c.loadavg_1m_start = float(start["load"])
    if end.get("load") is not None:
        c.loadavg_1m_end = float(end["load"])
    for k, v in procfs.busy_steal_pct(start.get("stat"), end.get("stat")).items():
        setattr(c, k, v)
    cpu = end["children_cpu_s"] - start["children_cpu_s"]
    if cpu > 0:
        c.engine_process_cpu_ns[process_label] = int(cpu * 1e9)
    if process_tree:
        c.worker_threads[process_label] = procfs.threads_text(process_tree)
    sig = start.get("cpu_signature") or end.get("cpu_signature")
    if sig:
        for k, v in sig.items():  # procfs.cpu_signature's keys are CpuSignature's field names
            if k in ("isa_flags", "isa_flags_checked"):
                getattr(c.cpu_signature, k).extend(str(x) for x in v)
            elif k in mpb.CpuSignature.DESCRIPTOR.fields_by_name:
                setattr(c.cpu_signature, k, v)
    c.duration_ns = int((end["t"] - start["t"]) * 1e9)
    if engine_uptime_s is not None:
        c.engine_uptime_ns = int(engine_uptime_s * 1e9)
    return c


def conditions_json(c: mpb.RunConditions) -> dict[str, Any]:
    """The provenance form (the project's JSON profile of the message)."""
    return to_dict(c)
