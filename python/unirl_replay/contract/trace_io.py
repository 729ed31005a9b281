"""Trace directories: manifest, record framing, streaming writer with atomic finalize, reader.

A trace is a directory::

    manifest.json                      TraceManifest (JSON profile), written LAST, atomically
    workload.jsonl | .binpb | .arrow   WorkloadRecord stream
    outcomes.jsonl | .binpb | .arrow   OutcomeRecord stream (read only through outcomes_io)

Framing:

- ``jsonl``: one compact JSON object per line (docs/json-profile.md), UTF-8, ``\\n``-terminated.
- ``binpb``: length-delimited binary protobuf, i.e. per record an unsigned base-128 varint byte
  length followed by the serialized message (what Java ``writeDelimitedTo`` / C++
  ``SerializeDelimitedToOstream`` write).
- ``arrow``: one Apache Arrow IPC file, one row per record, the schema derived from the record
  message's descriptor (:mod:`unirl_replay.contract.columnar`; needs the optional ``pyarrow``).

While writing, the record streams are ``*.partial`` files. :meth:`TraceWriter.finalize` closes
and fsyncs them, renames them to their final names and only then writes ``manifest.json``
(temp file + ``os.replace``) with the sha256, record count and byte size of each artifact. So a
directory without ``manifest.json``, with ``*.partial`` leftovers, or whose files do not match the
manifest's digests / sizes / counts is incomplete (:class:`IncompleteTraceError`) and is never read
as complete.

Memory: reading and writing jsonl / binpb are streaming (one record at a time plus a 1 MiB
buffer), whatever the trace size; ``arrow`` reads and writes one record batch of rows at a time
(the column readers of ``workload_columns`` map the whole file).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator, TypeVar

from google.protobuf.message import DecodeError, Message

from unirl_replay import SCHEMA_VERSION

from unirl_replay.contract import compat as compat_mod
from unirl_replay.contract import fast_jsonl, json_profile, json_write
from unirl_replay.contract.compat import CONTRACT_REVISION, CompatLog
from unirl_replay.contract.errors import (IncompleteTraceError, SchemaVersionError, TraceFormatError,
                                          TraceWriterBusyError)
from unirl_replay.v1.manifest_pb2 import (
    ARTIFACT_KIND_OUTCOMES,
    ARTIFACT_KIND_WORKLOAD,
    ENCODING_ARROW,
    ENCODING_BINPB,
    ENCODING_JSONL,
    ArtifactDigest,
    TraceManifest,
)
from unirl_replay.v1.workload_pb2 import WorkloadRecord

if TYPE_CHECKING:  # trace_io never reads measured outcomes; only outcomes_io imports their messages
    from unirl_replay.v1.outcomes_pb2 import OutcomeRecord

M = TypeVar("M", bound=Message)

MANIFEST_FILE = "manifest.json"
WORKLOAD_FILES = {"jsonl": "workload.jsonl", "binpb": "workload.binpb", "arrow": "workload.arrow"}
OUTCOME_FILES = {"jsonl": "outcomes.jsonl", "binpb": "outcomes.binpb", "arrow": "outcomes.arrow"}
PARTIAL_SUFFIX = ".partial"
ENCODINGS = ("jsonl", "binpb", "arrow")
_ENCODING_ENUM = {"jsonl": ENCODING_JSONL, "binpb": ENCODING_BINPB, "arrow": ENCODING_ARROW}
_ENCODING_NAME = {v: k for k, v in _ENCODING_ENUM.items()}
#: Largest binpb frame accepted (a corrupt length prefix must not allocate gigabytes).
MAX_FRAME_BYTES = 64 << 20
#: Longest JSONL line accepted, newline included (rule ``jsonl.line_too_long``); one record is far smaller.
MAX_LINE_BYTES = 64 << 20
#: Largest single-message JSON file read (manifest, replay result; rule ``json.file_too_large``).
MAX_JSON_FILE_BYTES = 256 << 20
#: Lock file a TraceWriter holds while writing (a second writer on the directory is refused). Its
#: ``.partial`` suffix makes a directory whose writer died read as incomplete.
WRITER_LOCK = "writer.lock" + ".partial"
_CHUNK = 1 << 20
#: Read buffer of an artifact: a JSONL line is read with one ``readline``; with the default 8 KiB
#: buffer (the file system's block size) that costs about 3x more CPU per 2 KiB line.
_READ_BUFFER = 1 << 16

__all__ = [
    "MANIFEST_FILE", "WORKLOAD_FILES", "OUTCOME_FILES", "ENCODINGS", "TraceWriter", "Trace", "open_trace",
    "write_message_json", "read_message_json", "read_manifest", "encode_varint", "decode_varint", "iter_frames", "iter_records",
    "sha256_file", "verify_artifact",
]


# ---------------------------------------------------------------------------------------------
# varint framing


def encode_varint(n: int) -> bytes:
    """Unsigned LEB128 / protobuf varint of ``n`` (0 <= n < 2**64)."""
    if n < 0 or n >= 1 << 64:
        raise ValueError(f"varint out of range: {n}")
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int] | None:
    """Decode a varint at ``buf[pos:]``. Returns ``(value, new_pos)`` or None when ``buf`` ends first.

    Raises:
        ValueError: more than 10 bytes (not a varint).
    """
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            return None
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def iter_frames(f: BinaryIO, *, file: str = "") -> Iterator[tuple[int, bytes]]:
    """Yield ``(frame_number, payload)`` from a length-delimited stream, 1-based, streaming.

    Raises:
        IncompleteTraceError: the stream ends inside a length prefix or a payload (rule ``binpb.truncated``).
        TraceFormatError: a length prefix is not a varint or exceeds ``MAX_FRAME_BYTES`` (``binpb.frame``).
    """
    buf = b""
    pos = 0
    n = 0
    eof = False
    while True:
        if len(buf) - pos < 10 and not eof:
            chunk = f.read(_CHUNK)
            eof = not chunk
            buf = buf[pos:] + chunk
            pos = 0
        if pos >= len(buf):
            return
        n += 1
        try:
            dec = decode_varint(buf, pos)
        except ValueError as e:
            raise TraceFormatError(str(e), file=file, line=n, rule="binpb.frame") from None
        if dec is None:
            raise IncompleteTraceError("stream ends inside a frame's length prefix", file=file, line=n,
                                       rule="binpb.truncated")
        size, pos = dec
        if size > MAX_FRAME_BYTES:
            raise TraceFormatError(f"frame length {size} exceeds {MAX_FRAME_BYTES} bytes (corrupt prefix?)",
                                   file=file, line=n, rule="binpb.frame")
        while len(buf) - pos < size and not eof:
            chunk = f.read(max(_CHUNK, size - (len(buf) - pos)))
            eof = not chunk
            buf = buf[pos:] + chunk
            pos = 0
        if len(buf) - pos < size:
            raise IncompleteTraceError(f"stream ends inside a frame ({len(buf) - pos} of {size} bytes)",
                                       file=file, line=n, rule="binpb.truncated")
        yield n, buf[pos:pos + size]
        pos += size


def _iter_jsonl(f: BinaryIO, cls: type[M], file: str, compat: CompatLog | None, inspect: bool, on_error=None
                ) -> Iterator[tuple[int, M]]:
    n = 0
    newer = compat is not None and compat.newer
    # off-profile forms are looked for once per file (validate reads the workload more than once)
    look = inspect and compat is not None and compat.start_inspecting(file)
    while raw := f.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise TraceFormatError(f"line longer than {MAX_LINE_BYTES} bytes", file=file, line=n,
                                   rule="jsonl.line_too_long")
        if not raw.endswith(b"\n"):
            raise IncompleteTraceError("last line has no newline (truncated write)", file=file, line=n,
                                       rule="jsonl.truncated")
        on_unknown = (lambda paths, n=n: compat.note(file, n, paths)) if newer else None
        try:
            if not raw.strip():
                raise TraceFormatError("empty line", file=file, line=n, rule="jsonl.empty_line")
            # the fast path takes only canonical-profile lines (no off-profile form, no unknown or
            # duplicate key); every other line goes to the reference parser, which words the error
            msg = fast_jsonl.try_parse(raw, cls)
            if msg is None:
                if look:
                    data = json_profile.loads(raw, file=file, line=n)
                    compat.off_profile(file, n, json_profile.off_profile_forms(data, cls.DESCRIPTOR))
                    msg = json_profile.parse_dict(data, cls, file=file, line=n, on_unknown=on_unknown)
                else:
                    msg = json_profile.parse_json(raw, cls, file=file, line=n, on_unknown=on_unknown)
        except TraceFormatError as e:
            if on_error is None:
                raise
            on_error(e)  # the framing is intact: report this line and go on with the next
            continue
        yield n, msg


def _iter_binpb(f: BinaryIO, cls: type[M], file: str, compat: CompatLog | None, inspect: bool, on_error=None
                ) -> Iterator[tuple[int, M]]:
    # unknown fields are looked for once per file (validate reads the workload more than once)
    look = compat is not None and (compat.newer or inspect) and compat.start_inspecting(file + "#binpb")
    for n, payload in iter_frames(f, file=file):
        try:
            msg = cls.FromString(payload)
        except (DecodeError, RecursionError) as e:
            err = TraceFormatError(f"not a valid {cls.DESCRIPTOR.full_name}: {e or 'nested too deeply'}", file=file,
                                   line=n, rule="binpb.decode")
            if on_error is None:
                raise err from None
            on_error(err)
            continue
        if look:
            paths = compat_mod.unknown_binpb_fields(msg, payload)
            if paths:
                if compat.newer:
                    compat.note(file, n, paths)
                else:
                    compat.foreign(file, n, paths)
        yield n, msg


def _iter_arrow(f: BinaryIO, cls: type[M], file: str, compat: CompatLog | None, inspect: bool, on_error=None
                ) -> Iterator[tuple[int, M]]:
    # a newer revision's schema (a superset) is read with its unknown fields skipped, like binpb's;
    # they are schema-level, so they are noted once, on row 1
    from unirl_replay.contract import columnar

    # one record batch in memory at a time, every batch validated before the first record (read_batches)
    skipped: list[str] = []
    batches = columnar.read_batches(f, cls, file, skipped)
    if skipped and compat is not None:
        if compat.newer:
            compat.note(file, 1, skipped)
        elif inspect:
            compat.foreign(file, 1, skipped)
    yield from columnar.messages_of_batches(batches, cls, file, on_error=on_error)


_READERS = {"jsonl": _iter_jsonl, "binpb": _iter_binpb, "arrow": _iter_arrow}


def iter_records(path: Path, cls: type[M], encoding: str, *, expected_count: int | None = None,
                 display_name: str | None = None, compat: CompatLog | None = None,
                 inspect: bool = False, on_error=None) -> Iterator[tuple[int, M]]:
    """Stream ``(1-based line/frame, message)`` from one record file.

    Args:
        path: the file.
        cls: message class of every record (WorkloadRecord / OutcomeRecord).
        encoding: ``"jsonl"``, ``"binpb"`` or ``"arrow"``.
        expected_count: when given, the number of records the manifest declares; a different
            count raises IncompleteTraceError (rule ``artifact.record_count``) at the end.
        display_name: file name used in errors (default ``path.name``).
        compat: the trace's :class:`~unirl_replay.contract.compat.CompatLog`. When the writer's
            revision is newer than this reader's, unknown JSON keys are skipped and unknown binpb
            fields (kept by the runtime) are noted there (one warning; an error when strict).
        inspect: also look for unknown binpb fields when the writer is not newer (``validate``).
        on_error: when given, a record that does not parse (framing intact: a JSONL line, a binpb
            frame whose length prefix is sound) is passed to ``on_error(TraceFormatError)`` and
            skipped, so every bad record is reported, not only the first; it still counts.
    """
    name = display_name or path.name
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")
    reader = _READERS[encoding]
    n = last_bad = 0

    def skipped(e: TraceFormatError) -> None:
        nonlocal last_bad
        last_bad = e.line
        on_error(e)

    with open_regular(path, name) as f:
        for n, msg in reader(f, cls, name, compat, inspect, skipped if on_error is not None else None):
            yield n, msg
    n = max(n, last_bad)
    if expected_count is not None and n != expected_count:
        raise IncompleteTraceError(f"{n} records in the file, the manifest says {expected_count}", file=name,
                                   rule="artifact.record_count")
    if compat is not None:
        compat.emit()


def open_regular(path: Path, name: str = "") -> BinaryIO:
    """Open a file for reading that must be a regular file (not a FIFO, device or directory).

    Raises:
        TraceFormatError: rule ``artifact.not_regular`` (not a regular file) or ``artifact.unreadable``
            (permission denied or another OS error), naming the file; never a bare OSError.
    """
    name = name or path.name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise TraceFormatError(f"cannot be read: {e.strerror or e}", file=name, rule="artifact.unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceFormatError("is not a regular file (a FIFO, device or directory cannot be an artifact)",
                                   file=name, rule="artifact.not_regular")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=_READ_BUFFER)
    except BaseException:
        os.close(fd)
        raise


def sha256_file(path: Path) -> tuple[str, int]:
    """Lowercase hex sha256 and byte size of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open_regular(path) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


