"""PNG plots of a matched comparison (matplotlib, Agg backend, no pyplot state).

Every figure's title (``Figure.suptitle``) ends with the report's honesty label (timing model and
calibration status, workload role and name, simulator), so a plot never travels without it.

- :func:`scatter_figure`: predicted vs measured per metric of one level (log-log when the range is
  wide), with the y = x line.
- :func:`cdf_figure`: measured and predicted empirical CDFs per metric of one level.
- :func:`timeline_figure`: one rollout batch, real vs simulated, one panel per engine; each request a
  row with a real bar (measured submit -> completion) and a simulated bar (arrival -> completion),
  the first token as a tick; times in ms from the batch's first submit on that engine (the same
  origin the comparison uses), the batch readiness as vertical lines.

Figures are built with ``matplotlib.figure.Figure`` and saved with :func:`save_png`; the builders
are pure (no file I/O) so tests can inspect titles before saving.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.textpath import text_to_path

from unirl_replay.contract.out_dir import id_file_stem
from unirl_replay.report import compare as C
from unirl_replay.report.metrics import NS_PER_MS, ecdf
from unirl_replay.v1 import common_pb2 as cpb
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import report_pb2 as vpb
from unirl_replay.v1 import workload_pb2 as wpb

REAL_COLOR = "#1f77b4"
SIM_COLOR = "#ff7f0e"
WAIT_COLOR = "#555555"
UP_COLOR = "#2ca02c"
DOWN_COLOR = "#d62728"


#: What one pair is at each level (a request is an engine request; its n samples are one pair).
_UNITS = {C.L_REQ: "requests", C.L_GROUP: "groups", C.L_TRAJ: "trajectories", C.L_BATCH: "rollout batches"}

#: Fewest pairs for a scatter / a CDF: fewer points say nothing about a distribution.
MIN_SCATTER_POINTS = 3
MIN_CDF_POINTS = 10
TITLE_FONTSIZE = 10
#: The timeline figure's most rows (requests; split over its engine panels, at least MIN_TIMELINE_ROWS each) and
#: panels (engines); what it leaves out its title says (Perfetto's timeline holds every request).
MAX_TIMELINE_ROWS = 240
MIN_TIMELINE_ROWS = 8
MAX_TIMELINE_ENGINES = 24
#: Longest id a plot's title, panel title or row label shows whole.
SHORT_ID_CHARS = 64


def _width_pt(text: str, fontsize: float) -> float:
    """The drawn width of ``text`` in points, measured with the font matplotlib draws it in (a missing glyph's
    box included)."""
    return text_to_path.get_text_width_height_descent(text, FontProperties(size=fontsize), ismath=False)[0]


def wrap_label(label: str, width_in: float, fontsize: float = TITLE_FONTSIZE) -> str:
    """The honesty label broken at its `` | `` separators (then at spaces, then anywhere) so that no line is wider
    than the figure, each line's width measured in the font it is drawn in (a fixed 0.6 em per character let a
    workload name of wide characters, ``W`` or CJK, run past both edges of the figure: the label clipped)."""
    max_pt = width_in * 72 * 0.92

    def fits(text: str) -> bool:
        return _width_pt(text, fontsize) <= max_pt

    lines: list[str] = []
    for part in label.split(" | "):
        cand = f"{lines[-1]} | {part}" if lines else part
        if lines and fits(cand):
            lines[-1] = cand
            continue
        while part and not fits(part):
            lo, hi = 1, len(part)  # the longest prefix that fits (at least one character a line)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fits(part[:mid]) else (lo, mid - 1)
            cut = part.rfind(" ", 0, lo + 1)
            cut = cut if cut > 0 else lo
            lines.append(part[:cut])
            part = part[cut:].lstrip()
        lines.append(part)
    return "\n".join(lines)


def _plain(text: str) -> str:
    """Text from the trace (names, ids, labels) shown literally: ``$...$`` is matplotlib math
    markup, and a malformed one would end the plot in a parse error."""
    return text.replace("$", r"\$")


def _title(fig: Figure, what: str, label: str) -> None:
    width = fig.get_figwidth()
    text = f"{wrap_label(what, width)}\n{wrap_label(label, width)}"
    # a title of more lines than the usual three (a long workload name in the label) makes the figure taller by
    # them: the plot keeps its room and no line of the label falls off the top
    extra = max(0, text.count("\n") + 1 - 3) * TITLE_FONTSIZE * 1.3 / 72
    if extra:
        fig.set_figheight(fig.get_figheight() + extra)
    fig.suptitle(_plain(text), fontsize=TITLE_FONTSIZE)


def _metrics_at(pairs: Mapping[tuple[int, str], C.Pairs], level: int, min_points: int = 1) -> list[tuple[str, C.Pairs]]:
    return [(m, p) for (lv, m), p in pairs.items() if lv == level and len(p.ids) >= min_points]


def scatter_figure(pairs: Mapping[tuple[int, str], C.Pairs], level: int, label: str) -> Figure | None:
    """Predicted vs measured scatter of every metric of ``level`` with at least
    :data:`MIN_SCATTER_POINTS` pairs; None when none has."""
    items = _metrics_at(pairs, level, MIN_SCATTER_POINTS)
    if not items:
        return None
    fig = Figure(figsize=(4.6 * len(items), 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (metric, p) in enumerate(items):
        ax = fig.add_subplot(1, len(items), i + 1)
        x, y = p.measured_ns / NS_PER_MS, p.predicted_ns / NS_PER_MS
        ax.scatter(x, y, s=14, alpha=0.7, color=SIM_COLOR, edgecolors="none")
        lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
        pos = np.concatenate([x[x > 0], y[y > 0]])
        if pos.size and lo > 0 and hi / lo > 50:
            ax.set_xscale("log")
            ax.set_yscale("log")
        pad = 0.05 * (hi - lo or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", lw=1, ls="--", label="y = x")
        ax.set_xlabel(f"measured {metric} (ms)")
        ax.set_ylabel(f"predicted {metric} (ms)")
        ax.set_title(f"{metric}: {len(p.ids)} {_UNITS[level]}", fontsize=9)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    _title(fig, f"Predicted vs measured, {C.LEVEL_NAMES[level]} level", label)
    return fig


def cdf_figure(pairs: Mapping[tuple[int, str], C.Pairs], level: int, label: str) -> Figure | None:
    """Measured and predicted CDF overlays per metric of ``level`` with at least :data:`MIN_CDF_POINTS`
    pairs; None when no metric has that many."""
    items = _metrics_at(pairs, level, MIN_CDF_POINTS)
    if not items:
        return None
    fig = Figure(figsize=(4.6 * len(items), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (metric, p) in enumerate(items):
        ax = fig.add_subplot(1, len(items), i + 1)
        for values, name, color in ((p.measured_ns, "measured", REAL_COLOR), (p.predicted_ns, "predicted", SIM_COLOR)):
            x, f = ecdf(values / NS_PER_MS)
            ax.step(x, f, where="post", color=color, label=name)
        ax.set_xlabel(f"{metric} (ms)")
        ax.set_ylabel("fraction of pairs")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{metric}: {len(p.ids)} {_UNITS[level]}", fontsize=9)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    _title(fig, f"CDF, measured vs predicted, {C.LEVEL_NAMES[level]} level", label)
    return fig


def timeline_figure(workload: Sequence[wpb.WorkloadRecord], outcomes: Iterable[opb.OutcomeRecord],
                    replay: rpb.ReplayResult, batch_id: str, label: str) -> Figure:
    """Real vs simulated timeline of one rollout batch, one panel per engine (see module doc).

    Raises:
        ValueError: ``batch_id`` has no requests in the workload.
    """
    idx = C.index_workload(workload)
    rids = idx.requests_of_batch.get(batch_id, [])
    if not rids:
        raise ValueError(f"rollout batch {batch_id!r} has no requests in the workload")
    outs = list(outcomes)
    req_out = {o.request.request_id: o.request for o in outs if o.WhichOneof("record") == "request"}
    ready_m = {o.rollout_batch.rollout_batch_id: o.rollout_batch.ready_ns for o in outs
               if o.WhichOneof("record") == "rollout_batch" and o.rollout_batch.HasField("ready_ns")}
    rows = {r.request_id: r for r in replay.requests}
    ready_p = {b.rollout_batch_id: b.ready_ns for b in replay.rollout_batches if b.HasField("ready_ns")}
    all_engines = sorted({idx.requests[r].engine_id for r in rids})
    engines = all_engines[:MAX_TIMELINE_ENGINES]
    cap = max(MIN_TIMELINE_ROWS, MAX_TIMELINE_ROWS // len(engines))  # rows per engine panel
    panels = []
    for eng in engines:
        mine = [r for r in rids if idx.requests[r].engine_id == eng]
        mb = {r: C.measured_request_boundaries(idx.requests[r], req_out[r]) for r in mine if r in req_out}
        pb = {r: C.predicted_request_boundaries(rows[r]) for r in mine if r in rows}
        panels.append((eng, mine, mb, pb, _row_order(idx, mine, mb)[:cap]))
    shown = sum(len(p[4]) for p in panels)
    heights = [max(2, len(p[4])) for p in panels]
    # a batch of thousands of requests was a PNG of 1100 x 105,798 pixels (116 MP, a minute to draw): the figure
    # holds at most MAX_TIMELINE_ROWS rows and MAX_TIMELINE_ENGINES panels, and its title says what it leaves out
    fig = Figure(figsize=(10, 1.2 + 0.32 * sum(heights) + 0.6 * len(engines)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(engines), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (eng, mine, mb, pb, order) in zip(axes, panels):
        om = min((b["submit"] for b in mb.values() if "submit" in b), default=None)
        op = min((b["submit"] for b in pb.values() if "submit" in b), default=None)
        row = {r: y for y, r in enumerate(order)}
        waits = False
        for y, rid in enumerate(order):
            for b, o, dy, color in ((mb.get(rid, {}), om, -0.17, REAL_COLOR), (pb.get(rid, {}), op, 0.17, SIM_COLOR)):
                if o is None or "submit" not in b or "completion" not in b:
                    continue
                s, e = (b["submit"] - o) / NS_PER_MS, (b["completion"] - o) / NS_PER_MS
                ax.barh(y + dy, e - s, left=s, height=0.3, color=color, alpha=0.85)
                if "first_token" in b:
                    ft = (b["first_token"] - o) / NS_PER_MS
                    ax.plot([ft, ft], [y + dy - 0.15, y + dy + 0.15], color="black", lw=1)
            # tool waits: predecessor's completion -> this request's submit, on both sides
            for dep in idx.requests[rid].dependencies:
                if dep.trigger != cpb.DEPENDENCY_TRIGGER_COMPLETION or dep.predecessor_request_id not in row:
                    continue
                for side, o, dy in ((mb, om, -0.17), (pb, op, 0.17)):
                    a, b = side.get(dep.predecessor_request_id, {}), side.get(rid, {})
                    if o is None or "completion" not in a or "submit" not in b or b["submit"] < a["completion"]:
                        continue
                    ax.plot([(a["completion"] - o) / NS_PER_MS, (b["submit"] - o) / NS_PER_MS], [y + dy, y + dy],
                            color=WAIT_COLOR, lw=1.2, ls=":")
                    waits = True
        if len(engines) == 1 and om is not None and batch_id in ready_m:
            ax.axvline((ready_m[batch_id] - om) / NS_PER_MS, color=REAL_COLOR, ls="--", lw=1.2)
        if len(engines) == 1 and op is not None and batch_id in ready_p:
            ax.axvline((ready_p[batch_id] - op) / NS_PER_MS, color=SIM_COLOR, ls="--", lw=1.2)
        ax.set_yticks(range(len(order)), [_plain(_row_label(idx.requests[r])) for r in order],
                      fontsize=7 if len(order) < 40 else 5)
        ax.set_ylim(max(len(order), 1) - 0.5, -0.5)  # first row on top; no 5 % margin (12 empty rows at 240)
        ax.set_xlabel("ms from the batch's first submit on this engine")
        left = f" (the first {len(order)} of its {len(mine)} requests by measured submit)" if len(order) < len(mine) else ""
        ax.set_title(_plain(f"engine {_short(eng)}{left}"), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        handles = [Patch(color=REAL_COLOR, label="real: submit -> completion"),
                   Patch(color=SIM_COLOR, label="simulated: arrival -> completion"),
                   Line2D([], [], color="black", lw=1, label="first token")]
        if waits:
            handles.append(Line2D([], [], color=WAIT_COLOR, ls=":", lw=1.2,
                                  label="tool wait: previous turn done -> next submit"))
        if len(engines) == 1:
            handles.append(Line2D([], [], color="grey", ls="--", label="batch ready (bar colour)"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    left = ""
    if shown < len(rids) or len(engines) < len(all_engines):
        left = (f"; {shown} of its {len(rids)} requests"
                + (f" on {len(engines)} of its {len(all_engines)} engines" if len(engines) < len(all_engines) else "")
                + " shown, every one in timeline.perfetto.json")
    _title(fig, f"Rollout batch {_short(batch_id)}: real vs simulated{left}", label)
    return fig


def waterfall_figure(d: vpb.ErrorDecomposition, label: str) -> Figure | None:
    """Measured -> each additive term -> predicted, as a waterfall (ms); None when not decomposed."""
    if d.unavailable_reason or not d.terms:
        return None
    fig = Figure(figsize=(8.5, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    names = ["measured"] + [t.name.replace("_", " ") for t in d.terms] + ["predicted"]
    level = d.measured_ns / NS_PER_MS
    levels = [0.0, level]
    ax.bar(0, level, color=REAL_COLOR)
    ax.text(0, level, f"{level:.1f}", ha="center", va="bottom", fontsize=8)
    for i, t in enumerate(d.terms, start=1):
        delta = t.delta_ns / NS_PER_MS
        ax.bar(i, delta, bottom=level, color=UP_COLOR if delta >= 0 else DOWN_COLOR)
        # a measured value of 0 has no percentage (pct_of_measured is 0.0 there, not a share of anything)
        pct = f"\n({t.pct_of_measured:+.1f}%)" if d.measured_ns else ""
        ax.text(i, max(level, level + delta), f"{delta:+.1f}{pct}", ha="center", va="bottom", fontsize=7)
        if i > 1:
            ax.plot([i - 1.4, i - 0.6], [level, level], color="grey", lw=0.8)
        level += delta
        levels.append(level)
    pred = d.predicted_ns / NS_PER_MS
    ax.bar(len(names) - 1, pred, color=SIM_COLOR)
    ax.text(len(names) - 1, pred, f"{pred:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"{d.metric} (ms)")
    # every running level on the axes: a term can take it above both ends (or below 0), and a bar cut off at the
    # axes' edge reads as a smaller term
    levels.append(pred)
    lo, hi = min(levels), max(levels)
    span = (hi - lo) or 1.0
    ax.set_ylim(lo - 0.05 * span if lo < 0 else 0.0, hi + 0.18 * span)
    ax.grid(axis="y", alpha=0.3)
    kind = "Rollout batch" if d.level == C.L_BATCH else "Trajectory"
    # the summed rows ("all rollout batches", "all trajectories") name themselves: not "Rollout batch all rollout batches"
    what = d.record_id.capitalize() if d.record_id in ("all rollout batches", "all trajectories") else f"{kind} {_short(d.record_id)}"
    pct = f" ({100 * d.total_ns / d.measured_ns:+.1f} %)" if d.measured_ns else " (measured 0 ms: no %)"
    _title(fig, f"{what}: predicted - measured = {d.total_ns / NS_PER_MS:+.1f} ms{pct}, additive terms (sum exact)",
           label)
    return fig


def _short(text: str, limit: int = SHORT_ID_CHARS) -> str:
    """An id as a plot shows it: whole up to ``limit`` characters, else its start and end around an ellipsis
    (ids may hold 1024 characters: one such tick label squeezed the timeline's axes to nothing). The report JSON,
    the table and the Perfetto timeline keep every id whole; the honesty label is never shortened."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[:limit - tail - 1]}\u2026{text[-tail:]}"


def _row_label(q: wpb.Request) -> str:
    """A timeline row: trajectory and turn for agentic requests, the request (and its n) otherwise."""
    if q.trajectory_id:
        turn = f" turn {q.turn_index}" if q.HasField("turn_index") else ""
        return f"{_short(q.trajectory_id, SHORT_ID_CHARS // 2)}{turn} ({_short(q.request_id, SHORT_ID_CHARS // 2)})"
    return _short(q.request_id) + (f" (n={q.num_samples})" if q.num_samples > 1 else "")


def _row_order(idx, rids: Sequence[str], mb: Mapping[str, dict]) -> list[str]:
    """Rows grouped by trajectory (in order of its first measured submit), then turn; plain requests
    by measured submit."""
    far = 1 << 62
    first: dict[str, int] = {}
    for r in rids:
        t = idx.requests[r].trajectory_id or r
        first[t] = min(first.get(t, far), mb.get(r, {}).get("submit", far))
    return sorted(rids, key=lambda r: (first[idx.requests[r].trajectory_id or r], idx.requests[r].trajectory_id,
                                       idx.requests[r].turn_index, mb.get(r, {}).get("submit", far), r))


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG (dpi 110) and return the path."""
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    return path


def pick_batch(workload: Sequence[wpb.WorkloadRecord]) -> str | None:
    """The batch shown in the timeline: the first rollout batch in workload order (None if none)."""
    idx = C.index_workload(workload)
    ids = list(dict.fromkeys([*idx.batches, *idx.requests_of_batch]))
    return ids[0] if ids else None


def _safe(name: str, among=None) -> str:
    return id_file_stem(name, among)  # bounded and collision-free: one batch's plot never replaces another's


def write_waterfalls(out_dir: str | Path, report: vpb.ValidationReport) -> list[str]:
    """``waterfall_<batch>.png`` for every decomposed rollout batch (and the sum over batches)."""
    out, written = Path(out_dir), []
    batch_ids = [d.record_id for d in report.decompositions if d.level == C.L_BATCH]
    for d in report.decompositions:
        if d.level != C.L_BATCH:
            continue
        fig = waterfall_figure(d, report.label)
        if fig is not None:
            # the summed row is ours, not an id: its name stays waterfall_all_rollout_batches.png (a batch of
            # that very id gets the hashed stem, so the two never share a file)
            stem = "all_rollout_batches" if d.record_id == "all rollout batches" else _safe(d.record_id, batch_ids)
            if stem == "all_rollout_batches" and d.record_id != "all rollout batches":
                stem += "-" + hashlib.sha256(d.record_id.encode()).hexdigest()[:16]
            name = f"waterfall_{stem}.png"
            save_png(fig, out / name)
            written.append(name)
    return written


def write_plots(out_dir: str | Path, pairs: Mapping[tuple[int, str], C.Pairs],
                workload: Sequence[wpb.WorkloadRecord], outcomes: Sequence[opb.OutcomeRecord],
                replay: rpb.ReplayResult, label: str, batch_id: str | None = None) -> list[str]:
    """Write every plot that has data into ``out_dir``; return the file names written.

    Names: ``scatter_<level>.png``, ``cdf_<level>.png``, ``timeline_<batch>.png``.
    """
    out = Path(out_dir)
    written = []
    for level in (C.L_REQ, C.L_GROUP, C.L_TRAJ, C.L_BATCH):
        for kind, build in (("scatter", scatter_figure), ("cdf", cdf_figure)):
            fig = build(pairs, level, label)
            if fig is not None:
                name = f"{kind}_{C.LEVEL_NAMES[level]}.png"
                save_png(fig, out / name)
                written.append(name)
    batch_id = batch_id or pick_batch(workload)
    if batch_id and replay.granularity == rpb.RESULT_GRANULARITY_PER_REQUEST:
        name = f"timeline_{_safe(batch_id)}.png"
        save_png(timeline_figure(workload, outcomes, replay, batch_id, label), out / name)
        written.append(name)
    return written
