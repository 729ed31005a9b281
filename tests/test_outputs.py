"""--out handling: directories are created; nothing the tool did not write is replaced or deleted."""

from __future__ import annotations

import json

import pytest

from tracebuild import grpo_trace
from unirl_replay.cli.main import main
from unirl_replay.contract import out_dir
from unirl_replay.contract.errors import TraceWriterBusyError, UnirlReplayError
from unirl_replay.contract.trace_io import TraceWriter
from unirl_replay.replay.convert.sidecar import read_block_size, sidecar_path


def test_convert_out_into_a_missing_directory_and_never_over_a_users_file(tmp_path, capsys):
    d = grpo_trace().write(tmp_path / "t")
    out = tmp_path / "new" / "deeper" / "in.jsonl"
    assert main(["convert", str(d), "--format", "mooncake", "--out", str(out)]) == 0
    assert out.is_file() and read_block_size(out) == 16  # the mooncake block size travels in the sidecar
    assert main(["convert", str(d), "--format", "mooncake", "--out", str(out)]) == 0  # ours: replaced
    user = tmp_path / "mine.jsonl"
    user.write_text("my notes\n")
    capsys.readouterr()
    assert main(["convert", str(d), "--out", str(user)]) == 2
    assert "not written by unirl-replay" in capsys.readouterr().err
    assert user.read_text() == "my notes\n" and not sidecar_path(user).exists()


def test_replay_mooncake_reads_the_block_size_back(tmp_path):
    pytest.importorskip("dynamo.replay")
    from unirl_replay.replay.runner import replay_trace

    d = grpo_trace().write(tmp_path / "t")
    res = replay_trace(d, "fixed:10,1", trace_format="mooncake", work_dir=tmp_path / "w")
    assert sidecar_path(next((tmp_path / "w").glob("*.mooncake.jsonl"))).is_file()
    assert len(res.requests) == 2 or res.aggregate


def test_replay_out_refuses_a_users_result_file(tmp_path, capsys):
    d = grpo_trace().write(tmp_path / "t")
    o = tmp_path / "o"
    o.mkdir()
    (o / "replay_result.json").write_text("{}")
    assert main(["replay", str(d), "--timing-model", "fixed:10,1", "--out", str(o)]) == 2
    assert "did not write" in capsys.readouterr().err and (o / "replay_result.json").read_text() == "{}"


def test_demo_out_never_replaces_a_users_directory(tmp_path, capsys):
    d = grpo_trace().write(tmp_path / "t")
    user = tmp_path / "results"
    user.mkdir()
    (user / "summary.json").write_text("[]")  # a name a user could have: not a marker
    (user / "thesis.tex").write_text("precious")
    assert main(["demo", "--trace", str(d), "--out", str(user), "--no-profile"]) == 2
    assert "not an earlier demo output" in capsys.readouterr().err
    assert sorted(p.name for p in user.iterdir()) == ["summary.json", "thesis.tex"]


def test_marker_lists_what_we_wrote(tmp_path):
    d = tmp_path / "o"
    out_dir.claim(d, ["a.json"], "replay")
    (d / "a.json").write_text("1")
    out_dir.record(d, ["a.json"], "replay")
    assert out_dir.owned(d) == {"a.json"} and out_dir.replaceable(d)
    out_dir.claim(d, ["a.json"], "replay")  # ours: may be rewritten
    (d / "b.txt").write_text("user")
    assert not out_dir.replaceable(d)
    with pytest.raises(FileExistsError):
        out_dir.claim(d, ["b.txt"], "replay")
    (d / out_dir.MARKER).write_text(json.dumps({"written_by": "someone", "entries": {"b.txt": "x"}}))
    assert out_dir.owned(d) == set()