# ---------------------------------------------------------------------------------------------
# single-message JSON files


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def write_message_json(path: str | os.PathLike, msg: Message, *, columns=None) -> None:
    """Write one message as pretty JSON (the profile), atomically: temp file, fsync, ``os.replace``.
    ``columns``: long repeated fields' rows as the columns they were built from
    (:func:`json_write.to_json_bytes`)."""
    path = Path(path)
    data = json_write.to_json_bytes(msg, columns=columns)  # = json_profile.to_json, map keys sorted (deterministic)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file ordinary permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def read_message_json(path: str | os.PathLike, cls: type[M]) -> M:
    """Read a single-message JSON file. Raises TraceFormatError naming the file on bad content
    (and on a file that is not regular, unreadable, or larger than :data:`MAX_JSON_FILE_BYTES`)."""
    path = Path(path)
    with open_regular(path) as f:
        data = f.read(MAX_JSON_FILE_BYTES + 1)
    if len(data) > MAX_JSON_FILE_BYTES:
        raise TraceFormatError(f"larger than {MAX_JSON_FILE_BYTES} bytes", file=path.name, rule="json.file_too_large")
    return json_profile.parse_json(data, cls, file=path.name)


def read_manifest(path: str | os.PathLike, *, strict: bool = False, warn: bool = True, inspect: bool = False
                  ) -> tuple[TraceManifest, CompatLog]:
    """Read ``manifest.json`` and learn the writer's contract revision.

    A manifest from a newer revision may carry keys this reader does not know: they are skipped
    and noted in the returned log (one :class:`~unirl_replay.contract.compat.ForwardCompatWarning`;
    with ``strict`` a TraceFormatError, rule ``compat.newer_revision``). From the same or an older
    revision an unknown key stays an error (``json.profile``). ``inspect`` notes the manifest's
    off-profile JSON forms in the log (``validate``).
    """
    path = Path(path)
    with open_regular(path) as f:
        text = f.read(MAX_JSON_FILE_BYTES + 1)
    if len(text) > MAX_JSON_FILE_BYTES:
        raise TraceFormatError(f"larger than {MAX_JSON_FILE_BYTES} bytes", file=path.name, rule="json.file_too_large")
    data = json_profile.loads(text, file=path.name)
    log = CompatLog(writer_revision=compat_mod.manifest_revision_of_dict(data), strict=strict, warn=warn)
    if inspect:
        log.start_inspecting(path.name)
        log.off_profile(path.name, 0, json_profile.off_profile_forms(data, TraceManifest.DESCRIPTOR))
    if log.newer:
        m = json_profile.parse_dict(data, TraceManifest, file=path.name,
                                    on_unknown=lambda paths: log.note(path.name, 0, paths))
    else:
        m = json_profile.parse_dict(data, TraceManifest, file=path.name)
    return m, log


