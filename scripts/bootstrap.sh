#!/usr/bin/env bash
# Create or update the project environment (.venv) from PyPI: Python 3.12, the package with its
# `replay` extra (the real Dynamo Replay), its `grid` extra (Ray) and the dev tools (pytest, hypothesis, buf, protoc).
# Idempotent; safe to run on every `make` target.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  for c in "${UNIRL_REPLAY_PYTHON:-}" python3.12 python3.13; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info[:2] in ((3,12),(3,13))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  for p in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

PY=$(find_python) || { echo "bootstrap: Python 3.12 is required (UniRL needs >=3.12). Install it or set UNIRL_REPLAY_PYTHON=/path/to/python3.12." >&2; exit 1; }

if ! command -v uv >/dev/null 2>&1; then
  if [ ! -x .cache/uv/bin/uv ]; then
    echo "bootstrap: installing uv into .cache/uv" >&2
    "$PY" -m venv .cache/uv >/dev/null
    .cache/uv/bin/python -m pip install -q uv
  fi
  UV=.cache/uv/bin/uv
else
  UV=uv
fi

# --compile-bytecode: write the .pyc files of every installed package now. This environment sets
# PYTHONDONTWRITEBYTECODE=1, so without it every process start recompiles protobuf, numpy and
# ai-dynamo's Python from source (about 20 % of a 100k-request convert). The project's own
# sources (an editable install) are compiled the same way; a stale .pyc is recompiled in memory
# by Python's mtime check, so an edit never runs old code. `grid`: Ray for `grid --backend ray`.
"$UV" sync --quiet --compile-bytecode --python "$PY" --extra replay --extra grid --extra columnar "$@"
.venv/bin/python -m compileall -q -j 0 python gen/python >/dev/null || true
