#!/usr/bin/env bash
# Interleaved same-run comparison of two checkouts with bench_pipeline.py: each step runs with the
# OTHER checkout's code ("today") and then with this one, on the same trace files.
#
#   OLD_TREE=/path/to/other/checkout OLD_PY=/path/to/its/.venv/bin/python N=100000 benchmarks/compare_checkouts.sh
#
# OLD_TREE's python/ and gen/python/ go first on PYTHONPATH (its editable install is not used).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD_TREE:?set OLD_TREE to the other checkout}"
OLD_PY=${OLD_PY:-.venv/bin/python}
NEW_PY=${NEW_PY:-.venv/bin/python}
N=${N:-100000}
D=${DIR:-$(mktemp -d /tmp/compare_checkouts.XXXXXX)}
OLDPP="$OLD_TREE/python:$OLD_TREE/gen/python"
uptime
for enc in binpb jsonl; do
  "$NEW_PY" benchmarks/bench_pipeline.py --requests "$N" --encodings $enc --steps read --dir "$D" --keep  # writes the trace
  if [ $enc = binpb ]; then steps="convert upstream replay validate read"; else steps="validate read convert"; fi
  for s in $steps; do
    echo "== today: $s"; PYTHONPATH="$OLDPP" "$OLD_PY" benchmarks/bench_pipeline.py --requests "$N" --encodings $enc --steps $s --dir "$D" --keep 2>&1 | grep -v CPU
    echo "== new:   $s"; "$NEW_PY" benchmarks/bench_pipeline.py --requests "$N" --encodings $enc --steps $s --dir "$D" --keep 2>&1 | grep -v CPU
  done
done
uptime
rm -rf "$D"
