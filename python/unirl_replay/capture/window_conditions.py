"""A window's ``RunConditions`` and ``ReferenceProbe`` entries from what the processes recorded (finalize).

Inputs (records of the shards, :mod:`finalize` groups them by kind):

* ``window_start`` / ``window_end`` marks of the driver, each with a ``conditions`` snapshot
  (:func:`procfs.snapshot`: load, ``/proc/stat``, every engine's process tree);
* ``probe_start`` / ``probe_end`` marks (:func:`probe.run`) with the same snapshots, and the
  engines' ``probe_generate`` records tagged with the probe's id.

Which probe belongs to the window: the last one that ended at or before the window's start is its
``before`` probe, the first one that started at or after the window's end its ``after`` probe (in
a run of several windows the probe between two windows is the ``after`` of one and the ``before``
of the next). Per engine of the window, each becomes one ``ReferenceProbe`` with its points, its
own conditions (over the probe) and a calibration-role artifact ``probes/<engine>-<when>.json``
(the raw probe records and the per-repeat step times) in the trace directory. Probe requests are
never a window's requests: they are recorded as another kind (``probe_generate``).
"""

from __future__ import annotations


from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from unirl_replay.capture import probe as P
from unirl_replay.capture.procfs import conditions_fields
from unirl_replay.contract.json_write import to_json_line
from unirl_replay.contract.out_dir import id_file_stem
from unirl_replay.v1 import common_pb2 as c
from unirl_replay.v1 import manifest_pb2 as m

ARTIFACT_SCHEMA = "unirl-replay.reference-probe/2"  #: ReferenceProbeArtifact (/1: before the message, read by no tool)


_SIGNATURE_FIELDS = ("vendor_id", "cpu_family", "model", "stepping", "microcode", "flags_digest", "isa_flags",
                     "isa_flags_checked")


def signature_message(fields: Dict[str, Any]) -> m.CpuSignature:
    """``manifest.CpuSignature`` from :func:`procfs.cpu_signature`'s dict (keys it does not know are skipped)."""
    out = m.CpuSignature()
    for k in _SIGNATURE_FIELDS:
        v = fields.get(k)
        if v is None:
            continue
        if k in ("isa_flags", "isa_flags_checked"):
            getattr(out, k).extend(str(x) for x in v)
        else:
            setattr(out, k, v)
    return out


def _message(fields: Dict[str, Any], engines: Optional[Sequence[str]] = None) -> m.RunConditions:
    out = m.RunConditions(cache_state=c.CACHE_STATE_KIND_COLD)
    for k, v in fields.items():
        if k == "cpu_signature":
            out.cpu_signature.CopyFrom(signature_message(v))
        elif k in ("engine_process_cpu_ns", "worker_threads"):
            getattr(out, k).update({e: x for e, x in v.items() if engines is None or e in engines})
        else:
            setattr(out, k, v)
    return out


