"""``unirl-replay conformance``: run the corpus against simulator revisions, print the matrix."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import click

from unirl_replay.cli import OutPath

from unirl_replay.conformance import runner
from unirl_replay.conformance.corpus import load_corpus
from unirl_replay.contract.errors import MissingEnvironmentError, OutputExistsError, TraceFormatError

MATRIX_KEYS = {"revisions", "cases"}


def _guard_matrix_out(out: Path) -> None:
    """``--out`` may be new or an earlier matrix (a JSON object with exactly the matrix keys, as
    :func:`runner.matrix_json` writes it: `make conformance-matrix` rewrites conformance/matrix.json);
    anything else is a user's file and is never replaced."""
    if not os.path.lexists(out):
        return
    ours = False
    if out.is_file() and not out.is_symlink() and out.stat().st_size <= 64 << 20:
        try:
            doc = json.loads(out.read_text(encoding="utf-8"))
            ours = isinstance(doc, dict) and set(doc) == MATRIX_KEYS and isinstance(doc["revisions"], list)
        except (OSError, ValueError):
            ours = False
    if not ours:
        raise OutputExistsError(f"{out} exists and is not a conformance matrix unirl-replay wrote: it is never "
                                "replaced; choose another --out or move it")


@click.command("conformance")
@click.option("--simulator", "simulators", multiple=True, metavar="ai-dynamo==X.Y.Z|aisimulate==VERSION",
              help="Simulator revision(s) to run; default: the one installed here (the pinned ai-dynamo==1.6.1). "
                   "Other ai-dynamo revisions are installed into cached isolated environments under --cache-dir; "
                   "aisimulate dev builds (e.g. aisimulate==0.13.0.dev202610270000000085) into their own under "
                   ".cache/simulators/ (the replay --simulator line).")
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=runner.REPO_ROOT / "conformance", show_default=True, help="Corpus root.")
@click.option("--case", "only", multiple=True, help="Run only these case names.")
@click.option("--executor", default=None,
              help="Run a foreign executor command (JSON lines over stdin/stdout, see "
                   "unirl_replay.conformance.protocol) instead of the Python adapter.")
@click.option("--cache-dir", type=OutPath(file_okay=False, path_type=Path),
              default=runner.REPO_ROOT / ".cache" / "conformance", show_default=True)
@click.option("--out", type=OutPath(dir_okay=False, path_type=Path), default=None,
              help="Write the matrix as JSON here.")
def command(simulators: tuple[str, ...], corpus: Path, only: tuple[str, ...], executor: str | None,
            cache_dir: Path, out: Path | None) -> None:
    """Run every conformance case on each simulator revision and print a case x revision matrix.

    Exit status 0 when every case passes or fails as listed in
    conformance/expected_failures/<dist>-<version>.txt; 1 otherwise (a failure, an error, or a listed
    expected failure that now passes).
    """
    revisions = list(simulators) or [runner.installed_revision() or ""]
    if not revisions[0]:
        raise MissingEnvironmentError("ai-dynamo is not installed here: run `make env`, or pass --simulator ai-dynamo==X.Y.Z")
    for rev in revisions:
        runner.parse_revision(rev)  # a malformed spec fails before anything runs
    if out is not None:
        _guard_matrix_out(out)  # before anything runs: a user's file is never replaced
    cases = load_corpus(corpus, list(only) or None)
    if not cases:
        raise TraceFormatError("no conformance case (a folder with a case.json) in the corpus",
                               file=str(corpus / "cases"), rule="conformance.empty")
    log = lambda m: click.echo(m, err=True)  # noqa: E731
    try:  # a command line as a shell would split it: quoted arguments stay whole
        cmd = shlex.split(executor) if executor else None
    except ValueError as e:
        raise click.BadParameter(f"{executor!r}: {e}", param_hint="--executor") from None
    if cmd == []:
        raise click.BadParameter("an empty command", param_hint="--executor")
    runs = []
    for rev in revisions:
        log(f"running {len(cases)} cases on {rev} ...")
        runs.append(runner.run_revision(corpus, cases, rev, cache_dir, log, cmd))
    click.echo(runner.matrix_markdown(cases, runs))
    if out:
        _guard_matrix_out(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(runner.matrix_json(cases, runs), indent=2) + "\n")
        os.replace(tmp, out)
        log(f"matrix written to {out}")
    if not runner.ok(runs):
        sys.exit(1)