# ---------------------------------------------------------------------------------------------
# writer


@dataclass
class _Stream:
    kind: int
    final_name: str
    path: Path
    f: BinaryIO
    sha: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    count: int = 0
    size: int = 0
    records: object | None = None  # arrow: the columnar.ArrowRecordWriter writing through this stream

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.count += 1
        self.size += len(data)

    def add(self, msg: Message) -> None:  # arrow: one record (its bytes reach the file batch by batch)
        self.records.write(msg)
        self.count += 1


class _ArrowSink:
    """The file object an ArrowRecordWriter writes to: the partial file, hashed as written."""

    def __init__(self, s: _Stream) -> None:
        self._s = s
        self.closed = False

    def write(self, data) -> int:
        s = self._s
        s.f.write(data)
        s.sha.update(data)
        s.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self._s.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class TraceWriter:
    """Streaming writer of one trace directory; a context manager.

    >>> with TraceWriter(out_dir, encoding="binpb") as w:      # doctest: +SKIP
    ...     for rec in workload: w.write_workload(rec)
    ...     for rec in outcomes: w.write_outcome(rec)
    ...     w.finalize(manifest)

    Records go to ``workload.<enc>.partial`` / ``outcomes.<enc>.partial``. Only :meth:`finalize`
    makes the trace complete. Leaving the ``with`` block by an exception (or without calling
    ``finalize``) leaves the partial files and no manifest: an incomplete trace.

    Args:
        trace_dir: directory to create (or an existing one with no manifest / record files).
        encoding: ``"jsonl"``, ``"binpb"`` or ``"arrow"`` (needs pyarrow).

    Raises:
        ValueError: unknown encoding.
        MissingEnvironmentError: ``"arrow"`` without pyarrow (before anything is created).
        TraceWriterBusyError (a FileExistsError): ``trace_dir`` already holds a manifest or record
            files (final or partial), or another TraceWriter is writing it (:data:`WRITER_LOCK`).
    """

    def __init__(self, trace_dir: str | os.PathLike, encoding: str = "jsonl"):
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; expected one of {ENCODINGS}")
        if encoding == "arrow":
            from unirl_replay.contract import columnar

            columnar.require_pyarrow()
        self.dir = Path(trace_dir)
        self.encoding = encoding
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = self.dir / WRITER_LOCK
        try:  # the atomic claim: one writer per directory
            os.close(os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise TraceWriterBusyError(f"{self.dir} is being written by another TraceWriter ({WRITER_LOCK} exists; "
                                       "if that writer died, the directory is an incomplete trace: write into a "
                                       "new directory)") from None
        names = (MANIFEST_FILE, *WORKLOAD_FILES.values(), *OUTCOME_FILES.values())
        taken = [n for n in (*names, *(n + PARTIAL_SUFFIX for n in names[1:])) if os.path.lexists(self.dir / n)]
        if taken:
            self._lock.unlink(missing_ok=True)
            raise TraceWriterBusyError(f"{self.dir} already holds {', '.join(taken)}; write a trace into a new "
                                       "directory")
        self._streams: dict[int, _Stream] = {}
        for kind, name in ((ARTIFACT_KIND_WORKLOAD, WORKLOAD_FILES[encoding]),
                           (ARTIFACT_KIND_OUTCOMES, OUTCOME_FILES[encoding])):
            p = self.dir / (name + PARTIAL_SUFFIX)
            self._streams[kind] = _Stream(kind, name, p, open(p, "xb", buffering=_CHUNK))
        if encoding == "arrow":  # the outcomes' writer is made at the first outcome (trace_io never imports them)
            self._arrow_writer(ARTIFACT_KIND_WORKLOAD, WorkloadRecord.DESCRIPTOR)
        self._finalized: TraceManifest | None = None
        self._closed = False

    def _arrow_writer(self, kind: int, descriptor) -> _Stream:
        from unirl_replay.contract import columnar

        s = self._streams[kind]
        if s.records is None:
            s.records = columnar.ArrowRecordWriter(_ArrowSink(s), descriptor)
        return s

    def _encode(self, msg: Message) -> bytes:
        if self.encoding == "jsonl":
            return json_write.to_json_line(msg)  # = json_profile.to_json_line (tests/test_json_write.py)
        body = msg.SerializeToString()
        return encode_varint(len(body)) + body

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"TraceWriter for {self.dir} is closed")

    def write_workload(self, rec: WorkloadRecord) -> None:
        """Append one workload record (any of the WorkloadRecord oneof kinds)."""
        self._check_open()
        s = self._streams[ARTIFACT_KIND_WORKLOAD]
        if s.records is not None:
            s.add(rec)
        else:
            s.write(self._encode(rec))

    def write_outcome(self, rec: "OutcomeRecord") -> None:
        """Append one measured-outcome record."""
        self._check_open()
        if self.encoding == "arrow":
            self._arrow_writer(ARTIFACT_KIND_OUTCOMES, rec.DESCRIPTOR).add(rec)
        else:
            self._streams[ARTIFACT_KIND_OUTCOMES].write(self._encode(rec))

    def _close_files(self, complete: bool = True) -> None:
        for s in self._streams.values():
            if s.records is not None and complete and not s.f.closed:
                s.records.close()  # the last batch and the footer
            if not s.f.closed:
                s.f.flush()
                os.fsync(s.f.fileno())
                s.f.close()
        self._closed = True

    def finalize(self, manifest: TraceManifest) -> TraceManifest:
        """Close the streams, rename them to their final names, write ``manifest.json`` last.

        The returned manifest is a copy of ``manifest`` with ``schema_version`` set to
        ``unirl_replay.v1`` (when empty), ``contract_revision`` set to this writer's revision
        (unless it already names a newer one) and ``artifacts`` replaced by the two written files
        (sha256, record_count, size_bytes). Atomic: the manifest appears complete or not at all.

        Raises:
            SchemaVersionError: ``manifest.schema_version`` is set to another version.
        """
        self._check_open()
        out = TraceManifest()
        out.CopyFrom(manifest)
        # A writer never claims an older revision than its own; a copier keeps a newer one (its
        # records may carry that revision's fields through, as binpb unknown fields).
        out.contract_revision = max(out.contract_revision, CONTRACT_REVISION)
        if not out.schema_version:
            out.schema_version = SCHEMA_VERSION
        elif out.schema_version != SCHEMA_VERSION:
            raise SchemaVersionError(f"this writer writes {SCHEMA_VERSION!r}, the manifest says "
                                     f"{out.schema_version!r}", file=MANIFEST_FILE, rule="manifest.schema_version")
        if self.encoding == "arrow" and self._streams[ARTIFACT_KIND_OUTCOMES].records is None:
            self._arrow_writer(ARTIFACT_KIND_OUTCOMES, _outcome_descriptor())  # no outcome written: an empty file
        self._close_files()
        del out.artifacts[:]
        for s in self._streams.values():
            final = self.dir / s.final_name
            os.replace(s.path, final)
            out.artifacts.append(ArtifactDigest(kind=s.kind, path=s.final_name, encoding=_ENCODING_ENUM[self.encoding],
                                                sha256=s.sha.hexdigest(), record_count=s.count, size_bytes=s.size))
        self._lock.unlink(missing_ok=True)  # before the manifest: a finalized trace holds no leftovers
        _fsync_dir(self.dir)
        write_message_json(self.dir / MANIFEST_FILE, out)
        self._finalized = out
        return out

    def close(self) -> None:
        """Close the partial files without finalizing (the trace stays incomplete)."""
        if not self._closed:
            self._close_files(complete=False)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        finalized = self._finalized is not None
        self.close()
        if exc_type is None and not finalized:
            raise IncompleteTraceError("TraceWriter left without finalize(manifest): the trace is incomplete",
                                       file=str(self.dir), rule="writer.not_finalized")


