#!/usr/bin/env bash
# Holdout validation of the calibrated CPU profile with the multi-process capture (issues 6, 12, 14).
# Reproduce from the repository root:
#   results/holdout/run_holdout.sh capture   # 2 engine sessions (GRPO, agentic) of 3 windows each, on UniRL's
#                                            # Ray wiring with 2 engines, reference probe before/after every window
#   results/holdout/run_holdout.sh report    # per window: probe-levelled profiles, replays (calibrated,
#                                            # calibrated+probe by LEVELLING (default two_term), the same probe by
#                                            # the scalar method (probe-scalar), default; agentic also the lanes =
#                                            # limit bound; REPORT_MODELS="probe ..." runs only those models),
#                                            # compares, summary.md / summary.json
# BASE=profiles/<name>.npz selects the base profile. LOCK=/path/to/lockfile runs each engine session under
# `flock LOCK` (a shared machine). SESSIONS=separate gives every window its own engine session (engine start,
# probe before, window, probe after), so the windows' spread includes engine-start variation; the default
# (SESSIONS=shared) runs the 3 windows of a mode in one engine session. H=DIR writes elsewhere than
# results/holdout; PROBE_CONTENDED=N adds the probe's contended part to the capture (and REPORT_MODELS may then name
# probe-contended: the scalar levelling of the contended points); ENGINES=N runs every session with N engines
# (capture --engines N, default 2; recorded as knob.engines in each manifest, and summarise.py labels it); RAW=DIR keeps the sessions' shards (default /tmp/unirl-replay-holdout-raw). The single-process holdout of 2026-11-30 is in single-process/.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${H:-results/holdout}
TRACES=${TRACES:-$H/traces}
RAW=${RAW:-/tmp/unirl-replay-holdout-raw}   # the sessions' shards (not committed)
BASE=${BASE:-profiles/vllm-cpu-tiny-qwen2-20261130b.npz}
LEVELLING=${LEVELLING:-two_term}   # the probe model's levelling (calibrate --levelling); probe-scalar is always scalar
PROBE_CONTENDED=${PROBE_CONTENDED:-0}   # capture --probe-contended N (the probe's contended part; 0 = off);
                                        # the probe-contended model levels to it (scalar, --probe-condition contended)
ENGINES=${ENGINES:-2}   # capture --engines N: Ray actors, one vLLM-CPU engine each
CLI=.venv/bin/unirl-replay
WINDOWS=3
BATCHES=2

# Holdout knobs: the issue-6 holdout's (other seeds and prompt-length ranges than the bundled traces and than
# anything the calibration sweep sends), run as 3 windows of the same prompts in one engine session per mode.
# GRPO_PROMPTS / GRPO_MAX_NEW_TOKENS / GRPO_NAME change the GRPO batch's size (defaults: the knobs above; a longer
# batch on a faster host: results/holdout-closed-long/) and its workload name.
GRPO_PROMPTS=${GRPO_PROMPTS:-6}
GRPO_MAX_NEW_TOKENS=${GRPO_MAX_NEW_TOKENS:-96}
GRPO_ARGS=(--role holdout --seed 11 --prompt-words 30:200 --prompts "$GRPO_PROMPTS" --samples 4
           --max-new-tokens "$GRPO_MAX_NEW_TOKENS")
AGENTIC_ARGS=(--role holdout --seed 21 --prompt-words 20:120 --prompts 4 --group-size 4 --per-worker-inflight 4
              --max-turns 4 --max-new-tokens 40)
declare -A NAME=([grpo]=${GRPO_NAME:-holdout-grpo-mp} [agentic]=holdout-agentic-mp)
declare -A TOKENS=([grpo]=$GRPO_MAX_NEW_TOKENS [agentic]=40)

load() { echo "$(cut -d' ' -f1-3 /proc/loadavg) | uptime:$(uptime)"; }

