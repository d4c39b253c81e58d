#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs every test: once in a Release build (the
# runtime's multi-process tests included), then the schedule-language fuzzer for 30 s, then the
# torch-free tests again under AddressSanitizer and UBSan (libtorch is not built with ASan, so the
# runtime stays out of that build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=build bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
FUZZ_DIR=build-fuzz bash fuzz/run.sh 30 2>&1 | tail -n 12
BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DFLEXPIPE_SANITIZE=ON -DFLEXPIPE_BENCH=OFF \
  -DFLEXPIPE_RUNTIME=OFF
ctest --test-dir build-asan --output-on-failure -j2
