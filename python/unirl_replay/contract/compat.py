"""Forward compatibility inside ``unirl_replay.v1``: contract revisions and unknown fields.

v1 only ever grows by additive fields. Each additive release bumps the **contract revision**
(:data:`CONTRACT_REVISION`; the history is :data:`REVISIONS`, also in docs/versioning.md), and every
writer records the revision it was built from in ``TraceManifest.contract_revision`` (absent, i.e.
0, means revision 1: written before the field existed).

A reader meeting a trace from a *newer* revision (``manifest.contract_revision`` > this reader's)
keeps going: JSON keys it does not know are skipped, binpb fields it does not know are kept as the
protobuf runtime's unknown fields (so a binpb copy or rewrite carries them through unchanged), and
one :class:`ForwardCompatWarning` names the fields and both revisions. With ``strict=True`` (CI) the
first unknown field raises :class:`~unirl_replay.contract.errors.TraceFormatError` (rule
``compat.newer_revision``) instead. A trace that says it is *not* newer but carries unknown JSON keys
is broken, not newer: that stays the error ``json.profile`` (a typo is never skipped).

This module only looks; :mod:`unirl_replay.contract.trace_io` decides when to call it.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import unknown_fields as _uf
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from unirl_replay.contract.errors import TraceFormatError

#: Revision of the v1 contract this code was generated from.
CONTRACT_REVISION = 4

#: revision -> what it added (additive only; docs/versioning.md repeats it).
REVISIONS: dict[int, str] = {
    1: "first release of unirl_replay.v1 (the baseline compat/unirl_replay_v1.binpb)",
    2: "every additive field since the baseline (TraceManifest.contract_revision, conditions, probes; the "
       "report's rebuilt steps, profile check and error decomposition; CALIBRATION_STATUS_CALIBRATED_PROBE; "
       "ENCODING_ARROW, the arrow encoding); "
       "standard file options (go_package, java_package, ...)",
    3: "RolloutBatch.after_batch (BatchBoundary: the driver's closed-loop boundary between rollout batches, with "
       "its measured driver gap); RunConditions.cpu_signature (CpuSignature: vendor, family, model, stepping, "
       "microcode, flags digest, named ISA flags)",
    4: "ReferenceProbeArtifact (the reference probe's calibration-role artifact file as a v1 message, with "
       "ProbeCall, ProbeRequestTiming, ProbeVerdict, ProbeCalls, ProbePass); ProbePoint.step_ms and passes (the "
       "artifact's per-repeat detail)",
}

#: Unknown field paths named per file in a message (the rest are counted).
MAX_LISTED = 50
#: Off-profile JSON forms kept per form (the rest are only counted, in ``off_profile_counts``).
MAX_FORMS_KEPT = 1000

__all__ = ["CONTRACT_REVISION", "REVISIONS", "ForwardCompatWarning", "CompatLog", "writer_revision",
           "manifest_revision_of_dict", "unknown_json_keys", "strip_unknown_json_keys", "unknown_binpb_fields",
           "bare_serialization"]


class ForwardCompatWarning(UserWarning):
    """A trace from a newer v1 revision carries fields this reader does not know (they are skipped)."""


def writer_revision(value: int) -> int:
    """``TraceManifest.contract_revision`` as a revision number (0 / absent means 1)."""
    return value or 1


def manifest_revision_of_dict(data: Any) -> int:
    """The writer's revision from a manifest still in JSON form (before it is parsed); 1 when absent or odd."""
    if not isinstance(data, dict):
        return 1
    v = data.get("contract_revision", data.get("contractRevision", 0))
    try:
        return writer_revision(int(v))
    except (TypeError, ValueError):
        return 1


def _is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)
    return bool(rep) if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def _field(desc: Descriptor, key: str) -> FieldDescriptor | None:
    f = desc.fields_by_name.get(key)
    if f is None:
        f = next((x for x in desc.fields if x.json_name == key), None)
    return f


