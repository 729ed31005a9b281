"""``unirl-replay conformance``: run the corpus against simulator revisions, print the matrix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from unirl_replay.conformance import runner
from unirl_replay.conformance.corpus import load_corpus
from unirl_replay.contract.errors import MissingEnvironmentError


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
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              default=runner.REPO_ROOT / ".cache" / "conformance", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
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
    cases = load_corpus(corpus, list(only) or None)
    log = lambda m: click.echo(m, err=True)  # noqa: E731
    cmd = executor.split() if executor else None
    runs = []
    for rev in revisions:
        log(f"running {len(cases)} cases on {rev} ...")
        runs.append(runner.run_revision(corpus, cases, rev, cache_dir, log, cmd))
    click.echo(runner.matrix_markdown(cases, runs))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runner.matrix_json(cases, runs), indent=2) + "\n")
        log(f"matrix written to {out}")
    if not runner.ok(runs):
        sys.exit(1)
