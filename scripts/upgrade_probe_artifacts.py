"""Rewrite reference-probe artifacts of schema ``/1`` as the v1 message ``ReferenceProbeArtifact`` (``/2``).

``capture finalize`` writes ``probes/<engine>-<when>.json`` as ``ReferenceProbeArtifact`` since contract revision 4;
captures made before hold the same facts as plain JSON (``unirl-replay.reference-probe/1``: request rows as
``[scheduled_ts, first_token_ts, last_token_ts, output_tokens]`` arrays, batched-prefill passes as ``[rows, tokens,
ms]`` or null, the loads' calls as plain arrays). This rewrites each such file in place, losslessly: every value is
read back from the written message and compared with the original before the file is replaced (a mismatch leaves
the file as it was and is reported). Files already at ``/2`` are left alone. The manifests are not touched (a probe's
entry names its artifact by path; the artifact files are not in the manifest's digests).

    .venv/bin/python scripts/upgrade_probe_artifacts.py TRACE_OR_DIR [...]   # every probes/*.json below each
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "gen" / "python")]

from unirl_replay.capture.window_conditions import ARTIFACT_SCHEMA, artifact_point  # noqa: E402
from unirl_replay.contract import json_profile  # noqa: E402
from unirl_replay.contract.json_write import to_json_line  # noqa: E402
from unirl_replay.v1 import manifest_pb2 as m  # noqa: E402

LEGACY = "unirl-replay.reference-probe/1"
_ROW = ("scheduled_ts", "first_token_ts", "last_token_ts", "output_tokens")


def _call(c: dict) -> m.ProbeCall:
    out = m.ProbeCall(point=str(c.get("point") or ""), round=str(c["round"]) if c.get("round") is not None else "",
                      call_monotonic=list(c.get("call_monotonic") or []))
    if c.get("repeat") is not None:
        out.repeat = int(c["repeat"])
    for row in c.get("requests") or []:
        t = out.requests.add()
        for name, v in zip(_ROW, row):
            if v is not None:
                setattr(t, name, int(v) if name == "output_tokens" else float(v))
    return out


def upgrade(doc: dict) -> m.ReferenceProbeArtifact:
    """The ``/2`` message of a ``/1`` artifact's JSON object (``doc``)."""
    art = m.ReferenceProbeArtifact(
        schema=ARTIFACT_SCHEMA, role=str(doc.get("role") or ""), engine_id=str(doc.get("engine_id") or ""),
        when=str(doc.get("when") or ""), probe_id=str(doc.get("probe_id") or ""), method=str(doc.get("method") or ""),
        window_offset_s=float(doc.get("window_offset_s") or 0.0), probe_wall_s=float(doc.get("probe_wall_s") or 0.0),
        points=[artifact_point(p) for p in doc.get("points") or []],
        requests=[_call(c) for c in doc.get("requests") or []])
    if doc.get("contended_method") is not None:
        art.contended_method = str(doc["contended_method"])
    art.contended_points.extend(artifact_point(p) for p in doc.get("contended_points") or [])
    for v in doc.get("contended_verdicts") or []:
        pv = art.contended_verdicts.add(point=str(v.get("point") or ""), round=str(v.get("round") or ""),
                                        used=bool(v.get("used")), reason=str(v.get("reason") or ""),
                                        interval=list(v.get("interval") or []))
        if v.get("repeat") is not None:
            pv.repeat = int(v["repeat"])
    art.contended_requests.extend(_call(c) for c in doc.get("contended_requests") or [])
    for eid, calls in sorted((doc.get("contended_loads") or {}).items()):
        art.contended_loads[eid].calls.extend(_call(c) for c in calls)
    return art


def _back(art: m.ReferenceProbeArtifact) -> dict:
    """The ``/1`` object the message holds (what :func:`upgrade` read), to check nothing was lost."""
    def call(c: m.ProbeCall, with_round: bool) -> dict:
        out = {"call_monotonic": list(c.call_monotonic), "point": c.point,
               "repeat": c.repeat if c.HasField("repeat") else None,
               "requests": [[getattr(t, n) if t.HasField(n) else None for n in _ROW] for t in c.requests]}
        if with_round:
            out["round"] = c.round
        return out

    def point(p: m.ProbePoint) -> dict:
        out = {"phase": p.phase, "batch_size": p.batch_size, "context_tokens": p.context_tokens,
               "prefill_tokens": p.prefill_tokens, "repeats": p.repeats, "unusable_repeats": p.unusable_repeats,
               "step_ms": list(p.step_ms)}
        if p.median_ms or p.p25_ms or p.p75_ms:
            out.update(median_ms=p.median_ms, p25_ms=p.p25_ms, p75_ms=p.p75_ms)
        if p.passes:
            out["passes"] = [[g.rows, g.tokens, g.ms] if g.usable else None for g in p.passes]
        if p.repeat_step_ms:
            out.update(repeat_step_ms=list(p.repeat_step_ms), repeat_pass_tokens=list(p.repeat_pass_tokens),
                       repeat_pass_rows=list(p.repeat_pass_rows))
        return out

    out = {"schema": LEGACY, "role": art.role, "engine_id": art.engine_id, "when": art.when, "probe_id": art.probe_id,
           "method": art.method, "window_offset_s": art.window_offset_s, "probe_wall_s": art.probe_wall_s,
           "points": [point(p) for p in art.points], "requests": [call(c, False) for c in art.requests]}
    if art.contended_method:
        out.update(contended_method=art.contended_method, contended_points=[point(p) for p in art.contended_points],
                   contended_verdicts=[{"point": v.point, "repeat": v.repeat if v.HasField("repeat") else None,
                                        "round": v.round, "used": v.used, **({"reason": v.reason} if v.reason else {}),
                                        **({"interval": list(v.interval)} if v.interval else {})}
                                       for v in art.contended_verdicts],
                   contended_requests=[call(c, False) for c in art.contended_requests],
                   contended_loads={e: [call(c, True) for c in cs.calls] for e, cs in art.contended_loads.items()})
    return out


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    done = kept = bad = 0
    for top in argv:
        for path in sorted(Path(top).rglob("probes/*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("schema") != LEGACY:
                kept += 1
                continue
            art = upgrade(doc)
            text = to_json_line(art)
            again = json_profile.parse_json(text, m.ReferenceProbeArtifact)  # the profile, unknown keys refused
            if again != art or not _same(_back(again), doc):
                print(f"{path}: NOT upgraded (the message would not hold every value of the file)", file=sys.stderr)
                bad += 1
                continue
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(text)
            os.replace(tmp, path)
            done += 1
    print(f"upgraded {done} artifact(s) to {ARTIFACT_SCHEMA}; {kept} left as they were (not /1); {bad} refused")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
