"""``unirl-replay validate TRACE_DIR [--json]``: check a trace against the v1 contract and its rules.

Exit status: 0 valid (warnings allowed), 1 invalid, 3 incomplete (not finalized, truncated,
digest / size / record-count mismatch).
"""

from __future__ import annotations

import sys

import click

from unirl_replay.contract import json_write
from unirl_replay.v1.report_pb2 import TraceCheck

EXIT = {TraceCheck.STATUS_VALID: 0, TraceCheck.STATUS_INVALID: 1, TraceCheck.STATUS_INCOMPLETE: 3}


@click.command("validate")
@click.argument("trace_dir", type=click.Path(exists=True, file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the TraceCheck as JSON (the JSON profile) instead.")
@click.option("--max-per-rule", default=200, show_default=True, type=click.IntRange(1),
              help="Violations listed per rule (at least 1).")
@click.option("--strict", is_flag=True,
              help="CI mode: what is a warning for interoperability (fields from a newer contract revision) is an error.")
def command(trace_dir: str, as_json: bool, max_per_rule: int, strict: bool) -> None:
    """Check TRACE_DIR: exit 0 valid, 1 invalid (each violation as `file:line record rule: message`), 3 incomplete."""
    from unirl_replay.contract.validate import WARNING, check_trace, format_violation

    res = check_trace(trace_dir, max_per_rule=max_per_rule, strict=strict)
    if as_json:  # the JSON profile with map keys sorted: the same bytes on every run (json_profile.to_json
        # writes maps in the protobuf runtime's iteration order, which changes from process to process)
        click.echo(json_write.to_json(res), nl=False)
    else:
        for v in res.violations:
            click.echo(format_violation(v))
        warnings = sum(1 for v in res.violations if v.severity == WARNING)
        errors = len(res.violations) - warnings
        status = TraceCheck.Status.Name(res.status).removeprefix("STATUS_").lower()
        counts = ", ".join(f"{k} {n}" for k, n in sorted(res.record_counts.items()))
        click.echo(f"{trace_dir}: {status} ({errors} errors, {warnings} warnings; records: {counts or 'not read'})")
    sys.exit(EXIT.get(res.status, 1))