# One engine session: `capture MODE ...` with its output in LOG, the load recorded right before and after it in
# loadavg.log. With LOCK set the lock is taken first, so "before" is the session's start, not the start of the wait
# for the lock (the capture's processes do not inherit the lock's descriptor: 9>&-).
session() {  # session LABEL LOG capture-args...
  local label=$1 log=$2; shift 2
  (
    if [ -n "${LOCK:-}" ]; then exec 9>>"$LOCK"; flock 9; fi
    echo "$(date -u +%FT%TZ) session $label ($ENGINES engines) load before: $(load)" | tee -a "$H/loadavg.log"
    rc=0; "$CLI" capture "$@" > "$log" 2>&1 9>&- || rc=$?
    echo "$(date -u +%FT%TZ) session $label load after:  $(load)$([ "$rc" = 0 ] || echo " (capture exit $rc)")" \
      | tee -a "$H/loadavg.log"
    exit $rc
  )
}

capture() {
  mkdir -p "$TRACES" "$RAW"
  for mode in ${MODES:-grpo agentic}; do
    if [ "$mode" = grpo ]; then args=("${GRPO_ARGS[@]}"); else args=("${AGENTIC_ARGS[@]}"); fi
    if [ "${SESSIONS:-shared}" = separate ]; then
      for r in $(seq 1 $WINDOWS); do
        s="$RAW/$mode-r$r"; out="$TRACES/$mode-r$r"
        [ -f "$out/manifest.json" ] && { echo "keep $out"; continue; }
        if [ ! -d "$s/raw" ]; then
          session "$mode-r$r" "$TRACES/$mode-r$r-session.log" "$mode" --out "$s" "${args[@]}" \
            --workload-name "${NAME[$mode]}" --batches $BATCHES --windows 1 --probe --probe-contended "$PROBE_CONTENDED" \
            --engines "$ENGINES" --overhead-pairs 0 --no-finalize
        fi
        "$CLI" capture finalize "$s/raw" --out "$out" --rollouts "0:$((BATCHES - 1))" --role holdout \
          --workload-name "${NAME[$mode]}" --trace-id "${NAME[$mode]}-r$r" --max-new-tokens "${TOKENS[$mode]}" \
          --label "holdout.window=$r of $WINDOWS (rollouts 0:$((BATCHES - 1)), its own engine session)"
      done
      continue
    fi
    s="$RAW/$mode"
    if [ ! -d "$s/raw" ]; then
      session "$mode" "$TRACES/$mode-session.log" "$mode" --out "$s" "${args[@]}" --workload-name "${NAME[$mode]}" \
        --batches $BATCHES --windows $WINDOWS --probe --probe-contended "$PROBE_CONTENDED" --engines "$ENGINES" \
        --overhead-pairs 0
    fi
    for r in $(seq 1 $WINDOWS); do
      out="$TRACES/$mode-r$r"
      [ -f "$out/manifest.json" ] && { echo "keep $out"; continue; }
      a=$(( (r - 1) * BATCHES )); b=$(( a + BATCHES - 1 ))
      "$CLI" capture finalize "$s/raw" --out "$out" --rollouts "$a:$b" --role holdout \
        --workload-name "${NAME[$mode]}" --trace-id "${NAME[$mode]}-r$r" --max-new-tokens "${TOKENS[$mode]}" \
        --label "holdout.window=$r of $WINDOWS (rollouts $a:$b, one engine session)"
    done
  done
}

report() {
  mkdir -p "$H/profiles"
  for mode in ${MODES:-grpo agentic}; do
    for r in $(seq 1 $WINDOWS); do
      t="$TRACES/$mode-r$r"
      others=()
      for o in $(seq 1 $WINDOWS); do [ "$o" != "$r" ] && others+=(--repeat "$TRACES/$mode-r$o"); done
      # the probe-levelled profile of this window (deterministic from the trace's probes and the base profile;
      # not committed: levels.json keeps the levels and the points they rest on)
      lv="$H/profiles/$mode-r$r+probe.npz"
      [ -f "$lv" ] || "$CLI" calibrate --level-to-probe "$t" --base "$BASE" --out "$lv" --levelling "$LEVELLING" > /dev/null
      lvs="$H/profiles/$mode-r$r+probe-scalar.npz"
      [ -f "$lvs" ] || "$CLI" calibrate --level-to-probe "$t" --base "$BASE" --out "$lvs" --levelling scalar > /dev/null
      lvm="$H/profiles/$mode-r$r+probe-mixed.npz"   # decode contended, prefill isolated (exploratory)
      case " ${REPORT_MODELS:-} " in *" probe-mixed "*)
        [ -f "$lvm" ] || "$CLI" calibrate --level-to-probe "$t" --base "$BASE" --out "$lvm" --levelling scalar \
          --probe-condition mixed > /dev/null ;; esac
      lvc="$H/profiles/$mode-r$r+probe-contended.npz"
      case " ${REPORT_MODELS:-calibrated probe probe-scalar default} " in *" probe-contended "*)
        [ -f "$lvc" ] || "$CLI" calibrate --level-to-probe "$t" --base "$BASE" --out "$lvc" --levelling scalar \
          --probe-condition contended > /dev/null
        .venv/bin/python - "$lvc" "$H/$mode/r$r/levels-contended.json" <<'EOF'
import json, sys
from pathlib import Path
prov = json.loads(Path(sys.argv[1] + ".provenance.json").read_text())["probe_levelled"]
keep = {k: prov[k] for k in ("label", "variant", "probe_condition", "base_profile", "base_sha256", "trace_id",
                             "decode_level", "prefill_level", "points", "method", "levelling") if k in prov}
Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
Path(sys.argv[2]).write_text(json.dumps(keep, indent=1) + "\n")
EOF
      ;; esac
      .venv/bin/python - "$lv" "$H/$mode/r$r/levels.json" <<'EOF'
import json, sys
from pathlib import Path
prov = json.loads(Path(sys.argv[1] + ".provenance.json").read_text())["probe_levelled"]
keep = {k: prov[k] for k in ("label", "base_profile", "base_sha256", "trace_id", "decode_level", "prefill_level",
                             "points", "method", "levelling", "decode", "prefill", "scalar_method") if k in prov}
Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
Path(sys.argv[2]).write_text(json.dumps(keep, indent=1) + "\n")
EOF
      for model in ${REPORT_MODELS:-calibrated probe probe-scalar default}; do
        case $model in
          calibrated) tm="profile:$BASE" ;;
          probe) tm="profile:$lv" ;;
          probe-scalar) tm="profile:$lvs" ;;
          probe-contended) tm="profile:$lvc" ;;
          probe-mixed) tm="profile:$lvm" ;;
          default) tm=polynomial ;;
        esac
        d="$H/$mode/r$r/$model"
        plots=(--no-plots); [ "$r" = 1 ] && [ "$model" = "${PLOT_MODEL:-probe}" ] && plots=()   # plots: run 1, PLOT_MODEL
        if [ "$mode" = agentic ]; then
          # the bracket: lanes = slots with the client's in-flight limit dropped (main), lanes = the limit (bound)
          # (a batch boundary the capture recorded cannot be held in lanes mode: batch_boundary.open_loop, labelled)
          "$CLI" replay "$t" --timing-model "$tm" --out "$d" --allow-unmodelled engine_client.inflight_limit \
            --allow-unmodelled batch_boundary.open_loop
          "$CLI" replay "$t" --timing-model "$tm" --out "$d/bound-lanes" \
            --allow-unmodelled engine_client.inflight_limit.as_lanes --allow-unmodelled batch_boundary.open_loop
          "$CLI" compare "$t" "$d/replay_result.json" --out "$d" "${others[@]}" "${plots[@]}" \
            --bound "$d/bound-lanes/replay_result.json" > /dev/null
          rm -rf "$d/bound-lanes/upstream"
        else
          # a recorded batch boundary is replayed closed loop where upstream can hold it (one engine); across
          # engines (per-engine replays cannot hold it) open loop, labelled UNMODELLED (the opt-in only acts there)
          "$CLI" replay "$t" --timing-model "$tm" --out "$d" --allow-unmodelled batch_boundary.open_loop
          "$CLI" compare "$t" "$d/replay_result.json" --out "$d" "${others[@]}" "${plots[@]}" > /dev/null
        fi
        rm -rf "$d/upstream"
      done
    done
  done
  .venv/bin/python results/holdout/summarise.py "$H" "$TRACES" > "$H/summary.md"
}

"${1:-report}"
