"""``unirl-replay calibrate --like TRACE_DIR --out profiles/NAME.npz``: measure a timing profile."""

from __future__ import annotations

import os
import re

import click

from unirl_replay.cli import OutPath


def _ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return vals


def _same_model(base: str, manifest) -> None:
    """A base profile measured on another model than the probe trace's is never levelled into a CALIBRATED+PROBE
    profile of it (replay refuses such a profile too: replay.timing_models.profile_model_problem)."""
    from unirl_replay.calibrate.probe import ProbeError
    from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model, profile_model_problem

    try:
        why = profile_model_problem(parse_timing_model(f"profile:{base}")[0], manifest)
    except TimingModelError:  # a broken base: level_profile words it (its own checked reader)
        return
    if why:
        raise ProbeError(why)


def _fit_describes_the_tables(base: str) -> None:
    """The base profile's fit (what the probe's level is measured against) describes its own tables (a provenance
    fit edited to d1 = 1e300 levelled the decode table by x0.000); a broken base is level_profile's to word."""
    from pathlib import Path

    from unirl_replay.calibrate.probe import PROFILE_TABLES, ProbeError
    from unirl_replay.contract.profile_npz import fit_problem, load_profile

    try:
        _, tables, prov = load_profile(Path(base), PROFILE_TABLES, ProbeError)
    except ProbeError:
        return
    why = fit_problem(tables, prov)
    if why:
        raise ProbeError(f"{base}: {why}; it cannot be levelled (was its provenance edited?)")


@click.command("calibrate")
@click.option("--like", "like", default=None, type=click.Path(exists=True, file_okay=False),
              help="Trace whose engine settings (manifest) and model the calibration engine copies. "
                   "None of its requests is used. Required unless --level-to-probe.")
@click.option("--level-to-probe", "probe_trace", default=None, type=click.Path(exists=True, file_okay=False),
              help="Measure nothing: write a copy of --base scaled to the level of this trace's reference probe "
                   "(TraceManifest.probes), labelled CALIBRATED+PROBE, with the probe in its provenance.")
@click.option("--base", "base", default=None, type=click.Path(exists=True, dir_okay=False),
              help="With --level-to-probe: the measured profile to level (never modified).")
@click.option("--levelling", "levelling", default="scalar", show_default=True,
              type=click.Choice(["two_term", "scalar"]),
              help="With --level-to-probe: two_term = decode fixed and per-sequence factors from the B=1 / B=32 points "
                   "(the scalar level with the reason recorded where they are refused), prefill level by pass size "
                   "between the isolated and the batched prefill points; scalar = one level per phase (the first "
                   "probe holdouts' method). Both are recorded in the provenance either way.")
@click.option("--probe-condition", "probe_condition", default="isolated", show_default=True,
              type=click.Choice(["isolated", "contended", "mixed"]),
              help="With --level-to-probe: isolated = the probe's points (every engine running the same point); "
                   "contended = its contended points (each engine measured while the others ran a steady decode "
                   "load; capture --probe-contended N), the variant CALIBRATED+PROBE contended; mixed = decode from the contended "
                   "points, prefill from the probe's points (exploratory).")
@click.option("--out", "out", required=True, type=OutPath(dir_okay=False),
              help="Profile to write (dynamo_profile NPZ); the provenance goes next to it as <out>.provenance.json.")
@click.option("--workload-name", default=None,
              help="Name of the calibration workload (default calibration-planner-sweep-<UTC date>).")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(1, 100),
              help="Isolated prefill runs per input length.")
@click.option("--decode-repeats", default=1, show_default=True, type=click.IntRange(1, 20),
              help="Runs per decode (batch, length) point.")
@click.option("--osl", default=64, show_default=True, type=click.IntRange(8, 1024),
              help="Output tokens per decode request (ignore_eos).")
@click.option("--batches", default=None, help="Decode batch sizes (sequences decoding at once), e.g. 1,2,4,8,16,32 (default: powers of 2 <= the --like trace's max_num_seqs).")
@click.option("--lengths", default=None, help="Decode prompt lengths (tokens per request), e.g. 32,128,512,1536.")
@click.option("--max-kv", default=32768, show_default=True, type=click.IntRange(64),
              help="Largest B*(L+OSL) measured, in KV tokens (B batch size, L prompt length, OSL output tokens; the grid still covers the engine's whole KV capacity).")