def _outcome_descriptor():
    """OutcomeRecord's descriptor from the default pool (loaded by whoever builds outcomes; trace_io
    never imports the measured outcomes' messages)."""
    from google.protobuf import descriptor_pool

    try:
        return descriptor_pool.Default().FindMessageTypeByName("unirl_replay.v1.OutcomeRecord")
    except KeyError:
        raise RuntimeError("an arrow trace without outcome records: import unirl_replay.v1.outcomes_pb2 "
                           "before finalize (its schema is derived from the OutcomeRecord descriptor)") from None


# ---------------------------------------------------------------------------------------------
# reader


@dataclass
class Trace:
    """An opened, complete trace: its manifest, and streaming access to the workload.

    Attributes:
        dir: the trace directory.
        manifest: the parsed manifest (artifacts verified at open).
        encoding: ``"jsonl"``, ``"binpb"`` or ``"arrow"`` (of the workload artifact).
        compat: writer / reader contract revisions and the unknown fields met so far.
        inspect: look for unknown binpb fields even from a writer that is not newer (``validate``).
    """

    dir: Path
    manifest: TraceManifest
    encoding: str
    compat: CompatLog = field(default_factory=CompatLog)
    inspect: bool = False

    def artifact(self, kind: int) -> ArtifactDigest:
        """The manifest's entry of one ArtifactKind (exactly one exists in an opened trace)."""
        return next(a for a in self.manifest.artifacts if a.kind == kind)

    def iter_workload(self, on_error=None) -> Iterator[tuple[int, WorkloadRecord]]:
        """Stream ``(1-based line/frame, WorkloadRecord)``; one record in memory at a time.
        ``on_error``: see :func:`iter_records` (report and skip records that do not parse).

        Raises:
            TraceFormatError: a record does not parse (file and line named).
            IncompleteTraceError: the record count differs from the manifest's.
        """
        a = self.artifact(ARTIFACT_KIND_WORKLOAD)
        return iter_records(self.dir / a.path, WorkloadRecord, _ENCODING_NAME[a.encoding],
                            expected_count=a.record_count, compat=self.compat, inspect=self.inspect,
                            on_error=on_error)


