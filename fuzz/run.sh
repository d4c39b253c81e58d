#!/usr/bin/env bash
# Builds every reader's libFuzzer target with clang (Debian's clang-14 or clang) through CMake, with
# ASan and UBSan, and runs each for a bounded time on its seeds: the schedule library and tests/data
# where they hold that kind of file, fuzz/seeds/ otherwise and for what those lack (a cost table
# written with units). Usage: fuzz/run.sh [SECONDS] (per target, default 10) [TARGET ...] (default
# all). FUZZ_DIR names the build folder (default build-fuzz); FUZZ_BUILD_TESTS=ON builds the
# torch-free tests there too, with the same flags, so that scripts/run-tests.sh compiles the
# libraries under the sanitizers once for both; FUZZ_JOBS targets run at once (default: one per
# core). Exit status 0: no crash, hang, leak, allocation over 2 GB or round-trip mismatch found;
# otherwise the failing target's report and input are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(lang pytorch_csv schedule_json cost_table cost_graph partition_plan megatron_layout
  pipedream checkpoint export_manifest slurm_nodelist)
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "fuzz/run.sh: needs clang++ (apt-get install clang-14)" >&2
  exit 2
fi
out=${FUZZ_DIR:-build-fuzz}
with_tests=${FUZZ_BUILD_TESTS:-OFF}
# -O1: libFuzzer's advice, and the tests run 2-3x faster than at -O0; -g1: line tables and function
# names, all a sanitizer report needs. Debug, so that assertions stay on.
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DCMAKE_CXX_COMPILER="$cxx" -DFLEXPIPE_FUZZ=ON -DFLEXPIPE_TESTS="$with_tests" -DFLEXPIPE_BENCH=OFF \
  -DFLEXPIPE_RUNTIME=OFF >/dev/null
build_targets=(all)
[ "$with_tests" = ON ] || build_targets=($(printf '%s_fuzzer ' "${targets[@]}"))
if ! cmake --build "$out" --target "${build_targets[@]}" >"$out/build.log" 2>&1; then
  tail -n 60 "$out/build.log"
  echo "fuzz/run.sh: the build failed (whole log: $out/build.log)" >&2
  exit 1
fi

shopt -s nullglob  # a seed folder without files of a kind adds none
seeds() {  # the files each target starts from
  case $1 in
    lang) echo examples/schedules/*.fps tests/data/runtime/*.fps fuzz/seeds/lang/* ;;
    pytorch_csv) echo tests/data/pytorch/*.csv tests/data/pytorch/legacy/*.csv ;;
    schedule_json) echo tests/data/runtime/*.json ;;
    cost_table) echo examples/costs/*.json fuzz/seeds/cost_table/* ;;
    *) echo fuzz/seeds/"$1"/* ;;
  esac
}
for target in "${targets[@]}"; do
  mkdir -p "$out/corpus/$target"
  for seed in $(seeds "$target"); do cp "$seed" "$out/corpus/$target/${seed//\//_}"; done  # two folders may share a name
done

fuzz() {  # TARGET: one libFuzzer run on its corpus, its verdict on one line
  local log="$out/$1.log"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a few kilobytes of input must never
  # allocate gigabytes; -max_len: inputs stay small enough that each run tries many.
  if "$out/$1_fuzzer" "$out/corpus/$1" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz $1: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs in ${seconds} s, no failure"
  else
    echo "fuzz $1: FAILED"
    tail -n 40 "$log"
    return 1
  fi
}
# libFuzzer runs on one core: as many targets at once as there are cores (FUZZ_JOBS), each for its full time.
export -f fuzz
export out seconds
printf '%s\n' "${targets[@]}" | xargs -P "${FUZZ_JOBS:-$(nproc)}" -I '{}' bash -c 'fuzz "$1"' fuzz '{}'
