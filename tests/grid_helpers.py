"""Shared by the grid tests: the small grid of the bundled real traces, and its sequential reference."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNMODELLED = ["engine_client.inflight_limit"]
MODELS = [{"name": "fixed", "spec": "fixed:10,1"}, "polynomial"]


def small_spec(path: Path, plots: bool = False, agentic_unmodelled: bool = True) -> Path:
    """traces/grpo-a and traces/agentic-a x (fixed:10,1, polynomial): 4 jobs, as a JSON spec file."""
    agentic = {"path": str(REPO / "traces" / "agentic-a"), "plots": plots}
    if agentic_unmodelled:
        agentic["allow_unmodelled"] = UNMODELLED
    spec = {"traces": [{"path": str(REPO / "traces" / "grpo-a"), "plots": plots}, agentic],
            "timing_models": MODELS}
    path.write_text(json.dumps(spec, indent=2))
    return path


def sequential_reference(tmp: Path) -> dict[str, dict]:
    """What the plain sequential commands produce for the small grid (``replay_trace`` +
    ``compare_to_dir``, one after another, not through the grid): job id -> digests and report."""
    from unirl_replay.grid.jobs import result_digests
    from unirl_replay.replay.runner import replay_trace, write_result
    from unirl_replay.report.outputs import compare_to_dir

    out = {}
    for trace, unmodelled in (("grpo-a", ()), ("agentic-a", UNMODELLED)):
        for name, spec in (("fixed", "fixed:10,1"), ("polynomial", "polynomial")):
            d = tmp / trace / name
            res = replay_trace(REPO / "traces" / trace, spec, unmodelled=unmodelled)
            write_result(d, res)
            compare_to_dir(REPO / "traces" / trace, d / "replay_result.json", d, plots_too=False)
            whole, reqs = result_digests(res)
            out[f"{trace}/dynamo/{name}"] = {"replay_sha256": whole, "requests_sha256": reqs,
                                             "report": (d / "validation_report.json").read_text()}
    return out


def assert_grid_equals(out_dir: Path, reference: dict[str, dict]) -> None:
    """Every job of the grid output at ``out_dir`` equals the reference, by digest and report."""
    from unirl_replay.contract.trace_io import read_message_json
    from unirl_replay.grid.jobs import result_digests
    from unirl_replay.v1 import replay_pb2

    doc = json.loads((out_dir / "grid.json").read_text())
    assert [j["job_id"] for j in doc["jobs"]] == list(reference), "jobs are reported in spec order"
    for job in doc["jobs"]:
        ref = reference[job["job_id"]]
        assert job["status"] == "ok", job
        assert job["replay_sha256"] == ref["replay_sha256"], job["job_id"]
        assert job["requests_sha256"] == ref["requests_sha256"], job["job_id"]
        on_disk = read_message_json(out_dir / job["replay_result"], replay_pb2.ReplayResult)
        assert result_digests(on_disk)[0] == ref["replay_sha256"], "the written replay_result.json is the same"
        assert (out_dir / job["report"]).read_text() == ref["report"], job["job_id"]
