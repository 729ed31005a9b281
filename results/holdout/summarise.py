"""Summarise the holdout validation (results/holdout/run_holdout.sh report): markdown to stdout,
``summary.json`` next to it.

Reads every ``<mode>/r<k>/<model>/validation_report.json`` (models: the calibrated base profile, the
probe-levelled profile, the default polynomial), ``<mode>/r<k>/levels.json`` (the probe levels), and,
for conditions and the effect breakdown, the holdout traces themselves (manifest ``conditions`` /
``probes``, workload + outcomes; main environment only).
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
#: probe = the probe-levelled profile by the run's levelling (two_term since issue 14's third redo); probe-scalar =
#: the same probe, the scalar method (one level per phase) of the first probe holdouts, where the run has it
#: probe-contended = the scalar levelling of the probe's contended points (ReferenceProbe.contended_points: each
#: engine measured while the others ran a steady decode load), where the run has it
MODELS = ("calibrated", "probe", "probe-scalar", "probe-contended", "probe-mixed", "default")
PROBE_MODELS = ("probe", "probe-scalar", "probe-contended", "probe-mixed")
TRACES_ROOT: list = [None]  # the holdout traces: ROOT/traces unless a second argument names them
MODEL_WORDS = {"calibrated": "calibrated (base profile)", "probe": "CALIBRATED+PROBE (probe-levelled)",
               "probe-scalar": "CALIBRATED+PROBE, scalar levelling (one level per phase)",
               "probe-contended": "CALIBRATED+PROBE contended, scalar levelling of the contended probe points",
               "probe-mixed": "CALIBRATED+PROBE mixed, decode from the contended points, prefill from the probe's own",
               "default": "default polynomial (UNCALIBRATED)"}
TARGETS = {"ready_mape": 5.0, "e2e_mape": 8.0}  # GRPO, with the probe-levelled profile
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


def conditions(trace_dir: Path) -> dict:
    """The window's RunConditions and probe points from the manifest."""
    from unirl_replay.contract.json_profile import to_dict

    m = open_trace(trace_dir).manifest
    c = m.conditions
    win_s = m.window.duration_ns / 1e9
    cpu = {e: int(v) / 1e9 for e, v in c.engine_process_cpu_ns.items()}
    probes = []
    for p in m.probes:
        probes.append({"engine_id": p.engine_id, "when": p.when,
                       "points": {(f"decode B={pt.batch_size}" if pt.phase == "decode" else
                                   f"prefill {pt.batch_size}x{pt.prefill_tokens}" if pt.batch_size > 1 else
                                   f"prefill {pt.prefill_tokens}"):
                                  [pt.p25_ms, pt.median_ms, pt.p75_ms] for pt in p.points},
                       "contended_points": {(f"decode B={pt.batch_size}" if pt.phase == "decode" else
                                             f"prefill {pt.batch_size}x{pt.prefill_tokens}" if pt.batch_size > 1 else
                                             f"prefill {pt.prefill_tokens}"):
                                            [pt.p25_ms, pt.median_ms, pt.p75_ms, pt.repeats, pt.unusable_repeats]
                                            for pt in p.contended_points}})
    return {"loadavg_1m_start": c.loadavg_1m_start if c.HasField("loadavg_1m_start") else None,
            "loadavg_1m_end": c.loadavg_1m_end if c.HasField("loadavg_1m_end") else None,
            "host_busy_pct": c.host_busy_pct if c.HasField("host_busy_pct") else None,
            "steal_pct": c.steal_pct if c.HasField("steal_pct") else None,
            "engine_cpu_s": cpu, "engine_cpu_share_pct": {e: 100 * v / win_s for e, v in cpu.items()} if win_s else {},
            "engine_uptime_s": c.engine_uptime_ns / 1e9 if c.HasField("engine_uptime_ns") else None,
            "duration_s": c.duration_ns / 1e9 if c.HasField("duration_ns") else None, "window_s": win_s,
            "worker_threads": dict(c.worker_threads), "probes": probes,
            "conditions": to_dict(c)}


def engines_of(trace_dir: Path) -> dict:
    """The window's engine count: the manifest's engines and the capture's ``knob.engines`` label (capture
    --engines; run_holdout.sh ENGINES), with a note when the two disagree."""
    m = open_trace(trace_dir).manifest
    n = len(m.engines)
    knob = m.labels.get("knob.engines")
    note = "" if knob is None or knob == str(n) else f"knob.engines = {knob} but the manifest lists {n} engines"
    return {"engines": n, "knob_engines": knob, "engine_ids": [e.engine_id for e in m.engines], "note": note}


