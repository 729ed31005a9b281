"""The sidecar of a converted upstream input file: ``<file>.unirl-replay.json``.

The mooncake format has no header line, so its hash block size (``hash_ids`` are one per
``block_size`` tokens) would be lost with the file; the sidecar carries it, and the replay reads
it back from there (``trace_block_size``). It also marks the file as written by unirl-replay, so
``convert --out`` replaces an earlier conversion but never a file it did not write.

Content (JSON)::

    {"written_by": "unirl-replay", "file": "<name>", "format": "mooncake", "engine_id": "e0",
     "block_size": 16,
     "unmodelled": [{"rule": "engine_client.inflight_limit", "reason": "...", "record_ids": ["e0"]}]}

``unmodelled`` is present only when the file was converted WITHOUT a constraint of the trace
(``convert --allow-unmodelled RULE``): the file is then an UNMODELLED input, not an exact one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from unirl_replay.contract import json_guard
from unirl_replay.contract.errors import OutputExistsError, TraceFormatError

SUFFIX = ".unirl-replay.json"
_TOOL = "unirl-replay"

__all__ = ["SUFFIX", "sidecar_path", "write_sidecar", "read_sidecar", "read_block_size", "guard_target"]


def sidecar_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p.with_name(p.name + SUFFIX)


def write_sidecar(path: str | os.PathLike, *, trace_format: str, engine_id: str, block_size: int,
                  unmodelled=()) -> Path:
    """Write ``path``'s sidecar (atomic). ``unmodelled``: ``replay_pb2.UnmodelledConstraint``
    messages the converted file lacks (listed under ``unmodelled``; omitted when empty)."""
    sp = sidecar_path(path)
    doc = {"written_by": _TOOL, "file": Path(path).name, "format": trace_format, "engine_id": engine_id,
           "block_size": int(block_size)}
    if unmodelled:
        doc["unmodelled"] = [{"rule": c.rule, "reason": c.reason, "record_ids": list(c.record_ids)}
                             for c in unmodelled]
    tmp = sp.with_name(f".{sp.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, sp)
    return sp


def read_sidecar(path: str | os.PathLike) -> dict:
    """The sidecar of ``path``. Raises TraceFormatError (rule ``sidecar.missing`` / ``sidecar.invalid``)."""
    sp = sidecar_path(path)
    if not sp.is_file() or sp.is_symlink():
        raise TraceFormatError(f"no {sp.name} next to the converted file (it carries the block size)",
                               file=str(path), rule="sidecar.missing")
    if sp.stat().st_size > 1 << 20:
        raise TraceFormatError("sidecar larger than 1 MiB", file=sp.name, rule="sidecar.invalid")
    doc = json_guard.loads(sp.read_bytes(), file=sp.name)
    if not (isinstance(doc, dict) and doc.get("written_by") == _TOOL and doc.get("file") == Path(path).name):
        raise TraceFormatError(f"not a unirl-replay sidecar of {Path(path).name}", file=sp.name, rule="sidecar.invalid")
    bs = doc.get("block_size")
    if not isinstance(bs, int) or isinstance(bs, bool) or not 0 < bs < 1 << 31:
        raise TraceFormatError(f"block_size {bs!r} is not a positive integer", file=sp.name, rule="sidecar.invalid")
    return doc


def read_block_size(path: str | os.PathLike) -> int:
    """The hash block size of a converted file, read back from its sidecar."""
    return read_sidecar(path)["block_size"]


def guard_target(path: str | os.PathLike) -> None:
    """Before (re)writing ``path``: create its directory; refuse to replace a file we did not write.

    Raises:
        OutputExistsError: ``path`` exists and is not a unirl-replay conversion (no valid sidecar).
    """
    p = Path(path)
    from unirl_replay.contract.out_dir import trace_file_problem

    why = trace_file_problem(p)  # `--out TRACE/workload.jsonl.partial`: the trace became INCOMPLETE for every reader
    if why:
        raise OutputExistsError(why)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(p):
        sp = sidecar_path(p)
        if os.path.lexists(sp):  # the sidecar's name without its file: replaced only if it is one of ours
            try:
                read_sidecar(p)
            except (TraceFormatError, OSError):
                raise OutputExistsError(f"{sp} exists and is not a sidecar unirl-replay wrote; it is never replaced: "
                                        "choose another --out or move it") from None
        return
    if p.is_dir() or p.is_symlink():
        raise OutputExistsError(f"{p} exists and is not a converted file unirl-replay wrote; choose another --out")
    try:
        read_sidecar(p)
    except (TraceFormatError, OSError):
        raise OutputExistsError(f"{p} exists and was not written by unirl-replay (no valid {sidecar_path(p).name}); "
                                "it is never replaced: choose another --out or move it") from None
