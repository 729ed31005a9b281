"""Capture conditions against the calibration's: warn instead of staying silent (pure).

A calibrated profile stands for the engine's speed in its calibration session. The capture
window's engine may run at another speed (a shared host, a cold engine); the rebuilt steps show it
after the fact (:mod:`.profile_check`), the conditions say why. Compared, when both sides recorded
them (the manifest's ``RunConditions`` / ``ReferenceProbe``; the profile provenance's
``hardware``, ``loadavg`` and ``conditions``):

- CPU model and logical CPU count differ;
- the CPU signature differs (``RunConditions.cpu_signature``: vendor, family, model, stepping, microcode,
  the flags digest, the named ISA flags; a cloud VM's model name can be only ``AMD EPYC`` on CPUs of
  different generations), or one side recorded none while the other did: then nothing recorded says
  whether the two ran on the same hardware, and the report says so;
- the 1-minute load differs by more than :data:`LOAD_PER_CPU` per logical CPU (the larger of the
  start and end values on each side). Traces written before ``RunConditions`` existed carry the
  load only in the label ``loadavg.window`` ("start a/b/c, end a/b/c"), which is read then;
- host CPU steal during the window above :data:`STEAL_PCT`;
- the engine's time since start differs by more than a factor :data:`UPTIME_FACTOR` (or one side
  started less than :data:`WARM_S` seconds before);
- the engine's thread binding differs (``RunConditions.worker_threads``: the OMP / vLLM binding
  environment its processes ran with, e.g. ``OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0`` in a
  capture's Ray actor against an unbound calibration engine); CPU lists compare by their size, so an
  engine bound to core 1 and a sweep bound to core 0 are bound alike;
- a reference probe point ran at a level (probe median / the profile's own value at that point)
  further from 1 than the probe's own spread (IQR / median) and :data:`PROBE_TOLERANCE`.

With a calibrated profile and none of the capture's conditions recorded, that itself is a warning.
"""

from __future__ import annotations

import re

from unirl_replay.contract.cpu_signature import (  # noqa: F401  (re-exported: the report's names)
    HARDWARE_FIELDS,
    SIGNATURE_FIELDS,
    _same,
    calibration_signature,
    capture_signature,
    other_hardware,
    signature_words,
)
from unirl_replay.report.timing_eval import StepModel
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import replay_pb2 as rpb

LOAD_PER_CPU = 0.25
STEAL_PCT = 5.0
UPTIME_FACTOR = 2.0
WARM_S = 120.0
PROBE_TOLERANCE = 0.10

_LOAD_LABEL = re.compile(r"start\s+([\d.]+)/[\d.]+/[\d.]+,\s*end\s+([\d.]+)/")


def _capture_load(manifest: mpb.TraceManifest) -> tuple[float | None, str]:
    c = manifest.conditions
    vals = [getattr(c, f) for f in ("loadavg_1m_start", "loadavg_1m_end") if c.HasField(f)]
    if vals:
        return max(vals), "conditions"
    m = _LOAD_LABEL.search(manifest.labels.get("loadavg.window", ""))
    if m:
        return max(float(m.group(1)), float(m.group(2))), "label loadavg.window"
    return None, ""


def _calibration_load(prov: dict) -> float | None:
    cond = prov.get("conditions") or {}
    vals = [cond.get(k) for k in ("loadavg1mStart", "loadavg1mEnd", "loadavg_1m_start", "loadavg_1m_end")]
    vals = [float(v) for v in vals if isinstance(v, (int, float))]
    if not vals:
        la = prov.get("loadavg") or {}
        vals = [float(v[0]) for v in la.values() if isinstance(v, list) and v and isinstance(v[0], (int, float))]
    return max(vals) if vals else None


def probe_levels(manifest: mpb.TraceManifest, model: StepModel | None
                 ) -> list[tuple[mpb.ProbePoint, str, float, str]]:
    """``(point, when, level, engine_id)`` per probe point: probe median over the model's value at that point."""
    if model is None:
        return []
    out = []
    for probe in manifest.probes:
        for pt in probe.points:
            if pt.phase == "decode" and pt.batch_size:
                ref = model.decode_ms([pt.context_tokens] * pt.batch_size)
            elif pt.phase == "prefill" and pt.prefill_tokens:
                ref = model.prefill_ms([pt.prefill_tokens])
            else:
                continue
            if ref > 0 and pt.median_ms > 0:
                out.append((pt, probe.when, pt.median_ms / ref, probe.engine_id))
    return out