def bracket(rep, level, name):
    for b in rep.get("brackets", []):
        if b["level"] == level and b["metric"] == name:
            return b
    return None


def decomposition(rep, record="all rollout batches"):
    for d in rep.get("decompositions", []):
        if d["record_id"] == record:
            return {t["name"]: t.get("pct_of_measured", 0.0) for t in d["terms"]} | {
                "total": 100 * int(d["total_ns"]) / int(d["measured_ns"]) if int(d["measured_ns"]) else None}
    return None


TERMS = ("client_path", "first_pass", "prefill_level", "decode_level", "simulator_scheduling")
SPLIT = ("client_path", "engine_first_token", "after_first_token")


def _measured(trace_dir: Path):
    tr = open_trace(trace_dir)
    reqs = {rec.request.request_id: rec.request for _, rec in tr.iter_workload() if rec.WhichOneof("record") == "request"}
    outs, ready = {}, {}
    for _, rec in iter_outcomes(tr):
        k = rec.WhichOneof("record")
        if k == "request":
            outs[rec.request.request_id] = rec.request
        elif k == "rollout_batch" and rec.rollout_batch.HasField("ready_ns"):
            ready[rec.rollout_batch.rollout_batch_id] = int(rec.rollout_batch.ready_ns)
    return reqs, outs, ready


def common_clock(reqs, pred) -> bool:
    """Whether the replay's engines share one clock: every request with an observed arrival offset arrives at
    that offset minus the trace's first one (within 1 us), on every engine."""
    offs = {r: int(q.arrival.observed_offset_ns) for r, q in reqs.items() if q.arrival.HasField("observed_offset_ns")}
    if not offs:
        return False
    zero = min(offs.values())
    return all(r in pred and abs(int(pred[r]["arrival_ns"]) - (o - zero)) <= 1000 for r, o in offs.items())


def readiness_across_engines(trace_dir: Path, replay_paths, *, check_arrivals: bool = True) -> dict | None:
    """Batch readiness (ready - the batch's first submit) of batches whose requests span engines, which compare
    leaves uncompared: measured from the trace, predicted from each replay result's rollout_batches (origin = the
    earliest predicted arrival of the batch's requests, compare's O_p over both engines), on the replay's one
    clock. ``check_arrivals``: require every request with an observed arrival offset to arrive at it (GRPO; else
    None). Agentic slot pools re-time first turns, so there only the replay's one clock is relied on (one
    simulation of both engines: one ReplayResult, one makespan). Per replay: per-batch signed error %, MAPE, bias."""
    reqs, outs, ready = _measured(trace_dir)
    out = {"measured_ms": {}, "replays": [], "arrivals_checked": check_arrivals}
    for b, r in ready.items():
        ids = [i for i, q in reqs.items() if q.rollout_batch_id == b and i in outs]
        if ids:
            out["measured_ms"][b] = (r - min(int(outs[i].submit_ns) for i in ids)) / 1e6
    for path in replay_paths:
        rr = json.loads(Path(path).read_text())
        pred = {x["request_id"]: x for x in rr.get("requests", [])}
        if check_arrivals and not common_clock(reqs, pred):
            return None
        pb = {b["rollout_batch_id"]: int(b["ready_ns"]) for b in rr.get("rollout_batches", []) if "ready_ns" in b}
        errs = {}
        for b, m in out["measured_ms"].items():
            ids = [i for i, q in reqs.items() if q.rollout_batch_id == b and i in pred]
            if b in pb and ids and m > 0:
                p = (pb[b] - min(int(pred[i]["arrival_ns"]) for i in ids)) / 1e6
                errs[b] = {"predicted_ms": p, "error_pct": 100 * (p - m) / m}
        e = [v["error_pct"] for v in errs.values()]
        out["replays"].append({"replay": str(path), "batches": errs,
                               "mape_pct": statistics.fmean(abs(x) for x in e) if e else None,
                               "bias_pct": statistics.fmean(e) if e else None})
    return out


