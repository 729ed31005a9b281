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

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from unirl_replay.report import compare as C
from unirl_replay.report.metrics import NS_PER_MS, ecdf
from unirl_replay.v1 import outcomes_pb2 as opb
from unirl_replay.v1 import replay_pb2 as rpb
from unirl_replay.v1 import workload_pb2 as wpb

REAL_COLOR = "#1f77b4"
SIM_COLOR = "#ff7f0e"


def _plain(text: str) -> str:
    """Text from the trace (names, ids, labels) shown literally: ``$...$`` is matplotlib math
    markup, and a malformed one would end the plot in a parse error."""
    return text.replace("$", r"\$")


def _title(fig: Figure, what: str, label: str) -> None:
    fig.suptitle(_plain(f"{what}\n{label}"), fontsize=10)


def _metrics_at(pairs: Mapping[tuple[int, str], C.Pairs], level: int) -> list[tuple[str, C.Pairs]]:
    return [(m, p) for (lv, m), p in pairs.items() if lv == level and len(p.ids)]


def scatter_figure(pairs: Mapping[tuple[int, str], C.Pairs], level: int, label: str) -> Figure | None:
    """Predicted vs measured scatter of every metric of ``level`` with pairs; None when none has."""
    items = _metrics_at(pairs, level)
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
        ax.set_title(f"{metric}: {len(p.ids)} pairs", fontsize=9)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    _title(fig, f"Predicted vs measured, {C.LEVEL_NAMES[level]} level", label)
    return fig


def cdf_figure(pairs: Mapping[tuple[int, str], C.Pairs], level: int, label: str) -> Figure | None:
    """Measured and predicted CDF overlays per metric of ``level``; None when no metric has pairs."""
    items = _metrics_at(pairs, level)
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
        ax.set_title(f"{metric}: {len(p.ids)} pairs", fontsize=9)
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
    engines = sorted({idx.requests[r].engine_id for r in rids})
    heights = [max(2, sum(idx.requests[r].engine_id == e for r in rids)) for e in engines]
    fig = Figure(figsize=(10, 1.2 + 0.32 * sum(heights) + 0.6 * len(engines)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(engines), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, eng in zip(axes, engines):
        mine = [r for r in rids if idx.requests[r].engine_id == eng]
        mb = {r: C.measured_request_boundaries(idx.requests[r], req_out[r]) for r in mine if r in req_out}
        pb = {r: C.predicted_request_boundaries(rows[r]) for r in mine if r in rows}
        om = min((b["submit"] for b in mb.values() if "submit" in b), default=None)
        op = min((b["submit"] for b in pb.values() if "submit" in b), default=None)
        order = sorted(mine, key=lambda r: (mb.get(r, {}).get("submit", 1 << 62), r))
        for y, rid in enumerate(order):
            for b, o, dy, color in ((mb.get(rid, {}), om, -0.17, REAL_COLOR), (pb.get(rid, {}), op, 0.17, SIM_COLOR)):
                if o is None or "submit" not in b or "completion" not in b:
                    continue
                s, e = (b["submit"] - o) / NS_PER_MS, (b["completion"] - o) / NS_PER_MS
                ax.barh(y + dy, e - s, left=s, height=0.3, color=color, alpha=0.85)
                if "first_token" in b:
                    ft = (b["first_token"] - o) / NS_PER_MS
                    ax.plot([ft, ft], [y + dy - 0.15, y + dy + 0.15], color="black", lw=1)
        if len(engines) == 1 and om is not None and batch_id in ready_m:
            ax.axvline((ready_m[batch_id] - om) / NS_PER_MS, color=REAL_COLOR, ls="--", lw=1.2)
        if len(engines) == 1 and op is not None and batch_id in ready_p:
            ax.axvline((ready_p[batch_id] - op) / NS_PER_MS, color=SIM_COLOR, ls="--", lw=1.2)
        ax.set_yticks(range(len(order)), [_plain(str(x)) for x in order], fontsize=7 if len(order) < 40 else 4)
        ax.invert_yaxis()
        ax.set_xlabel("ms from the batch's first submit on this engine")
        ax.set_title(_plain(f"engine {eng}"), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        handles = [Patch(color=REAL_COLOR, label="real: submit -> completion"),
                   Patch(color=SIM_COLOR, label="simulated: arrival -> completion"),
                   Line2D([], [], color="black", lw=1, label="first token")]
        if len(engines) == 1:
            handles.append(Line2D([], [], color="grey", ls="--", label="batch ready (bar colour)"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    _title(fig, f"Rollout batch {batch_id}: real vs simulated", label)
    return fig


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
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in batch_id)
        name = f"timeline_{safe}.png"
        save_png(timeline_figure(workload, outcomes, replay, batch_id, label), out / name)
        written.append(name)
    return written
