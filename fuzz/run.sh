#!/usr/bin/env bash
# Builds the schedule-language fuzz target with clang (Debian's clang-14 or clang) through CMake and
# runs it for a bounded time, seeded with the schedule library. Usage: fuzz/run.sh [SECONDS] (default 60).
# Exit status 0: no crash, hang, leak or round-trip mismatch found.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "fuzz/run.sh: needs clang++ (apt-get install clang-14)" >&2
  exit 2
fi
out=${FUZZ_DIR:-build-fuzz}
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_COMPILER="$cxx" -DFLEXPIPE_FUZZ=ON -DFLEXPIPE_TESTS=OFF -DFLEXPIPE_BENCH=OFF -DFLEXPIPE_RUNTIME=OFF \
  >/dev/null
cmake --build "$out" --target lang_fuzzer
mkdir -p "$out/corpus"
cp examples/schedules/*.fps "$out/corpus/"
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a blown-up allocation is a failure.
"$out/lang_fuzzer" "$out/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1
