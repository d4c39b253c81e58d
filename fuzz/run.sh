#!/usr/bin/env bash
# Builds the schedule-language fuzz target with clang (Debian's clang-14 or clang) and runs it for a
# bounded time, seeded with the schedule library. Usage: fuzz/run.sh [SECONDS] (default 60).
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
mkdir -p "$out/corpus"
cp examples/schedules/*.fps "$out/corpus/"
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude \
  fuzz/lang_fuzzer.cpp src/core/lang_*.cpp src/core/{action,schedule,error,validator,validator_deadlock}.cpp $(pkg-config --cflags --libs fmt 2>/dev/null || echo -lfmt) \
  -o "$out/lang_fuzzer"
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a blown-up allocation is a failure.
"$out/lang_fuzzer" "$out/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1