def verify_artifact(d: Path, a: ArtifactDigest, *, verify_digest: bool = True) -> None:
    """Check that one artifact of the manifest is present with its declared size and sha256.

    Raises:
        IncompleteTraceError: rule ``artifact.missing`` / ``artifact.size`` / ``artifact.digest``.
    """
    p = d / a.path
    _no_symlink(p, a.path)
    if not p.is_file():
        if p.exists():
            raise TraceFormatError("is not a regular file (a FIFO, device or directory cannot be an artifact)",
                                   file=a.path, rule="artifact.not_regular")
        raise IncompleteTraceError("artifact listed in the manifest is missing", file=a.path, rule="artifact.missing")
    size = p.stat().st_size
    if size != a.size_bytes:
        raise IncompleteTraceError(f"file has {size} bytes, the manifest says {a.size_bytes}: it was truncated or edited after "
                                   "the trace was finalized; re-capture it (or restore the original file)", file=a.path,
                                   rule="artifact.size")
    if verify_digest:
        digest, _ = sha256_file(p)
        if digest != a.sha256:
            raise IncompleteTraceError(f"sha256 {digest} differs from the manifest's {a.sha256 or '(empty)'}: the file "
                                       "was changed after the trace was finalized; re-capture it (or restore the original)",
                                       file=a.path, rule="artifact.digest")


