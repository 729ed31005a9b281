"""Checks of a ``CpuSignature`` (manifest.proto), shared by the gate (rule ``manifest.conditions``, a trace's and its
probes' conditions) and the profile reader (``contract.profile_npz``: a profile provenance's ``conditions``), which
``replay`` imports: no import of the gate package (it reaches the outcomes reader)."""

from __future__ import annotations

from unirl_replay.contract.message_guard import _CONTROL, MAX_ID_CHARS

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
