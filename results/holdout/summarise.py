"""Summarise the holdout validation (results/holdout/run_holdout.sh report): markdown to stdout,
``summary.json`` next to it.

Reads every ``<mode>/r<k>/<model>/validation_report.json`` and, for the effect breakdown, the
holdout traces themselves (workload + outcomes, main environment only).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.trace_io import open_trace

MODES = ("grpo", "agentic")
MODELS = ("calibrated", "default")
KEYS = (("COMPARISON_LEVEL_REQUEST", "e2e"), ("COMPARISON_LEVEL_REQUEST", "ttft"),
        ("COMPARISON_LEVEL_REQUEST", "queueing_delay"), ("COMPARISON_LEVEL_TRAJECTORY", "trajectory_e2e"),
        ("COMPARISON_LEVEL_GROUP", "group_completion"), ("COMPARISON_LEVEL_ROLLOUT_BATCH", "batch_readiness"))


def load_reports(root: Path):
    out = defaultdict(dict)  # (mode, model) -> run -> report
    for p in sorted(root.glob("*/r*/*/validation_report.json")):
        mode, run, model = p.parts[-4], p.parts[-3], p.parts[-2]
        out[(mode, model)][run] = json.loads(p.read_text())
    return out


def metric(rep, level, name):
    for m in rep.get("metrics", []):
        if m["level"] == level and m["metric"] == name:
            return m
    return None


def spread(rep, level, name):
    for s in rep.get("repeat_spread", []):
        if s["level"] == level and s["metric"] == name:
            return s
    return None


def ms(ns) -> float:
    return int(ns) / 1e6


def effects(trace_dir: Path) -> dict:
    """Client-side and engine-side durations measured in one trace (ms)."""
    tr = open_trace(trace_dir)
    reqs = {rec.request.request_id: rec.request for _, rec in tr.iter_workload() if rec.WhichOneof("record") == "request"}
    fwd, queue, ttft_engine, ttft_client, delays, first = [], [], [], [], [], []
    for _, rec in iter_outcomes(tr):
        if rec.WhichOneof("record") != "request":
            continue
        o = rec.request
        if o.HasField("queued_ns"):
            fwd.append(ms(o.queued_ns - o.submit_ns))
            if o.HasField("scheduled_ns"):
                queue.append(ms(o.scheduled_ns - o.queued_ns))
        if o.HasField("first_token_ns") and o.HasField("scheduled_ns"):
            ttft_engine.append(ms(o.first_token_ns - o.scheduled_ns))
        if o.HasField("first_token_ns"):
            ttft_client.append(ms(o.first_token_ns - o.submit_ns))
        first.append((o.submit_ns, o.request_id))
    comp = {}
    ready = []
    slot_tail = []
    last_of_traj = {}
    for _, rec in iter_outcomes(tr):
        k = rec.WhichOneof("record")
        if k == "request" and rec.request.HasField("completion_ns"):
            comp[rec.request.request_id] = rec.request.completion_ns
        elif k == "rollout_batch" and rec.rollout_batch.HasField("ready_ns"):
            ready.append((rec.rollout_batch.rollout_batch_id, rec.rollout_batch.ready_ns))
        elif k == "trajectory" and rec.trajectory.HasField("slot_released_ns"):
            last_of_traj[rec.trajectory.trajectory_id] = rec.trajectory.slot_released_ns
    # vLLM-side concurrency: intervals queued -> completion of every request (EngineCore clock)
    ivs = []
    for _, rec in iter_outcomes(tr):
        if rec.WhichOneof("record") == "request":
            o = rec.request
            if o.HasField("queued_ns") and o.HasField("completion_ns"):
                ivs.append((int(o.queued_ns), int(o.completion_ns)))
    events = sorted([(a, 1) for a, _ in ivs] + [(b, -1) for _, b in ivs], key=lambda e: (e[0], e[1]))
    cur = peak = 0
    busy = 0
    last = None
    for t, d in events:
        if cur > 0 and last is not None:
            busy += t - last
        cur += d
        peak = max(peak, cur)
        last = t
    span = (max(b for _, b in ivs) - min(a for a, _ in ivs)) if ivs else 0
    return_path = []
    for bid, rdy in ready:  # GRPO: generate() return in the driver - last vLLM completion of the batch
        ends = [comp[r.request_id] for r in reqs.values() if r.rollout_batch_id == bid and r.request_id in comp]
        if ends and not any(r.trajectory_id for r in reqs.values()):
            return_path.append(ms(rdy - max(ends)))
    for tid, rel in last_of_traj.items():  # agentic: slot release - the trajectory's last completion
        ends = [comp[r.request_id] for r in reqs.values() if r.trajectory_id == tid and r.request_id in comp]
        if ends:
            slot_tail.append(ms(rel - max(ends)))
    for r in reqs.values():
        for d in r.dependencies:
            if d.HasField("external_delay_ns"):
                delays.append(ms(d.external_delay_ns))
    first.sort(key=lambda x: int(x[0]))

    def st(xs):
        if not xs:
            return None
        xs = sorted(xs)
        return {"n": len(xs), "median": statistics.median(xs), "mean": statistics.fmean(xs),
                "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))], "max": xs[-1], "sum": sum(xs)}

    m = tr.manifest
    return {"submit_to_queued_ms": st(fwd), "queued_to_scheduled_ms": st(queue),
            "scheduled_to_first_token_ms": st(ttft_engine), "submit_to_first_token_ms": st(ttft_client),
            "external_delay_ms": st(delays), "requests": len(reqs),
            "batch_return_path_ms": st(return_path), "engine_peak_concurrent_requests": peak,
            "engine_busy_fraction": (busy / span) if span else None, "slot_release_after_last_completion_ms": st(slot_tail),
            "window_s": m.window.duration_ns / 1e9,
            "load": m.labels.get("loadavg.window", ""),
            "overhead_ratio": m.capture_overhead.overhead_ratio if m.capture_overhead.pairs else None,
            "forward_path_label": m.labels.get("forward_path_ms", "")}


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def main(root: str) -> int:
    root = Path(root)
    reps = load_reports(root)
    summary = {"runs": {}, "effects": {}}
    lines = []
    for mode in MODES:
        runs = sorted({r for (mo, _), d in reps.items() if mo == mode for r in d})
        if not runs:
            continue
        lines += [f"### {mode}", "",
                  "| run | model | req E2E MAPE % | E2E bias % | TTFT MAPE % | traj E2E MAPE % | batch readiness err % "
                  "(per batch) | real spread E2E CV % (max dev) | real spread readiness CV % (max dev) | "
                  "engine_e2e (vLLM queued -> done) MAPE % (bias) | engine_ttft MAPE % | real spread engine_e2e CV % |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for model in MODELS:
            agg = defaultdict(list)
            for run in runs:
                rep = reps[(mode, model)].get(run)
                if rep is None:
                    continue
                e2e = metric(rep, "COMPARISON_LEVEL_REQUEST", "e2e") or {}
                ttft = metric(rep, "COMPARISON_LEVEL_REQUEST", "ttft") or {}
                tj = metric(rep, "COMPARISON_LEVEL_TRAJECTORY", "trajectory_e2e") or {}
                br = metric(rep, "COMPARISON_LEVEL_ROLLOUT_BATCH", "batch_readiness") or {}
                s_e2e = spread(rep, "COMPARISON_LEVEL_REQUEST", "e2e") or {}
                s_br = spread(rep, "COMPARISON_LEVEL_ROLLOUT_BATCH", "batch_readiness") or {}
                row = {"e2e_mape": e2e.get("mape_pct"), "e2e_bias": e2e.get("signed_bias_pct"),
                       "ttft_mape": ttft.get("mape_pct"), "traj_mape": tj.get("mape_pct"),
                       "ready_mape": br.get("mape_pct"), "ready_bias": br.get("signed_bias_pct"),
                       "spread_e2e_cv": s_e2e.get("cv_pct"), "spread_e2e_max": s_e2e.get("max_dev_pct"),
                       "spread_ready_cv": s_br.get("cv_pct"), "spread_ready_max": s_br.get("max_dev_pct"),
                       "label": rep.get("label")}
                ee = metric(rep, "COMPARISON_LEVEL_REQUEST", "engine_e2e") or {}
                et = metric(rep, "COMPARISON_LEVEL_REQUEST", "engine_ttft") or {}
                s_ee = spread(rep, "COMPARISON_LEVEL_REQUEST", "engine_e2e") or {}
                row["engine_mape"], row["engine_bias"] = ee.get("mape_pct"), ee.get("signed_bias_pct")
                row["engine_ttft_mape"] = et.get("mape_pct")
                row["spread_engine_e2e_cv"] = s_ee.get("cv_pct")
                summary["runs"][f"{mode}/{run}/{model}"] = row
                for k, v in row.items():
                    if isinstance(v, float):
                        agg[k].append(v)
                lines.append(f"| {run} | {model} | {fmt(row['e2e_mape'])} | {fmt(row['e2e_bias'], 1)} | "
                             f"{fmt(row['ttft_mape'])} | {fmt(row['traj_mape'])} | "
                             f"{fmt(row['ready_mape'])} (bias {fmt(row['ready_bias'])}) | "
                             f"{fmt(row['spread_e2e_cv'])} ({fmt(row['spread_e2e_max'])}) | "
                             f"{fmt(row['spread_ready_cv'])} ({fmt(row['spread_ready_max'])}) | "
                             f"{fmt(row['engine_mape'])} ({fmt(row['engine_bias'])}) | {fmt(row['engine_ttft_mape'])} | "
                             f"{fmt(row['spread_engine_e2e_cv'])} |")
            if agg:
                mean = {k: statistics.fmean(v) for k, v in agg.items()}
                summary["runs"][f"{mode}/mean/{model}"] = mean
                lines.append(f"| **mean** | **{model}** | **{fmt(mean.get('e2e_mape'))}** | {fmt(mean.get('e2e_bias'))} | "
                             f"{fmt(mean.get('ttft_mape'))} | {fmt(mean.get('traj_mape'))} | "
                             f"**{fmt(mean.get('ready_mape'))}** (bias {fmt(mean.get('ready_bias'))}) | "
                             f"{fmt(mean.get('spread_e2e_cv'))} ({fmt(mean.get('spread_e2e_max'))}) | "
                             f"{fmt(mean.get('spread_ready_cv'))} ({fmt(mean.get('spread_ready_max'))}) | "
                             f"{fmt(mean.get('engine_mape'))} ({fmt(mean.get('engine_bias'))}) | "
                             f"{fmt(mean.get('engine_ttft_mape'))} | {fmt(mean.get('spread_engine_e2e_cv'))} |")
        lines.append("")
        lab = next((r.get("label") for (mo, mdl), d in reps.items() if mo == mode for r in d.values()), "")
        lines += [f"Labels, e.g.: `{summary['runs'].get(f'{mode}/r1/calibrated', {}).get('label', lab)}` and "
                  f"`{summary['runs'].get(f'{mode}/r1/default', {}).get('label', lab)}`", ""]
        # effects measured in the traces
        lines += [f"Measured in the {mode} holdout traces (ms; median / p90 / max over requests):", "",
                  "| run | requests | window s | submit -> vLLM queued (client lock + pipe + runtime) | "
                  "queued -> scheduled | scheduled -> first token (engine) | submit -> first token | "
                  "external delay between turns | last completion -> batch ready (GRPO) / slot release (agentic) | "
                  "vLLM peak concurrent requests (queued->done) | engine busy % of span | capture overhead | load (window) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for run in runs:
            tdir = root / "traces" / f"{mode}-{run}"
            if not (tdir / "manifest.json").exists():
                continue
            ef = effects(tdir)
            summary["effects"][f"{mode}/{run}"] = ef

            def trio(s):
                return "-" if not s else f"{s['median']:.1f} / {s['p90']:.1f} / {s['max']:.1f}"

            ov = ef["overhead_ratio"]
            lines.append(f"| {run} | {ef['requests']} | {ef['window_s']:.2f} | {trio(ef['submit_to_queued_ms'])} | "
                         f"{trio(ef['queued_to_scheduled_ms'])} | {trio(ef['scheduled_to_first_token_ms'])} | "
                         f"{trio(ef['submit_to_first_token_ms'])} | {trio(ef['external_delay_ms'])} | "
                         f"{trio(ef['batch_return_path_ms'] or ef['slot_release_after_last_completion_ms'])} | "
                         f"{ef['engine_peak_concurrent_requests']} | {fmt(100 * (ef['engine_busy_fraction'] or 0))} | "
                         f"{'-' if ov is None else f'{100 * ov:+.1f}%'} | {ef['load']} |")
        lines.append("")
        for run in runs:
            ef = summary["effects"].get(f"{mode}/{run}")
            if ef and ef["forward_path_label"]:
                lines.append(f"- {run}: capture label forward_path_ms: {ef['forward_path_label']}")
        lines.append("")
    (root / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/holdout"))
