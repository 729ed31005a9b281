"""Third s15 attack round, on the OUTPUTS of `replay`, `compare`, `convert` and the plots / timelines with valid
but extreme traces (ids of 1000 characters, ids two of which differ only in a character a file name cannot hold,
measured times all equal, thousands of requests in one batch, slot holds that begin before an engine's first
submit). Each test failed before its fix."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from tracebuild import MS, TraceParts, grpo_trace, make_manifest, make_request, request_outcome
from unirl_replay.cli.main import main
from unirl_replay.contract.out_dir import id_file_stem
from unirl_replay.v1 import outcomes_pb2 as o
from unirl_replay.v1 import workload_pb2 as w

REPO = Path(__file__).resolve().parents[1]


def _strict_json(path: Path):
    def bad(c):
        raise AssertionError(f"{path.name}: non-finite number {c}")
    return json.loads(path.read_text(), parse_constant=bad)


def _rename(t: TraceParts, f) -> TraceParts:
    """Every request, group, batch and trajectory id (and every reference to one) through ``f``."""
    keys = ("request_id", "group_id", "rollout_batch_id", "trajectory_id")
    for rec in [*t.workload, *t.outcomes]:
        m = getattr(rec, rec.WhichOneof("record"))
        for k in keys:
            if k in m.DESCRIPTOR.fields_by_name and getattr(m, k):
                setattr(m, k, f(getattr(m, k)))
        for k in ("member_ids", "group_ids", "request_ids", "sample_ids"):
            if k in m.DESCRIPTOR.fields_by_name:
                m.__getattribute__(k)[:] = [f(x) for x in getattr(m, k)]
        for d in getattr(m, "dependencies", []):
            d.predecessor_request_id = f(d.predecessor_request_id)
    return t


def _engines_trace(engines: tuple[str, ...]) -> TraceParts:
    """One request (n = 2) per engine, one group each, one batch over all engines."""
    t = TraceParts(make_manifest(engines=engines))
    gids = []
    for i, e in enumerate(engines):
        rid, gid = f"req-{i}", f"g{i}"
        gids.append(gid)
        t.add(make_request(rid, samples=2, engine_id=e, group_id=gid, batch_id="b0", offset_ns=i * MS))
        t.add(w.Group(group_id=gid, rollout_batch_id="b0", unit=w.GROUP_UNIT_SAMPLES, expected_size=2, member_ids=[rid]))
        t.add(request_outcome(rid, i * MS))
        t.add(o.GroupOutcome(group_id=gid, completed_ns=i * MS + 20 * MS))
    t.add(w.RolloutBatch(rollout_batch_id="b0", group_ids=gids, readiness_rule=w.BATCH_READINESS_RULE_ALL_GROUPS,
                         engine_ids=list(engines)))
    t.add(o.BatchOutcome(rollout_batch_id="b0", ready_ns=40 * MS))
    return t


def _replay_compare(capsys, trace: Path, tmp_path: Path, *extra) -> tuple[Path, str]:
    rc = main(["replay", str(trace), "--timing-model", "fixed:10,1", "--out", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert rc == 0, err
    rc = main(["compare", str(trace), str(tmp_path / "r"), "--out", str(tmp_path / "rep")])
    cap = capsys.readouterr()
    assert rc == 0 and "Traceback" not in cap.err, cap.err
    return tmp_path / "rep", cap.out


# -- ids in file names -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["b0", "engine-0", "batch.1_x"])
def test_an_id_a_file_name_can_hold_is_its_own_stem(value):
    assert id_file_stem(value) == value


def test_ids_that_differ_only_where_a_file_name_cannot_hold_them_get_distinct_bounded_stems():
    ids = ["e/0", "e_0", "e 0", "x" * 1000, "x" * 1001, "漢" * 1000, "..", "", "e_0-" + "0" * 16]
    stems = [id_file_stem(i) for i in ids]
    assert len(set(stems)) == len(stems), stems
    for s in stems:
        assert s and s.isascii() and len(s.encode()) <= 100 and s.strip(".") and "/" not in s, s


def test_compare_of_a_batch_id_of_1000_characters_writes_its_timeline(tmp_path, capsys):
    """A valid trace whose ids are 1000 characters long: compare ended in "File name too long" (exit 2, nothing
    written) on the timeline's file name timeline_<batch id>.png; now the plot's name holds the id's first 64
    characters and a digest of it, and every output is written."""
    trace = _rename(grpo_trace(3, 2), lambda s: (s + "-" + "x" * 1000)[:1000]).write(tmp_path / "t")
    rep, _ = _replay_compare(capsys, trace, tmp_path)
    doc = _strict_json(rep / "validation_report.json")
    timelines = [a for a in doc["artifacts"] if a.startswith("timeline_") and a.endswith(".png")]
    assert len(timelines) == 1 and (rep / timelines[0]).is_file() and len(timelines[0]) < 120


def test_replay_of_an_engine_id_of_1000_characters_runs(tmp_path, capsys):
    """An engine id of 1000 characters (ids may hold 1024): replay wrote the upstream input as
    upstream/<engine id>.agentic_mooncake.jsonl and failed with "File name too long"; now it replays."""
    trace = _engines_trace(("E" * 1000, "e1")).write(tmp_path / "t")
    rep, _ = _replay_compare(capsys, trace, tmp_path)
    assert (rep / "timeline.perfetto.json").is_file()


def test_convert_of_two_engines_whose_ids_differ_in_a_slash_writes_two_files(tmp_path, capsys):
    """Engines "e/0" and "e_0": convert wrote both to x.e_0.jsonl, the second replacing the first (printed the
    same path twice); now each engine has its own file."""
    trace = _engines_trace(("e/0", "e_0")).write(tmp_path / "t")
    out = tmp_path / "cv"
    out.mkdir()
    rc = main(["convert", str(trace), "--format", "agentic_mooncake", "--out", str(out / "x.jsonl")])
    printed = capsys.readouterr().out.split()
    assert rc == 0
    files = sorted(p.name for p in out.glob("x.*.jsonl"))
    assert len(files) == 2 and len(set(printed)) == 2, (files, printed)


# -- measured times all equal: the waterfall ----------------------------------------------------------------------

def _all_equal_trace(prompts: int = 3, at_ns: int = 5 * MS) -> TraceParts:
    """Every request (n = 1, one output token) submitted, queued, scheduled, first token and completed at one
    instant, its group complete and the batch ready at that instant: every measured duration is 0."""
    t = grpo_trace(prompts, 1)
    for q in t.requests():
        q.output_tokens[:] = [1]
        q.arrival.observed_offset_ns = at_ns
    for rec in t.outcomes:
        kind = rec.WhichOneof("record")
        if kind == "request":
            r = rec.request
            r.submit_ns = r.queued_ns = r.scheduled_ns = r.first_token_ns = r.completion_ns = at_ns
        elif kind == "group":
            rec.group.completed_ns = at_ns
        else:
            rec.rollout_batch.ready_ns = at_ns
    return t


def test_a_batch_whose_measured_readiness_is_0_gets_its_waterfall(tmp_path, capsys):
    """Measured times all equal (batch readiness 0 ms): compare ended in a ZeroDivisionError traceback in the
    waterfall's title (% of the measured value); now the waterfall says there is no percentage of 0 ms."""
    trace = _all_equal_trace().write(tmp_path / "t")
    rep, _ = _replay_compare(capsys, trace, tmp_path)
    doc = _strict_json(rep / "validation_report.json")
    assert "waterfall_b0.png" in doc["artifacts"] and (rep / "waterfall_b0.png").is_file()