@click.option("--model", "model", default=None, type=click.Path(file_okay=False, exists=True),
              help="A local Hugging Face model directory to measure, like `capture --model` (default: the tiny "
                   "scripted model). Must be the --like trace's model when its manifest records the weights' sha256.")
@click.option("--model-dir", default=None, type=click.Path(file_okay=False),
              help="Where the tiny model is built when missing (default: the capture's cache).")
@click.option("--max-load", default=None, type=float,
              help="Refuse to measure when the 1-minute load average is above this.")
@click.option("--engine-env", "engine_env", multiple=True, metavar="NAME=VALUE",
              help="Environment of the calibration engine (repeatable), recorded in the provenance, e.g. the thread "
                   "binding a capture's engines ran with (its conditions' worker_threads): --engine-env "
                   "OMP_NUM_THREADS=1 --engine-env VLLM_CPU_OMP_THREADS_BIND=0 measures the engine as UniRL's Ray "
                   "actors run it, one OMP thread on one core.")
@click.option("--prefill-row-tokens", "prefill_row_tokens", default=None, metavar="L|like",
              help="Measure each prefill point N as ONE engine pass of ceil(N/L) rows of about L new tokens (sum "
                   "exactly N <= max_num_batched_tokens; a lead row first, repeats whose pass did not hold every row "
                   "left out), shaped like a window's prefill passes; `like` takes L from the --like trace (its "
                   "token-weighted prompt length sum(n^2)/sum(n)). Also measures the reference probe's points in this engine "
                   "(provenance reference_points, which --level-to-probe then levels against). Default: one row.")