def _no_symlink(p: Path, name: str) -> None:
    if p.is_symlink():
        raise TraceFormatError("is a symbolic link; a trace's files must be regular files inside the trace "
                               "directory", file=name, rule="artifact.symlink")


def _check_artifacts(m: TraceManifest) -> str:
    by_kind: dict[int, list[ArtifactDigest]] = {}
    for a in m.artifacts:
        by_kind.setdefault(a.kind, []).append(a)
    encodings = set()
    for kind, label in ((ARTIFACT_KIND_WORKLOAD, "workload"), (ARTIFACT_KIND_OUTCOMES, "outcomes")):
        found = by_kind.get(kind, [])
        if len(found) != 1:
            raise TraceFormatError(f"the manifest lists {len(found)} {label} artifacts; exactly one is required",
                                   file=MANIFEST_FILE, rule="manifest.artifacts")
        a = found[0]
        if a.encoding not in _ENCODING_NAME:
            raise TraceFormatError(f"{label} artifact has encoding {a.encoding}; expected ENCODING_JSONL, ENCODING_BINPB or "
                                   "ENCODING_ARROW",
                                   file=MANIFEST_FILE, rule="manifest.artifacts")
        enc = _ENCODING_NAME[a.encoding]
        expected_name = (WORKLOAD_FILES if kind == ARTIFACT_KIND_WORKLOAD else OUTCOME_FILES)[enc]
        if a.path != expected_name:
            raise TraceFormatError(f"{label} artifact path {a.path!r}; expected {expected_name!r}",
                                   file=MANIFEST_FILE, rule="manifest.artifacts")
        encodings.add(enc)
    if len(encodings) != 1:
        raise TraceFormatError("workload and outcomes use different encodings", file=MANIFEST_FILE,
                               rule="manifest.artifacts")
    return encodings.pop()