def _snap(rec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    s = rec.get("conditions")
    return s if isinstance(s, dict) and "error" not in s else None


def window_conditions(start_mark: Optional[Dict[str, Any]], end_mark: Optional[Dict[str, Any]],
                      hardware: m.Hardware, engines: Sequence[str]) -> Optional[m.RunConditions]:
    """RunConditions between the window's marks (None when either mark has no snapshot)."""
    a = _snap(start_mark) if start_mark else None
    b = _snap(end_mark) if end_mark else None
    if a is None or b is None:
        return None
    hw = {"cpu_model": hardware.cpu_model, "cpu_count": hardware.cpu_count}
    return _message(conditions_fields(a, b, hardware=hw), engines)


def probe_runs(recs: Dict[str, List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """Every probe run with both marks (probe_start, probe_end): id, marks and host monotonic t0 / t1 (s), by start."""
    starts = {r.get("probe_id"): r for r in recs.get("probe_start", []) if r.get("probe_id")}
    ends = {r.get("probe_id"): r for r in recs.get("probe_end", []) if r.get("probe_id")}
    out = []
    for pid, s in starts.items():
        e = ends.get(pid)
        if e is None:
            continue
        out.append({"probe_id": pid, "start": s, "end": e, "t0": s["at"]["monotonic"], "t1": e["at"]["monotonic"]})
    return sorted(out, key=lambda p: p["t0"])


def window_probes(recs: Dict[str, List[Dict[str, Any]]], start_mono: float, end_mono: float, hardware: m.Hardware,
                  engines: Sequence[str]) -> Tuple[List[m.ReferenceProbe], Dict[str, m.ReferenceProbeArtifact]]:
    """The window's ReferenceProbe entries and their artifacts (path relative to the trace directory -> message)."""
    probes = probe_runs(recs)
    before = [p for p in probes if p["t1"] <= start_mono]
    after = [p for p in probes if p["t0"] >= end_mono]
    chosen = ([("before", before[-1])] if before else []) + ([("after", after[0])] if after else [])
    gens: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in recs.get("probe_generate", []):
        tag = r.get("probe") or {}
        gens.setdefault((str(tag.get("probe_id")), str(r.get("engine_id"))), []).append(r)
    hw = {"cpu_model": hardware.cpu_model, "cpu_count": hardware.cpu_count}
    entries: List[m.ReferenceProbe] = []
    artifacts: Dict[str, m.ReferenceProbeArtifact] = {}
    for when, p in chosen:
        a, b = _snap(p["start"]), _snap(p["end"])
        cond = conditions_fields(a, b, hardware=hw) if a and b else {}
        by_engine = {eid: sorted(gens.get((p["probe_id"], eid), []), key=lambda r: r["call_monotonic"][0])
                     for eid in {k[1] for k in gens if k[0] == p["probe_id"]}}
        for eid in engines:
            rows = by_engine.get(eid, [])
            if not rows:
                continue
            # the probe's points (every engine running the same point) and its contended part, never mixed
            iso = [r for r in rows if (r.get("probe") or {}).get("condition", "isolated") == "isolated"]
            cont = [r for r in rows if (r.get("probe") or {}).get("condition") == "contended"]
            loads = {o: [r for r in rs if (r.get("probe") or {}).get("condition") == "load"]
                     for o, rs in by_engine.items() if o != eid}
            loads = {o: rs for o, rs in loads.items() if rs}
            points = P.probe_points(iso)
            cpoints, verdicts = P.contended_points(cont, loads) if cont else ([], [])
            # one file per engine: ids that would share a safe name (``vllm:h1:21``, ``vllm_h1_21``) or outgrow a
            # file name (a 1000-character id) get a digest (contract.out_dir.id_file_stem)
            path = f"probes/{id_file_stem(eid, engines)}-{when}.json"
            rp = m.ReferenceProbe(engine_id=eid, when=when, artifact_path=path)
            for dest, pts in ((rp.points, points), (rp.contended_points, cpoints)):
                for pt in pts:
                    if "median_ms" not in pt:
                        continue
                    dest.append(_point(pt))
            if cont:
                rp.contended_load = P.contended_load_words()
            if cond:
                rp.conditions.CopyFrom(_message(cond, [eid]))
            entries.append(rp)
            art = m.ReferenceProbeArtifact(
                schema=ARTIFACT_SCHEMA, role="calibration", engine_id=eid, when=when, probe_id=str(p["probe_id"]),
                method=P.method_words(1 + max((int((r.get("probe") or {}).get("repeat") or 0) for r in iso), default=-1)
                                      if iso else P.PROBE_REPEATS),
                window_offset_s=(p["t1"] - start_mono) if when == "before" else (p["t0"] - end_mono),
                probe_wall_s=p["t1"] - p["t0"], points=[artifact_point(pt) for pt in points],
                requests=[probe_call(r) for r in iso])
            if cont:  # the contended part: its points, one verdict per repeat, its requests and the loads' rows
                art.contended_method = P.CONTENDED_METHOD
                art.contended_points.extend(artifact_point(pt) for pt in cpoints)
                art.contended_verdicts.extend(_verdict(v) for v in verdicts)
                art.contended_requests.extend(probe_call(r) for r in cont)
                for o, rs in sorted(loads.items()):
                    art.contended_loads[o].calls.extend(probe_call(r) for r in rs)
            artifacts[path] = art
    return entries, artifacts


def _point(pt: Dict[str, Any]) -> m.ProbePoint:
    return m.ProbePoint(phase=pt["phase"], batch_size=pt["batch_size"], context_tokens=pt["context_tokens"],
                        prefill_tokens=pt["prefill_tokens"], repeats=pt["repeats"], median_ms=pt["median_ms"],
                        p25_ms=pt["p25_ms"], p75_ms=pt["p75_ms"], unusable_repeats=pt["unusable_repeats"],
                        repeat_step_ms=pt.get("repeat_step_ms", []), repeat_pass_tokens=pt.get("repeat_pass_tokens", []),
                        repeat_pass_rows=pt.get("repeat_pass_rows", []))


def _ts(x: Any) -> Optional[float]:
    return round(float(x), 6) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _uint(x: Any) -> Optional[int]:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**32 else None


def probe_call(r: Dict[str, Any]) -> m.ProbeCall:
    """One ``probe_generate`` record as the artifact keeps it: its point, repeat and round, the driver's clock
    around the call, and per request vLLM's [scheduled, first token, last token] timestamps (monotonic s, 1 us)
    and output tokens."""
    tag = r.get("probe") or {}
    call = m.ProbeCall(point=str(tag.get("point") or ""), round=str(tag["round"]) if tag.get("round") is not None else "",
                       call_monotonic=[t for t in map(_ts, r.get("call_monotonic") or []) if t is not None])
    if _uint(tag.get("repeat")) is not None:
        call.repeat = _uint(tag.get("repeat"))
    for q in r.get("requests") or []:
        met = q.get("metrics") or {}
        row = call.requests.add()
        for field, key in (("scheduled_ts", "scheduled_ts"), ("first_token_ts", "first_token_ts"),
                           ("last_token_ts", "last_token_ts")):
            v = _ts(met.get(key))
            if v is not None:
                setattr(row, field, v)
        n = _uint((q.get("output_tokens") or [None])[0])
        if n is not None:
            row.output_tokens = n
    return call


def artifact_point(pt: Dict[str, Any]) -> m.ProbePoint:
    """A point of :func:`probe.probe_points` / :func:`probe.contended_points` with its per-repeat detail (the
    artifact's ``ProbePoint``: ``step_ms`` and, for a batched prefill, every repeat's pass)."""
    out = _point(pt) if "median_ms" in pt else m.ProbePoint(
        phase=pt["phase"], batch_size=pt["batch_size"], context_tokens=pt["context_tokens"],
        prefill_tokens=pt["prefill_tokens"], repeats=pt["repeats"], unusable_repeats=pt["unusable_repeats"])
    out.step_ms.extend(pt.get("step_ms") or [])
    for g in pt.get("passes") or []:  # [rows, tokens, ms] of a usable repeat's pass, None for an unusable one
        if g is None:
            out.passes.add()
        else:
            out.passes.add(usable=True, rows=g[0], tokens=g[1], ms=g[2])
    return out


def _verdict(v: Dict[str, Any]) -> m.ProbeVerdict:
    out = m.ProbeVerdict(point=str(v.get("point") or ""), round=str(v.get("round") or ""), used=bool(v.get("used")),
                         reason=str(v.get("reason") or ""), interval=list(v.get("interval") or []))
    if _uint(v.get("repeat")) is not None:
        out.repeat = _uint(v.get("repeat"))
    return out


def attach(man: m.TraceManifest, recs: Dict[str, List[Dict[str, Any]]], start_mark: Optional[Dict[str, Any]],
           end_mark: Optional[Dict[str, Any]], start_mono: float, end_mono: float, engines: Sequence[str]
           ) -> Dict[str, m.ReferenceProbeArtifact]:
    """Fill ``man.conditions`` and ``man.probes``; return the probe artifacts to write next to the trace."""
    cond = window_conditions(start_mark, end_mark, man.hardware, engines)
    if cond is not None:
        man.conditions.CopyFrom(cond)
    entries, artifacts = window_probes(recs, start_mono, end_mono, man.hardware, engines)
    man.probes.extend(entries)
    return artifacts


def write_artifacts(out_dir: Path, artifacts: Dict[str, m.ReferenceProbeArtifact]) -> None:
    """Each probe artifact as one JSON object in the JSON profile (``json_write``), at its path in ``out_dir``."""
    for rel, body in artifacts.items():
        path = Path(out_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_json_line(body))


__all__ = ["attach", "window_conditions", "signature_message", "window_probes", "write_artifacts", "probe_call",
           "artifact_point", "ARTIFACT_SCHEMA"]
