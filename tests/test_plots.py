"""Plots: files are written, are valid PNGs, and every title carries the honesty label."""

from __future__ import annotations

import compare_fixtures as fx
from unirl_replay.report import compare as C
from unirl_replay.report import plots as P

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _inputs():
    wl, outs, rp = fx.workload(), fx.outcomes(), fx.replay()
    report = C.compare(fx.manifest(), wl, outs, rp)
    return wl, outs, rp, C.match(wl, outs, rp).pairs, report.label


def _title_text(fig) -> str:
    return fig._suptitle.get_text()


def test_titles_carry_the_label_before_saving():
    wl, outs, rp, pairs, label = _inputs()
    assert "holdout" in label and "UNCALIBRATED" in label and "grpo-toy" in label
    figs = [P.scatter_figure(pairs, C.L_REQ, label), P.timeline_figure(wl, outs, rp, "B1", label)]
    for fig in figs:
        assert fig is not None
        # the label may be wrapped at its " | " separators, never shortened
        assert _title_text(fig).split("\n", 1)[1].replace("\n", " | ") == label
    # scatter at request level: one panel per metric with at least MIN_SCATTER_POINTS pairs
    assert [ax.get_title() for ax in figs[0].axes] == ["ttft: 3 requests", "e2e: 4 requests",
                                                          "queueing_delay: 4 requests"]


def test_long_labels_are_wrapped_inside_the_figure():
    """The honesty label is the part that matters when a plot is pasted elsewhere: never clipped."""
    wl, outs, rp, pairs, _ = _inputs()
    label = ("holdout workload holdout-agentic-b-with-a-long-name | ai-dynamo 1.6.1 | profile "
             "vllm-cpu-tiny-qwen2-20261130b-probe-levelled.npz (CALIBRATED+PROBE) | UNMODELLED: "
             "engine_client.inflight_limit")
    for fig in (P.scatter_figure(pairs, C.L_REQ, label), P.timeline_figure(wl, outs, rp, "B1", label)):
        fig.canvas.draw()
        box = fig._suptitle.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
        for part in label.split(" | "):
            assert part in _title_text(fig).replace("\n", " ")


def test_distribution_plots_need_enough_points():
    _, _, _, pairs, label = _inputs()
    # 3 groups: below MIN_SCATTER_POINTS? no (3 is enough for a scatter), far below MIN_CDF_POINTS
    assert P.scatter_figure(pairs, C.L_GROUP, label) is not None
    assert P.cdf_figure(pairs, C.L_GROUP, label) is None
    assert P.scatter_figure(pairs, C.L_BATCH, label) is None  # one batch


def test_write_plots_writes_valid_pngs(tmp_path):
    wl, outs, rp, pairs, label = _inputs()
    names = P.write_plots(tmp_path, pairs, wl, outs, rp, label)
    expect = {f"scatter_{C.LEVEL_NAMES[lv]}.png" for lv in (C.L_REQ, C.L_GROUP, C.L_TRAJ, C.L_BATCH)
              if any(k[0] == lv and len(p.ids) >= P.MIN_SCATTER_POINTS for k, p in pairs.items())}
    expect |= {f"cdf_{C.LEVEL_NAMES[lv]}.png" for lv in (C.L_REQ, C.L_GROUP, C.L_TRAJ, C.L_BATCH)
               if any(k[0] == lv and len(p.ids) >= P.MIN_CDF_POINTS for k, p in pairs.items())}
    assert set(names) == expect | {"timeline_B1.png"}
    for n in names:
        data = (tmp_path / n).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, n


def test_timeline_rows_name_trajectory_and_turn_and_draw_tool_waits():
    wl, outs, rp, _, label = _inputs()
    fig = P.timeline_figure(wl, outs, rp, "B1", label)
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert "T1 turn 1 (r4)" in rows and "r1" in rows
    assert any(t.get_text().startswith("tool wait") for t in ax.get_legend().get_texts())
    # r3 completes at 160 (measured) and r4 is submitted at 180: a dotted 20 ms wait from 60 to 80 ms
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert any(list(ln.get_xdata()) == [60.0, 80.0] for ln in dotted)


def test_levels_without_pairs_give_no_figure():
    assert P.scatter_figure({}, C.L_REQ, "x") is None
    assert P.cdf_figure({}, C.L_BATCH, "x") is None


def test_math_markup_in_names_is_shown_literally(tmp_path):
    """A workload name or batch id with matplotlib math markup (`$...$`, even malformed) never
    ends the plots in a parse error."""
    import compare_fixtures as F
    from unirl_replay.report import plots
    from unirl_replay.report.matching import match

    workload, outcomes, replay = F.workload(), F.outcomes(), F.replay()
    for rec in workload:
        if rec.WhichOneof("record") == "request":
            rec.request.engine_id = "e$\\frac{"
    m = match(workload, outcomes, replay)
    names = plots.write_plots(tmp_path, m.pairs, workload, outcomes, replay, "label $\\undefined{x$ $$", batch_id="B1")
    assert names and all((tmp_path / n).stat().st_size > 0 for n in names)