def signature_warning(cap: dict, cal: dict, cal_cpu_model: str, levelled: bool) -> str | None:
    """The warning comparing two CPU signatures (dicts of :data:`SIGNATURE_FIELDS`), or None (equal, or neither
    side recorded one: a capture and a profile that both predate signatures say nothing new)."""
    tail = (" (the probe levelling rescales the level, not the profile's form measured on that hardware)"
            if levelled else "")
    if cap and cal:
        diff = [k for k in SIGNATURE_FIELDS if k in cap and k in cal and not _same(cap, cal, k)]
        if not diff:
            return None
        return (f"CPU signature differs ({', '.join(diff)}): capture {signature_words(cap)}; calibration "
                f"{signature_words(cal)}: the profile was measured on other hardware, so its speed (and the shape of "
                f"its curves) need not hold for the capture's engine; recalibrate on the capture's host{tail}")
    if cap:
        return (f"the calibration recorded no CPU signature (only CPU model {cal_cpu_model or '?'!r}): it cannot be "
                f"told whether the profile was measured on the capture's hardware ({signature_words(cap)}); a sweep "
                f"of this version records it{tail}")
    if cal:
        return (f"the capture recorded no CPU signature: it cannot be told whether it ran on the calibration's "
                f"hardware ({signature_words(cal)})")
    return None


_CPU_LIST = re.compile(r"\d{1,9}(-\d{1,9})?(,\d{1,9}(-\d{1,9})?)*\Z")  # ids of a few digits: int() of 5000 is a ValueError
_CPU_LIST_VARS = ("VLLM_CPU_OMP_THREADS_BIND", "GOMP_CPU_AFFINITY")


def _cores(cpu_list: str) -> int:
    """How many CPUs a Linux CPU list names (``0``, ``1``, ``0-3,6``)."""
    n = 0
    for part in cpu_list.split(","):
        a, _, b = part.partition("-")
        n += (int(b) - int(a) + 1) if b else 1
    return n


_PROCESS = re.compile(r"pid (\d+) (.+?): (\d{1,9}) threads, affinity (.+)\Z")


#: CPU ids a Linux CPU list may name (the kernel's NR_CPUS is at most 8192): the sets below are built id by id
MAX_CPUS = 1 << 16


def _cpu_set(cpu_list: str) -> set[int] | None:
    """The CPUs a Linux CPU list names, or None for a list no kernel writes (a range backwards, an id of
    :data:`MAX_CPUS` or more: ``0-99999999999`` in an edited worker_threads was a MemoryError in compare)."""
    out: set[int] = set()
    for part in cpu_list.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if not lo <= hi < MAX_CPUS:
            return None
        out.update(range(lo, hi + 1))
    return out


def _cpu_words(cpus: set[int]) -> str:
    return "CPU " + ",".join(str(c) for c in sorted(cpus)) if len(cpus) == 1 else \
        "CPUs " + ",".join(str(c) for c in sorted(cpus))


def shared_cores(threads_text: str) -> str | None:
    """Which of an engine's processes may share the CPUs its most-bound process is pinned to, from
    ``RunConditions.worker_threads`` text (``capture.procfs.threads_text``: ``pid N COMM: T threads, affinity
    0-1 x7; pid M VLLM::Worker: 46 threads, affinity 1 x46``), or None (nothing bound to a strict subset of the
    CPUs the processes name, nothing else allowed there, or text of another shape).

    E.g. ``"pid 3549 VLLM::Worker is bound to CPU 1, where pid 3457 python (7 threads) and pid 3523
    VLLM::EngineCor (13 threads) may also run"``: the recorded reason a pass can run at half speed."""
    procs = []
    for item in threads_text.split("; "):
        m = _PROCESS.match(item.strip())
        if not m:
            continue
        groups = []
        for g in m.group(4).split(", "):
            cpus, sep, n = g.rpartition(" x")
            got = _cpu_set(cpus) if sep and _CPU_LIST.match(cpus) and n.isdigit() and len(n) <= 9 else None
            if got is None:  # text of another shape
                groups = []
                break
            groups.append((got, int(n)))
        if groups:
            procs.append((m.group(1), m.group(2), int(m.group(3)), groups))
    every = set().union(*(s for p in procs for s, _ in p[3])) if procs else set()
    bound = [p for p in procs if all(s < every for s, _ in p[3])]
    if not bound:
        return None
    pid, comm, _, groups = max(bound, key=lambda p: sum(n for _, n in p[3]))
    cores = set().union(*(s for s, _ in groups))
    others = [f"pid {p[0]} {p[1]} ({p[2]} threads)" for p in procs if p[0] != pid and any(s & cores for s, _ in p[3])]
    if not others:
        return None
    return f"pid {pid} {comm} is bound to {_cpu_words(cores)}, where {' and '.join(others)} may also run"