def test_the_waterfalls_axes_hold_every_running_level():
    """A term that takes the running level above both the measured and the predicted value was cut off at 1.18x
    the larger of the two (the bar and its number outside the axes); now the axes hold every level."""
    from unirl_replay.report.plots import waterfall_figure
    from unirl_replay.v1 import report_pb2 as vpb

    d = vpb.ErrorDecomposition(level=vpb.COMPARISON_LEVEL_ROLLOUT_BATCH, metric="batch_readiness", record_id="b0",
                               measured_ns=40 * MS, predicted_ns=30 * MS, total_ns=-10 * MS)
    d.terms.add(name="first_pass", delta_ns=100 * MS, pct_of_measured=250.0)
    d.terms.add(name="simulator_scheduling", delta_ns=-110 * MS, pct_of_measured=-275.0)
    fig = waterfall_figure(d, "unlabelled workload test | ai-dynamo 1.6.1 | fixed (FIXED)")
    lo, hi = fig.axes[0].get_ylim()
    assert lo <= 0 and hi > 140


# -- the Perfetto timeline -----------------------------------------------------------------------------------------

def _slices_ok(trace: dict) -> None:
    """Chrome trace-event checks: every complete slice has ts >= 0 and dur >= 0; on one track, slices either nest
    or follow each other (no partial overlap)."""
    tracks = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] in ("X", "i"):
            assert e["ts"] >= 0 and e.get("dur", 0) >= 0 and math.isfinite(e["ts"]), e
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, sl in tracks.items():
        stack: list[tuple] = []
        for s, end, name in sorted(sl, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][1] <= s + 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1][1] + 1e-6, (key, stack[-1], (s, end, name))
            stack.append((s, end, name))


