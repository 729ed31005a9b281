"""The only reader of the measured-outcomes artifact (``outcomes.jsonl`` / ``outcomes.binpb``).

Kept apart from :mod:`unirl_replay.contract.trace_io` so that code that predicts (converters, replay)
never has a path to measured times: only the comparison and validation import this module.
"""

from __future__ import annotations

from typing import Iterator

from unirl_replay.contract.trace_io import _ENCODING_NAME, Trace, iter_records, verify_artifact
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_OUTCOMES
from unirl_replay.v1.outcomes_pb2 import OutcomeRecord

__all__ = ["iter_outcomes"]


def iter_outcomes(trace: Trace, *, verify_digest: bool = True, on_error=None) -> Iterator[tuple[int, OutcomeRecord]]:
    """Stream ``(1-based line/frame, OutcomeRecord)`` of an opened trace; one record in memory at a time.

    Times in the records are int64 ns offsets from the capture window start on the manifest's clock.

    The file is checked against the manifest (presence, size, sha256 unless ``verify_digest`` is
    false) before the first record is yielded (``open_trace`` leaves the outcomes alone).

    ``on_error``: see :func:`unirl_replay.contract.trace_io.iter_records` (report and skip bad records).

    Raises:
        TraceFormatError: a record does not parse (file and line named).
        IncompleteTraceError: the file is missing, its size / digest differ from the manifest, the
            stream is truncated, or its record count differs from the manifest's.
    """
    a = trace.artifact(ARTIFACT_KIND_OUTCOMES)
    verify_artifact(trace.dir, a, verify_digest=verify_digest)
    return iter_records(trace.dir / a.path, OutcomeRecord, _ENCODING_NAME[a.encoding], expected_count=a.record_count,
                        compat=trace.compat, inspect=trace.inspect, on_error=on_error)
