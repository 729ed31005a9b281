"""Host and process counters from ``/proc`` (Linux), stdlib only: the raw material of ``RunConditions``.

Used by both measuring stages, which is why it lives here: the capture (it runs inside a user's
processes, so it must be the standard library only; this module is) and the calibration sweep
(``calibrate.conditions``, which may import this one module of capture and ``capture.probe``'s
point definitions, see the stage docstrings). Nothing here writes or changes anything.

* :func:`host_snapshot`: monotonic and wall time, the load averages, the ``cpu`` line of
  ``/proc/stat`` (user nice system idle iowait irq softirq steal ..., in clock ticks).
* :func:`process_tree` / :func:`engine_snapshots`: for an engine's process (the vLLM runtime
  whose pid names the engine, ``vllm:<host>:<pid>``) and every descendant (vLLM's EngineCore):
  user + system CPU time, threads, each thread's CPU affinity as the kernel holds it (vLLM-CPU
  binds its OMP threads itself), the ``VLLM_CPU_OMP_THREADS_BIND`` the engine was started with, and
  its start time (time since engine start). Engines are found from their shard headers
  (``raw/engine-*.jsonl``, first line), on this host only.
* :func:`cpu_signature`: the host's CPU identity from ``/proc/cpuinfo`` (vendor, family, model,
  stepping, microcode, a digest of the flags, the ISA flags vLLM-CPU's kernels depend on): what
  tells two hosts apart when their ``model name`` is the same (a cloud VM's ``AMD EPYC``). Read in
  every :func:`host_snapshot`, so a window's and a probe's conditions carry it.
* :func:`conditions_fields`: the ``manifest.RunConditions`` fields between two snapshots, as a
  dict keyed by the message's field names (the caller builds the message; this module has no
  protobuf).

A counter that cannot be read (no ``/proc``, a process that exited, another host) is left out,
never guessed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

PROC = Path("/proc")
#: environment variables of the engine process that say how vLLM-CPU binds its threads
THREAD_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS")


#: ISA flags (``/proc/cpuinfo`` names) that vLLM-CPU's kernels and oneDNN / PyTorch choose code paths by:
#: bf16 and int8 matmuls (AVX-512 BF16 / VNNI, AMX), the AVX-512 base, AVX2 (the fallback)
ISA_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8")
#: hex digits of the flags digest (SHA-256 of the sorted flags)
FLAGS_DIGEST_HEX = 16


def parse_cpu_signature(text: str) -> Dict[str, Any]:
    """``manifest.CpuSignature`` fields (message field names) from a ``/proc/cpuinfo`` text, its first processor
    block; keys it lacks are left out (an empty dict when it has none of them)."""
    block: Dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                break  # the first processor only: the others of one host repeat it
            continue
        k, sep, v = line.partition(":")
        if sep:
            block.setdefault(k.strip(), v.strip())
    out: Dict[str, Any] = {}
    if block.get("vendor_id"):
        out["vendor_id"] = block["vendor_id"]
    for key, name in (("cpu family", "cpu_family"), ("model", "model"), ("stepping", "stepping")):
        v = block.get(key, "")
        if v.isdigit():
            out[name] = int(v)
    if block.get("microcode"):
        out["microcode"] = block["microcode"]
    flags_line = block.get("flags", block.get("Features"))  # "Features" on arm64
    if flags_line is not None:
        flags = sorted(set(flags_line.split()))
        out["flags_digest"] = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:FLAGS_DIGEST_HEX]
        have = set(flags)
        out["isa_flags"] = [f for f in ISA_FLAGS if f in have]
        out["isa_flags_checked"] = list(ISA_FLAGS)
    return out


def cpu_signature(root: Path = PROC) -> Dict[str, Any]:
    """:func:`parse_cpu_signature` of this host's ``/proc/cpuinfo`` (empty when it cannot be read)."""
    try:
        return parse_cpu_signature((root / "cpuinfo").read_text(errors="replace"))
    except OSError:
        return {}


def signature_text(sig: Dict[str, Any]) -> str:
    """One line naming a signature, e.g. ``AuthenticAMD family 25 model 17 stepping 1, microcode 0x1000065, flags
    3f2a..., ISA avx2 avx512f avx512_bf16``."""
    if not sig:
        return "none recorded"
    parts = [" ".join(str(x) for x in (sig.get("vendor_id") or "?", *(f"{k.replace('cpu_', '')} {sig[k]}"
                                                                       for k in ("cpu_family", "model", "stepping")
                                                                       if sig.get(k) is not None)))]
    if sig.get("microcode"):
        parts.append(f"microcode {sig['microcode']}")
    if sig.get("flags_digest"):
        parts.append(f"flags {sig['flags_digest']}")
    if sig.get("isa_flags_checked"):
        parts.append("ISA " + (" ".join(sig.get("isa_flags") or []) or "none of " + " ".join(sig["isa_flags_checked"])))
    return ", ".join(parts)


