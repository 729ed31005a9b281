"""Readable plain-text rendering of a ``ValidationReport`` (pure: message in, string out).

Layout: the honesty label; granularity, capture overhead and unavailable requests; one row per
metric (pairs, MAPE, median / p90 APE, signed bias, measured and predicted p50 / p90 / p99 in ms)
with the run-to-run spread (CV and max deviation, %) of the real execution next to it when
repeats were given; aggregate rows show the measured and predicted number; then the not-compared
records counted per metric and reason, and the notes.
"""

from __future__ import annotations

import unicodedata
from collections import Counter

from unirl_replay.report.compare import LEVEL_NAMES
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb


def _f(msg, field: str, fmt: str = "{:.1f}") -> str:
    return fmt.format(getattr(msg, field)) if msg.HasField(field) else "-"


#: Longest id a table cell shows whole (validation_report.json holds every id whole).
CELL_ID_CHARS = 64


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal: East Asian wide / fullwidth characters (CJK, most emoji) two,
    combining marks none (``len`` misaligned every column after a CJK id)."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _id_cell(text: str) -> str:
    """An id in a table cell: whole up to CELL_ID_CHARS characters, else its start and end around ``...`` (one
    1000-character trajectory id made every row of the decomposition table 1,200 columns wide)."""
    if len(text) <= CELL_ID_CHARS:
        return text
    tail = CELL_ID_CHARS // 4
    return f"{text[:CELL_ID_CHARS - tail - 3]}...{text[-tail:]}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(_width(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for j, r in enumerate(rows):
        out.append("  ".join(c + " " * (w - _width(c)) if i < 2 else " " * (w - _width(c)) + c
                             for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def format_report(report: vpb.ValidationReport, max_reasons: int = 12) -> str:
    """The report as a multi-line string (no trailing newline)."""
    lines = [f"Validation report: {report.label}", ""]
    gran = rpb.ResultGranularity.Name(report.granularity).removeprefix("RESULT_GRANULARITY_")
    co = report.capture_overhead
    overhead = (f"{100 * co.overhead_ratio:+.1f}% over {co.pairs} paired runs ({co.method})"
                if co.HasField("overhead_ratio") else "not measured")
    lines += [f"trace {report.trace_id}  |  granularity {gran}  |  capture overhead {overhead}",
              f"workload: {report.workload_requests} engine requests, {report.workload_samples} samples (sequences; "
              f"n > 1 fans one request out)  |  requests left out (measured outcome unavailable): "
              f"{report.requests_unavailable}", ""]
    incomplete = [n for n in report.notes if n.startswith(("INCOMPLETE capture", "capture warning ("))]
    for n in incomplete:  # also among the notes; said up front: what follows is of the whole records only
        lines.append(f"WARNING: {n}")
    for w in report.condition_warnings:
        lines.append(f"WARNING (conditions): {w}")
    if report.condition_warnings or incomplete:
        lines.append("")
    spread = {(s.level, s.metric): s for s in report.repeat_spread}
    per_record = [m for m in report.metrics if m.level != vpb.COMPARISON_LEVEL_AGGREGATE]
    aggregate = [m for m in report.metrics if m.level == vpb.COMPARISON_LEVEL_AGGREGATE]
    if per_record:
        rows = [["level", "metric", "pairs", "MAPE%", "medAPE%", "p90APE%", "bias%", "meas p50/p90/p99 ms",
                 "pred p50/p90/p99 ms", "repeat CV% (max dev%)"]]
        for m in per_record:
            s = spread.get((m.level, m.metric))
            rows.append([LEVEL_NAMES.get(m.level, "?"), m.metric, str(m.pairs) + (f" ({m.zero_measured} zero)" if m.zero_measured else ""),
                         _f(m, "mape_pct"), _f(m, "median_ape_pct"), _f(m, "p90_ape_pct"),
                         _f(m, "signed_bias_pct", "{:+.1f}"),
                         "/".join(_f(m, f"measured_{p}_ms") for p in ("p50", "p90", "p99")),
                         "/".join(_f(m, f"predicted_{p}_ms") for p in ("p50", "p90", "p99")),
                         f"{_f(s, 'cv_pct')} ({_f(s, 'max_dev_pct')}) n={s.repeats}" if s else "-"])
        lines += _table(rows)
    if report.granularity == rpb.RESULT_GRANULARITY_AGGREGATE_ONLY:
        lines += ["AGGREGATE-ONLY comparison (the replay result has no per-request rows):"]
    if aggregate:
        rows = [["level", "metric", "measured", "predicted", "error%"]]
        for m in aggregate:
            rows.append(["aggregate", m.metric, _f(m, "measured_value", "{:.3f}"), _f(m, "predicted_value", "{:.3f}"),
                         _f(m, "signed_bias_pct", "{:+.1f}")])
        lines += _table(rows)
    if not report.metrics:
        lines.append("no metric could be compared")
    lines += explanation_lines(report)
    if report.not_compared:
        counts = Counter((LEVEL_NAMES.get(n.level, "?"), n.metric, n.reason) for n in report.not_compared)
        lines += ["", f"not compared: {len(report.not_compared)} (level / metric / reason: count)"]
        for (lv, metric, reason), c in counts.most_common(max_reasons):
            lines.append(f"  {lv} / {metric or '*'} / {reason}: {c}")
        if len(counts) > max_reasons:
            lines.append(f"  ... {len(counts) - max_reasons} more distinct reasons in validation_report.json")
    if report.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in report.notes]
    if report.artifacts:
        lines += ["", "files: " + ", ".join(report.artifacts)]
    return "\n".join(lines)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:+.1f}"


