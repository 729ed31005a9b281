"""Manifest rules: the capture window, enums of the trace and its engines, the reference probes."""

from __future__ import annotations

import datetime
import math
import re
import stat
import statistics
from pathlib import PurePosixPath

from unirl_replay.contract.cpu_signature import signature_problems
from unirl_replay.contract.message_guard import name_problem
from unirl_replay.contract.trace_io import MANIFEST_FILE, OUTCOME_FILES, PARTIAL_SUFFIX, WORKLOAD_FILES
from unirl_replay.contract.validate.context import TraceState
from unirl_replay.contract.validate.registry import MAX_LOADAVG, MAX_PROBE_MS, MAX_TOKENS, WARNING

#: ReferenceProbe.when and ProbePoint.phase, as manifest.proto defines them
PROBE_WHEN = ("before", "after")
PROBE_PHASES = ("decode", "prefill")


_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|\+00:00|-00:00)\Z")


def created_at_problem(text: str) -> str | None:
    """Why ``TraceManifest.created_at`` ("RFC 3339 UTC", manifest.proto) is not one, or None (absent is fine)."""
    if not text:
        return None
    if _RFC3339_UTC.match(text):
        try:  # the fields must also be a real time (no month 13, no 25:00)
            datetime.datetime.strptime(text[:19].replace("t", "T"), "%Y-%m-%dT%H:%M:%S")
            return None
        except ValueError:
            pass
    return f"created_at {text[:64]!r} is not an RFC 3339 UTC time (e.g. 2026-12-01T17:50:19Z)"


def conditions_problems(c) -> list[str]:
    """What is wrong with one ``RunConditions`` (manifest.proto), readable; empty when nothing is."""
    out = []
    for name in ("loadavg_1m_start", "loadavg_1m_end"):
        if c.HasField(name) and not (math.isfinite(v := getattr(c, name)) and 0 <= v <= MAX_LOADAVG):
            out.append(f"{name} {v!r} is not a load average (finite, 0 to {MAX_LOADAVG:.0e})")
    for name in ("steal_pct", "host_busy_pct"):
        if c.HasField(name) and not (math.isfinite(v := getattr(c, name)) and 0 <= v <= 100):
            out.append(f"{name} {v!r} is not a percentage of CPU time (0 to 100)")
    for name in ("engine_uptime_ns", "duration_ns"):
        if c.HasField(name) and getattr(c, name) < 0:
            out.append(f"{name} {getattr(c, name)} is negative")
    for label, ns in sorted(c.engine_process_cpu_ns.items()):
        if ns < 0:
            out.append(f"engine_process_cpu_ns[{label!r}] {ns} is negative")
    if c.HasField("cpu_signature"):
        out.extend(f"cpu_signature.{why}" for why in signature_problems(c.cpu_signature, vendor=False))
    return out


def _step_ms_problem(name: str, ms: float) -> str | None:
    if math.isfinite(ms) and 0 < ms <= MAX_PROBE_MS:
        return None
    return f"{name} {ms!r} is not a step time (finite, > 0, <= {MAX_PROBE_MS:.0f} ms)"