def test_the_bundled_agentic_traces_timeline_has_no_slice_before_0(tmp_path, capsys):
    """agentic-a's slot holds are acquired before the trajectory's first submit: the real side's
    `trajectory slots` slices began at ts -63.555 us (Perfetto's engine-first-submit origin); now both sides of
    an engine start at the earliest slice, so every ts is >= 0 and the two sides' first submits still line up."""
    trace = REPO / "traces" / "agentic-a"
    rep, _ = _replay_compare(capsys, trace, tmp_path, "--allow-unmodelled", "engine_client.inflight_limit")
    doc = _strict_json(rep / "timeline.perfetto.json")
    _slices_ok(doc)
    firsts = defaultdict(list)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "request":
            side, eng = names[e["pid"]].split(" [", 1)[0].split(" ", 1)  # "simulated <engine> [<label>]"
            firsts[eng].append((side, e["ts"]))
    for eng, xs in firsts.items():
        by_side = {side: min(ts for sd, ts in xs if sd == side) for side, _ in xs}
        assert by_side["real"] == pytest.approx(by_side["simulated"]) and by_side["real"] > 0, (eng, by_side)
    assert doc["metadata"]["label"] == _strict_json(rep / "validation_report.json")["label"]


# -- the timeline PNG ----------------------------------------------------------------------------------------------

def _timeline(t: TraceParts, label: str = "unlabelled workload test | ai-dynamo 1.6.1 | fixed (FIXED)"):
    from unirl_replay.report.plots import pick_batch, timeline_figure
    from unirl_replay.v1 import replay_pb2 as rpb

    replay = rpb.ReplayResult(granularity=rpb.RESULT_GRANULARITY_PER_REQUEST)
    return timeline_figure(t.workload, t.outcomes, replay, pick_batch(t.workload), label)


def test_the_timeline_of_a_batch_of_thousands_of_requests_is_a_bounded_png_that_says_what_it_leaves_out():
    """One rollout batch of 3000 requests: the timeline was a figure of 1100 x 105,798 pixels (116 MP: Pillow's
    decompression-bomb warning on opening it, 47 s of compare); now it shows the first 240 rows by measured submit
    and its title says how many of how many, every one being in timeline.perfetto.json."""
    fig = _timeline(grpo_trace(3000, 1, gap_ms=1, window_s=600))
    w_px, h_px = (fig.get_size_inches() * 110).tolist()
    assert w_px * h_px < 20e6 and h_px < 16000, (w_px, h_px)
    title = fig._suptitle.get_text()
    assert "240 of its 3000 requests" in title and "timeline.perfetto.json" in title and "(FIXED)" in title


def test_timeline_rows_of_1000_character_ids_leave_the_axes_their_room():
    """Ids of 1000 characters: each row's tick label was the whole id, and the axes collapsed to nothing
    (matplotlib's 'constrained_layout not applied'); now a plot shows at most 64 characters of an id around an
    ellipsis, and the honesty label whole."""
    import warnings

    label = "unlabelled workload " + "w" * 300 + " | ai-dynamo 1.6.1 | fixed prefill 10 ms / decode 1 ms (FIXED)"
    fig = _timeline(_rename(grpo_trace(3, 2), lambda s: (s + "-" + "x" * 1000)[:1000]), label)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_position().height > 0.2 and ax.get_position().width > 0.2
    assert all(len(t.get_text()) <= 80 for t in ax.get_yticklabels())
    assert fig._suptitle.get_text().replace("\n", "").count("w") >= 300 and "(FIXED)" in fig._suptitle.get_text()


