#!/usr/bin/env bash
# Configures and builds FlexPipe into build/ (or $BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
mkdir -p "$build_dir"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$build_dir/configure.log"
grep '^-- FlexPipe' "$build_dir/configure.log" || true  # which libtorch the runtime builds against
cmake --build "$build_dir"