def _point_size_problems(pt, engine) -> list[str]:
    """Sizes of one ProbePoint the probe's engine cannot have run (``engine``: its EngineConfig or None),
    and per-repeat pass sizes (``repeat_*``, one value per usable repeat) that do not line up."""
    out = []
    # only what no engine runs (a row over max_model_len is refused by vLLM; MAX_TOKENS bounds the rest): an engine
    # with fewer sequences, KV blocks or step tokens than the probe asks for queues or chunks it, and the probe
    # records what it asked for
    max_len = (engine.max_model_len if engine is not None else 0) or MAX_TOKENS
    if pt.batch_size * pt.context_tokens > MAX_TOKENS:
        out.append(f"{pt.batch_size} sequences of {pt.context_tokens} context tokens are more than {MAX_TOKENS} tokens")
    if pt.context_tokens > max_len:
        out.append(f"context_tokens {pt.context_tokens} is above the engine's max_model_len {max_len}")
    if pt.prefill_tokens > max(pt.batch_size, 1) * max_len:
        out.append(f"prefill_tokens {pt.prefill_tokens} is more than {max(pt.batch_size, 1)} row(s) of "
                   f"max_model_len {max_len}")
    n = (len(pt.repeat_step_ms), len(pt.repeat_pass_tokens), len(pt.repeat_pass_rows))
    if any(n) and len(set(n)) > 1:
        out.append(f"repeat_step_ms / repeat_pass_tokens / repeat_pass_rows hold {n[0]} / {n[1]} / {n[2]} values: "
                   "one per usable repeat each")
        return out
    if any(n):  # per-repeat pass sizes are a batched prefill point's, whose size is their median-low (manifest.proto):
        # a batch_size edited to 0 or 1 read the batched pass as an isolated prefill point in the levels, and a
        # prefill_tokens of another size placed the point there (a wrong level written, nothing said)
        if pt.phase != "prefill" or pt.batch_size < 2:
            out.append(f"repeat_step_ms / repeat_pass_tokens / repeat_pass_rows are a batched prefill point's (phase "
                       f"prefill, batch_size >= 2), not of phase {pt.phase!r} with batch_size {pt.batch_size}")
        else:
            low = (statistics.median_low(pt.repeat_pass_rows), statistics.median_low(pt.repeat_pass_tokens))
            if (pt.batch_size, pt.prefill_tokens) != low:
                out.append(f"batch_size {pt.batch_size} / prefill_tokens {pt.prefill_tokens} are not the median-low "
                           f"{low[0]} / {low[1]} of the repeats' pass rows / tokens (the point's observed size)")
    for k, (ms, tokens, rows) in enumerate(zip(pt.repeat_step_ms, pt.repeat_pass_tokens, pt.repeat_pass_rows)):
        why = _step_ms_problem(f"repeat_step_ms[{k}]", ms)
        if why:
            out.append(why)
        if not 1 <= rows <= tokens:
            out.append(f"repeat {k}: a pass of {rows} row(s) and {tokens} new token(s) (rows >= 1, one token per row "
                       "at least)")
        elif tokens > rows * max_len:
            out.append(f"repeat {k}: {tokens} new tokens are more than {rows} row(s) of max_model_len {max_len}")
    steps = [ms for ms in pt.repeat_step_ms if math.isfinite(ms)]
    if steps and math.isfinite(pt.median_ms) and not (min(steps) - 1e-3 <= pt.median_ms <= max(steps) + 1e-3):
        out.append(f"median_ms {pt.median_ms!r} lies outside its repeats' step times ({min(steps)!r} to {max(steps)!r} ms)")
    return out


#: the trace's own files (docs/validation-rules.md): a probe artifact is never one of them
_TRACE_FILES = frozenset({MANIFEST_FILE, *WORKLOAD_FILES.values(), *OUTCOME_FILES.values()})