def e2e_split(trace_dir: Path, replay_path) -> dict | None:
    """Exact split of the summed request E2E error (predicted - measured, % of the summed measured E2E):
    client_path = -(submit -> vLLM queued) (the simulator has no client stage), engine_first_token =
    predicted TTFT - measured (queued -> first token), after_first_token = predicted (first token -> completion)
    - measured. Over requests with all boundaries on both sides; the three terms sum to the total."""
    reqs, outs, _ = _measured(trace_dir)
    pred = {x["request_id"]: x for x in json.loads(Path(replay_path).read_text()).get("requests", [])}
    terms = dict.fromkeys(SPLIT, 0)
    meas_total = 0
    n = 0
    for r, o in outs.items():
        p = pred.get(r)
        if not p or not all(o.HasField(f) for f in ("submit_ns", "queued_ns", "first_token_ns", "completion_ns")) or \
                not all(k in p for k in ("arrival_ns", "first_token_ns", "completion_ns")):
            continue
        a, f, c = (int(p[k]) for k in ("arrival_ns", "first_token_ns", "completion_ns"))
        terms["client_path"] -= int(o.queued_ns) - int(o.submit_ns)
        terms["engine_first_token"] += (f - a) - (int(o.first_token_ns) - int(o.queued_ns))
        terms["after_first_token"] += (c - f) - (int(o.completion_ns) - int(o.first_token_ns))
        meas_total += int(o.completion_ns) - int(o.submit_ns)
        n += 1
    if not meas_total:
        return None
    out = {k: 100 * v / meas_total for k, v in terms.items()}
    out["total"] = 100 * sum(terms.values()) / meas_total
    out["requests"] = n
    return out


