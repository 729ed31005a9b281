"""The validation run: the passes over a trace, in order, and the public ``check_trace``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from unirl_replay.contract.errors import IncompleteTraceError, TraceFormatError
from unirl_replay.contract.trace_io import open_trace, verify_artifact
from unirl_replay.contract.validate.bounds import BoundRules
from unirl_replay.contract.validate.context import _REC_ID, _from_error, _Sink
from unirl_replay.contract.validate.dependencies import DependencyRules
from unirl_replay.contract.validate.lineage import LineageRules
from unirl_replay.contract.validate.manifest import ManifestRules
from unirl_replay.contract.validate.outcomes import OutcomeRules
from unirl_replay.contract.validate.registry import ERROR, RULES, SUSPECT_SMALL, WARNING
from unirl_replay.contract.validate.requests import RequestRules
from unirl_replay.contract.validate.single_pass import SinglePassRules
from unirl_replay.v1.common_pb2 import CACHE_STATE_KIND_WARM_DECLARED, CacheStateKind
from unirl_replay.v1.manifest_pb2 import ARTIFACT_KIND_OUTCOMES
from unirl_replay.v1.report_pb2 import TraceCheck, Violation


#: Always run the second workload pass (the reference behaviour; the equality test sets it).
TWO_PASSES = False


_CACHE_STATES = set(CacheStateKind.values())


class _Checker(ManifestRules, RequestRules, DependencyRules, LineageRules, OutcomeRules, BoundRules, SinglePassRules):
    """All rule groups over one trace; the passes below dispatch each record to its group."""

    def skip(self, e: TraceFormatError) -> None:
        """A record that does not parse: reported (pass 1 / outcomes), and the pass goes on."""
        self.counts["unparsed"] += 1
        self.v(e.rule if e.rule in RULES else "json.profile", Path(e.file).name if e.file else "", e.line,
               e.record_id, _from_error(e).message)

    # -- workload pass 1: ids, per-record rules (and what proves pass 2 silent, single_pass)
    def pass1(self) -> None:
        f = self.wfile
        self._sp_init()
        for line, rec in self.t.iter_workload(on_error=self.skip):
            self.counts["workload"] += 1
            kind = rec.WhichOneof("record")
            if kind is None:
                self.v("record.empty", f, line, "", "WorkloadRecord with no record kind set")
                continue
            self.record1(line, kind, getattr(rec, kind))
        self._engine_capacity()
        self._batch_boundaries()
        self._pool_starts()
        self._pool_engines()
        self._batch_engines()

    def record1(self, line: int, kind: str, msg) -> None:
        """Pass 1's rules of one record (``kind``: its oneof member; the gate's fast pass runs this
        for every record that is not a request, contract/validate/fast.py)."""
        f = self.wfile
        rid = getattr(msg, _REC_ID[kind])
        fresh = self._unique(kind, f, line, rid, self.ids[kind])
        self._known_enums(f, line, rid, msg)
        self._good_ids(f, line, rid, msg)
        if kind == "request":
            self._request1(line, msg, fresh)
            if not self.sp_doubt:
                self._sp_request(msg)
        elif kind in ("trajectory", "group", "rollout_batch", "slot_pool"):
            self._lineage1(kind, line, msg, rid, fresh)
            if not self.sp_doubt and kind != "slot_pool":
                self._sp_lineage[kind](self, msg, fresh)
        elif kind == "engine_client":
            self._engine(f, line, rid, msg.engine_id)
            if msg.HasField("inflight_request_limit") and msg.inflight_request_limit == 0:
                self.v("engine_client.limit", f, line, rid, "inflight_request_limit is 0: this client could never "
                       "have a model request in flight (leave it out for no limit)")
        elif kind == "cache_warmup":
            if self.m.cache_state != CACHE_STATE_KIND_WARM_DECLARED:
                state = self.m.cache_state
                name = CacheStateKind.Name(state) if state in _CACHE_STATES else str(state)
                self.v("cache_warmup.cold_manifest", f, line, rid, f"CacheWarmup record in a trace whose manifest "
                       f"cache_state is {name}, not CACHE_STATE_KIND_WARM_DECLARED: a prefix declared resident "
                       "contradicts the cache state the replay starts from")
            self._engine(f, line, rid, msg.engine_id)
            self._warmup_prefix(line, rid, msg)
            self._tokens(line, rid, msg.engine_id, msg.input_tokens, (), None)

    def _warmup_prefix(self, line: int, rid: str, msg) -> None:
        """A warm-up is a prefix declared resident: it needs tokens and the hashes of its blocks
        (rule ``cache_warmup.prefix``); those it has meet the requests' prefix rules."""
        p = msg.prefix
        hashed = msg.HasField("prefix") and bool(p.block_size_tokens or p.block_hashes)
        if msg.input_tokens < 1:
            self.v("cache_warmup.prefix", self.wfile, line, rid, "input_tokens is 0: a warm-up declares a resident "
                   "prefix of at least one token")
        elif not hashed:
            self.v("cache_warmup.prefix", self.wfile, line, rid, f"{msg.input_tokens} input tokens but no prefix "
                   "block hashes: a warm-up declares its resident prefix by its block hashes, without them it "
                   "declares nothing the replay can load")
        if hashed:
            self._prefix(line, rid, msg.input_tokens, True, p, msg.engine_id)

    _sp_lineage = {"trajectory": SinglePassRules._sp_trajectory, "group": SinglePassRules._sp_group,
                   "rollout_batch": lambda self, msg, fresh: self._sp_batch(msg)}

    # -- workload pass 2: references
    def pass2(self) -> None:
        group_in_batches: Counter[str] = Counter()
        for line, rec in self.t.iter_workload(on_error=_ignore):  # reported in pass 1
            kind = rec.WhichOneof("record")
            if kind == "request":
                self._request2(line, rec.request)
            elif kind == "trajectory":
                self._trajectory2(line, rec.trajectory)
            elif kind == "group":
                self._group2(line, rec.group)
            elif kind == "rollout_batch":
                self._batch2(line, rec.rollout_batch, group_in_batches)
        self._batch_membership(group_in_batches)
        self._intermediates()
        self.pass2_tail()

    def pass2_or_proof(self) -> None:
        """Pass 2, or only its tail when pass 1 proved it would report nothing (single_pass)."""
        if TWO_PASSES or not self.pass2_silent():
            self.pass2()
        else:
            self.pass2_tail()

    def pass2_tail(self) -> None:
        f = self.wfile
        if self.observed >= 2 and self.window_ns > 0 and 0 < self.max_offset < self.window_ns / SUSPECT_SMALL:
            self.v("units.suspect_small", f, 0, "", f"all {self.observed} observed arrivals within {self.max_offset} ns "
                   f"of a {self.window_ns} ns window: offsets in s or ms declared as ns?", WARNING)