def probe_problems(probe, engines) -> list[str]:
    """What is wrong with one ``ReferenceProbe`` (manifest.proto), readable; empty when nothing is.
    ``engines``: the manifest's engines by id (their limits bound the points' sizes), or only their ids."""
    out = []
    engine = engines.get(probe.engine_id) if isinstance(engines, dict) else None
    if engines and probe.engine_id not in engines:
        out.append(f"engine_id {probe.engine_id!r} is not among the manifest's engines")
    if probe.when not in PROBE_WHEN:
        out.append(f"when {probe.when!r} is neither 'before' nor 'after' the window")
    if probe.artifact_path:
        path = PurePosixPath(probe.artifact_path)
        if path.is_absolute() or ".." in path.parts or "\\" in probe.artifact_path:
            out.append(f"artifact_path {probe.artifact_path!r} is not a path inside the trace directory")
        elif any(ord(ch) < 32 or ord(ch) == 127 for ch in probe.artifact_path):  # a NUL: a traceback in recode
            out.append(f"artifact_path {probe.artifact_path!r} holds a control character")
        elif path.parts[:1] and path.parts[0] in _TRACE_FILES or probe.artifact_path.endswith(PARTIAL_SUFFIX):
            out.append(f"artifact_path {probe.artifact_path!r} names a file of the trace itself (the manifest, a "
                       "record stream, a writer's partial file), not a probe artifact")
    seen: dict[tuple, object] = {}
    for i, pt in [(i, pt) for i, pt in enumerate(probe.points)] + [(f"contended {i}", pt) for i, pt in
                                                                    enumerate(probe.contended_points)]:
        where = f"point {i} ({pt.phase or 'no phase'})"
        # one point per size in each list (a probe measures each point once: a copy weighs it twice in the levels)
        size = (isinstance(i, str), pt.phase, pt.batch_size, pt.context_tokens, pt.prefill_tokens)
        if (first := seen.setdefault(size, i)) != i:
            out.append(f"{where}: measures the same point as point {first} (phase, batch_size, context_tokens, "
                       "prefill_tokens): one entry per point")
        if pt.phase == "prefill" and pt.batch_size > 1 and pt.prefill_tokens and pt.batch_size > pt.prefill_tokens:
            out.append(f"{where}: a pass of {pt.batch_size} rows and {pt.prefill_tokens} new token(s) (one token per "
                       "row at least)")
        if pt.repeats == 0 and pt.median_ms:
            out.append(f"{where}: repeats 0: a median rests on one repeat at least")
        elif pt.repeat_step_ms and len(pt.repeat_step_ms) != pt.repeats:
            out.append(f"{where}: repeats {pt.repeats}, but {len(pt.repeat_step_ms)} repeat_step_ms (one per usable "
                       "repeat)")
        if pt.phase not in PROBE_PHASES:
            out.append(f"{where}: phase {pt.phase!r} is neither 'decode' nor 'prefill'")
        elif pt.phase == "decode" and not (pt.batch_size and pt.context_tokens):
            out.append(f"{where}: a decode point needs batch_size and context_tokens > 0")
        elif pt.phase == "prefill" and not pt.prefill_tokens:
            out.append(f"{where}: a prefill point needs prefill_tokens > 0")
        out.extend(f"{where}: {why}" for why in _point_size_problems(pt, engine))
        med = pt.median_ms
        if why := _step_ms_problem("median_ms", med):
            out.append(f"{where}: {why}")
            continue
        for name, q in (("p25_ms", pt.p25_ms), ("p75_ms", pt.p75_ms)):
            if not math.isfinite(q) or q < 0:
                out.append(f"{where}: {name} {q!r} is not finite and >= 0")
        if math.isfinite(pt.p25_ms) and math.isfinite(pt.p75_ms) and (pt.p25_ms or pt.p75_ms) and not (
                pt.p25_ms <= med <= pt.p75_ms):
            out.append(f"{where}: quartiles p25_ms {pt.p25_ms!r} <= median_ms {med!r} <= p75_ms {pt.p75_ms!r} do not hold")
    return out



#: the probe artifact's schema names: /2 is the v1 message ReferenceProbeArtifact; /1 (written before it) is read as
#: plain JSON, its shape unchecked (read by no tool)
PROBE_ARTIFACT_SCHEMA = "unirl-replay.reference-probe/2"
PROBE_ARTIFACT_LEGACY = "unirl-replay.reference-probe/1"
MAX_PROBE_ARTIFACT_BYTES = 64 << 20  # a probe's artifact is ~50-500 KB; beyond this it is not read to be checked


def _reached(root, parts) -> tuple[bool, str | None]:
    """Whether ``root / parts`` is a regular file, and the first component on the way that is a symbolic link (a
    relative path from ``root``), or None: each component is looked at itself (lstat), never through a link."""
    p = root
    for k, part in enumerate(parts):
        p = p / part
        try:
            st = p.lstat()
        except OSError:  # absent, or a path through a file
            return False, None
        if stat.S_ISLNK(st.st_mode):
            return False, "/".join(parts[:k + 1])
    return stat.S_ISREG(st.st_mode) if parts else False, None


