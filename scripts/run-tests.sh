#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs every test: once in a Release build (the
# runtime's multi-process tests included), then the conventions (format, layering, the architecture
# graph: scripts/check-conventions.sh), then, from one clang build with AddressSanitizer and UBSan,
# every reader's fuzzer for 8 s each and the torch-free tests again (libtorch is not built with ASan,
# so the runtime stays out of that build).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, so that a slow run says where its time went.
phase_start=$SECONDS
phase_done() {
  echo "run-tests: $1 took $((SECONDS - phase_start)) s ($SECONDS s in all)"
  phase_start=$SECONDS
}
bash scripts/setup.sh
phase_done "setup"
BUILD_DIR=build bash scripts/build.sh
phase_done "the Release build"
ctest --test-dir build --output-on-failure -j2
phase_done "the Release tests"
bash scripts/check-conventions.sh build
phase_done "the conventions check"
FUZZ_DIR=build-sanitize FUZZ_BUILD_TESTS=ON bash fuzz/run.sh 8
phase_done "the sanitizers' build and fuzzing"

# Under the sanitizers each process start costs about 0.3 s, so rather than ctest's one process per
# test each executable runs whole, the longest split into gtest shards, two at a time, longest first.
run_shard() {  # TESTS INDEX COUNT
  local log="build-sanitize/$1_tests.shard$2.log"
  if (cd build-sanitize && GTEST_TOTAL_SHARDS=$3 GTEST_SHARD_INDEX=$2 timeout 1200 "./$1_tests" --gtest_brief=1) \
    >"$log" 2>&1; then
    echo "sanitized $1_tests $(($2 + 1))/$3: $(grep -o '[0-9]* tests\? from .*)' "$log")"
  else
    echo "sanitized $1_tests $(($2 + 1))/$3: FAILED"
    cat "$log"
    return 1
  fi
}
export -f run_shard
for entry in search:4 cli:4 partition:2 schedules:1 lang:1 views:1 costs:1 validate:1 interop:1 ir:1 sim:1 \
  support:1 train:1; do
  for ((shard = 0; shard < ${entry#*:}; ++shard)); do echo "${entry%:*} $shard ${entry#*:}"; done
done | xargs -P 2 -L 1 bash -c 'run_shard "$@"' run_shard
phase_done "the sanitized tests"