def _compat_violations(trace, strict: bool) -> list[Violation]:
    """The forward-compatibility findings of the run: fields a newer revision added (warning, error
    when strict) and unknown binpb fields from a writer that does not claim to be newer (error)."""
    log = trace.compat
    out = []
    for file, first in log.first_line.items():
        out.append(Violation(
            rule="compat.newer_revision", file=file, line=min(first.values()),
            message=f"written by unirl_replay.v1 revision {log.writer_revision}, this reader is revision "
                    f"{log.reader_revision}: skipped fields it does not know: {', '.join(first)}",
            severity=ERROR if strict else WARNING))
    for file, first in log.foreign_fields.items():
        out.append(Violation(
            rule="binpb.unknown_fields", file=file, line=min(first.values()),
            message=f"records (binpb frames, an arrow schema) carry fields unknown to revision {log.reader_revision} ({', '.join(first)}), but the "
                    f"manifest says revision {log.writer_revision}: a writer built from a newer proto must set "
                    "TraceManifest.contract_revision (or these are not unirl_replay.v1 records)", severity=ERROR))
    return out


def _off_profile(trace, sink: _Sink, strict: bool) -> None:
    """JSON the reader accepted but the profile never writes (json_profile.OFF_PROFILE_FORMS)."""
    from unirl_replay.contract.json_profile import OFF_PROFILE_FORMS

    log = trace.compat
    sev = ERROR if strict else WARNING
    for file, line, form, path in log.off_profile_forms:
        sink(f"json.{form}", file, line, "", f"{path}: {OFF_PROFILE_FORMS[form]}", sev)
    for form, n in log.off_profile_counts.items():
        kept = sum(1 for x in log.off_profile_forms if x[2] == form)
        if n > kept:
            sink.violations.append(Violation(rule=f"json.{form}", message=f"{n - kept} more not looked at in detail",
                                             severity=sev))


