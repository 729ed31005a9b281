"""The whole job on the bundled real traces: validate, replay, compare, report.

For every bundled trace (``traces/<name>/``) and every timing model (the calibrated profile in
``profiles/`` when there is one, and the upstream default polynomial, which is uncalibrated):
validate the trace, replay it in the real Dynamo Replay, compare the prediction with the measured
outcomes, and write the report (table, JSON, plots, Perfetto timelines). A summary table of the
headline errors goes to ``<out>/REPORT.md`` and ``<out>/summary.json``.

Runs in the light environment (no torch, no vLLM).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from unirl_replay.contract.errors import UnirlReplayError, UnsupportedWorkloadError

from unirl_replay.reference.environments import REPO_ROOT  # noqa: E402
DEFAULT_TRACES_DIR = REPO_ROOT / "traces"
DEFAULT_PROFILES_DIR = REPO_ROOT / "profiles"
# Constraints a real UniRL agentic trace carries that upstream cannot express, dropped here with a
# label on every report: UniRL's direct-vLLM driver lets one model request in flight per client
# (a lock), while several trajectory slots are active.
DEMO_UNMODELLED = ("engine_client.inflight_limit",)
# Headline metrics of the summary: (level name in the report, metric).
HEADLINES = (("request", "e2e"), ("request", "engine_e2e"), ("request", "ttft"), ("group", "group_completion"),
             ("trajectory", "slot_hold"), ("rollout_batch", "batch_readiness"))


@dataclass
class SummaryRow:
    """One (trace, timing model) line of the summary. Errors in %, None when not compared."""

    trace: str
    role: str
    timing_model: str
    label: str
    requests: int
    mape_pct: dict[str, float | None]
    bias_pct: dict[str, float | None]
    report_dir: str


def find_traces(traces_dir: Path) -> list[Path]:
    """Finalized trace directories directly under ``traces_dir`` (those with a manifest.json)."""
    return sorted(p.parent for p in traces_dir.glob("*/manifest.json"))


#: The demo's calibrated profile, by name: the one README's demo table, docs/demo/ and grids/demo.yaml show.
#: (It was "the newest *.npz by name": adding profiles/...-20261201-bound.npz, a profile of engines bound to one
#: core as UniRL's Ray actors run them, silently switched the demo to it, and grpo-a's calibrated row went from
#: 31.8 % to 1322 % request E2E MAPE.)
DEFAULT_PROFILE = "vllm-cpu-tiny-qwen2-20261130b.npz"


def find_profile(profiles_dir: Path) -> Path | None:
    """The calibrated profile to use: :data:`DEFAULT_PROFILE` in ``profiles_dir``, else the only ``*.npz``
    there, else None (several others: which one is not guessed; pass ``--profile``)."""
    named = profiles_dir / DEFAULT_PROFILE
    if named.is_file():
        return named
    npzs = sorted(profiles_dir.glob("*.npz"))
    return npzs[0] if len(npzs) == 1 else None


def _headline(report) -> tuple[dict, dict]:
    from unirl_replay.report.compare import LEVEL_NAMES

    mape, bias = {}, {}
    by_key = {(LEVEL_NAMES.get(m.level), m.metric): m for m in report.metrics}
    for level, metric in HEADLINES:
        m = by_key.get((level, metric))
        key = f"{level}.{metric}"
        mape[key] = round(m.mape_pct, 2) if m is not None and m.HasField("mape_pct") else None
        bias[key] = round(m.signed_bias_pct, 2) if m is not None and m.HasField("signed_bias_pct") else None
    return mape, bias


def check_out_dir(out_dir: Path) -> None:
    """Refuse (UnirlReplayError) an ``--out`` the demo may not replace whole: anything but absent, empty or an
    earlier demo output holding only what the demo wrote (``contract.out_dir.refusal`` says why)."""
    from unirl_replay.contract import out_dir as outputs

    why = outputs.refusal(out_dir, "demo")
    if why is not None:
        raise UnirlReplayError(f"{out_dir} exists and is not an earlier demo output: {why}; the demo replaces its "
                               "output whole, so choose another --out or move that entry away")


def run_demo(out_dir: Path, traces: list[Path], profile: Path | None,
             log: Callable[[str], None] = print, profile_note: str = "") -> list[SummaryRow]:
    """Run the whole job; returns the summary rows and writes ``out_dir/REPORT.md`` + ``summary.json``.

    Every trace is validated before anything is replayed. The output is built in a temporary
    directory beside ``out_dir`` and moved into place only when complete, so a failed run leaves
    the previous output untouched and a finished one holds no stale files from an earlier run.

    Raises:
        TraceFormatError: a trace is invalid or incomplete (nothing is written).
        UnirlReplayError: ``out_dir`` exists, is not empty and is not an earlier demo output.
        MissingEnvironmentError: the real simulator (ai-dynamo) is not installed (run ``make env``).
    """
    from unirl_replay.contract import out_dir as outputs

    names = [Path(t).name for t in traces]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:  # each trace's results go to <out>/<trace name>/: a second one would replace the first's
        raise UnirlReplayError(f"traces named {dup} given more than once (the demo writes each trace's results to "
                               "<out>/<trace directory name>/): pass each trace once, under distinct names")
    check_out_dir(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
    try:
        rows = _run(work, traces, profile, log, profile_note)
        outputs.record(work, [p.name for p in work.iterdir()], "demo")
        outputs.mark_tree(work, "demo")
        outputs.swap_in(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return rows


def _run(out_dir: Path, traces: list[Path], profile: Path | None, log: Callable[[str], None],
         profile_note: str) -> list[SummaryRow]:
    from unirl_replay.contract import validate
    from unirl_replay.contract.gate import refusal
    from unirl_replay.report.labels import replay_timing_label
    from unirl_replay.report.outputs import compare_to_dir
    from unirl_replay.replay.runner import replay_trace, write_result
    from unirl_replay.v1 import common_pb2

    models = ([(f"profile:{profile}", profile_tag(profile))] if profile else []) + [("polynomial", "default")]
    steps = len(traces) * (1 + 2 * len(models))
    step = 0
    rows: list[SummaryRow] = []
    out_dir.mkdir(parents=True, exist_ok=True)

    def progress(msg: str) -> float:
        nonlocal step
        step += 1
        log(f"[{step}/{steps}] {msg}")
        return time.perf_counter()

    for trace_dir in traces:  # every trace first: nothing is replayed from a set with a broken trace
        t0 = progress(f"validate {trace_dir}")
        check = validate.check_trace(trace_dir)
        err = refusal(trace_dir, "demo", check)  # the gate's refusal (rule demo.validate), validate's messages
        if err is not None:
            raise err
        log(f"      valid ({sum(check.record_counts.values())} records, {time.perf_counter() - t0:.1f} s)")
    for trace_dir in traces:
        name = trace_dir.name
        for spec, tag in models:
            t0 = progress(f"replay {name} with {tag} timing model ({spec.split(':')[0]})")
            dest = out_dir / name / tag
            try:
                result = replay_trace(trace_dir, spec, work_dir=dest / "upstream")
            except UnsupportedWorkloadError as e:
                if e.rule not in DEMO_UNMODELLED:
                    raise
                log(f"      {e.rule}: upstream cannot express it; replaying without it, labelled UNMODELLED")
                result = replay_trace(trace_dir, spec, work_dir=dest / "upstream", unmodelled=DEMO_UNMODELLED)
            write_result(dest, result)
            # the model's honesty label as the report has it (a --profile of other hardware is UNVALIDATED here,
            # whatever the step's tag says)
            log(f"      {len(result.requests)} requests predicted, {replay_timing_label(result.timing_model)} "
                f"({time.perf_counter() - t0:.1f} s)")
            t0 = progress(f"compare {name} ({tag}) with the measured outcomes")
            report = compare_to_dir(trace_dir, dest / "replay_result.json", dest)
            mape, bias = _headline(report)
            role = common_pb2.WorkloadRole.Name(report.role).removeprefix("WORKLOAD_ROLE_").lower()
            rows.append(SummaryRow(trace=name, role=role, timing_model=_row_model(tag, result.timing_model),
                                   label=report.label, requests=len(result.requests),
                                   mape_pct=mape, bias_pct=bias, report_dir=str(dest.relative_to(out_dir))))
            e2e, ready = mape["request.e2e"], bias["rollout_batch.batch_readiness"]
            log(f"      request E2E MAPE {_pct(e2e)}, batch readiness error {_pct(ready, signed=True)} "
                f"({time.perf_counter() - t0:.1f} s)")
    (out_dir / "summary.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    (out_dir / "REPORT.md").write_text(summary_markdown(rows, profile, profile_note))
    return rows


def profile_tag(profile: Path) -> str:
    """The demo's name of a --profile (its directory under each trace, its steps' and table's word): "calibrated"
    only when its provenance says it was measured (CALIBRATED / CALIBRATED+PROBE), else "profile" (a profile
    without that provenance is UNCALIBRATED, and was shown as "calibrated")."""
    from unirl_replay.replay.timing_models import parse_timing_model
    from unirl_replay.v1 import replay_pb2

    tm, _ = parse_timing_model(f"profile:{profile}")
    measured = (replay_pb2.CALIBRATION_STATUS_CALIBRATED, replay_pb2.CALIBRATION_STATUS_CALIBRATED_PROBE)
    return "calibrated" if tm.calibration in measured else "profile"


def _row_model(tag: str, tm) -> str:
    """The table's "timing model" cell: the tag, with the status the replay gave where the tag alone would claim more
    (a calibrated profile of other hardware than the trace's capture is UNVALIDATED there)."""
    from unirl_replay.v1 import replay_pb2

    if tm.kind != replay_pb2.TIMING_MODEL_KIND_PROFILE or tm.calibration in (
            replay_pb2.CALIBRATION_STATUS_CALIBRATED, replay_pb2.CALIBRATION_STATUS_CALIBRATED_PROBE):
        return tag
    return f"profile ({replay_pb2.CalibrationStatus.Name(tm.calibration).removeprefix('CALIBRATION_STATUS_')})"


def _pct(v: float | None, signed: bool = False) -> str:
    """A progress-line percentage, or why there is none."""
    return "not compared (see the report)" if v is None else f"{_fmt(v, signed)}%"


def _fmt(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.1f}" if signed else f"{v:.1f}")


def summary_markdown(rows: list[SummaryRow], profile: Path | None, profile_note: str = "") -> str:
    """The summary as markdown: one line per (trace, timing model), MAPE% (signed bias%) per level."""
    head = ["trace", "role", "timing model", "requests"] + [k for k in (f"{lv}.{m}" for lv, m in HEADLINES)]
    lines = ["# unirl-replay demo: real UniRL traces replayed in Dynamo Replay", "",
             "Each cell: MAPE % (signed bias %: the mean of the per-record percentage errors "
             "100 * (predicted - measured) / measured; positive means the simulator predicts longer "
             "durations for the typical record). `-`: not compared (see the report's not-compared "
             "list).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.trace, r.role, r.timing_model, str(r.requests)]
        for lv, m in HEADLINES:
            k = f"{lv}.{m}"
            cells.append(f"{_fmt(r.mape_pct[k])} ({_fmt(r.bias_pct[k], True)})" if r.mape_pct[k] is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Labels (as on every report and plot):", ""] + [f"- `{r.report_dir}`: {r.label}" for r in rows]
    if profile is None:
        lines += ["", profile_note or "No calibrated profile was found in profiles/: only the uncalibrated "
                  "default model ran."]
    return "\n".join(lines) + "\n"
