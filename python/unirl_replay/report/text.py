"""Readable plain-text rendering of a ``ValidationReport`` (pure: message in, string out).

Layout: the honesty label; granularity, capture overhead and unavailable requests; one row per
metric (pairs, MAPE, median / p90 APE, signed bias, measured and predicted p50 / p90 / p99 in ms)
with the run-to-run spread (CV and max deviation, %) of the real execution next to it when
repeats were given; aggregate rows show the measured and predicted number; then the not-compared
records counted per metric and reason, and the notes.
"""

from __future__ import annotations

from collections import Counter

from unirl_replay.report.compare import LEVEL_NAMES
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb


def _f(msg, field: str, fmt: str = "{:.1f}") -> str:
    return fmt.format(getattr(msg, field)) if msg.HasField(field) else "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for j, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
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
              f"requests left out (measured outcome unavailable): {report.requests_unavailable}", ""]
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
