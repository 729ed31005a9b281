#!/usr/bin/env bash
# Contract guard, run by `make test` (and so by CI):
#  1. buf lint;
#  2. buf breaking (WIRE_JSON) against the committed v1 baseline image compat/unirl_replay_v1.binpb,
#     then our own check against it (unirl_replay.contract.breaking: signedness, presence, oneofs,
#     labels, names: what WIRE_JSON lets through);
#  3. gen/ is exactly what buf generate makes from proto/ now;
#  4. schema/ is exactly what the JSON Schema generator makes from the descriptors now, and
#     docs/validation-rules.md what the rule registry renders;
#  5. the installed protobuf runtime can load the generated code (it checks its own version).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export PATH="$PWD/$BIN:$PATH"

buf lint
buf breaking --against compat/unirl_replay_v1.binpb

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
buf build -o "$tmp/current.binpb"
"$BIN/python" -m unirl_replay.contract.breaking --against compat/unirl_replay_v1.binpb "$tmp/current.binpb"
cp -r proto buf.yaml buf.gen.yaml "$tmp/"
(cd "$tmp" && buf generate)
if ! diff -r -q -x __pycache__ gen "$tmp/gen" >/dev/null; then
  echo "check_gen: gen/ is stale; run 'make gen' and commit:" >&2
  diff -r -x __pycache__ gen "$tmp/gen" | head -20 >&2
  exit 1
fi
"$BIN/python" -m unirl_replay.contract.jsonschema_gen --check schema
"$BIN/python" -m unirl_replay.contract.validate.docs --check docs/validation-rules.md
"$BIN/python" - <<'PY'
import importlib, pkgutil
import google.protobuf
import unirl_replay.v1 as v1
mods = [m.name for m in pkgutil.iter_modules(v1.__path__) if m.name.endswith("_pb2")]
for m in mods:
    importlib.import_module(f"unirl_replay.v1.{m}")  # raises VersionError if the runtime is too old
print(f"check_gen: buf lint, breaking, gen/ and schema/ fresh; {len(mods)} modules load on protobuf {google.protobuf.__version__}")
PY
