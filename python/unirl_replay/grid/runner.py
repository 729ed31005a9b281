"""The grid driver: expand a spec, run its jobs on a backend, collect and order the results.

Output directory (``out``)::

    .unirl-replay-output.json the tool's output marker (contract.out_dir): every entry is ours, so a
                              later grid (or demo) may replace the directory whole
    grid.json                 every job in spec order: status, error, digests, headline errors, timings
    GRID.md                   the same as a table, failures with their error
    <job_id>/                 per replay job: replay_result.json, upstream/, validation_report.json, plots
                              (a failed job: error.json with the error, and whatever it wrote before)
    conformance/matrix.json   when the spec has a conformance section: the case x revision matrix
    conformance/MATRIX.md

Nothing a user had is overwritten: a non-empty ``out`` holding an entry our markers do not list,
at any level (a user's file put inside a job directory included), is refused
(``contract.out_dir.replaceable``); every directory of a finished grid has its marker (``mark_tree``). The grid is
built in a hidden sibling directory and moved into place when every job has reported (failed jobs
included), so an interrupted grid leaves an earlier output untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from unirl_replay.contract.errors import UnirlReplayError
from unirl_replay.grid import backends
from unirl_replay.grid.jobs import FAILED, OK
from unirl_replay.grid.spec import ConformanceJob, GridSpec, expand

COMMAND = "grid"
GRID_JSON = "grid.json"
GRID_MD = "GRID.md"
ERROR_JSON = "error.json"


@dataclass
class GridRun:
    out_dir: Path
    backend: str
    results: list[dict[str, Any]]           # in job order
    info: dict[str, Any] = field(default_factory=dict)
    conformance_ok: bool = True

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("status") != OK]

    @property
    def ok(self) -> bool:
        return not self.failed and self.conformance_ok


def check_out_dir(out_dir: Path) -> None:
    """Refuse an output directory holding anything that is not an earlier output of ours."""
    from unirl_replay.contract import out_dir as outputs

    if out_dir.exists() and not out_dir.is_dir():
        raise UnirlReplayError(f"{out_dir} exists and is not a directory; choose another --out")
    why = outputs.refusal(out_dir, "grid")
    if why is not None:
        raise UnirlReplayError(f"{out_dir} exists and is not an earlier grid output: {why}; choose another --out "
                               "or move that entry away: nothing of yours is overwritten")


def run_grid(spec: GridSpec, out_dir: str | Path, backend: str = "local", workers: int | None = None,
             address: str | None = None, progress: bool = True,
             log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> GridRun:
    """Run every job of ``spec`` and write ``out_dir`` (see the module docstring).

    Raises (before any job runs): GridSpecError, UnirlReplayError (an ``out_dir`` that is not ours),
    MissingEnvironmentError (Ray not installed for ``backend="ray"``). A job's own failure is never
    raised: it is in the returned ``GridRun.results`` and in ``grid.json``.
    """
    if backend not in backends.BACKENDS:
        raise UnirlReplayError(f"unknown backend {backend!r}; use one of {backends.BACKENDS}")
    jobs = expand(spec)
    out_dir = Path(out_dir).resolve()
    check_out_dir(out_dir)
    from unirl_replay.contract import out_dir as outputs

    work = outputs.work_sibling(out_dir)  # an ordinary directory's mode, not mkdtemp's private one
    try:
        run = _run(spec, jobs, work, backend, workers, address, progress, log)
        _write_outputs(run, spec, jobs, work)
        outputs.record(work, [p.name for p in work.iterdir()], COMMAND)
        outputs.mark_tree(work, COMMAND)
        outputs.swap_in(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    run.out_dir = out_dir
    return run


def _run(spec, jobs, work: Path, backend: str, workers, address, progress: bool, log) -> GridRun:
    from tqdm import tqdm

    info: dict[str, Any] = {"backend": backend, "jobs": len(jobs)}
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    t0 = time.perf_counter()
    bar = tqdm(total=len(jobs), desc=f"grid ({backend})", unit="job", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    n_failed = 0
    try:
        for idx, res in backends.run(backend, jobs, work, info, workers, address):
            results[idx] = res
            if res.get("status") != OK:
                n_failed += 1
                err = res.get("error", {})
                bar.write(f"FAILED {res['job_id']}: {err.get('type')}: {str(err.get('message', ''))[:300]}"
                          + (f" [hint: {err['hint']}]" if err.get("hint") else ""), file=sys.stderr)
            bar.set_postfix(failed=n_failed, refresh=False)
            bar.update(1)
    finally:
        bar.close()
    info["wall_s"] = round(time.perf_counter() - t0, 3)
    for j in jobs:  # a backend that lost a job entirely (should not happen): still reported
        if results[j.index] is None:
            results[j.index] = {"index": j.index, "job_id": j.job_id, "kind": j.kind, "status": FAILED,
                                "error": {"type": "WorkerLost", "message": "no result came back"}}
    return GridRun(work, backend, results, info)  # type: ignore[arg-type]


def _write_outputs(run: GridRun, spec: GridSpec, jobs, work: Path) -> None:
    for r in run.failed:  # each failed job's directory says why (beside whatever it had written)
        d = work / r["job_id"]
        d.mkdir(parents=True, exist_ok=True)
        (d / ERROR_JSON).write_text(json.dumps(r, indent=2) + "\n")
    conf_jobs = [j for j in jobs if isinstance(j, ConformanceJob)]
    matrix = None
    if conf_jobs:
        matrix, run.conformance_ok = _conformance_matrix(spec, conf_jobs, run.results, work / "conformance")
    doc = {"spec": spec.path, "backend": run.backend, "info": run.info,
           "ok": not run.failed and run.conformance_ok, "failed": [r["job_id"] for r in run.failed],
           "jobs": run.results}
    (work / GRID_JSON).write_text(json.dumps(doc, indent=2) + "\n")
    (work / GRID_MD).write_text(grid_markdown(run, matrix))


def _conformance_matrix(spec: GridSpec, conf_jobs, results, dest: Path):
    """Merge the shards of each revision into the runner's RevisionRun and write the matrix."""
    from unirl_replay.conformance import runner as C
    from unirl_replay.conformance.corpus import load_corpus

    c = spec.conformance
    cases = load_corpus(Path(c.corpus), c.cases)
    runs: dict[str, C.RevisionRun] = {}
    for j in conf_jobs:
        r = results[j.index]
        run = runs.setdefault(j.revision, C.RevisionRun(j.revision, ""))
        if r.get("status") == OK:
            run.executor = r["executor"]
            for name, cell in r["cells"].items():
                run.results[name] = C.CellResult(cell["status"], cell["detail"])
        else:
            msg = _first_line(r["error"].get("message"), 200) if r.get("error") else "failed"
            run.executor = run.executor or "-"
            for name in j.cases:
                run.results[name] = C.CellResult(C.ERROR, msg)
    ordered = [runs[rev] for rev in c.revisions]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "matrix.json").write_text(json.dumps(C.matrix_json(cases, ordered), indent=2) + "\n")
    md = C.matrix_markdown(cases, ordered)
    (dest / "MATRIX.md").write_text(md + "\n")
    return md, C.ok(ordered)