def probe_artifact_problem(path, probe) -> str | None:
    """Why the artifact file at ``path`` (a regular file) is not the probe's ReferenceProbeArtifact, or None.

    A ``/1`` artifact (before the message) is accepted as JSON with its schema named; anything else must parse as
    ``ReferenceProbeArtifact`` in the JSON profile (unknown keys refused) and name the entry's engine and side."""
    from unirl_replay.contract import json_profile
    from unirl_replay.contract.errors import TraceFormatError
    from unirl_replay.v1.manifest_pb2 import ReferenceProbeArtifact

    try:
        size = path.stat().st_size
        if size > MAX_PROBE_ARTIFACT_BYTES:
            return f"{size} bytes, more than a probe's artifact holds ({MAX_PROBE_ARTIFACT_BYTES >> 20} MiB): not read"
        text = path.read_bytes()
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    try:  # decoded once, as every reader here takes JSON (the guard: a key twice, a NaN or a 1e400 is no JSON)
        head = json_profile.loads(text)
        if isinstance(head, dict) and head.get("schema") == PROBE_ARTIFACT_LEGACY:
            return None
        art = json_profile.parse_dict(head, ReferenceProbeArtifact)
    except TraceFormatError as e:
        why = " ".join(str(e.args[0] if e.args else e).split(": ", 1)[-1].split())  # one line (protobuf's has two)
        return f"not a ReferenceProbeArtifact ({why[:300]})"
    if art.schema != PROBE_ARTIFACT_SCHEMA:
        return f"schema {art.schema[:80]!r}, not {PROBE_ARTIFACT_SCHEMA!r}"
    if (art.engine_id, art.when) != (probe.engine_id, probe.when):
        return (f"the artifact is engine {art.engine_id[:80]!r} {art.when[:20]!r}, the entry engine "
                f"{probe.engine_id[:80]!r} {probe.when[:20]!r}")
    for name in ("window_offset_s", "probe_wall_s"):  # (proto3 JSON reads "NaN" / "Infinity" into a double)
        v = getattr(art, name)
        if not math.isfinite(v) or (name == "probe_wall_s" and v < 0):
            return f"{name} {v!r} is not a finite {'wall time >= 0' if name == 'probe_wall_s' else 'offset'} (s)"
    # its points' times (the measurements the entry's points summarise; a point without a usable repeat has none)
    for label, pts in (("point", art.points), ("point contended", art.contended_points)):
        for i, pt in enumerate(pts):
            times = [("median_ms", pt.median_ms), ("p25_ms", pt.p25_ms), ("p75_ms", pt.p75_ms),
                     *((f"repeat_step_ms[{k}]", v) for k, v in enumerate(pt.repeat_step_ms)),
                     *((f"step_ms[{k}]", v) for k, v in enumerate(pt.step_ms)),
                     *((f"passes[{k}].ms", g.ms) for k, g in enumerate(pt.passes))]
            for name, v in times:
                if not (math.isfinite(v) and v >= 0):
                    return f"its {label} {i} ({pt.phase or 'no phase'}): {name} {v!r} is not a finite time >= 0 (ms)"
    return None

