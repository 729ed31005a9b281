"""The report label (and so the text table and every plot title) names dropped constraints."""

from __future__ import annotations

import compare_fixtures as fx
from unirl_replay.report import compare as C
from unirl_replay.report import plots as P
from unirl_replay.report.text import format_report

BASE = "holdout workload grpo-toy | ai-dynamo 1.6.1 | polynomial default (UNCALIBRATED)"


def test_unmodelled_constraints_on_the_label_table_and_plots():
    wl, outs, rp = fx.workload(), fx.outcomes(), fx.replay()
    assert C.compare(fx.manifest(), wl, outs, rp).label == BASE  # exact replay: no suffix
    rp.unmodelled_constraints.add(rule="engine_client.inflight_limit", reason="client limit 1 dropped",
                                  record_ids=["e0"])
    rp.unmodelled_constraints.add(rule="engine_client.inflight_limit", reason="again", record_ids=["e1"])
    rep = C.compare(fx.manifest(), wl, outs, rp)
    assert rep.label == BASE + " | UNMODELLED: engine_client.inflight_limit"
    assert format_report(rep).splitlines()[0] == f"Validation report: {rep.label}"
    fig = P.scatter_figure(C.match(wl, outs, rp).pairs, C.L_REQ, rep.label)
    assert fig._suptitle.get_text().endswith("| UNMODELLED: engine_client.inflight_limit")
