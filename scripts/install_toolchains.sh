#!/usr/bin/env bash
# Install what scripts/check_bindings.sh needs to build the C++, Java, Go and TypeScript bindings
# and their interop programs (bindings/README.md). Run by `make test` (CI runs as root). Idempotent:
# a present tool is not reinstalled, so the second run takes about a second.
#
#   Debian packages (apt-get): protobuf-compiler libprotobuf-dev g++           C++
#                              libprotobuf-java libgoogle-gson-java libguava-java default-jdk-headless   Java
#                              golang-go protoc-gen-go golang-google-protobuf-dev                      Go
#                              nodejs npm                                                               TypeScript
#   npm (bindings/ts/package-lock.json): @bufbuild/protobuf, @bufbuild/protoc-gen-es, typescript
#
#   scripts/install_toolchains.sh            install what is missing (as root: apt-get; npm ci)
#   scripts/install_toolchains.sh --check    install nothing; exit 1 naming the install command
#
# Not root and something missing: exit 1 with the exact command to run. It never skips a language.
set -euo pipefail
cd "$(dirname "$0")/.."
check_only=0
[[ ${1:-} == --check ]] && check_only=1

# what must exist -> the Debian package that provides it
declare -a need=(
  "/usr/bin/protoc protobuf-compiler"
  "/usr/include/google/protobuf/message.h libprotobuf-dev"
  "/usr/include/google/protobuf/util/json_util.h libprotobuf-dev"
  "g++ g++"
  "/usr/share/java/protobuf.jar libprotobuf-java"
  "/usr/share/java/protobuf-util.jar libprotobuf-java"
  "/usr/share/java/gson.jar libgoogle-gson-java"
  "/usr/share/java/guava.jar libguava-java"
  "javac default-jdk-headless"
  "go golang-go"
  "/usr/bin/protoc-gen-go protoc-gen-go"
  "/usr/share/gocode/src/google.golang.org/protobuf/proto/encode.go golang-google-protobuf-dev"
  "node nodejs"
  "npm npm"
)
missing=()
for entry in "${need[@]}"; do
  what=${entry% *}; pkg=${entry##* }
  if [[ $what == /* ]]; then [[ -e $what ]] && continue; else command -v "$what" >/dev/null 2>&1 && continue; fi
  [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
done

if ((${#missing[@]})); then
  cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  if ((check_only)) || [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "install_toolchains: missing Debian packages ${missing[*]}; install them with:" >&2
    echo "  ${SUDO:-sudo} $cmd" >&2
    exit 1
  fi
  echo "install_toolchains: apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages of the TypeScript bindings, exactly as locked
ts=bindings/ts
stamp=$ts/node_modules/.package-lock.json
if [[ ! -x $ts/node_modules/.bin/protoc-gen-es || ! -x $ts/node_modules/.bin/tsc || $ts/package-lock.json -nt $stamp ]]; then
  if ((check_only)); then
    echo "install_toolchains: npm packages of $ts missing; install them with:" >&2
    echo "  npm ci --prefix $ts" >&2
    exit 1
  fi
  echo "install_toolchains: npm ci --prefix $ts" >&2
  npm ci --prefix "$ts" --no-audit --no-fund --loglevel=error >/dev/null
fi
echo "install_toolchains: protoc $(/usr/bin/protoc --version | cut -d' ' -f2), $(g++ --version | head -1), \
javac $(javac -version 2>&1 | cut -d' ' -f2), $(go version | cut -d' ' -f3), node $(node --version), \
protoc-gen-es $("$ts/node_modules/.bin/protoc-gen-es" --version 2>/dev/null | awk '{print $NF}')"