def main(root: str) -> int:
    root = Path(root)
    if TRACES_ROOT[0] is None:
        TRACES_ROOT[0] = root / "traces"
    reps = load_reports(root)
    summary = {"runs": {}, "effects": {}, "conditions": {}, "levels": {}, "decomposition": {}, "brackets": {},
               "targets": {}}
    lines = []
    for mode in MODES:
        runs = sorted({r for (mo, _), d in reps.items() if mo == mode for r in d})
        if not runs:
            continue
        # the real runs' own spread of batch readiness across engines (compare has none when batches span engines)
        from unirl_replay.report.metrics import repeat_spread

        means = []
        for run in runs:
            tdir = TRACES_ROOT[0] / f"{mode}-{run}"
            if (tdir / "manifest.json").exists():
                _, outs, ready = _measured(tdir)
                xr = readiness_across_engines(tdir, [], check_arrivals=False)
                if xr and xr["measured_ms"]:
                    means.append(statistics.fmean(xr["measured_ms"].values()))
        derived_spread = repeat_spread(means) if len(means) >= 2 else (None, None)
        summary.setdefault("readiness_spread_across_engines", {})[mode] = derived_spread
        eng = {run: engines_of(TRACES_ROOT[0] / f"{mode}-{run}") for run in runs
               if (TRACES_ROOT[0] / f"{mode}-{run}" / "manifest.json").exists()}
        summary.setdefault("engines", {}).update({f"{mode}/{run}": e for run, e in eng.items()})
        counts = sorted({e["engines"] for e in eng.values()})
        lines += [f"### {mode} ({'/'.join(map(str, counts)) or '?'} engine{'' if counts == [1] else 's'} per window)", "",
                  "Engines per window (manifest engines; capture --engines, run_holdout.sh ENGINES): "
                  + ", ".join(f"{run} {e['engines']} ({', '.join(e['engine_ids'])})" + (f" [{e['note']}]" if e["note"] else "")
                              for run, e in eng.items()), "",
                  "| run | model | req E2E MAPE % | E2E bias % | TTFT MAPE % | traj E2E MAPE % | batch readiness err % "
                  "(bias) | real spread E2E CV % (max dev) | real spread readiness CV % (max dev) | "
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
                dec = decomposition(rep)
                if dec:
                    summary["decomposition"][f"{mode}/{run}/{model}"] = dec
                tdir = TRACES_ROOT[0] / f"{mode}-{run}"
                rdir = root / mode / run / model
                if (tdir / "manifest.json").exists() and (rdir / "replay_result.json").exists():
                    paths = [rdir / "replay_result.json"] + ([rdir / "bound-lanes" / "replay_result.json"]
                                                             if (rdir / "bound-lanes" / "replay_result.json").exists() else [])
                    xr = readiness_across_engines(tdir, paths, check_arrivals=mode == "grpo")
                    if xr is not None:
                        summary.setdefault("readiness_across_engines", {})[f"{mode}/{run}/{model}"] = xr
                        if not br:
                            row["ready_mape"] = xr["replays"][0]["mape_pct"]
                            row["ready_bias"] = xr["replays"][0]["bias_pct"]
                            row["ready_derived"] = True
                            if row["spread_ready_cv"] is None:
                                row["spread_ready_cv"], row["spread_ready_max"] = derived_spread
                    sp = e2e_split(tdir, rdir / "replay_result.json")
                    if sp:
                        summary.setdefault("e2e_split", {})[f"{mode}/{run}/{model}"] = sp
                bk = bracket(rep, "COMPARISON_LEVEL_ROLLOUT_BATCH", "batch_readiness")
                if bk:
                    summary["brackets"][f"{mode}/{run}/{model}"] = {
                        "bounds_bias_pct": [b.get("signed_bias_pct") for b in bk["bounds"]],
                        "records": bk.get("records"), "records_inside": bk.get("records_inside", 0),
                        "reading": bk.get("reading")}
                for k, v in row.items():
                    if isinstance(v, float):
                        agg[k].append(v)
                lines.append(f"| {run} | {model} | {fmt(row['e2e_mape'])} | {fmt(row['e2e_bias'], 1)} | "
                             f"{fmt(row['ttft_mape'])} | {fmt(row['traj_mape'])} | "
                             f"{fmt(row['ready_mape'])}{'*' if row.get('ready_derived') else ''} "
                             f"(bias {fmt(row['ready_bias'])}) | "
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
        if any(v.get("ready_derived") for k, v in summary["runs"].items() if k.startswith(mode + "/")):
            clock = ("checked per request: every predicted arrival = its measured arrival offset minus the window's "
                     "first" if mode == "grpo" else "one simulation of both engines, one ReplayResult; the slot pools "
                     "re-time first turns, so arrivals cannot be checked against the trace")
            lines += ["\\* batch readiness of rollout batches whose requests span more than one engine, derived here "
                      "(summarise.py readiness_across_engines): compare leaves them uncompared (\"separate simulated "
                      f"engines have separate clock origins\"); the replay's engines share one clock ({clock}), so "
                      "readiness = ready - the batch's first submit (predicted: earliest predicted arrival of its "
                      "requests, compare's O_p over all its engines) on both sides; the real spread is over the three "
                      "runs' measured means (report.metrics.repeat_spread).", ""]
        labs = [summary["runs"].get(f"{mode}/{runs[0]}/{mdl}", {}).get("label") for mdl in MODELS]
        lines += ["Labels (run " + runs[0] + "): " + "; ".join(f"`{x}`" for x in labs if x), ""]

        # targets (GRPO: probe-levelled profile; agentic: measured readiness inside the bracket)
        if mode == "grpo":
            lines += ["Targets with each probe-levelled profile (each run next to the real runs' own spread):", ""]
            for run, pm in [(r, pm) for pm in PROBE_MODELS for r in runs]:
                row = summary["runs"].get(f"{mode}/{run}/{pm}")
                if not row:
                    continue
                ok = {k: row.get(k) is not None and row[k] <= v for k, v in TARGETS.items()}
                summary["targets"][f"{mode}/{run}" + ("" if pm == "probe" else f"/{pm}")] = ok
                lines.append(f"- {run} {pm}: batch readiness error {fmt(row['ready_mape'])} % (target <= 5: "
                             f"{'met' if ok['ready_mape'] else 'NOT met'}; real spread CV {fmt(row['spread_ready_cv'])} %, "
                             f"max dev {fmt(row['spread_ready_max'])} %), request E2E MAPE {fmt(row['e2e_mape'])} % "
                             f"(target <= 8: {'met' if ok['e2e_mape'] else 'NOT met'}; real spread CV "
                             f"{fmt(row['spread_e2e_cv'])} %, max dev {fmt(row['spread_e2e_max'])} %)")
            lines.append("")
        else:
            lines += ["Bracket of batch readiness (lanes = slots with the client limit dropped .. lanes = the limit; "
                      "both UNMODELLED), per run and model:", "",
                      "| run | model | lower bound bias % | upper bound bias % | batches inside | reading |",
                      "|---|---|---|---|---|---|"]
            for run in runs:
                inside_all = {}
                for model in MODELS:
                    bk = summary["brackets"].get(f"{mode}/{run}/{model}")
                    xr = summary.get("readiness_across_engines", {}).get(f"{mode}/{run}/{model}")
                    if not bk and xr and len(xr["replays"]) == 2:
                        lo_r, hi_r = xr["replays"]
                        inside_n = sum(1 for b, m in xr["measured_ms"].items() if b in lo_r["batches"] and
                                       b in hi_r["batches"] and min(lo_r["batches"][b]["predicted_ms"],
                                                                    hi_r["batches"][b]["predicted_ms"]) <= m <=
                                       max(lo_r["batches"][b]["predicted_ms"], hi_r["batches"][b]["predicted_ms"]))
                        where = []
                        for b, m in sorted(xr["measured_ms"].items()):
                            if b in lo_r["batches"] and b in hi_r["batches"]:
                                a, z = lo_r["batches"][b]["predicted_ms"], hi_r["batches"][b]["predicted_ms"]
                                where.append(f"{b}: {m:.0f} ms in {a:.0f} .. {z:.0f}"
                                             + (f" ({100 * (m - a) / (z - a):.0f} %)" if z != a else ""))
                        bk = {"bounds_bias_pct": [lo_r["bias_pct"], hi_r["bias_pct"]], "records": len(xr["measured_ms"]),
                              "records_inside": inside_n, "reading": "derived*: " + "; ".join(where)}
                        summary["brackets"][f"{mode}/{run}/{model}"] = bk
                    if not bk:
                        continue
                    lo, hi = bk["bounds_bias_pct"][0], bk["bounds_bias_pct"][-1]
                    inside = bk["records_inside"] == bk["records"]
                    if model in PROBE_MODELS:
                        inside_all[model] = inside
                    lines.append(f"| {run} | {model} | {fmt(lo)} | {fmt(hi)} | {bk['records_inside']}/{bk['records']} | "
                                 f"{bk['reading']} |")
                summary["targets"][f"{mode}/{run}"] = {f"readiness_inside_bracket_{pm}": v for pm, v in inside_all.items()}
            lines.append("")
            for pm in PROBE_MODELS:
                key = f"readiness_inside_bracket_{pm}"
                got = [(run, summary["targets"][f"{mode}/{run}"].get(key)) for run in runs]
                if all(v is None for _, v in got):
                    continue
                lines += [f"Target (measured readiness inside the bracket in every run, {pm}): "
                          + ", ".join(f"{run} {'-' if v is None else 'met' if v else 'NOT met'}" for run, v in got), ""]

        # decomposition of batch readiness (all rollout batches), % of measured
        lines += ["Decomposition of batch readiness error, all rollout batches of the run (report/decompose.py, "
                  "% of measured; terms sum to the total):", "",
                  "| run | model | total | " + " | ".join(TERMS) + " |", "|---|---|---|" + "---|" * len(TERMS)]
        missing = []
        for run in runs:
            for model in MODELS:
                d = summary["decomposition"].get(f"{mode}/{run}/{model}")
                if d:
                    lines.append(f"| {run} | {model} | {fmt(d.get('total'))} | "
                                 + " | ".join(fmt(d.get(t)) for t in TERMS) + " |")
                    continue
                # no aggregate: the batches that are decomposed, one row each, and why the others are not
                rep = reps[(mode, model)].get(run) or {}
                why = []
                for bd in rep.get("decompositions", []):
                    if bd.get("metric") != "batch_readiness" or bd["record_id"] == "all rollout batches":
                        continue
                    if bd.get("terms"):
                        one = decomposition(rep, bd["record_id"]) or {}
                        summary["decomposition"][f"{mode}/{run}/{model}/{bd['record_id']}"] = one
                        lines.append(f"| {run} ({bd['record_id']}) | {model} | {fmt(one.get('total'))} | "
                                     + " | ".join(fmt(one.get(t)) for t in TERMS) + " |")
                    elif bd.get("unavailable_reason"):
                        why.append(f"{bd['record_id']}: {bd['unavailable_reason'][:220]}")
                if why:
                    missing.append(f"{run}/{model} ({'; '.join(why)})")
            if mode == "agentic":
                for model in MODELS:
                    rep = reps[(mode, model)].get(run)
                    d = decomposition(rep, "all trajectories") if rep else None
                    if d:
                        summary["decomposition"][f"{mode}/{run}/{model}/trajectories"] = d
                        lines.append(f"| {run} (all trajectories, trajectory E2E) | {model} | {fmt(d.get('total'))} | "
                                     + " | ".join(fmt(d.get(t)) for t in TERMS) + " |")
        lines.append("")
        if missing:
            lines += ["Not decomposed as a whole window (the report's reasons per batch): " + "; ".join(missing), ""]
        # compare's note where simulated batches overlap that the run kept apart (report/explain.batch_overlaps)
        ov = [(run, model, n) for run in runs for model in MODELS
              for n in (reps[(mode, model)].get(run) or {}).get("notes", []) if n.startswith("simulated rollout batches overlap")]
        summary.setdefault("batch_overlaps", {}).update({f"{mode}/{run}/{model}": n for run, model, n in ov})
        if ov:
            lines += ["Simulated rollout batches that overlap where the run kept them apart (compare's notes, "
                      "report/explain.batch_overlaps):", ""] + [f"- {run} {model}: {n}" for run, model, n in ov] + [""]
        lines += ["Exact split of the summed request E2E error (summarise.py e2e_split, % of the summed measured E2E; "
                  "client_path = the measured submit -> vLLM queued the simulator does not have, engine_first_token = "
                  "predicted TTFT - measured queued -> first token, after_first_token = the decode part):", "",
                  "| run | model | total | " + " | ".join(SPLIT) + " | requests |", "|---|---|---|" + "---|" * (len(SPLIT) + 1)]
        for run in runs:
            for model in MODELS:
                sp = summary.get("e2e_split", {}).get(f"{mode}/{run}/{model}")
                if sp:
                    lines.append(f"| {run} | {model} | {fmt(sp['total'])} | " + " | ".join(fmt(sp[t]) for t in SPLIT)
                                 + f" | {sp['requests']} |")
        lines.append("")

        # profile check: real / model per phase on the rebuilt steps (report/profile_check.py)
        lines += ["Profile check (report/profile_check.py: real / model step time per phase on the rebuilt engine steps, "
                  "median (IQR)):", ""]
        for run in runs:
            for model in MODELS:
                pc = (reps[(mode, model)].get(run) or {}).get("profile_check") or {}
                if pc.get("phases"):
                    summary.setdefault("profile_check", {})[f"{mode}/{run}/{model}"] = pc["phases"]
                    ph = "; ".join(f"{x['phase']} {x['median_ratio']:.2f}x ({x['p25_ratio']:.2f}-{x['p75_ratio']:.2f}, "
                                   f"{x['intervals']} intervals)" for x in pc["phases"])
                    lines.append(f"- {run} {model}: {ph}. {pc.get('reading', '')}")
                elif model in PROBE_MODELS and reps[(mode, model)].get(run):
                    lines.append(f"- {run} {model}: not available: {pc.get('unavailable_reason', '?')[:160]}...")
        lines.append("")

        # conditions and probe levels
        lines += [f"Conditions of each {mode} window (TraceManifest.conditions) and its probe levels (levels.json: "
                  "probe median / the base profile's fitted model):", "",
                  "| run | load 1m start -> end | host busy % | steal % | engine CPU s in window (share of wall %) | "
                  "engine uptime s | probe decode B=1 / B=32 / prefill 512 / batched prefill (rows x tokens) median ms "
                  "(per engine, before -> after) | scalar decode level | scalar prefill level | two-term decode "
                  "fixed / per-seq factor | prefill level by pass tokens |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for run in runs:
            tdir = TRACES_ROOT[0] / f"{mode}-{run}"
            if not (tdir / "manifest.json").exists():
                continue
            cd = conditions(tdir)
            summary["conditions"][f"{mode}/{run}"] = cd
            lvp = root / mode / run / "levels.json"
            lv = json.loads(lvp.read_text()) if lvp.exists() else {}
            summary["levels"][f"{mode}/{run}"] = {k: lv.get(k) for k in ("decode_level", "prefill_level", "levelling",
                                                                          "decode", "prefill")}
            lvcp = root / mode / run / "levels-contended.json"
            lvc = json.loads(lvcp.read_text()) if lvcp.exists() else {}
            if lvc:
                summary["levels"][f"{mode}/{run}"]["contended"] = {k: lvc.get(k) for k in (
                    "decode_level", "prefill_level", "points", "variant")}
            dapp = (lv.get("decode") or {}).get("applied") or {}
            dtt = (lv.get("decode") or {}).get("two_term") or {}
            if dtt.get("method") == "two_term":
                two = f"{fmt(dtt['fixed_factor'], 3)} / {fmt(dtt['per_sequence_factor'], 3)}"
            else:
                two = f"refused ({dtt.get('reason', 'not computed')})" if lv.get("decode") else "-"
            if dapp.get("fallback_reason"):
                two += " (scalar applied)"
            bytok = ((lv.get("prefill") or {}).get("by_tokens") or {}).get("points") or []
            pre_by = ", ".join(f"{q['level']:.3f} @ {q['tokens']}" for q in bytok) or "-"
            cpu = ", ".join(f"{v:.2f} ({cd['engine_cpu_share_pct'].get(e, 0):.0f})" for e, v in sorted(cd["engine_cpu_s"].items()))
            per_eng = defaultdict(dict)
            for p in cd["probes"]:
                per_eng[p["engine_id"]][p["when"]] = p["points"]

            def pts(x):
                batched = [k for k in x if k.startswith("prefill ") and "x" in k]
                out = "/".join(fmt(x.get(k, [None, None])[1]) for k in ("decode B=1", "decode B=32", "prefill 512"))
                return out + "".join(f"/{fmt(x[k][1])} ({k[8:]})" for k in batched)
            probes = "; ".join(f"{pts(w.get('before', {}))} -> {pts(w.get('after', {}))}" for _, w in sorted(per_eng.items()))
            if lvc:
                cont = defaultdict(dict)
                for p in cd["probes"]:
                    cont[p["engine_id"]][p["when"]] = {k: v[:3] for k, v in p["contended_points"].items()}
                probes += ("<br>contended: " + "; ".join(f"{pts(w.get('before', {}))} -> {pts(w.get('after', {}))}"
                                                         for _, w in sorted(cont.items())))
                dl = f"{fmt(lv.get('decode_level'), 3)} (contended {fmt(lvc.get('decode_level'), 3)})"
                pl = f"{fmt(lv.get('prefill_level'), 3)} (contended {fmt(lvc.get('prefill_level'), 3)})"
            else:
                dl, pl = fmt(lv.get('decode_level'), 3), fmt(lv.get('prefill_level'), 3)
            lines.append(f"| {run} | {fmt(cd['loadavg_1m_start'], 2)} -> {fmt(cd['loadavg_1m_end'], 2)} | "
                         f"{fmt(cd['host_busy_pct'])} | {fmt(cd['steal_pct'])} | {cpu or '-'} | {fmt(cd['engine_uptime_s'], 0)} | "
                         f"{probes or '-'} | {dl} | {pl} | "
                         f"{two} | {pre_by} |")
        lines.append("")

        # effects measured in the traces
        lines += [f"Measured in the {mode} holdout traces (ms; median / p90 / max over requests):", "",
                  "| run | requests | window s | submit -> vLLM queued (client lock + pipe + runtime) | "
                  "queued -> scheduled | scheduled -> first token (engine) | submit -> first token | "
                  "external delay between turns | last completion -> batch ready (GRPO) / slot release (agentic) | "
                  "vLLM peak concurrent requests (queued->done) | engine busy % of span |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for run in runs:
            tdir = TRACES_ROOT[0] / f"{mode}-{run}"
            if not (tdir / "manifest.json").exists():
                continue
            ef = effects(tdir)
            summary["effects"][f"{mode}/{run}"] = ef

            def trio(s):
                return "-" if not s else f"{s['median']:.1f} / {s['p90']:.1f} / {s['max']:.1f}"

            lines.append(f"| {run} | {ef['requests']} | {ef['window_s']:.2f} | {trio(ef['submit_to_queued_ms'])} | "
                         f"{trio(ef['queued_to_scheduled_ms'])} | {trio(ef['scheduled_to_first_token_ms'])} | "
                         f"{trio(ef['submit_to_first_token_ms'])} | {trio(ef['external_delay_ms'])} | "
                         f"{trio(ef['batch_return_path_ms'] or ef['slot_release_after_last_completion_ms'])} | "
                         f"{ef['engine_peak_concurrent_requests']} | {fmt(100 * (ef['engine_busy_fraction'] or 0))} |")
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
    if len(sys.argv) > 2:
        TRACES_ROOT[0] = Path(sys.argv[2])
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/holdout"))