def _walk_json(data: dict, desc: Descriptor, prefix: str, out: list[str], strip: bool) -> None:
    for key in list(data):
        f = _field(desc, key)
        path = f"{prefix}{key}"
        if f is None:
            out.append(path)
            if strip:
                del data[key]
            continue
        if f.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        val = data[key]
        if f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            if vf.type == FieldDescriptor.TYPE_MESSAGE and isinstance(val, dict):
                for k, v in val.items():
                    if isinstance(v, dict):
                        _walk_json(v, vf.message_type, f"{path}[{k!r}].", out, strip)
        elif _is_repeated(f):
            if isinstance(val, list):
                for i, v in enumerate(val):
                    if isinstance(v, dict):
                        _walk_json(v, f.message_type, f"{path}[{i}].", out, strip)
        elif isinstance(val, dict):
            _walk_json(val, f.message_type, f"{path}.", out, strip)


def unknown_json_keys(data: Any, desc: Descriptor) -> list[str]:
    """Dotted paths (``request.reasoning_tokens``) of the keys in decoded JSON that ``desc`` does not know."""
    out: list[str] = []
    if isinstance(data, dict):
        _walk_json(data, desc, "", out, strip=False)
    return out


def strip_unknown_json_keys(data: dict, desc: Descriptor) -> list[str]:
    """Remove the unknown keys from ``data`` in place; returns their paths (as :func:`unknown_json_keys`)."""
    out: list[str] = []
    _walk_json(data, desc, "", out, strip=True)
    return out


def _walk_msg(msg: Message, prefix: str, out: list[str]) -> None:
    for u in _uf.UnknownFieldSet(msg):
        out.append(f"{prefix}#{u.field_number}")
    for f, val in msg.ListFields():
        if f.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            if vf.type == FieldDescriptor.TYPE_MESSAGE:
                for k, v in val.items():
                    _walk_msg(v, f"{prefix}{f.name}[{k!r}].", out)
        elif _is_repeated(f):
            for i, v in enumerate(val):
                _walk_msg(v, f"{prefix}{f.name}[{i}].", out)
        else:
            _walk_msg(val, f"{prefix}{f.name}.", out)


def unknown_binpb_fields(msg: Message, payload: bytes | None = None) -> list[str]:
    """Paths of the unknown fields a parsed binary message carries, by field number (``request.#18``).

    The protobuf runtime keeps them and writes them back on ``SerializeToString``; their names are
    not in this reader's descriptors, so they are named by number. With ``payload`` (the bytes the
    message was parsed from) a fast test comes first: a copy without unknown fields that serializes
    to exactly ``payload`` has none (about 10x cheaper than walking the message). The same *size*
    proves nothing: a writer that encodes a one-element repeated scalar unpacked saves a byte per
    field, which an unknown field can fill (attack-s7).
    """
    if payload is not None and bare_serialization(msg) == payload:
        return []
    out: list[str] = []
    _walk_msg(msg, "", out)
    return out


def bare_serialization(msg: Message) -> bytes:
    """``msg``'s canonical bytes without its unknown fields (``msg`` itself unchanged): equal to the
    bytes it was parsed from exactly when those carried no unknown field and were canonical."""
    bare = type(msg)()
    bare.CopyFrom(msg)
    bare.DiscardUnknownFields()
    return bare.SerializeToString()


def _generic(path: str) -> str:
    """``engines[0].x`` -> ``engines[].x``: one entry per field, not per element."""
    import re

    return re.sub(r"\[[^\]]*\]", "[]", path)