def _binding(threads_text: str) -> str:
    """The binding part of a ``worker_threads`` value (``procfs.threads_text``): the items before the first
    ``pid ...`` item, e.g. ``OMP_NUM_THREADS=1; VLLM_CPU_OMP_THREADS_BIND=0``."""
    items = []
    for item in threads_text.split(";"):
        item = item.strip()
        if item.startswith("pid "):
            break
        if item:
            items.append(item)
    return "; ".join(items)


def _binding_shape(binding: str) -> str:
    """A binding with its CPU lists replaced by their size (``VLLM_CPU_OMP_THREADS_BIND=1`` and ``=0`` are both
    ``VLLM_CPU_OMP_THREADS_BIND=<1 CPU>``): two engines bound to different cores of one host are bound alike."""
    out = []
    for item in binding.split("; "):
        name, sep, value = item.partition("=")
        if sep and name in _CPU_LIST_VARS and _CPU_LIST.match(value):
            n = _cores(value)
            item = f"{name}=<{n} CPU{'s' if n != 1 else ''}>"
        out.append(item)
    return "; ".join(out)


def hardware_mismatch(manifest: mpb.TraceManifest, replay: rpb.ReplayResult, prov: dict) -> str | None:
    """Why the replay's measured profile is of other hardware than the capture, or None
    (:func:`unirl_replay.contract.cpu_signature.other_hardware`; only a measured profile has a calibration host)."""
    if replay.timing_model.kind != rpb.TIMING_MODEL_KIND_PROFILE:
        return None
    return other_hardware(manifest, prov)