class ManifestRules(TraceState):
    def manifest(self) -> None:
        m, f = self.m, MANIFEST_FILE
        if not m.trace_id:
            self.v("manifest.trace_id", f, 0, "", "trace_id is empty (results and reports are tied to it)")
        self._known_enums(f, 0, m.trace_id, m)
        self._good_ids(f, 0, m.trace_id, m)
        if m.workload_name and (why := name_problem(m.workload_name)):  # not an *_id field, yet a name reports key on
            self.v("manifest.workload_name", f, 0, m.trace_id, f"workload_name: {why}")
        if not m.HasField("window") or m.window.duration_ns <= 0:
            self.v("manifest.window", f, 0, m.trace_id, "capture window missing or duration_ns <= 0")
        self._enum(f, 0, m.trace_id, "window.clock_domain", m.window.clock_domain)
        self._enum(f, 0, m.trace_id, "role", m.role)
        self._enum(f, 0, m.trace_id, "privacy.content", m.privacy.content)
        self._enum(f, 0, m.trace_id, "cache_state", m.cache_state)
        why = created_at_problem(m.created_at)
        if why:
            self.v("manifest.created_at", f, 0, m.trace_id, why)
        for problem in conditions_problems(m.conditions):
            self.v("manifest.conditions", f, 0, m.trace_id, f"conditions: {problem}")
        co = m.capture_overhead
        if co.HasField("overhead_ratio") and not (math.isfinite(co.overhead_ratio) and co.overhead_ratio >= -1):
            self.v("manifest.capture_overhead", f, 0, m.trace_id,
                   f"capture_overhead.overhead_ratio = {co.overhead_ratio!r}: (instrumented / plain wall time) - 1 is a "
                   "finite number >= -1 (reports print it as the capture's overhead)")
        for name in ("instrumented_wall_ns", "plain_wall_ns"):
            if co.HasField(name) and getattr(co, name) < 0:
                self.v("manifest.capture_overhead", f, 0, m.trace_id,
                       f"capture_overhead.{name} = {getattr(co, name)}: a wall time is >= 0 ns")
        if m.HasField("completeness"):
            cc = m.completeness
            if cc.complete and cc.lost:
                self.v("manifest.completeness", f, 0, m.trace_id, f"completeness.complete is true but lost lists "
                       f"{len(cc.lost)} kind(s) of lost records ({', '.join(x.kind or '?' for x in cc.lost[:4])}): "
                       "complete means nothing was lost")
            elif not cc.complete and not cc.lost:
                self.v("manifest.completeness", f, 0, m.trace_id, "completeness.complete is false but lost lists "
                       "nothing: an incomplete capture says what it lost (one LostRecords entry per kind)")
            for i, x in enumerate(cc.lost):
                if not x.kind or x.count == 0:
                    self.v("manifest.completeness", f, 0, m.trace_id, f"completeness.lost[{i}] "
                           f"(kind {x.kind!r}, count {x.count}): a loss names its kind and how many records")
        engines = {e.engine_id: e for e in m.engines}
        probed: dict[tuple[str, str], int] = {}
        for i, probe in enumerate(m.probes):
            if (first := probed.setdefault((probe.engine_id, probe.when), i)) != i:
                self.v("manifest.probe", f, 0, probe.engine_id or m.trace_id,
                       f"reference probe {i} ({probe.when or 'no when'}) is a second probe of engine "
                       f"{probe.engine_id!r} {probe.when or 'no when'} the window (probe {first}): one per engine and side")
            problems = probe_problems(probe, engines)
            for problem in problems:
                self.v("manifest.probe", f, 0, probe.engine_id or m.trace_id,
                       f"reference probe {i} ({probe.when or 'no when'}): {problem}")
            if probe.artifact_path and not any(p.startswith("artifact_path") for p in problems):
                art = self.t.dir / probe.artifact_path
                regular, link = _reached(self.t.dir, PurePosixPath(probe.artifact_path).parts)
                where = f"reference probe {i} ({probe.when or 'no when'}): artifact_path {probe.artifact_path!r}"
                if link is not None:  # a probes/ directory linked elsewhere was read as the trace's own (recode refuses it)
                    self.v("manifest.probe_artifact", f, 0, probe.engine_id or m.trace_id,
                           f"{where} is reached through the symbolic link {link!r}: a file outside the trace "
                           "directory, not the trace's own (recode does not copy it)", WARNING)
                elif not regular:
                    self.v("manifest.probe_artifact", f, 0, probe.engine_id or m.trace_id,
                           f"{where} is no regular file in the trace directory (its points are the manifest's; the raw "
                           "requests they came from are missing)", WARNING)
                elif (why := probe_artifact_problem(art, probe)) is not None:
                    self.v("manifest.probe_artifact", f, 0, probe.engine_id or m.trace_id, f"{where}: {why}", WARNING)
            for problem in conditions_problems(probe.conditions):
                self.v("manifest.conditions", f, 0, probe.engine_id or m.trace_id,
                       f"reference probe {i} ({probe.when or 'no when'}) conditions: {problem}")
        seen: set[str] = set()
        for e in m.engines:
            if not e.engine_id or not e.block_size_tokens:
                self.v("manifest.engine", f, 0, e.engine_id, "engine needs engine_id and block_size_tokens > 0")
            elif e.engine_id in seen:
                self.v("id.duplicate", f, 0, e.engine_id, f"engine id {e.engine_id!r} listed twice")
            seen.add(e.engine_id)
