#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs every test: once in a Release build, then
# the schedule-language fuzzer for 60 s, then the same tests under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=build bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
FUZZ_DIR=build-fuzz bash fuzz/run.sh 60 2>&1 | tail -n 12
BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DFLEXPIPE_SANITIZE=ON -DFLEXPIPE_BENCH=OFF
ctest --test-dir build-asan --output-on-failure -j2
