#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs every test: once in a Release build (the
# runtime's multi-process tests included), then the conventions (format, layering, the architecture
# graph: scripts/check-conventions.sh), then every reader's fuzzer for 8 s each, then the
# torch-free tests again under AddressSanitizer and UBSan (libtorch is not built with ASan, so the
# runtime stays out of that build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=build bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
bash scripts/check-conventions.sh build
FUZZ_DIR=build-fuzz bash fuzz/run.sh 8
# -g1: line tables and function names, all a sanitizer report needs, and about 10% less compile time.
BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DFLEXPIPE_SANITIZE=ON \
  -DFLEXPIPE_BENCH=OFF -DFLEXPIPE_RUNTIME=OFF
# Under the sanitizers each process start costs about 0.3 s, so rather than ctest's one process per
# test each executable runs whole, split into two gtest shards side by side.
failed=0
for tests in support ir validate lang schedules costs sim views partition search interop train cli; do
  tests=${tests}_tests
  pids=()
  for shard in 0 1; do
    (cd build-asan && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard timeout 1200 "./$tests" --gtest_brief=1 \
      >"$tests.shard$shard.log" 2>&1) &
    pids+=($!)
  done
  for shard in 0 1; do
    if ! wait "${pids[$shard]}"; then
      failed=1
      cat "build-asan/$tests.shard$shard.log"
    fi
    tail -n 3 "build-asan/$tests.shard$shard.log"
  done
done
exit $failed
