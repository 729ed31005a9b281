"""``unirl-replay validate TRACE_DIR [--json]``: check a trace against the v1 contract and its rules.

Exit status: 0 valid (warnings allowed), 1 invalid, 3 incomplete (not finalized, truncated,
digest / size / record-count mismatch).
"""

from __future__ import annotations

import os
import sys

import click

from unirl_replay.contract import json_write
from unirl_replay.v1.report_pb2 import TraceCheck

EXIT = {TraceCheck.STATUS_VALID: 0, TraceCheck.STATUS_INVALID: 1, TraceCheck.STATUS_INCOMPLETE: 3}


def stable_json(res: TraceCheck) -> str:
    """``validate --json``: the TraceCheck in the JSON profile (map keys sorted), with every one of its four keys
    present whatever the outcome (``violations`` ``[]`` when valid, ``record_counts`` ``{}`` when nothing was read):
    one shape for a script to read (the profile leaves empty fields out: a valid trace had no ``violations`` key,
    an unreadable one no ``record_counts``)."""
    import json

    d = json.loads(json_write.to_json(res))
    shaped = {"status": d.get("status", TraceCheck.Status.Name(res.status)), "trace_dir": d.get("trace_dir", ""),
              "violations": d.get("violations", []), "record_counts": d.get("record_counts", {})}
    return json.dumps(shaped, indent=2, ensure_ascii=False) + "\n"


@click.command("validate")
# no click existence check: a path that is no directory is validate's own violation (trace.not_a_directory, exit 2),
# so that --json always prints a TraceCheck (was: click's usage error, nothing on stdout)
@click.argument("trace_dir", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the TraceCheck as JSON (the JSON profile) instead.")
@click.option("--max-per-rule", default=200, show_default=True, type=click.IntRange(1),
              help="Violations listed per rule (at least 1).")
@click.option("--strict", is_flag=True,
              help="CI mode: what is a warning for interoperability (off-profile JSON such as a camelCase key or an "
                   "enum number, fields from a newer contract revision) is an error.")
def command(trace_dir: str, as_json: bool, max_per_rule: int, strict: bool) -> None:
    """Check TRACE_DIR: exit 0 valid, 1 invalid (each violation as `file:line record rule: message`), 3 incomplete,
    2 no directory there (with --json its TraceCheck is printed all the same)."""
    from unirl_replay.contract.validate import WARNING, check_trace, format_violation

    res = check_trace(trace_dir, max_per_rule=max_per_rule, strict=strict)
    if not os.path.isdir(trace_dir):  # no directory at all: a usage error (exit 2) as before, yet with --json still
        # the TraceCheck on stdout (its trace.not_a_directory violation), never an empty stdout
        if as_json:
            click.echo(stable_json(res), nl=False)
        for v in res.violations:
            click.echo(f"error: {trace_dir}: {v.message} ({v.rule})", err=True)
        sys.exit(2)
    if as_json:  # the JSON profile with map keys sorted: the same bytes on every run (json_profile.to_json
        # writes maps in the protobuf runtime's iteration order, which changes from process to process)
        click.echo(stable_json(res), nl=False)
    else:
        for v in res.violations:
            click.echo(format_violation(v))
        warnings = sum(1 for v in res.violations if v.severity == WARNING)
        errors = len(res.violations) - warnings
        status = TraceCheck.Status.Name(res.status).removeprefix("STATUS_").lower()
        counts = ", ".join(f"{k} {n}" for k, n in sorted(res.record_counts.items()))
        click.echo(f"{trace_dir}: {status} ({errors} error{'' if errors == 1 else 's'}, {warnings} "
                   f"warning{'' if warnings == 1 else 's'}; records: {counts or 'not read'})")
    sys.exit(EXIT.get(res.status, 1))
