#!/usr/bin/env bash
# `unirl-replay convert` end to end (gate + converter), another checkout ("old") vs this one, binpb
# and arrow, against the upstream replay alone of the same trace; interleaved rounds, one run.
#
#   OLD_TREE=/path/to/other/checkout N=100000 DIR=D ROUNDS=3 benchmarks/compare_cli_convert.sh
#
# DIR holds (or gets) trace-binpb-N and trace-arrow-N (bench_pipeline.py's workload). Each round:
# per encoding the CLI convert with the old code and with this checkout's (the order alternates
# between rounds), the sha256 of each converted file and its sidecar (must be equal), then the
# upstream alone on the converted binpb file. OLD_TREE's python/ and gen/python/ go first on
# PYTHONPATH. The fast pass can be turned off for a run with UNIRL_REPLAY_GATE_FAST=0.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD_TREE:?set OLD_TREE to the other checkout}"
PY=${PY:-.venv/bin/python}
N=${N:-100000}
D=${DIR:-$(mktemp -d /tmp/compare_cli_convert.XXXXXX)}
ROUNDS=${ROUNDS:-3}
OLDPP="$OLD_TREE/python:$OLD_TREE/gen/python"
B="$PY benchmarks/bench_pipeline.py --requests $N --dir $D --keep"
echo "start $(date -u +%T) $(uptime)"; grep -m1 "model name" /proc/cpuinfo || true; nproc
for enc in binpb arrow; do $B --encodings $enc --steps read > /dev/null; done  # writes the traces if absent
run() {  # old|new encoding step
  if [ "$1" = old ]; then PYTHONPATH="$OLDPP" $B --encodings "$2" --steps "$3" | grep -v CPU | sed "s/^/old /"
  else $B --encodings "$2" --steps "$3" | grep -v CPU | sed "s/^/new /"; fi
  if [ "$3" = cli_convert ]; then
    w="$D/work-$2-$N"
    echo "  sha256 $1 $2 $(sha256sum < "$w/upstream.jsonl" | cut -c1-16) sidecar $(sha256sum < "$w/upstream.jsonl.unirl-replay.json" | cut -c1-16)"
  fi
}
for r in $(seq "$ROUNDS"); do
  echo "== round $r $(date -u +%T) $(uptime)"
  if [ $((r % 2)) = 0 ]; then order="new old"; else order="old new"; fi
  for enc in binpb arrow; do for who in $order; do run $who $enc cli_convert; done; done
  run new binpb upstream
done
echo "end $(date -u +%T) $(uptime)"
