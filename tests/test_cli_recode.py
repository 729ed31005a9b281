"""``unirl-replay recode TRACE_DIR --encoding E --out NEW_DIR`` (contract/recode.py): the same trace in
another encoding -- it validates, converts to the same simulator input, recodes back to the same
records; an existing --out and a bad source are refused, nothing is overwritten or left behind."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from unirl_replay.cli.main import main
from unirl_replay.contract import trace_io
from unirl_replay.contract.gate import refusal
from unirl_replay.contract.outcomes_io import iter_outcomes
from unirl_replay.contract.validate import check_trace
from unirl_replay.replay import runner
from unirl_replay.v1 import manifest_pb2
from unirl_replay.v1.report_pb2 import TraceCheck

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "traces" / n for n in ("agentic-a", "agentic-ray-a", "grpo-a")] + \
          [REPO / "conformance" / "cases" / n / "trace" for n in ("dependency_spawn_join", "fanout_grpo_n4")]
ENCODINGS = ["jsonl", "binpb", pytest.param("arrow", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("pyarrow") is None, reason="pyarrow (the columnar extra) not installed"))]


def _name(p: Path) -> str:
    return p.parent.name if p.name == "trace" else p.name


def tree_digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def records(d: Path) -> tuple[list, list]:
    t = trace_io.open_trace(d)
    return [r for _, r in t.iter_workload()], [o for _, o in iter_outcomes(t)]


def converted(d: Path, out: Path) -> list[bytes]:
    """The agentic_mooncake / mooncake input of ``d`` (the header's workload digest aside)."""
    t = trace_io.open_trace(d)
    sha = t.artifact(manifest_pb2.ARTIFACT_KIND_WORKLOAD).sha256
    kinds = {r.WhichOneof("record") for _, r in t.iter_workload()}
    fmt = "agentic_mooncake" if kinds & {"trajectory", "group"} else "mooncake"
    files = runner.convert_trace(d, out, trace_format=fmt, unmodelled=("engine_client.inflight_limit",))
    return [p.read_bytes().replace(sha.encode(), b"<digest>") for p in files]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("src", SOURCES, ids=_name)
def test_recode_validates_converts_alike_and_recodes_back(tmp_path: Path, src: Path, encoding: str, capsys) -> None:
    before = tree_digest(src)
    new = tmp_path / "new"
    assert main(["recode", str(src), "--encoding", encoding, "--out", str(new)]) == 0
    assert f"{new}: {encoding}" in capsys.readouterr().out
    res = check_trace(new)
    assert res.status == TraceCheck.STATUS_VALID, [v.rule + ": " + v.message for v in res.violations]
    assert sorted(p.name for p in new.iterdir()) == sorted(
        ["manifest.json", trace_io.WORKLOAD_FILES[encoding], trace_io.OUTCOME_FILES[encoding]])
    # the manifest: the new files' artifacts, everything else as the source's
    got, want = trace_io.open_trace(new).manifest, trace_io.open_trace(src).manifest
    for a in got.artifacts:
        assert a.sha256 == hashlib.sha256((new / a.path).read_bytes()).hexdigest()
        assert a.size_bytes == (new / a.path).stat().st_size
        assert a.encoding == {"jsonl": manifest_pb2.ENCODING_JSONL, "binpb": manifest_pb2.ENCODING_BINPB,
                              "arrow": manifest_pb2.ENCODING_ARROW}[encoding]
    assert [a.record_count for a in got.artifacts] == [a.record_count for a in want.artifacts]
    g, w = manifest_pb2.TraceManifest(), manifest_pb2.TraceManifest()
    g.CopyFrom(got)
    w.CopyFrom(want)
    for m in (g, w):
        del m.artifacts[:]
        m.ClearField("contract_revision")
    assert g == w
    assert records(new) == records(src)
    assert converted(new, tmp_path / "a.jsonl") == converted(src, tmp_path / "b.jsonl")
    # back to the source's encoding: the same records
    back = tmp_path / "back"
    src_enc = trace_io.open_trace(src).encoding
    assert main(["recode", str(new), "--encoding", src_enc, "--out", str(back)]) == 0
    assert records(back) == records(src)
    assert tree_digest(src) == before  # the source is only read
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_after_batch_round_trips_through_every_encoding_with_the_same_digests(tmp_path: Path, capsys) -> None:
    """RolloutBatch.after_batch (issue 14) in the example base ``batches``: JSONL -> binpb -> arrow -> JSONL
    keeps it, and each encoding's files are byte for byte (sha256) the ones written directly in it."""
    from unirl_replay.contract.validate.examples import Example, materialize

    pytest.importorskip("pyarrow")
    base = materialize(Example("batches", ()), tmp_path / "base")
    wl, oc = records(base)
    man = trace_io.open_trace(base).manifest
    del man.artifacts[:]
    direct = {}
    for enc in ("jsonl", "binpb", "arrow"):  # each encoding written directly by the TraceWriter
        with trace_io.TraceWriter(tmp_path / f"direct-{enc}", enc) as tw:
            for r in wl:
                tw.write_workload(r)
            for r in oc:
                tw.write_outcome(r)
            tw.finalize(man)
        direct[enc] = tmp_path / f"direct-{enc}"
    assert tree_digest(direct["jsonl"])["workload.jsonl"] == tree_digest(base)["workload.jsonl"]  # canonical lines
    src, hops = base, []
    for enc in ("binpb", "arrow", "jsonl"):
        out = tmp_path / f"hop{len(hops)}-{enc}"
        assert main(["recode", str(src), "--encoding", enc, "--out", str(out)]) == 0, capsys.readouterr().err
        assert check_trace(out).status == TraceCheck.STATUS_VALID
        for kind in (manifest_pb2.ARTIFACT_KIND_WORKLOAD, manifest_pb2.ARTIFACT_KIND_OUTCOMES):
            got, want = trace_io.open_trace(out).artifact(kind), trace_io.open_trace(direct[enc]).artifact(kind)
            assert (got.path, got.sha256, got.size_bytes, got.record_count) == \
                (want.path, want.sha256, want.size_bytes, want.record_count), (enc, kind)
        assert records(out) == records(direct["jsonl"])
        hops.append(out)
        src = out
    b1 = next(r.rollout_batch for r in records(hops[1])[0]
              if r.WhichOneof("record") == "rollout_batch" and r.rollout_batch.rollout_batch_id == "b1")
    assert (b1.after_batch.previous_rollout_batch_id, b1.after_batch.driver_gap_ns) == ("b0", 2_000_000)


@pytest.mark.parametrize("what", ["empty_dir", "user_dir", "file"])
def test_existing_out_is_refused(tmp_path: Path, what: str, capsys) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "traces" / "grpo-a", src)
    before = tree_digest(src)
    out = tmp_path / "out"
    if what == "file":
        out.write_text("mine\n")
    else:
        out.mkdir()
        if what == "user_dir":
            (out / "notes.txt").write_text("mine\n")
    out_before = out.read_text() if what == "file" else tree_digest(out)
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "exists" in err and "Traceback" not in err
    assert (out.read_text() if what == "file" else tree_digest(out)) == out_before
    assert tree_digest(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]  # no partial sibling


