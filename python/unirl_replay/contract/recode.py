"""``recode``: the same trace in another encoding (``jsonl``, ``binpb``, ``arrow``).

:func:`recode_trace` gates the source as ``unirl-replay validate`` does (every rule, outcomes
included: only warnings pass), writes every workload and outcome record, in order, to a new
directory through :class:`~unirl_replay.contract.trace_io.TraceWriter` in the chosen encoding,
and copies the files the manifest's reference probes name (``probes[].artifact_path``), each
checked against the source's sha256 after the copy. The new manifest is the source's with its
``artifacts`` (path, encoding, sha256, size, record count) those of the new files; the writer sets
``contract_revision`` to its own when the source's is older or absent (an ``arrow`` trace needs revision 2),
everything else is unchanged.

Nothing a user has is replaced or partly written: an existing ``out_dir`` is refused
(:class:`~unirl_replay.contract.errors.OutputExistsError`) before anything is read; the trace is
written into a temporary sibling (``.NAME.*.partial``) and renamed to ``out_dir`` only when
complete (removed on any failure). A trace from a newer contract revision is refused: its fields
this reader does not know would be dropped. ``arrow`` without pyarrow raises
:class:`~unirl_replay.contract.errors.MissingEnvironmentError` before the source is read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from unirl_replay.contract import out_dir as outputs
from unirl_replay.contract import trace_io
from unirl_replay.contract.errors import OutputExistsError, TraceFormatError, UnirlReplayError
from unirl_replay.v1.manifest_pb2 import TraceManifest

__all__ = ["recode_trace"]

STAGE = "recode"


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _not_plain_file(trace_dir: Path, parts: tuple[str, ...]) -> str | None:
    """Why ``trace_dir / parts`` is not a regular file reached without a symbolic link (a link would copy a
    file from outside the trace into the new one), or None."""
    p = trace_dir
    for k, part in enumerate(parts):
        p = p / part
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return "is missing"
        if stat.S_ISLNK(st.st_mode):
            return f"is reached through a symbolic link ({p}): only files inside the trace directory are copied"
        if k == len(parts) - 1 and not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
    return None


def _probe_files(trace_dir: Path, manifest: TraceManifest) -> list[str]:
    """The probe artifacts the manifest names (relative paths inside the trace), each once."""
    out: list[str] = []
    for p in manifest.probes:
        rel = p.artifact_path
        if not rel:
            continue
        parts = PurePosixPath(rel).parts
        if PurePosixPath(rel).is_absolute() or ".." in parts:
            raise TraceFormatError(f"probe artifact path {rel!r} leaves the trace directory",
                                   file=str(trace_dir / trace_io.MANIFEST_FILE), rule="recode.probe_artifact")
        why = _not_plain_file(trace_dir, parts)
        if why:
            raise TraceFormatError(f"probe artifact {rel!r} named by the manifest {why}",
                                   file=str(trace_dir / trace_io.MANIFEST_FILE), rule="recode.probe_artifact")
        if rel not in out:
            out.append(rel)
    return out


def recode_trace(trace_dir: str | os.PathLike, encoding: str, out_dir: str | os.PathLike) -> TraceManifest:
    """Write ``trace_dir``'s records to the new trace directory ``out_dir`` in ``encoding`` (module
    doc); returns the new manifest.

    Raises:
        OutputExistsError: ``out_dir`` exists (file, directory, link; empty or not).
        TraceRejectedError: the source breaks a rule ``validate`` reports as an error (the gate's message).
        MissingEnvironmentError: ``encoding="arrow"`` without pyarrow.
        UnirlReplayError: unknown encoding; a source from a newer contract revision.
    """
    from unirl_replay.contract.gate import refusal
    from unirl_replay.contract.outcomes_io import iter_outcomes
    from unirl_replay.contract.validate import check_trace

    if encoding not in trace_io.ENCODINGS:
        raise UnirlReplayError(f"unknown encoding {encoding!r}; use one of {', '.join(trace_io.ENCODINGS)}")
    src_dir, out = Path(trace_dir), Path(out_dir).absolute()
    if os.path.lexists(out):
        raise OutputExistsError(f"{out_dir} exists; recode writes a new trace directory and never replaces one "
                                "(choose another --out or remove it)")
    if encoding == "arrow":
        from unirl_replay.contract import columnar

        columnar.require_pyarrow()
    res = check_trace(src_dir, outcomes=True)
    err = refusal(src_dir, STAGE, res)
    if err is not None:
        raise err
    src = trace_io.open_trace(src_dir, verify_digests=False)  # verified by check_trace a moment ago
    if src.compat.newer:
        raise UnirlReplayError(f"{trace_dir} was written by unirl_replay.v1 revision {src.compat.writer_revision}, "
                               f"this tool is revision {src.compat.reader_revision}: recoding would drop the fields "
                               "it does not know. Upgrade unirl-replay to recode it")
    probes = _probe_files(src_dir, src.manifest)
    work = outputs.work_sibling(out)  # an ordinary directory's mode, not mkdtemp's private one
    try:
        with trace_io.TraceWriter(work, encoding=encoding) as w:
            for _, rec in src.iter_workload():
                w.write_workload(rec)
            for _, rec in iter_outcomes(src):
                w.write_outcome(rec)
            for rel in probes:
                dst = work / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src_dir / rel, dst)
                want, got = _sha256(src_dir / rel), _sha256(dst)
                if want != got:
                    raise UnirlReplayError(f"copy of probe artifact {rel} differs from the source "
                                           f"(sha256 {got} != {want})")
            manifest = w.finalize(src.manifest)
        if os.path.lexists(out):  # appeared while we wrote: still never replaced
            raise OutputExistsError(f"{out_dir} appeared while recoding; nothing was replaced")
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest
