#!/usr/bin/env bash
# Holdout validation of a calibrated profile (issue 6). Reproduce from the repository root:
#   results/holdout/run_holdout.sh capture   # 3 GRPO + 3 agentic real UniRL windows (.venv-ref), ~12 min
#   results/holdout/run_holdout.sh report    # replay (calibrated + default), compare, summarise (.venv)
# PROFILE=profiles/<name>.npz selects the profile (default: the newest in profiles/).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=results/holdout
TRACES=${TRACES:-$H/traces}
PROFILE=${PROFILE:-$(ls profiles/*.npz | sort | tail -1)}
CLI=.venv/bin/unirl-replay
REPEATS=${REPEATS:-3}

# Holdout knobs: other seeds and prompt-length ranges than the bundled traces (seed 0, grpo 4:300
# words, agentic 6:80 words) and than anything the calibration sweep sends (random token ids).
GRPO_ARGS=(--role holdout --workload-name holdout-grpo-b --seed 11 --prompt-words 30:200 --prompts 6
           --samples 4 --max-new-tokens 96 --batches 2 --overhead-pairs 2)
AGENTIC_ARGS=(--role holdout --workload-name holdout-agentic-b --seed 21 --prompt-words 20:120 --prompts 4
              --group-size 4 --per-worker-inflight 4 --max-turns 4 --max-new-tokens 40 --batches 2
              --overhead-pairs 2)

load() { cut -d' ' -f1-3 /proc/loadavg; }

capture() {
  mkdir -p "$TRACES"
  for r in $(seq 1 "$REPEATS"); do
    for mode in grpo agentic; do
      out="$TRACES/$mode-r$r"
      [ -f "$out/manifest.json" ] && { echo "keep $out"; continue; }
      rm -rf "$out"
      if [ "$mode" = grpo ]; then args=("${GRPO_ARGS[@]}"); else args=("${AGENTIC_ARGS[@]}"); fi
      echo "$(date -u +%FT%TZ) capture $out load before: $(load)" | tee -a "$H/loadavg.log"
      "$CLI" capture "$mode" --out "$out" "${args[@]}" > "$TRACES/$mode-r$r.log" 2>&1
      echo "$(date -u +%FT%TZ) capture $out load after:  $(load)" | tee -a "$H/loadavg.log"
    done
  done
}

report() {
  for mode in grpo agentic; do
    extra=()
    [ "$mode" = agentic ] && extra=(--allow-unmodelled engine_client.inflight_limit)
    for r in $(seq 1 "$REPEATS"); do
      others=()
      for o in $(seq 1 "$REPEATS"); do [ "$o" != "$r" ] && others+=(--repeat "$TRACES/$mode-r$o"); done
      for model in calibrated default; do
        if [ $model = calibrated ]; then tm="profile:$PROFILE"; else tm=polynomial; fi
        d="$H/$mode/r$r/$model"
        "$CLI" replay "$TRACES/$mode-r$r" --timing-model "$tm" --out "$d" "${extra[@]}"
        plots=(--no-plots); [ "$r" = 1 ] && plots=()
        "$CLI" compare "$TRACES/$mode-r$r" "$d/replay_result.json" --out "$d" "${others[@]}" "${plots[@]}" \
          > "$d/table.txt"
        rm -rf "$d/upstream"
      done
    done
  done
  .venv/bin/python "$H/summarise.py" "$H" > "$H/summary.md"
}

"${1:-report}"
