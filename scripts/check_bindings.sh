#!/usr/bin/env bash
# Generate C++ and Java bindings from proto/ and compile them where the toolchain exists.
# Uses the system (Debian) protoc so the generated code matches the system headers / jar
# (the protoc 36 of the Python wheel would not match libprotobuf-dev 3.21).
# Install: apt-get install protobuf-compiler libprotobuf-dev libprotobuf-java default-jdk-headless g++
# Skips (exit 0, with a message) for each language whose toolchain is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC=/usr/bin/protoc
if [[ ! -x $PROTOC ]]; then
  echo "check_bindings: SKIP all: no system protoc ($PROTOC); apt-get install protobuf-compiler"
  exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
protos=(proto/unirl_replay/v1/*.proto)
echo "check_bindings: $($PROTOC --version)"

# C++
if command -v g++ >/dev/null && [[ -f /usr/include/google/protobuf/message.h ]]; then
  mkdir -p "$tmp/cpp"
  $PROTOC -Iproto --cpp_out="$tmp/cpp" "${protos[@]}"
  for f in "$tmp"/cpp/unirl_replay/v1/*.pb.cc; do
    g++ -std=c++17 -c -I"$tmp/cpp" "$f" -o "${f%.cc}.o"
  done
  echo "check_bindings: C++ OK ($(ls "$tmp"/cpp/unirl_replay/v1/*.o | wc -l) units)"
else
  echo "check_bindings: SKIP C++: needs g++ and libprotobuf-dev"
fi

# Java
jar=$(ls /usr/share/java/protobuf.jar /usr/share/java/protobuf-java.jar 2>/dev/null | head -1 || true)
if command -v javac >/dev/null && [[ -n $jar ]]; then
  mkdir -p "$tmp/java" "$tmp/classes"
  $PROTOC -Iproto --java_out="$tmp/java" "${protos[@]}"
  find "$tmp/java" -name '*.java' > "$tmp/sources"
  javac -nowarn -cp "$jar" -d "$tmp/classes" @"$tmp/sources"
  echo "check_bindings: Java OK ($(find "$tmp/classes" -name '*.class' | wc -l) classes)"
else
  echo "check_bindings: SKIP Java: needs javac and libprotobuf-java"
fi