def open_trace(trace_dir: str | os.PathLike, *, verify_digests: bool = True, strict: bool = False,
               warn: bool = True, inspect: bool = False) -> Trace:
    """Open a finalized trace directory.

    Checks, in order: the directory exists; no ``*.partial`` leftovers; ``manifest.json`` exists and
    parses; ``schema_version`` is ``unirl_replay.v1``; the manifest lists exactly one workload and
    one outcomes artifact; the workload file is present with the declared size and
    (``verify_digests``, default) sha256. The outcomes file is NOT touched here (a predictor may
    get a trace without it): :func:`unirl_replay.contract.outcomes_io.iter_outcomes` verifies it. Record
    counts are checked when a stream is read to its end.

    Forward compatibility (:mod:`unirl_replay.contract.compat`): a trace whose manifest names a
    newer ``contract_revision`` is read, skipping the fields this reader does not know, with one
    :class:`~unirl_replay.contract.compat.ForwardCompatWarning` (``warn=False``: only noted in
    ``trace.compat``); ``strict=True`` (CI) makes the first such field an error
    (rule ``compat.newer_revision``). ``inspect=True`` also notes unknown binpb fields in a trace that
    does not claim to be newer, and the off-profile JSON forms of the manifest and the JSONL records
    (``json_profile.OFF_PROFILE_FORMS``), in ``trace.compat`` (``validate`` reports them).

    Raises:
        IncompleteTraceError: not finalized, leftovers, missing file, size or digest mismatch.
        SchemaVersionError: another contract version (the message says what to do).
        TraceFormatError: the manifest does not parse or its artifact list is malformed.
    """
    d = Path(trace_dir)
    if not d.is_dir():
        raise TraceFormatError("does not exist" if not d.exists() else "is not a directory (a trace is a directory "
                               "holding manifest.json, the workload and the outcomes)", file=str(d),
                               rule="trace.not_a_directory")
    partial = sorted(p.name for p in d.glob("*" + PARTIAL_SUFFIX))
    if not (d / MANIFEST_FILE).is_file():
        artifacts = [n for n in (*WORKLOAD_FILES.values(), *OUTCOME_FILES.values()) if (d / n).exists()]
        if not partial and not artifacts:
            raw = (d / "raw").is_dir()
            # *.jsonl files that are no output of this tool (no output marker there, no converted file's
            # ``<file>.unirl-replay.json`` sidecar, replay/convert/sidecar.py): a capture's shards themselves
            from unirl_replay.contract.out_dir import MARKER

            shards = not raw and not (d / MARKER).exists() and any(
                not p.with_name(p.name + ".unirl-replay.json").exists() for p in d.glob("*.jsonl"))
            hint = ("it holds raw/ capture shards: merge them with `unirl-replay capture finalize "
                    f"{d / 'raw'} --out TRACE_DIR`" if raw else
                    "it holds *.jsonl files: if they are a capture's shards (UNIRL_REPLAY_TRACE_DIR/raw), merge them "
                    f"with `unirl-replay capture finalize {d} --out TRACE_DIR`" if shards else
                    "pass the directory that holds manifest.json, the workload and the outcomes (a replay or report "
                    "output directory is not a trace)")
            raise TraceFormatError(f"not a trace directory: no {MANIFEST_FILE}, no workload or outcomes file; {hint}",
                                   file=str(d), rule="trace.not_a_trace")
        why = f" ({', '.join(partial)} left by an unfinished writer)" if partial else ""
        raise IncompleteTraceError(f"no {MANIFEST_FILE}: the trace was never finalized{why}; a capture that "
                                   "stopped early cannot be completed, capture the window again", file=str(d),
                                   rule="trace.no_manifest")
    if partial:
        raise IncompleteTraceError(f"leftover partial files {', '.join(partial)}: a writer did not finish",
                                   file=str(d), rule="trace.partial_files")
    _no_symlink(d / MANIFEST_FILE, MANIFEST_FILE)
    m, log = read_manifest(d / MANIFEST_FILE, strict=strict, warn=warn, inspect=inspect)
    if m.schema_version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema_version is {m.schema_version or '(empty)'!r}; this reader reads only {SCHEMA_VERSION!r}. "
            f"Read it with the unirl-replay release of that contract version, or re-capture / convert it to "
            f"{SCHEMA_VERSION}", file=MANIFEST_FILE, rule="manifest.schema_version")
    enc = _check_artifacts(m)
    trace = Trace(dir=d, manifest=m, encoding=enc, compat=log, inspect=inspect)
    verify_artifact(d, trace.artifact(ARTIFACT_KIND_WORKLOAD), verify_digest=verify_digests)
    if log.newer:
        # One look at the whole workload now, so that the one warning names every skipped field
        # (only for traces from a newer revision; the file was just read for its digest anyway).
        try:
            for _ in trace.iter_workload():
                pass
        except TraceFormatError as e:
            if e.rule == "compat.newer_revision":
                raise
            # a broken record: reported where the caller reads it, with the rest of the workload
    log.emit()
    return trace