def _ignore(e: TraceFormatError) -> None:
    pass


def check_trace(trace_dir: str | Path, *, max_per_rule: int = 200, strict: bool = False,
                outcomes: bool = True) -> TraceCheck:
    """Check a trace directory: container, manifest, every workload and outcome rule of :data:`RULES`.

    Every record that does not parse is reported (up to ``max_per_rule`` per rule), not only the
    first: the passes skip it and go on (a JSONL line, or a binpb frame whose length prefix is
    sound; a corrupt length prefix ends the file's pass).

    Args:
        trace_dir: the trace directory.
        max_per_rule: violations listed per rule; beyond it one summary violation gives the count.
        strict: CI mode: fields skipped from a newer contract revision are errors, not warnings.
        outcomes: also check the outcomes artifact (default). ``False`` checks the container,
            manifest and workload only: what a predictor relies on (the outcomes file may be absent).

    Returns:
        TraceCheck with status VALID (no error; warnings allowed), INVALID, or INCOMPLETE (not
        finalized, truncated, digest / size / count mismatch: then the records are not checked).
        Never raises for a bad trace; raises only on I/O errors of the machine.
    """
    out = TraceCheck(trace_dir=str(trace_dir))
    sink = _Sink(max_per_rule)
    try:
        trace = open_trace(trace_dir, warn=False, inspect=True)
    except OSError as e:  # the machine refused to read the directory: a violation, not a traceback
        out.status = TraceCheck.STATUS_INVALID
        out.violations.append(Violation(rule="artifact.unreadable", file=str(trace_dir), message=f"cannot be read: "
                                        f"{e.strerror or e}", severity=Violation.SEVERITY_ERROR))
        return out
    except IncompleteTraceError as e:
        out.status = TraceCheck.STATUS_INCOMPLETE
        out.violations.append(_from_error(e))
        return out
    except TraceFormatError as e:
        out.status = TraceCheck.STATUS_INVALID
        out.violations.append(_from_error(e))
        return out
    ch = _Checker(trace, sink)
    status = TraceCheck.STATUS_VALID
    try:
        if outcomes:
            verify_artifact(trace.dir, trace.artifact(ARTIFACT_KIND_OUTCOMES))  # incomplete before any rule
        ch.manifest()
        ch._window_bound()
        ch.pass1()
        if not ch.ids["request"]:
            ch.v("trace.no_requests", ch.wfile, 0, "", "the workload holds 0 requests: there is nothing to replay "
                 "(a capture writes a trace only from joined engine requests; finalize it again and read what "
                 "it reports missing)")
        ch.pass2_or_proof()
        ch.cycles()
        if outcomes:
            ch.outcomes()
    except IncompleteTraceError as e:
        status = TraceCheck.STATUS_INCOMPLETE
        sink.violations.append(_from_error(e))
    except TraceFormatError as e:
        sink.errors += 1
        sink.violations.append(_from_error(e))
    except OSError as e:
        sink.errors += 1
        sink.violations.append(Violation(rule="artifact.unreadable", file=Path(getattr(e, "filename", "") or "").name,
                                         message=f"cannot be read: {e.strerror or e}",
                                         severity=Violation.SEVERITY_ERROR))
    compat = _compat_violations(trace, strict)
    sink.violations.extend(compat)
    sink.errors += sum(1 for v in compat if v.severity != WARNING)
    _off_profile(trace, sink, strict)
    if status != TraceCheck.STATUS_INCOMPLETE:
        status = TraceCheck.STATUS_INVALID if sink.errors else TraceCheck.STATUS_VALID
    out.status = status
    out.violations.extend(sink.finish())
    for k in ("workload", "outcomes"):
        out.record_counts[k] = ch.counts[k]
    return out


def format_violation(v: Violation) -> str:
    """``file:line record rule: message`` (``warning:`` before the message for warnings)."""
    where = v.file + (f":{v.line}" if v.line else "")
    sev = "warning: " if v.severity == WARNING else ""
    return f"{where or '-'} {v.record_id or '-'} {v.rule}: {sev}{v.message}"