@dataclass
class CompatLog:
    """What one reader of one trace learnt about revisions and unknown fields.

    Attributes:
        writer_revision: the manifest's ``contract_revision`` (1 when absent).
        reader_revision: :data:`CONTRACT_REVISION`.
        strict: raise at the first unknown field instead of skipping it.
        warn: emit the one :class:`ForwardCompatWarning` (``validate`` turns it into a violation instead).
        fields: file name -> unknown field paths seen (generic: ``engines[].x``), in first-seen order.
        first_line: file name -> (generic path -> first line / frame it was seen on).
        foreign_fields: like ``first_line``, for unknown binpb fields in a trace that does NOT claim
            a newer revision (only looked for with ``inspect``; ``validate`` reports them as errors).
        off_profile_forms: ``(file, line, form, path)`` of JSON the reader accepted but the profile's
            writers never write (``json_profile.OFF_PROFILE_FORMS``; only with ``inspect``).
        inspected: files already looked at for off-profile forms (each is looked at once).
    """

    writer_revision: int = 1
    reader_revision: int = CONTRACT_REVISION
    strict: bool = False
    warn: bool = True
    fields: dict[str, list[str]] = field(default_factory=dict)
    first_line: dict[str, dict[str, int]] = field(default_factory=dict)
    foreign_fields: dict[str, dict[str, int]] = field(default_factory=dict)
    off_profile_forms: list[tuple[str, int, str, str]] = field(default_factory=list)
    inspected: set[str] = field(default_factory=set)
    off_profile_counts: Counter[str] = field(default_factory=Counter)
    warned: bool = False
    _warned_count: int = 0

    @property
    def newer(self) -> bool:
        """The trace was written by a newer revision than this reader's."""
        return self.writer_revision > self.reader_revision

    def describe(self) -> str:
        """One line naming every unknown field per file and both revisions."""
        parts = []
        for f, paths in self.fields.items():
            shown = ", ".join(paths[:MAX_LISTED]) + (f" and {len(paths) - MAX_LISTED} more" if len(paths) > MAX_LISTED else "")
            parts.append(f"{f}: {shown}")
        return (f"written by unirl_replay.v1 revision {self.writer_revision}, read by revision {self.reader_revision}; "
                f"fields this reader does not know were skipped ({'; '.join(parts)}). Upgrade unirl-replay to read them.")

    def note(self, file: str, line: int, paths: list[str]) -> None:
        """Record unknown fields of one record (or the manifest) from a newer writer; raise when strict.

        The warning itself is :meth:`emit`'s (``open_trace`` emits after looking at the manifest and
        the whole workload, so the one warning names every field)."""
        if not paths:
            return
        if self.strict:
            raise TraceFormatError(
                f"fields {', '.join(paths)} are unknown to this reader (revision {self.reader_revision}); the trace was "
                f"written by revision {self.writer_revision}. Strict mode refuses to skip them: upgrade unirl-replay",
                file=file, line=line, rule="compat.newer_revision")
        known = self.fields.setdefault(file, [])
        lines = self.first_line.setdefault(file, {})
        for p in paths:
            g = _generic(p)
            if g not in lines:
                lines[g] = line
                known.append(g)

    def emit(self) -> None:
        """Warn once about the fields noted since the last warning (nothing when there are none)."""
        total = sum(len(v) for v in self.fields.values())
        if not self.warn or total <= self._warned_count:
            return
        self._warned_count = total
        self.warned = True
        warnings.warn(ForwardCompatWarning(self.describe()), stacklevel=3)

    def foreign(self, file: str, line: int, paths: list[str]) -> None:
        """Record unknown binpb fields in a trace that does not claim to be newer (a writer that forgot
        ``contract_revision``, or bytes of another message type)."""
        seen = self.foreign_fields.setdefault(file, {})
        for p in paths:
            seen.setdefault(_generic(p), line)

    def start_inspecting(self, file: str) -> bool:
        """True the first time for ``file`` (then its off-profile forms are looked for), False after."""
        if file in self.inspected:
            return False
        self.inspected.add(file)
        return True

    def off_profile(self, file: str, line: int, forms: list[tuple[str, str]]) -> None:
        """Record the off-profile JSON forms of one record (or of the manifest, line 0)."""
        for form, path in forms:
            self.off_profile_counts[form] += 1
            if self.off_profile_counts[form] <= MAX_FORMS_KEPT:
                self.off_profile_forms.append((file, line, form, path))
