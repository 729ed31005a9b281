"""The probe's levels, isolated vs contended, next to the level each window really ran at (results/holdout-probe3).

Per window: the level of every probe point against the bound base profile's fit (probe median / fitted model;
``levels.json`` = the probe's points, measured with both engines running the same point at once;
``levels-contended.json`` = its contended points, each engine measured while the other ran a steady 12-row
decode load), the median over the window's probe entries (2 engines x before / after), the contended repeats
used / run (from the trace manifest), and the window's own level by phase from the report's profile check of
the base profile (``calibrated`` model: sum of real / sum of model time over the phase's rebuilt intervals).
Usage: ``python contended_levels.py H_DIR`` (markdown to stdout).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from unirl_replay.contract.trace_io import open_trace

POINTS = (("decode", 1), ("decode", 32), ("prefill", 0), ("prefill", 8))
NAMES = {("decode", 1): "decode B=1", ("decode", 32): "decode B=32", ("prefill", 0): "prefill 512",
         ("prefill", 8): "batched prefill"}


def key(pt: dict) -> tuple:
    if pt["phase"] == "decode":
        return ("decode", pt["batch_size"])
    return ("prefill", 8 if pt["batch_size"] > 1 else 0)


def med_levels(path: Path) -> dict:
    if not path.exists():
        return {}
    by: dict = {}
    for pt in json.loads(path.read_text())["points"]:
        by.setdefault(key(pt), []).append(pt["level"])
    return {k: statistics.median(v) for k, v in by.items()}


def window_levels(rep_path: Path) -> dict:
    if not rep_path.exists():
        return {}
    pc = json.loads(rep_path.read_text()).get("profile_check") or {}
    out, dec = {}, [0.0, 0.0]
    for ph in pc.get("phases", []):
        if ph["phase"].startswith("decode"):
            dec[0] += ph["real_ms"]
            dec[1] += ph["model_ms"]
            out[ph["phase"]] = ph["total_ratio"]
        elif ph["phase"] in ("prefill", "first_pass"):
            out[ph["phase"]] = ph["total_ratio"]
    if dec[1]:
        out["decode (all)"] = dec[0] / dec[1]
    return out


def main(h: str) -> int:
    root = Path(h)
    print("| window | point | isolated level | contended level | contended / isolated | contended repeats used / run |")
    print("|---|---|---|---|---|---|")
    win_rows = []
    for mode in ("grpo", "agentic"):
        for r in (1, 2, 3):
            d = root / mode / f"r{r}"
            iso, con = med_levels(d / "levels.json"), med_levels(d / "levels-contended.json")
            tdir = root / "traces" / f"{mode}-r{r}"
            used: dict = {}
            if (tdir / "manifest.json").exists():
                for p in open_trace(tdir).manifest.probes:  # the artifact keeps points with no usable repeat too
                    art = json.loads((tdir / p.artifact_path).read_text())
                    for pt in art.get("contended_points", []):
                        u = used.setdefault(key(pt), [0, 0])
                        u[0] += pt["repeats"]
                        u[1] += pt["repeats"] + pt["unusable_repeats"]
            for k in POINTS:
                if k not in iso and k not in con:
                    continue
                a, b = iso.get(k), con.get(k)
                ratio = f"{b / a:.3f}" if a and b else "-"
                u = used.get(k)
                print(f"| {mode} r{r} | {NAMES[k]} | {a:.3f} | {b:.3f} | {ratio} | "
                      f"{u[0]} / {u[1]} |" if a and b and u else
                      f"| {mode} r{r} | {NAMES[k]} | {a if a is None else round(a, 3)} | "
                      f"{b if b is None else round(b, 3)} | {ratio} | {u if u else '-'} |")
            w = window_levels(d / "calibrated" / "validation_report.json")
            if w:
                win_rows.append((f"{mode} r{r}", w))
    print()
    print("The window's own level (profile check of the base profile, real / model over the rebuilt steps):")
    print()
    for name, w in win_rows:
        print(f"- {name}: " + "; ".join(f"{k} {v:.3f}x" for k, v in w.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/holdout-probe3"))