def test_os_errors_are_one_line_not_a_traceback(tmp_path, capsys):
    d = grpo_trace().write(tmp_path / "t")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["replay", str(d), "--timing-model", "fixed:10,1", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err


def test_a_second_trace_writer_on_one_directory_is_refused(tmp_path):
    t = grpo_trace()
    with TraceWriter(tmp_path / "t") as w1:
        with pytest.raises(TraceWriterBusyError, match="another TraceWriter"):
            TraceWriter(tmp_path / "t", encoding="binpb")
        for r in t.workload:
            w1.write_workload(r)
        w1.finalize(t.manifest)
    with pytest.raises(TraceWriterBusyError, match="already holds"):
        TraceWriter(tmp_path / "t")
    from unirl_replay.contract.validate import check_trace
    assert check_trace(tmp_path / "t").status == check_trace(tmp_path / "t").STATUS_VALID


def _listing(d):
    return sorted(p.name for p in d.iterdir())


def test_a_failed_replay_leaves_nothing_it_created(tmp_path, capsys):
    pytest.importorskip("dynamo.replay")
    d = grpo_trace().write(tmp_path / "t")
    out = tmp_path / "new" / "r"
    bad = ["--timing-model", f"profile:{tmp_path / 'missing.npz'}"]
    assert main(["replay", str(d), *bad, "--out", str(out)]) == 2
    assert "missing.npz" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # created by the failed run (parents too): removed again
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n")
    assert main(["replay", str(d), *bad, "--out", str(mine)]) == 2
    assert _listing(mine) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep\n"
    # an earlier good result survives a failed re-run into the same directory
    assert main(["replay", str(d), "--timing-model", "fixed:10,1", "--out", str(mine)]) == 0
    before = (mine / "replay_result.json").read_bytes()
    assert main(["replay", str(d), *bad, "--out", str(mine)]) == 2
    assert (mine / "replay_result.json").read_bytes() == before and (mine / "upstream").is_dir()


def test_compare_into_a_reused_out_drops_the_earlier_runs_plots(tmp_path):
    # a report directory never shows a plot of another trace: what an earlier compare wrote and this one
    # did not is removed; a user's own file there is kept
    pytest.importorskip("dynamo.replay")
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("keep\n")
    runs = {}
    for name, extra in (("agentic-a", ["--allow-unmodelled", "engine_client.inflight_limit"]), ("grpo-a", [])):
        r = tmp_path / f"r-{name}"
        assert main(["replay", str(repo / "traces" / name), "--timing-model", "polynomial", "--out", str(r),
                     *extra]) == 0
        assert main(["compare", str(repo / "traces" / name), str(r), "--out", str(out)]) == 0
        doc = json.loads((out / "validation_report.json").read_text())
        runs[name] = set(doc["artifacts"])
        assert set(_listing(out)) == runs[name] | {"validation_report.json", "notes.txt", out_dir.MARKER}
    assert runs["agentic-a"] - runs["grpo-a"]  # the test would not show anything otherwise
    assert (out / "notes.txt").read_text() == "keep\n"
    marker = json.loads((out / out_dir.MARKER).read_text())["entries"]
    assert set(marker) == runs["grpo-a"] | {"validation_report.json"}


def test_prune_removes_only_listed_plain_files_of_that_command(tmp_path):
    d = tmp_path / "o"
    d.mkdir()
    for n in ("a.png", "b.png", "c.json"):
        (d / n).write_text(n)
    (d / "sub").mkdir()
    out_dir.record(d, ["a.png", "b.png", "sub"], "compare")
    out_dir.record(d, ["c.json"], "replay")
    assert out_dir.prune(d, ["a.png"], "compare") == ["b.png"]
    assert _listing(d) == sorted(["a.png", "c.json", "sub", out_dir.MARKER])  # a directory is never removed
    assert out_dir.owned(d) == {"a.png", "c.json", "sub"}


def test_upstream_info_logs_stay_off_the_terminal_unless_asked_for(tmp_path):
    # the real upstream's Rust logger prints INFO lines per profile load; they are off by default (DYN_LOG=warn)
    # and come back when the user sets DYN_LOG (a fresh process each: the logger reads DYN_LOG once)
    pytest.importorskip("dynamo.replay")
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    args = [sys.executable, "-m", "unirl_replay", "replay", str(repo / "traces" / "grpo-a"), "--timing-model",
            f"profile:{repo / 'profiles' / 'vllm-cpu-tiny-qwen2-20261130b.npz'}"]
    env = {k: v for k, v in os.environ.items() if k != "DYN_LOG"}
    quiet = subprocess.run([*args, "--out", str(tmp_path / "a")], env=env, capture_output=True, text=True)
    assert quiet.returncode == 0 and " INFO " not in quiet.stderr + quiet.stdout
    loud = subprocess.run([*args, "--out", str(tmp_path / "b")], env={**env, "DYN_LOG": "info"}, capture_output=True,
                          text=True)
    assert loud.returncode == 0 and " INFO " in loud.stderr + loud.stdout


def test_swapping_a_new_output_in_keeps_a_users_dot_old_directory(tmp_path):
    """demo / grid replace their earlier output whole through out_dir.swap_in; the old output went aside to
    the fixed name `.<out>.old`, and a user's directory of that name was removed first (rmtree)."""
    out, work = tmp_path / "demo", tmp_path / "work"
    out.mkdir()
    (out / "summary.json").write_text("old run\n")
    mine = tmp_path / ".demo.old"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's notes\n")
    work.mkdir()
    (work / "summary.json").write_text("new run\n")
    out_dir.swap_in(work, out)
    assert (out / "summary.json").read_text() == "new run\n" and not work.exists()
    assert (mine / "notes.txt").read_text() == "a user's notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".demo.old", "demo"]  # nothing else left behind


def test_a_users_file_below_a_marked_tree_makes_it_irreplaceable_and_is_named(tmp_path):
    """Only the top level used to be checked: a user's notes.txt put in <out>/grpo-a/default/ of an earlier demo
    went with the old output on the next run."""
    d = tmp_path / "o"
    (d / "grpo-a" / "default").mkdir(parents=True)
    (d / "grpo-a" / "default" / "table.txt").write_text("ours")
    (d / "summary.json").write_text("{}")
    (d / "link").symlink_to(tmp_path)  # a link is an entry, never followed
    out_dir.record(d, ["grpo-a", "summary.json", "link"], "demo")
    assert out_dir.foreign_entry(d) == d / "grpo-a" / "default", "entries of a directory without its marker are not ours"
    out_dir.mark_tree(d, "demo")
    assert out_dir.replaceable(d) and out_dir.foreign_entry(d) is None
    assert out_dir._entries(d)["summary.json"] == "demo"
    (d / "grpo-a" / "default" / "notes.txt").write_text("mine")
    assert not out_dir.replaceable(d) and out_dir.foreign_entry(d) == d / "grpo-a" / "default" / "notes.txt"
    (d / "grpo-a" / "default" / "notes.txt").unlink()
    (d / "grpo-a" / "default" / "sub").mkdir()
    assert out_dir.foreign_entry(d) == d / "grpo-a" / "default" / "sub"
    assert out_dir.replaceable(tmp_path / "absent") and out_dir.foreign_entry(tmp_path / "absent") is None


def test_demo_and_grid_replace_only_their_own_earlier_output(tmp_path, capsys):
    """A directory all of whose entries a marker lists was replaceable by any command: `grid --out <a demo output>`
    and `demo --out <a compare report>` deleted a user's REPORT.md / table.txt. Now each replaces only what it
    wrote itself, and the refusal names the entry and the command that wrote it."""
    from unirl_replay.grid.runner import check_out_dir

    rep = tmp_path / "report"  # a compare --out
    out_dir.claim(rep, ["table.txt", "validation_report.json"], "compare")
    for n in ("table.txt", "validation_report.json"):
        (rep / n).write_text("ours")
    out_dir.record(rep, ["table.txt", "validation_report.json"], "compare")
    assert out_dir.replaceable(rep) and not out_dir.replaceable(rep, "grid") and not out_dir.replaceable(rep, "demo")
    why = out_dir.refusal(rep, "grid")
    assert "`unirl-replay compare` wrote" in why and str(rep / "table.txt") in why
    with pytest.raises(UnirlReplayError, match="not an earlier grid output: .*compare"):
        check_out_dir(rep)
    assert main(["demo", "--out", str(rep), "--no-profile"]) == 2
    err = capsys.readouterr().err
    assert "not an earlier demo output" in err and "compare" in err and "timing models" not in err  # refused first
    assert sorted(p.name for p in rep.iterdir()) == [out_dir.MARKER, "table.txt", "validation_report.json"]

    demo_out = tmp_path / "demo"
    (demo_out / "grpo-a").mkdir(parents=True)
    (demo_out / "REPORT.md").write_text("ours")
    out_dir.mark_tree(demo_out, "demo")
    assert out_dir.refusal(demo_out, "demo") is None and out_dir.replaceable(demo_out, "demo")
    assert "`unirl-replay demo` wrote" in out_dir.refusal(demo_out, "grid")
    (demo_out / "grpo-a" / "sub").mkdir()  # another command's output inside, its own marker, the parent's not
    out_dir.record(demo_out / "grpo-a" / "sub", [], "replay")
    (demo_out / "grpo-a" / "sub" / "x.json").write_text("{}")
    out_dir.record(demo_out / "grpo-a" / "sub", ["x.json"], "replay")
    why = out_dir.refusal(demo_out, "demo")
    assert "an output of `unirl-replay replay`" in why and "sub" in why
    assert out_dir.refusal(tmp_path / "absent", "grid") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert out_dir.refusal(empty, "grid") is None
    (tmp_path / "file").write_text("x")
    assert "not a directory" in out_dir.refusal(tmp_path / "file", "demo")
