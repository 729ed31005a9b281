"""Checks of a ``CpuSignature`` (manifest.proto), shared by the gate (rule ``manifest.conditions``, a trace's and its
probes' conditions) and the profile reader (``contract.profile_npz``: a profile provenance's ``conditions``), which
``replay`` imports: no import of the gate package (it reaches the outcomes reader)."""

from __future__ import annotations

from unirl_replay.contract.message_guard import _CONTROL, MAX_ID_CHARS
from unirl_replay.v1 import manifest_pb2 as mpb

#: most flags of a CpuSignature list (isa_flags, isa_flags_checked): a CPU's whole "flags" line holds ~200
MAX_SIGNATURE_FLAGS = 1024


def signature_problems(sig, vendor: bool = True) -> list[str]:
    """What is wrong with one ``CpuSignature`` (manifest.proto): the report prints its text, and tells hosts apart
    by its ISA flags (as sets, over the flags both sides checked), so a text with a control character (a newline
    forges a report line) or over :data:`MAX_ID_CHARS`, an empty or repeated flag, or an ISA flag outside
    ``isa_flags_checked`` (the flags looked for; absent from it the flag reads as unchecked) is refused.
    ``vendor``: check ``vendor_id`` too (the gate's id rules check it in a trace)."""
    out = []
    texts = [("vendor_id", sig.vendor_id)] if vendor else []
    texts += [("microcode", sig.microcode), ("flags_digest", sig.flags_digest)]
    for name in ("isa_flags", "isa_flags_checked"):
        flags = list(getattr(sig, name))
        if len(flags) > MAX_SIGNATURE_FLAGS:
            out.append(f"{name} holds {len(flags)} flags (at most {MAX_SIGNATURE_FLAGS})")
            continue
        texts += [(f"{name}[{i}]", v) for i, v in enumerate(flags)]
        if "" in flags:
            out.append(f"{name}[{flags.index('')}] is empty")
        dup = sorted({v for v in flags if flags.count(v) > 1}) if len(set(flags)) != len(flags) else []
        if dup:
            out.append(f"{name} lists {dup[0][:64]!r} twice: a flag is present or not")
    for name, v in texts:
        if len(v) > MAX_ID_CHARS:
            out.append(f"{name} of {len(v)} characters (limit {MAX_ID_CHARS})")
        elif m := _CONTROL.search(v):
            out.append(f"{name} {v[:64]!r} holds the control character U+{ord(m.group()):04X}")
    if sig.isa_flags_checked and len(sig.isa_flags) <= MAX_SIGNATURE_FLAGS:
        unchecked = [v for v in sig.isa_flags if v not in set(sig.isa_flags_checked)]
        if unchecked:
            out.append(f"isa_flags holds {unchecked[0][:64]!r}, not among isa_flags_checked (the flags looked for)")
    return out


#: CpuSignature fields compared (JSON profile names: snake_case, camelCase accepted)
SIGNATURE_FIELDS = ("vendor_id", "cpu_family", "model", "stepping", "microcode", "flags_digest", "isa_flags")
#: the fields that name the processor itself: a difference in one of them is other hardware (the label says
#: UNVALIDATED); a microcode or full-flags difference alone is only warned about (a hypervisor or an update)
HARDWARE_FIELDS = ("vendor_id", "cpu_family", "model", "stepping", "isa_flags")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _signature_from_json(d: object) -> dict:
    """A CpuSignature in the JSON profile (provenance) as a plain dict of :data:`SIGNATURE_FIELDS` (empty: none)."""
    if not isinstance(d, dict):
        return {}
    out = {}
    for k in SIGNATURE_FIELDS:
        v = d.get(k, d.get(_camel(k)))
        if v in (None, "", []):
            continue
        out[k] = [str(x) for x in v] if k == "isa_flags" and isinstance(v, list) else (
            int(v) if k in ("cpu_family", "model", "stepping") and str(v).isdigit() else v)
    checked = d.get("isa_flags_checked", d.get("isaFlagsChecked"))
    if "isa_flags" in out and isinstance(checked, list) and checked:
        out["isa_flags_checked"] = [str(x) for x in checked]
    return out