@pytest.mark.parametrize("name", ["W" * 300, "漢" * 200, "W" * 1024])
def test_a_plot_title_holds_the_whole_honesty_label_of_a_wide_workload_name(name):
    """The title's label was wrapped at 0.6 em a character: a workload name of W or CJK characters (1.0-1.15 em)
    ran past both edges of a plot (a 300-W name from x = -155 to 615 px on a 460 px figure): the label clipped.
    Now each line is measured in the font it is drawn in, and a title of many lines makes the figure taller."""
    import warnings

    from unirl_replay.report.plots import waterfall_figure
    from unirl_replay.v1 import report_pb2 as vpb

    d = vpb.ErrorDecomposition(level=vpb.COMPARISON_LEVEL_ROLLOUT_BATCH, metric="batch_readiness", record_id="b0",
                               measured_ns=40 * MS, predicted_ns=30 * MS, total_ns=-10 * MS)
    d.terms.add(name="first_pass", delta_ns=-10 * MS, pct_of_measured=-25.0)
    label = f"holdout workload {name} | ai-dynamo 1.6.1 | profile p.npz (CALIBRATED+PROBE)"
    fig = waterfall_figure(d, label)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CJK glyphs missing from DejaVu Sans: drawn as boxes, measured as such
        fig.canvas.draw()
        bb = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    fb = fig.bbox
    assert bb.x0 >= fb.x0 and bb.x1 <= fb.x1 and bb.y0 >= fb.y0 and bb.y1 <= fb.y1, (bb.bounds, fb.bounds)
    text = fig._suptitle.get_text()
    assert text.replace("\n", "").count(name[0]) >= len(name) and "(CALIBRATED+PROBE)" in text
    assert fig.axes[0].get_position().height > 0.2