@click.option("--raw-out", default=None, type=OutPath(dir_okay=False), help="Also keep the raw driver JSON here.")
@click.option("--from-raw", "raw_in", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Refit an earlier --raw-out instead of measuring (the provenance says measured: the data were).")
def command(like, probe_trace, base, levelling, probe_condition, out, workload_name, repeats, decode_repeats, osl, batches, lengths, max_kv,
            model, model_dir, max_load, engine_env, prefill_row_tokens, raw_out, raw_in) -> None:
    """Measure the real engine configured like the --like trace (reference environment) and write a dynamo_profile NPZ."""
    from unirl_replay.calibrate.profiler import CalibrationError, calibrate

    if probe_trace is not None:
        measuring = [n for n, v in (("--like", like), ("--from-raw", raw_in), ("--raw-out", raw_out),
                                    ("--engine-env", engine_env), ("--model", model), ("--model-dir", model_dir),
                                    ("--batches", batches), ("--lengths", lengths), ("--max-load", max_load),
                                    ("--workload-name", workload_name),
                                    ("--prefill-row-tokens", prefill_row_tokens)) if v]
        if measuring:
            raise click.UsageError(f"--level-to-probe measures nothing: {', '.join(measuring)} would be ignored "
                                   "(they are options of a measurement, `calibrate --like`)")
        from unirl_replay.calibrate.probe import ProbeError, level_profile
        from unirl_replay.contract.gate import gate

        if base is None:
            raise click.UsageError("--level-to-probe needs --base PROFILE.npz (the measured profile to level)")
        try:  # the gate: a probe validate rejects (manifest.probe: NaN medians, unknown phases) never levels
            manifest = gate(probe_trace, "calibrate").manifest
            _same_model(base, manifest)
            _fit_describes_the_tables(base)
            path, prov = level_profile(base, manifest, out, levelling=levelling,
                                       probe_condition=probe_condition)
        except ProbeError as e:
            raise CalibrationError(str(e)) from e
        pl = prov["probe_levelled"]
        dec, pre = pl["decode"]["applied"], pl["prefill"]["applied"]
        if dec["method"] == "two_term":
            dtext = f"decode fixed x{dec['fixed_factor']:.3f}, per sequence x{dec['per_sequence_factor']:.3f}"
        else:
            dtext = f"decode x{dec['level']:.3f}" + (f" (two-term refused: {dec['fallback_reason']})"
                                                      if "fallback_reason" in dec else "")
        if pre["method"] == "scalar":
            ptext = f"prefill x{pre['level']:.3f}"
        else:
            ptext = "prefill x" + ", ".join(f"{q['level']:.3f} at {q['tokens']} tokens"
                                            for q in pl["prefill"]["by_tokens"]["points"])
        click.echo(f"{path}: {base} levelled to the probe of {pl['trace_id']} ({pl['variant']}, {levelling}): "
                   f"{dtext}; {ptext} (scalar levels: decode x{pl['decode_level']:.3f}, prefill x{pl['prefill_level']:.3f})")
        from unirl_replay.contract.cpu_signature import other_hardware

        why = other_hardware(manifest, prov)  # the rule replay and compare apply (docs/comparison.md)
        if why:
            click.echo(f"warning: {base} was measured on other hardware than the capture of {pl['trace_id']} ({why}): "
                       "the probe levels the engine's speed, not the form measured elsewhere, so a replay of that "
                       "capture with this profile is labelled UNVALIDATED on this host (measured on other hardware); "
                       "level a base profile swept on the capture's host", err=True)
        return
    if probe_condition != "isolated":
        raise click.UsageError("--probe-condition is an option of --level-to-probe (which probe points it levels to)")
    if like is None:
        raise click.UsageError("--like TRACE_DIR is required (or --level-to-probe with --base)")
    if base is not None:
        raise click.UsageError("--base is the profile --level-to-probe levels; a measurement (--like) has no base")

    if workload_name is not None:  # the profile's calibration workload: compared with traces' workload_name
        from unirl_replay.contract.message_guard import name_problem

        why = name_problem(workload_name) or ("" if workload_name else "an empty name")
        if why:  # was: accepted, the sweep run, and the name written into the provenance
            raise click.BadParameter(f"{why} (a workload name as validate's manifest.workload_name allows)",
                                     param_hint="--workload-name")
    env = _engine_env(engine_env)
    rows = _row_tokens(prefill_row_tokens)

    def load_report() -> None:  # once the inputs are checked and the reference environment found (was: before
        # either, so a machine without .venv-ref heard of its load before hearing it cannot measure)
        load = os.getloadavg()[0]
        click.echo(f"load average (1 min) before measuring: {load:.2f}", err=True)
        if max_load is not None and load > max_load:
            raise CalibrationError(f"1-minute load {load:.2f} > --max-load {max_load}: measure on a quiet machine")
        if load > 1.0:
            click.echo("warning: the machine is busy; the profile records the load next to every measurement",
                       err=True)

    path, prov = calibrate(like, out, workload_name=workload_name, repeats=repeats, osl=osl,
                           decode_repeats=decode_repeats, max_kv=max_kv, batches=_ints(batches),
                           lengths=_ints(lengths), model_dir=model_dir, model=model, raw_in=raw_in, raw_out=raw_out,
                           engine_env=env, prefill_row_tokens=rows, before_measuring=load_report)
    f = prov["fit"]
    click.echo(f"{path}: calibration workload {prov['calibration_workloads'][0]} (measured)")
    click.echo(f"  prefill {f['prefill']['form']}: {f['prefill']['coefficients']}, "
               f"residual MAPE {f['prefill']['residuals']['mape_pct']:.1f}%")
    if "prefill_rows" in prov:
        pr = prov["prefill_rows"]
        bad = [q["tokens"] for q in pr["points"] if q["refused"]]
        click.echo(f"  prefill passes of rows of ~{pr['row_tokens']} tokens ({pr['source']}); refused points: "
                   f"{bad or 'none'}")
    click.echo(f"  decode  {f['decode']['form']}: {f['decode']['coefficients']}, "
               f"residual MAPE {f['decode']['residuals']['mape_pct']:.1f}%")


def _row_tokens(value):
    """``--prefill-row-tokens``: None, ``"like"`` or a positive int; UsageError otherwise."""
    if value is None or value == "like":
        return value
    if not (value.isascii() and value.isdigit() and int(value) > 0):
        raise click.UsageError(f"--prefill-row-tokens {value!r}: expected a positive number of tokens or `like`")
    return int(value)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _engine_env(items) -> dict:
    """``--engine-env NAME=VALUE`` items as a dict; UsageError naming the item that is not NAME=VALUE."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise click.UsageError(f"--engine-env {item!r}: expected NAME=VALUE with NAME a shell variable name")
        if name in out and out[name] != value:  # never "last one wins": the provenance would hide the other
            raise click.UsageError(f"--engine-env {name} given twice ({out[name]!r} and {value!r}): which one?")
        out[name] = value
    return out