def _ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def proc_stat_cpu(root: Path = PROC) -> Optional[List[int]]:
    """The ``cpu`` line of ``/proc/stat`` (clock ticks), or None."""
    try:
        first = (root / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    return [int(x) for x in first[1:]]


def busy_steal_pct(a: Optional[List[int]], b: Optional[List[int]]) -> Dict[str, float]:
    """Host-wide CPU busy and steal between two ``cpu`` lines, % of all CPU time (empty if unknown)."""
    if not a or not b or len(a) != len(b):
        return {}
    d = [y - x for x, y in zip(a, b)]
    total = sum(d[:8]) if len(d) >= 8 else sum(d)  # user nice system idle iowait irq softirq steal
    if total <= 0:
        return {}
    idle = d[3] + (d[4] if len(d) > 4 else 0)

    def pct(x: float) -> float:  # Linux's iowait (and on some hypervisors steal) can step backwards: keep 0-100
        return min(100.0, max(0.0, 100.0 * x / total))

    out = {"host_busy_pct": pct(total - idle)}
    if len(d) > 7:
        out["steal_pct"] = pct(d[7])
    return out


def host_snapshot(root: Path = PROC) -> Dict[str, Any]:
    """Counters of the host now."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    snap: Dict[str, Any] = {"monotonic": time.monotonic(), "wall": time.time(), "loadavg": load,
                            "stat": proc_stat_cpu(root), "host": socket.gethostname()}
    sig = cpu_signature(root)
    if sig:
        snap["cpu_signature"] = sig
    return snap


def _stat_fields(pid: int, root: Path = PROC) -> Optional[List[str]]:
    try:
        text = (root / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm is in parentheses and may contain spaces: fields start after the last ')'
    head, _, tail = text.rpartition(")")
    return [head.split("(", 1)[-1]] + tail.split()


def _children(root: Path = PROC) -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    try:
        entries = [p for p in root.iterdir() if p.name.isdigit()]
    except OSError:
        return kids
    for p in entries:
        f = _stat_fields(int(p.name), root)
        if f and len(f) > 2:
            kids.setdefault(int(f[2]), []).append(int(p.name))  # tail[1] = ppid
    return kids


def _status(path: Path) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(":")
            out[k] = v.strip()
    except OSError:
        pass
    return out


def _affinities(pid: int, root: Path = PROC) -> Dict[str, int]:
    """Distinct per-thread CPU affinity lists and how many threads hold each."""
    out: Dict[str, int] = {}
    try:
        tids = [t.name for t in (root / str(pid) / "task").iterdir()]
    except OSError:
        return out
    for tid in tids:
        aff = _status(root / str(pid) / "task" / tid / "status").get("Cpus_allowed_list")
        if aff:
            out[aff] = out.get(aff, 0) + 1
    return out


def _environ(pid: int, root: Path = PROC) -> Dict[str, str]:
    try:
        raw = (root / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        if k.decode(errors="replace") in THREAD_ENV:
            out[k.decode()] = v.decode(errors="replace")
    return out


def _uptime_s(root: Path = PROC) -> Optional[float]:
    try:
        return float((root / "uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(pid: int, root: Path = PROC, kids: Optional[Dict[int, List[int]]] = None) -> Optional[Dict[str, Any]]:
    """``pid`` and its descendants: CPU time (ns), threads, affinities, age; None if ``pid`` is gone."""
    tck = _ticks()
    kids = _children(root) if kids is None else kids
    up = _uptime_s(root)
    procs = []
    stack = [pid]
    seen = set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        f = _stat_fields(p, root)
        if not f or len(f) < 22:
            if p == pid:
                return None
            continue
        # fields after comm: state(1) ppid(2) ... utime(12) stime(13) ... num_threads(18) starttime(20)
        cpu_ns = int((int(f[12]) + int(f[13])) * 1e9 / tck)
        entry = {"pid": p, "comm": f[0], "cpu_ns": cpu_ns, "threads": int(f[18]),
                 "affinity": _affinities(p, root), "env": _environ(p, root)}
        if up is not None:
            entry["age_s"] = up - int(f[20]) / tck
        procs.append(entry)
        stack.extend(kids.get(p, []))
    return {"pid": pid, "cpu_ns": sum(e["cpu_ns"] for e in procs), "processes": procs,
            "age_s": procs[0].get("age_s")}


def engine_pids(raw_dir: Path | str) -> Dict[str, int]:
    """``engine_id -> pid`` of the engines whose shards are in ``raw_dir`` and run on this host."""
    host = socket.gethostname()
    out: Dict[str, int] = {}
    for path in sorted(Path(raw_dir).glob("engine-*.jsonl")):
        try:
            with open(path, "rb") as fh:
                head = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        if head.get("kind") == "process" and head.get("host") == host and head.get("engine_id") and head.get("pid"):
            out[str(head["engine_id"])] = int(head["pid"])
    return out


def engine_snapshots(raw_dir: Path | str, root: Path = PROC) -> Dict[str, Dict[str, Any]]:
    """:func:`process_tree` of every engine of ``raw_dir`` still running on this host."""
    pids = engine_pids(raw_dir)
    if not pids:
        return {}
    kids = _children(root)
    out = {}
    for eid, pid in pids.items():
        tree = process_tree(pid, root, kids)
        if tree is not None:
            out[eid] = tree
    return out


def snapshot(raw_dir: Path | str | None = None, root: Path = PROC) -> Dict[str, Any]:
    """The host now, plus the engines of ``raw_dir`` (a capture's shard directory) when given."""
    snap = host_snapshot(root)
    if raw_dir is not None:
        snap["engines"] = engine_snapshots(raw_dir, root)
    return snap


def threads_text(tree: Dict[str, Any]) -> str:
    """One engine's threads and affinity as the processes hold them, e.g. ``VLLM_CPU_OMP_THREADS_BIND=0;
    pid 12 python: 5 threads, affinity 0-1 x5; pid 34 VLLM::EngineCor: 9 threads, affinity 0 x8, 0-1 x1``."""
    env: Dict[str, str] = {}
    for p in tree.get("processes", []):
        for k, v in p.get("env", {}).items():
            env.setdefault(k, v)
    parts = [f"{k}={v}" for k, v in sorted(env.items())] or ["VLLM_CPU_OMP_THREADS_BIND unset"]
    for p in tree.get("processes", []):
        aff = ", ".join(f"{a} x{n}" for a, n in sorted(p.get("affinity", {}).items(), key=lambda kv: -kv[1]))
        parts.append(f"pid {p['pid']} {p['comm']}: {p['threads']} threads, affinity {aff or '?'}")
    return "; ".join(parts)


def conditions_fields(start: Dict[str, Any], end: Dict[str, Any], *, hardware: Optional[Dict[str, Any]] = None
                      ) -> Dict[str, Any]:
    """``RunConditions`` fields (message field names) between two :func:`snapshot` s.

    Per-engine CPU time is end minus start of each engine's process tree (engines present in
    both); the engine uptime is the youngest engine's age at ``start``; threads and affinity are
    read at ``start`` (``end`` where ``start`` lacks the engine); the CPU signature from ``start``
    (``end`` where ``start`` has none), else from ``hardware["cpu_signature"]``.
    """
    hw = hardware or {}
    out: Dict[str, Any] = {"cpu_model": str(hw.get("cpu_model", "")), "cpu_count": int(hw.get("cpu_count") or 0)}
    la, lb = start.get("loadavg"), end.get("loadavg")
    if la:
        out["loadavg_1m_start"] = float(la[0])
    if lb:
        out["loadavg_1m_end"] = float(lb[0])
    out.update(busy_steal_pct(start.get("stat"), end.get("stat")))
    ea, eb = start.get("engines") or {}, end.get("engines") or {}
    cpu = {eid: int(eb[eid]["cpu_ns"]) - int(ea[eid]["cpu_ns"]) for eid in ea if eid in eb
           and int(eb[eid]["cpu_ns"]) >= int(ea[eid]["cpu_ns"])}
    if cpu:
        out["engine_process_cpu_ns"] = cpu
    threads = {eid: threads_text(t) for eid, t in {**eb, **ea}.items()}
    if threads:
        out["worker_threads"] = threads
    ages = [t["age_s"] for t in ea.values() if t.get("age_s") is not None]
    if ages:
        out["engine_uptime_ns"] = int(min(ages) * 1e9)
    sig = start.get("cpu_signature") or end.get("cpu_signature") or hw.get("cpu_signature")
    if isinstance(sig, dict) and sig:
        out["cpu_signature"] = dict(sig)
    if start.get("monotonic") is not None and end.get("monotonic") is not None:
        out["duration_ns"] = int(round((float(end["monotonic"]) - float(start["monotonic"])) * 1e9))
    return out


__all__ = ["host_snapshot", "snapshot", "process_tree", "engine_snapshots", "engine_pids", "conditions_fields",
           "busy_steal_pct", "proc_stat_cpu", "threads_text", "cpu_signature", "parse_cpu_signature",
           "signature_text", "ISA_FLAGS"]
