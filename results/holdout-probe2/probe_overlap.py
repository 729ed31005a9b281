"""What the other engine did while one engine's batched prefill pass ran (results/holdout-probe2, issue 14).

Reads each holdout trace's probe artifacts (``probes/<engine>-<when>.json``: per request [scheduled,
first token, last token] in the host's monotonic clock, the same clock for both engines of a window)
and, per batched prefill repeat of one engine, its pass's step time (``capture.probe.batched_prefill_pass``)
and the share of that pass during which the other engine was running each probe point (decode B=1,
B=32, the isolated prefill, the batched prefill). Prints a markdown table and the median step time by
what the other engine mostly ran. Usage: ``python probe_overlap.py TRACES_DIR [TRACES_DIR ...]``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from unirl_replay.capture.probe import batched_prefill_pass

BATCHED = "prefill:b8:2048"


def busy(art: dict) -> list[tuple[str, float, float]]:
    """(point, start, end) per request: decode from scheduled to its last token, prefill to its first token."""
    out = []
    for call in art["requests"]:
        for sched, first, last, _n in call["requests"]:
            if sched is None or first is None:
                continue
            end = last if call["point"].startswith("decode") and last is not None else first
            out.append((call["point"], sched, end))
    return out


def rows(trace: Path):
    by_when: dict[str, dict[str, dict]] = {}
    for f in sorted((trace / "probes").glob("*.json")):
        art = json.loads(f.read_text())
        by_when.setdefault(art["when"], {})[art["engine_id"]] = art
    for when, arts in sorted(by_when.items()):
        if len(arts) != 2:
            continue
        (ea, a), (eb, b) = sorted(arts.items())
        for me, art, other in ((ea, a, b), (eb, b, a)):
            ob = busy(other)
            for call in art["requests"]:
                if call["point"] != BATCHED:
                    continue
                reqs = [{"prompt_tokens": 256, "metrics": {"scheduled_ts": s, "first_token_ts": f}}
                        for s, f, _l, _n in call["requests"]]
                got = batched_prefill_pass(reqs)
                if got is None:
                    continue
                end = max(f for s, f, _l, _n in call["requests"] if f is not None)
                start = end - got["ms"] / 1e3
                share: dict[str, float] = {}
                for point, s, e in ob:
                    o = max(0.0, min(end, e) - max(start, s))
                    share[point] = max(share.get(point, 0.0), o)  # requests of one call overlap each other
                # one call per (point, repeat): sum over the other engine's calls, not its requests
                per_call: dict[str, float] = {}
                for oc in other["requests"]:
                    o = 0.0
                    for s, f, last, _n in oc["requests"]:
                        if s is None or f is None:
                            continue
                        e = last if oc["point"].startswith("decode") and last is not None else f
                        o = max(o, max(0.0, min(end, e) - max(start, s)))
                    per_call[oc["point"]] = per_call.get(oc["point"], 0.0) + o
                dur = got["ms"] / 1e3
                yield {"trace": trace.name, "engine": me, "when": when, "repeat": call["repeat"], "rows": got["rows"],
                       "ms": got["ms"], "share": {k: min(1.0, v / dur) for k, v in per_call.items() if v > 0}}


def main(dirs: list[str]) -> int:
    all_rows = [r for d in dirs for t in sorted(Path(d).glob("*-r*")) if (t / "probes").is_dir() for r in rows(t)]
    print("| trace | engine | when | repeat | rows | pass ms | other engine during the pass (share) |")
    print("|---|---|---|---|---|---|---|")
    groups: dict[str, list[float]] = {}
    for r in all_rows:
        sh = ", ".join(f"{k} {100 * v:.0f} %" for k, v in sorted(r["share"].items(), key=lambda kv: -kv[1])) or "idle"
        print(f"| {r['trace']} | {r['engine']} | {r['when']} | {r['repeat']} | {r['rows']} | {r['ms']:.0f} | {sh} |")
        top = max(r["share"].items(), key=lambda kv: kv[1])[0] if r["share"] else "idle"
        groups.setdefault(top, []).append(r["ms"] / r["rows"])
    print()
    print("| the other engine mostly ran | repeats | median ms per row of the pass |")
    print("|---|---|---|")
    for k, v in sorted(groups.items()):
        print(f"| {k} | {len(v)} | {statistics.median(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["results/holdout-probe2/traces"]))