def _signature_from_message(sig: mpb.CpuSignature) -> dict:
    out: dict = {}
    for k in SIGNATURE_FIELDS:
        if k == "isa_flags":
            if sig.isa_flags or sig.isa_flags_checked:
                out[k] = list(sig.isa_flags)
                if sig.isa_flags_checked:
                    out["isa_flags_checked"] = list(sig.isa_flags_checked)
        elif k in ("cpu_family", "model", "stepping"):
            if sig.HasField(k):
                out[k] = getattr(sig, k)
        elif getattr(sig, k):
            out[k] = getattr(sig, k)
    return out


def _same(cap: dict, cal: dict, k: str) -> bool:
    """Whether field ``k`` (in both signatures) is equal. ISA flags compare as sets (their order and a repeat are
    no property of the CPU), over the flags both sides looked for when both recorded them (``isa_flags_checked``: a
    capture of a version that checks one more flag is not other hardware for lacking it in an older profile)."""
    if k != "isa_flags":
        return cap[k] == cal[k]
    a, b = set(cap[k]), set(cal[k])
    if cap.get("isa_flags_checked") and cal.get("isa_flags_checked"):
        both = set(cap["isa_flags_checked"]) & set(cal["isa_flags_checked"])
        a, b = a & both, b & both
    return a == b


def capture_signature(manifest: mpb.TraceManifest) -> dict:
    """The capture's CPU signature: the window's conditions, else the first probe's that has one."""
    if manifest.conditions.HasField("cpu_signature"):
        return _signature_from_message(manifest.conditions.cpu_signature)
    for probe in manifest.probes:
        if probe.conditions.HasField("cpu_signature"):
            return _signature_from_message(probe.conditions.cpu_signature)
    return {}


def calibration_signature(prov: dict) -> dict:
    cond = prov.get("conditions") or {}
    return _signature_from_json(cond.get("cpu_signature", cond.get("cpuSignature")))


def signature_words(sig: dict) -> str:
    """e.g. ``AuthenticAMD family 25 model 17 stepping 1, microcode 0x1000065, flags 6a93d771884cba54, ISA avx2
    avx512f avx512_bf16``."""
    head = " ".join([str(sig.get("vendor_id") or "?")] + [f"{k.replace('cpu_', '')} {sig[k]}"
                                                           for k in ("cpu_family", "model", "stepping") if k in sig])
    parts = [head]
    if sig.get("microcode"):
        parts.append(f"microcode {sig['microcode']}")
    if sig.get("flags_digest"):
        parts.append(f"flags {sig['flags_digest']}")
    if "isa_flags" in sig:
        parts.append("ISA " + (" ".join(sig["isa_flags"]) or "none of the named flags"))
    return ", ".join(parts)


def other_hardware(manifest: mpb.TraceManifest, prov: dict) -> str | None:
    """Why a measured profile (``prov``: its provenance, ``"measured": true``) is of other hardware than the capture
    ``manifest``, or None (same hardware, or nothing recorded says otherwise; not measured: no calibration host).

    Other hardware: the CPU model strings differ (``TraceManifest.hardware.cpu_model`` vs the provenance's
    ``hardware.cpu_model``), or both sides recorded a CPU signature (``RunConditions.cpu_signature``, else the first
    probe's / the provenance's ``conditions.cpu_signature``) and one of :data:`HARDWARE_FIELDS` differs (ISA flags
    compared as a set). Unknown (a side recorded neither) is not a mismatch: the report's conditions warnings say so.
    """
    if not prov.get("measured"):
        return None
    hw = prov.get("hardware") if isinstance(prov.get("hardware"), dict) else {}
    cap_cpu, cal_cpu = manifest.hardware.cpu_model, str(hw.get("cpu_model", ""))
    if cap_cpu and cal_cpu and cap_cpu != cal_cpu:
        return f"CPU model {cap_cpu!r} (capture) vs {cal_cpu!r} (calibration)"
    cap, cal = capture_signature(manifest), calibration_signature(prov)
    diff = [k for k in HARDWARE_FIELDS if k in cap and k in cal and not _same(cap, cal, k)]
    if diff:
        return f"CPU signature {signature_words(cap)} (capture) vs {signature_words(cal)} (calibration)"
    return None