# -- bidirectional controls in ids and names ------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\u202e", "\u2067", "\u200f", "\u061c"])
def test_a_workload_name_with_a_bidi_override_is_refused(tmp_path, capsys, char):
    """A workload name holding U+202E (RIGHT-TO-LEFT OVERRIDE) was a valid trace: the honesty label printed after
    it (the table's first line, every plot title) read backwards on any bidi-aware display ("... )DEXIF("). Now
    validate refuses it by manifest.workload_name, as it refuses a control character."""
    t = grpo_trace()
    t.manifest.workload_name = f"grpo{char}-a"
    trace = t.write(tmp_path / "t")
    rc = main(["validate", "--json", str(trace)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and "manifest.workload_name" in {v["rule"] for v in doc["violations"]}, doc
    assert any(f"U+{ord(char):04X}" in v["message"] for v in doc["violations"])


@pytest.mark.parametrize("encoding", ["jsonl", "binpb"])
def test_an_id_with_a_bidi_override_is_refused_by_every_gate(tmp_path, capsys, encoding):
    """A batch id holding U+202E passed validate and the gate's fast pass (binpb), and reversed the timeline
    title and every row of it; now it is id.invalid, also for replay."""
    trace = _rename(grpo_trace(), lambda s: s + "\u202e").write(tmp_path / "t", encoding=encoding)
    assert main(["validate", str(trace)]) == 1
    assert "id.invalid" in capsys.readouterr().out
    rc = main(["replay", str(trace), "--timing-model", "fixed:10,1", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and "id.invalid" in err and "U+202E" in err and "Traceback" not in err


# -- GRID.md -------------------------------------------------------------------------------------------------------

def test_grid_md_keeps_its_columns_and_code_spans_for_odd_trace_names(tmp_path):
    """A trace named "a|b" split its GRID.md table row into one column more (the status read "b/dynamo/fixed"), a
    job named with a backtick ended its code span in the label list early, and a failed job's line stopped at
    "`unirl-replay validate` reports:", its reason left out. Now the table cell escapes the bar, the code span is
    fenced by more backticks than the name holds, and the failure names its first violation."""
    from unirl_replay.grid.runner import GridRun, grid_markdown

    label = "unlabelled workload test | ai-dynamo 1.6.1 | fixed prefill 10 ms / decode 1 ms (FIXED)"
    results = [{"kind": "replay", "job_id": "a|b/dynamo/fixed", "status": "ok", "requests": 1, "label": label,
                "replay_sha256": "0" * 64, "mape_pct": {}},
               {"kind": "replay", "job_id": "x`y`/dynamo/fixed", "status": "ok", "requests": 1, "label": label,
                "replay_sha256": "1" * 64, "mape_pct": {}},
               {"kind": "replay", "job_id": "bad/dynamo/fixed", "status": "failed",
                "error": {"type": "TraceRejectedError", "message": "t [replay.validate]: the trace is invalid (1 error); "
                          "`unirl-replay validate` reports:\n  workload.jsonl:3 r0 id.invalid: id holds ..."}}]
    md = grid_markdown(GridRun(tmp_path, "sequential", results))
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header = rows[0]
    n = len(header.split(" | "))
    for row in rows[1:]:
        cells = [c for c in __import__("re").split(r"(?<!\\) \| ", row)]
        assert len(cells) == n, row
    assert "| a\\|b/dynamo/fixed | ok |" in md
    assert "- ``x`y`/dynamo/fixed``: " + label in md
    assert "workload.jsonl:3 r0 id.invalid" in md


# -- the table -----------------------------------------------------------------------------------------------------

def test_the_decomposition_table_stays_aligned_and_narrow_for_long_and_wide_ids():
    """A 1000-character trajectory id made every row of the table's decomposition section 1,200 columns wide, and
    a CJK id (two terminal columns a character) shifted every later column of its row; now a cell shows at most 64
    characters of an id, and widths are counted in terminal columns."""
    import unicodedata

    from unirl_replay.report.text import format_report
    from unirl_replay.v1 import report_pb2 as vpb

    rep = vpb.ValidationReport(label="unlabelled workload test | ai-dynamo 1.6.1 | fixed (FIXED)")
    for rid in ("t" * 1000, "漢字軌跡", "plain"):
        d = rep.decompositions.add(level=vpb.COMPARISON_LEVEL_TRAJECTORY, metric="trajectory_e2e", record_id=rid,
                                   measured_ns=40 * MS, predicted_ns=30 * MS, total_ns=-10 * MS)
        d.terms.add(name="first_pass", delta_ns=-10 * MS, pct_of_measured=-25.0, what="x")

    def cols(line: str) -> int:
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)

    lines = format_report(rep).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("level") and "record" in ln)
    table = lines[head:head + 5]
    assert len({cols(ln.rstrip()) for ln in table[2:]} | {cols(table[0].rstrip())}) == 1, table
    assert max(map(cols, table)) < 200
    assert lines[0] == "Validation report: " + rep.label


def test_the_summed_waterfall_keeps_its_name_and_a_batch_of_that_name_its_own_file(tmp_path):
    """The sum over batches is waterfall_all_rollout_batches.png (README, demo); a batch whose id is
    "all_rollout_batches" wrote the same file, replacing the sum's plot."""
    from unirl_replay.report.plots import write_waterfalls
    from unirl_replay.v1 import report_pb2 as vpb

    rep = vpb.ValidationReport(label="unlabelled workload test | ai-dynamo 1.6.1 | fixed (FIXED)")
    for rid in ("all_rollout_batches", "b0", "all rollout batches"):
        d = rep.decompositions.add(level=vpb.COMPARISON_LEVEL_ROLLOUT_BATCH, metric="batch_readiness", record_id=rid,
                                   measured_ns=40 * MS, predicted_ns=30 * MS, total_ns=-10 * MS)
        d.terms.add(name="first_pass", delta_ns=-10 * MS, pct_of_measured=-25.0)
    names = write_waterfalls(tmp_path, rep)
    assert len(set(names)) == 3 and "waterfall_all_rollout_batches.png" in names and "waterfall_b0.png" in names
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(names)


def test_ids_named_side_by_side_keep_readable_stems_unless_two_would_share_one():
    """UniRL's engine ids (vllm:HOST:PID) name the converted files of a trace readably (x.vllm_vm_18522.jsonl, as
    the README and users' scripts read them); only ids whose readable stems would collide, or ids too long for
    one, get the digest."""
    engines = ["vllm:vm:18522", "vllm:vm:18591"]
    assert [id_file_stem(e, engines) for e in engines] == ["vllm_vm_18522", "vllm_vm_18591"]
    both = ["e/0", "e_0"]
    stems = [id_file_stem(e, both) for e in both]
    assert stems[1] == "e_0" and stems[0].startswith("e_0-") and len(set(stems)) == 2
    assert id_file_stem("x" * 1000, ["x" * 1000]).startswith("x" * 64 + "-")
    assert id_file_stem("e/0") != "e_0"  # no context: the digest, never a stem another id may hold


def test_compare_batch_of_a_long_unknown_id_names_it_without_echoing_it_whole(tmp_path, capsys):
    trace = grpo_trace(2, 2).write(tmp_path / "t")
    assert main(["replay", str(trace), "--timing-model", "fixed:10,1", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    rc = main(["compare", str(trace), str(tmp_path / "r"), "--out", str(tmp_path / "c"), "--batch", "b" * 2000,
               "--no-plots"])
    err = capsys.readouterr().err
    assert rc != 0 and "(2000 characters)" in err and "b" * 200 not in err and "Traceback" not in err, err
