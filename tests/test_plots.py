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


def test_titles_carry_the_label_before_saving():
    wl, outs, rp, pairs, label = _inputs()
    assert "holdout" in label and "UNCALIBRATED" in label and "grpo-toy" in label
    figs = [P.scatter_figure(pairs, C.L_REQ, label), P.cdf_figure(pairs, C.L_GROUP, label),
            P.timeline_figure(wl, outs, rp, "B1", label)]
    for fig in figs:
        assert fig is not None
        assert fig._suptitle is not None and fig._suptitle.get_text().endswith(label)
    # scatter at request level: one panel per metric with pairs (ttft, e2e, queueing_delay)
    assert [ax.get_title() for ax in figs[0].axes] == ["ttft: 3 pairs", "e2e: 4 pairs", "queueing_delay: 4 pairs",
                                                          "engine_ttft: 1 pairs", "engine_e2e: 1 pairs"]


def test_write_plots_writes_valid_pngs(tmp_path):
    wl, outs, rp, pairs, label = _inputs()
    names = P.write_plots(tmp_path, pairs, wl, outs, rp, label)
    assert set(names) == {f"{k}_{lv}.png" for k in ("scatter", "cdf")
                          for lv in ("request", "group", "trajectory", "rollout_batch")} | {"timeline_B1.png"}
    for n in names:
        data = (tmp_path / n).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, n


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