def _first_line(message, limit: int) -> str:
    """An error's first line; a message-less exception (``RuntimeError()``, a bare ``assert``) has none."""
    return (str(message or "").splitlines() or ["(no message)"])[0][:limit]


def _n(count, noun: str) -> str:
    """``1 worker``, ``2 workers``, ``? workers``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _cell(text) -> str:
    """A Markdown table cell: a ``|`` in a name (a trace named ``a|b``) split the row into one column more, every
    later column of the job read under the wrong heading."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|")


def _code(text: str) -> str:
    """A Markdown code span holding ``text`` whole: fenced by one backtick more than its longest run of them (a job
    named ``unavail`x``` ended a one-backtick span in its middle)."""
    run = max((len(m) for m in re.findall("`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _error_line(message, limit: int) -> str:
    """An error's first line, and its second where the first only announces it (``... validate reports:``: the
    job's reason was left out of GRID.md)."""
    lines = [ln.strip() for ln in str(message or "").splitlines() if ln.strip()] or ["(no message)"]
    text = lines[0] + (f" {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else "")
    return text[:limit]


def grid_markdown(run: GridRun, conformance_md: str | None = None) -> str:
    """GRID.md: one line per job in spec order; failures listed with their error."""
    from unirl_replay.demo.run import HEADLINES

    keys = [f"{lv}.{m}" for lv, m in HEADLINES]
    lines = [f"# unirl-replay grid ({run.backend}, {_n(run.info.get('workers', '?'), 'worker')}, "
             f"{run.info.get('wall_s', 0):.1f} s)", "",
             "Replay jobs: request-level digest of the replay result (without simulator wall time) and "
             "MAPE % of the headline metrics.", "",
             "| job | status | requests | replay sha256 | " + " | ".join(keys) + " | wall s |",
             "|---|---|---|---|" + "---|" * len(keys) + "---|"]
    for r in run.results:
        if r.get("kind") != "replay":
            continue
        mape = r.get("mape_pct") or {}
        lines.append(f"| {_cell(r['job_id'])} | {r['status']} | {r.get('requests', '-')} | "
                     f"{r.get('replay_sha256', '-')[:12]} | " + " | ".join(_fmt(mape.get(k)) for k in keys)
                     + f" | {r.get('wall_s', 0):.1f} |")
    labelled = [r for r in run.results if r.get("kind") == "replay" and r.get("label")]
    if labelled:  # the honesty labels (UNCALIBRATED, FIXED, UNMODELLED, ...), as the demo's REPORT.md lists them
        lines += ["", "Labels (as on every report and plot):", ""]
        lines += [f"- {_code(r['job_id'])}: {r['label']}" for r in labelled]
    fails = run.failed
    if fails:
        lines += ["", f"## {len(fails)} failed jobs", ""]
        for r in fails:
            e = r.get("error", {})
            lines.append(f"- {_code(r['job_id'])}: {e.get('type')}: {_error_line(e.get('message'), 400)}"
                         + (f" (hint: {e['hint']})" if e.get("hint") else ""))
    if conformance_md:
        lines += ["", "## Conformance matrix", "", conformance_md]
    return "\n".join(lines) + "\n"


def default_workers() -> int:
    return os.cpu_count() or 1