def condition_warnings(manifest: mpb.TraceManifest, replay: rpb.ReplayResult, prov: dict,
                       model: StepModel | None) -> list[str]:
    """Readable warnings (empty when the replay's model is not a measured profile)."""
    if replay.timing_model.kind != rpb.TIMING_MODEL_KIND_PROFILE or not prov.get("measured"):
        return []
    out: list[str] = []
    hw = prov.get("hardware") or {}
    cap_cpu, cal_cpu = manifest.hardware.cpu_model, str(hw.get("cpu_model", ""))
    if cap_cpu and cal_cpu and cap_cpu != cal_cpu:
        out.append(f"CPU model differs: capture {cap_cpu!r}, calibration {cal_cpu!r}")
    sig_warning = signature_warning(capture_signature(manifest), calibration_signature(prov), cal_cpu,
                                    bool(prov.get("probe_levelled")))
    if sig_warning:
        out.append(sig_warning)
    cap_n, cal_n = manifest.hardware.cpu_count, int(hw.get("cpu_count") or 0)
    if cap_n and cal_n and cap_n != cal_n:
        out.append(f"logical CPUs differ: capture {cap_n}, calibration {cal_n}")
    ncpu = cap_n or cal_n or 1
    cap_load, src = _capture_load(manifest)
    cal_load = _calibration_load(prov)
    if cap_load is not None and cal_load is not None and abs(cap_load - cal_load) > LOAD_PER_CPU * ncpu:
        out.append(f"1-minute load differs: capture up to {cap_load:.2f} ({src}), calibration up to {cal_load:.2f} "
                   f"on {ncpu} CPUs (more than {LOAD_PER_CPU} per CPU): the engine may have run at another speed")
    c = manifest.conditions
    if c.HasField("steal_pct") and c.steal_pct > STEAL_PCT:
        out.append(f"CPU steal {c.steal_pct:.1f} % during the capture window (> {STEAL_PCT} %)")
    cal_cond = prov.get("conditions") or {}
    cal_up = cal_cond.get("engineUptimeNs", cal_cond.get("engine_uptime_ns"))
    if c.HasField("engine_uptime_ns") and cal_up is not None:
        a, b = c.engine_uptime_ns / 1e9, float(cal_up) / 1e9
        if min(a, b) > 0 and (max(a, b) / min(a, b) > UPTIME_FACTOR or (min(a, b) < WARM_S <= max(a, b))):
            out.append(f"engine time since start differs: capture {a:.0f} s, calibration {b:.0f} s")
    cal_threads = cal_cond.get("worker_threads", cal_cond.get("workerThreads")) or {}
    cal_bind = sorted({_binding(str(v)) for v in cal_threads.values() if _binding(str(v))})
    cal_shapes = {_binding_shape(b) for b in cal_bind}
    if cal_bind:
        for eid, text in sorted(c.worker_threads.items()):
            cap_bind = _binding(text)
            if cap_bind and _binding_shape(cap_bind) not in cal_shapes:
                out.append(f"engine thread binding differs: capture engine {eid} ran with {cap_bind!r}, the "
                           f"calibration's engine with {' / '.join(repr(b) for b in cal_bind)}: the engine may have "
                           "run at another speed (the probe measures by how much)")
    levelled = prov.get("probe_levelled") if isinstance(prov.get("probe_levelled"), dict) else {}
    own_probe = bool(manifest.trace_id) and levelled.get("trace_id") == manifest.trace_id
    several = len({p.engine_id for p in manifest.probes}) > 1
    for pt, when, level, eid in probe_levels(manifest, model):
        spread = (pt.p75_ms - pt.p25_ms) / pt.median_ms if pt.median_ms else 0.0
        who = f" of engine {eid[:80]!r}" if several else ""  # which engine's probe: two engines' lines read alike
        if abs(level - 1) > max(spread, PROBE_TOLERANCE):
            what = (f"decode B={pt.batch_size} ctx {pt.context_tokens}" if pt.phase == "decode"
                    else f"batched prefill, {pt.batch_size} rows, {pt.prefill_tokens} tokens in one pass"
                    if pt.batch_size > 1 else f"prefill {pt.prefill_tokens} tokens")
            if own_probe:  # the level is applied already: what is left is this point's misfit to the levelling
                if levelled.get("probe_condition") == "contended":
                    out.append(f"reference probe{who} {when} the window ({what}, measured with every engine running it) "
                               f"ran at {level:.2f}x the probe-levelled profile's time (probe spread "
                               f"{100 * spread:.0f} %): the profile was levelled to this trace's own probe's "
                               "CONTENDED points (each engine measured while the others decoded), so its "
                               "isolated points differ from the level it applies")
                    continue
                out.append(f"reference probe{who} {when} the window ({what}) ran at {level:.2f}x the probe-levelled "
                           f"profile's time (probe spread {100 * spread:.0f} %): the profile was levelled to this "
                           f"trace's own probe ({levelled.get('levelling', 'scalar')} levelling), and this point "
                           "stays off the level it applies (the probe's points do not share one level per phase)")
            else:
                out.append(f"reference probe{who} {when} the window ({what}) ran at {level:.2f}x the profile's time "
                           f"(probe spread {100 * spread:.0f} %): the capture's engine level differs from the "
                           "calibration's")
    recorded = (c.ByteSize() > 0 or len(manifest.probes) > 0 or "loadavg.window" in manifest.labels)
    if not recorded:
        out.append("the capture recorded no run conditions and no reference probe: nothing recorded says whether its "
                   "engine ran at the calibration's speed (record them: README, Capturing inside a UniRL run, step 5: "
                   "unirl_replay.capture.probe.run(rollout, 'before'/'after') around the window)")
    elif not manifest.probes:
        out.append("no reference probe in the capture's engine: its speed level is inferred from the rebuilt steps "
                   "(profile check), not measured (README, Capturing step 5: unirl_replay.capture.probe.run)")
    return out