def explanation_lines(report: vpb.ValidationReport, max_traj_rows: int = 6) -> list[str]:
    """The "where the error comes from" sections: brackets, profile check, decomposition, steps."""
    lines: list[str] = []
    for b in report.brackets:
        lines += ["", f"UNMODELLED bracket ({b.rule}), {LEVEL_NAMES.get(b.level, '?')} {b.metric}: no single prediction; "
                  "the two bounds upstream can express:"]
        for bd in b.bounds:
            lines.append(f"  {bd.name}: mean {bd.mean_ms:.1f} ms (bias {bd.signed_bias_pct:+.1f} %)  [{bd.replay_result}]")
        lines.append(f"  measured: mean {b.measured_mean_ms:.1f} ms; {b.records_inside} of {b.records} records inside "
                     f"the bracket. {b.reading}")
    steps = [es for es in report.engine_steps]
    if steps:
        lines += ["", "engine steps rebuilt from the measured outcomes (vLLM V1 per-sample first token / completion):"]
        for es in steps:
            if es.unavailable_reason:
                lines.append(f"  {es.engine_id}: NOT rebuilt: {es.unavailable_reason}")
                continue
            segs = len({s.segment for s in es.steps})
            checks = ", ".join(f"{c.name}: {'ok' if c.passed else 'FAILED'}" for c in es.checks)
            lines.append(f"  {es.engine_id}: {len(es.steps)} steps in {segs} segments, {es.samples} samples, "
                         f"{len(es.intervals)} measured intervals ({checks})")
            for c in es.checks:  # what a FAILED check means is in its detail (it was in the JSON alone)
                if not c.passed and c.detail:
                    lines.append(f"    {c.name}: {c.detail[:300]}")
    pc = report.profile_check
    if pc.timing_model or pc.unavailable_reason:
        lines += ["", f"profile check: {pc.timing_model} on the REAL step schedule (real / model per phase):"]
        if pc.unavailable_reason:
            lines.append(f"  not done: {pc.unavailable_reason}")
        else:
            rows = [["phase", "intervals", "steps", "median", "IQR", "total", "real ms", "model ms"]]
            for p in pc.phases:
                rows.append([p.phase, str(p.intervals), str(p.steps), f"{p.median_ratio:.2f}x",
                             f"{p.p25_ratio:.2f}-{p.p75_ratio:.2f}", f"{p.total_ratio:.2f}x", f"{p.real_ms:.1f}",
                             f"{p.model_ms:.1f}"])
            lines += ["  " + r for r in _table(rows)]
            lines.append(f"  reading: {pc.reading}")
        if pc.profile_spread:
            lines.append(f"  the profile's own spread (provenance): {pc.profile_spread}")
    decs = list(report.decompositions)
    if decs:
        lines += ["", "decomposition of predicted - measured (ms; % of measured; the terms sum exactly to the total):"]
        names = [t.name for t in next((d for d in decs if d.terms), vpb.ErrorDecomposition()).terms]
        rows = [["level", "record", "measured", "predicted", "total"] + names]
        skipped = []
        trajs = [d for d in decs if d.level == vpb.COMPARISON_LEVEL_TRAJECTORY and d.terms and d.record_id != "all trajectories"]
        shown_traj = {d.record_id for d in sorted(trajs, key=lambda d: -abs(d.total_ns))[:max_traj_rows]}
        for d in decs:
            if d.level == vpb.COMPARISON_LEVEL_TRAJECTORY and d.terms and d.record_id != "all trajectories" \
                    and d.record_id not in shown_traj:
                continue
            if d.unavailable_reason:
                skipped.append(d)
                continue
            pct = (lambda ns: f" ({100 * ns / d.measured_ns:+.1f}%)") if d.measured_ns else (lambda ns: "")
            rows.append([LEVEL_NAMES.get(d.level, "?"), _id_cell(d.record_id), f"{d.measured_ns / 1e6:.1f}",
                         f"{d.predicted_ns / 1e6:.1f}", _ms(d.total_ns) + pct(d.total_ns)]
                        + [_ms(t.delta_ns) + pct(t.delta_ns) for t in d.terms])
        if len(rows) > 1:
            lines += ["  " + r for r in _table(rows)]
            if len(trajs) > len(shown_traj):
                lines.append(f"  (the {len(shown_traj)} trajectories with the largest error of {len(trajs)}; every one is "
                             "in validation_report.json)")
            what = next(d for d in decs if d.terms)
            lines += [f"  {t.name}: {t.what}" for t in what.terms]
        for d in skipped[:5]:
            lines.append(f"  {LEVEL_NAMES.get(d.level, '?')} {d.record_id}: not decomposed: {d.unavailable_reason}")
        if len(skipped) > 5:
            lines.append(f"  ... {len(skipped) - 5} more not decomposed (validation_report.json)")
    return lines