def test_bad_source_is_refused_with_the_gates_message(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "traces" / "agentic-a", src)
    lines = (src / "workload.jsonl").read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if '"request"' in line][:2]
    first, second = (json.loads(lines[i]) for i in at)
    second["request"]["request_id"] = first["request"]["request_id"]  # a duplicate id
    lines[at[1]] = json.dumps(second) + "\n"
    body = "".join(lines).encode()
    (src / "workload.jsonl").write_bytes(body)  # a rule break with a valid digest: the gate must find it
    mp = src / "manifest.json"
    m = json.loads(mp.read_text())
    for a in m["artifacts"]:
        if a["path"] == "workload.jsonl":
            a["sha256"], a["size_bytes"] = hashlib.sha256(body).hexdigest(), str(len(body))
    mp.write_text(json.dumps(m, indent=2) + "\n")
    res = check_trace(src, outcomes=True)
    assert res.status != TraceCheck.STATUS_VALID
    want = str(refusal(src, "recode", res))
    before = tree_digest(src)
    out = tmp_path / "out"
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {want}\n" and "refused before recode" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert tree_digest(src) == before


def test_incomplete_source_is_refused(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "traces" / "grpo-a", src)
    with open(src / "workload.jsonl", "ab") as f:
        f.write(b"{")  # the digest no longer matches
    assert main(["recode", str(src), "--encoding", "jsonl", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "refused before recode" in err and "incomplete" in err
    assert not (tmp_path / "out").exists()


def test_probe_artifacts_are_copied(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "traces" / "grpo-a", src)
    (src / "probes").mkdir()
    (src / "probes" / "e0-before.json").write_text('{"role": "calibration", "points": []}\n')
    mp = src / "manifest.json"
    m = json.loads(mp.read_text())  # manifest.json is not digested
    eid = m["engines"][0]["engine_id"]
    m["probes"] = [{"engine_id": eid, "when": "before", "artifact_path": "probes/e0-before.json"}]
    mp.write_text(json.dumps(m, indent=2) + "\n")
    out = tmp_path / "out"
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(out)]) == 0
    assert (out / "probes" / "e0-before.json").read_bytes() == (src / "probes" / "e0-before.json").read_bytes()
    assert trace_io.open_trace(out).manifest.probes == trace_io.open_trace(src).manifest.probes
    # a probe path that leaves the trace is refused (typed, before anything is written)
    m["probes"][0]["artifact_path"] = "../elsewhere.json"
    mp.write_text(json.dumps(m, indent=2) + "\n")
    (tmp_path / "elsewhere.json").write_text("{}\n")
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(tmp_path / "out2")]) == 2
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("how", ["file_link", "dir_link", "fifo", "directory", "own_file"])
def test_probe_artifact_outside_the_trace_or_not_a_file_is_refused(tmp_path: Path, how: str, capsys) -> None:
    """s6-f: a probe artifact that is a symbolic link (to the file or its directory) was followed, and the file
    from outside the trace copied into the new one; a FIFO / directory was reported "missing"; a probe path
    naming the trace's own workload file was copied over the records recode had just written."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "traces" / "grpo-a", src)
    secret = tmp_path / "elsewhere" / "e0-before.json"
    secret.parent.mkdir()
    secret.write_text('{"not": "part of the trace"}\n')
    rel = "probes/e0-before.json"
    if how == "file_link":
        (src / "probes").mkdir()
        (src / rel).symlink_to(secret)
    elif how == "dir_link":
        (src / "probes").symlink_to(secret.parent)
    elif how == "fifo":
        (src / "probes").mkdir()
        __import__("os").mkfifo(src / rel)
    elif how == "directory":
        (src / rel).mkdir(parents=True)
    else:
        rel = "workload.binpb"
        shutil.copyfile(src / "workload.jsonl", src / rel)
    mp = src / "manifest.json"
    m = json.loads(mp.read_text())
    m["probes"] = [{"engine_id": m["engines"][0]["engine_id"], "when": "before", "artifact_path": rel}]
    mp.write_text(json.dumps(m, indent=2) + "\n")
    out = tmp_path / "out"
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("manifest.probe" if how == "own_file" else "recode.probe_artifact") in err, err
    assert {"file_link": "symbolic link", "dir_link": "symbolic link", "fifo": "not a regular file",
            "directory": "not a regular file", "own_file": "names a file of the trace itself"}[how] in err, err
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_arrow_without_pyarrow_is_a_missing_environment(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = tmp_path / "out"
    assert main(["recode", str(REPO / "traces" / "grpo-a"), "--encoding", "arrow", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs pyarrow" in err and "unirl-replay[columnar]" in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_help_lists_recode(capsys) -> None:
    assert main(["--help"]) == 0
    assert "recode" in capsys.readouterr().out


def test_compare_names_the_replayed_trace_when_given_its_recoded_copy(tmp_path: Path, capsys) -> None:
    """Same trace id and records, another workload file: compare refuses the pair and says which trace
    the result belongs with (the message was 'replay result replayed workload sha256 ...')."""
    src = REPO / "traces" / "grpo-a"
    new = tmp_path / "new"
    assert main(["recode", str(src), "--encoding", "binpb", "--out", str(new)]) == 0
    assert main(["replay", str(new), "--timing-model", "fixed:10,1", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["compare", str(src), str(tmp_path / "r"), "--out", str(tmp_path / "c"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "another workload file" in err and "the trace directory that was replayed" in err and "recode" in err
    assert not (tmp_path / "c").exists()
    assert main(["compare", str(new), str(tmp_path / "r"), "--out", str(tmp_path / "c"), "--no-plots"]) == 0
