#!/usr/bin/env bash
# Compares the simulator, search and partitioner benchmarks of the working tree with those of a given
# commit, side by side on this machine (docs/performance.md). Run it before landing a change that
# touches the simulator, the search or the partitioner.
#
#   bench/compare.sh REV [--rounds N] [--zoo-budget SECONDS] [--no-zoo] [--instructions]
#
# REV is built once from `git archive` under build-compare/<commit> (kept for the next run; the
# runtime and the tests off); the working tree is built in $BUILD_DIR (default build). Then, N rounds
# (default 5), alternating which build goes first:
#   - simulator_bench, 64 devices x 512 micro-batches, recording off (CPU time per simulation);
#   - the README's search, `flexpipe search --model gpt3-1.3b -p 4 -m 8 --memory-limit 18.1e9
#     --threads 1 --json` at --time-budget 5 and 40 (the search's own seconds, answer, exhausted);
#   - partitioner_bench's 2,002-operator 16-stage case (CPU time).
# It prints the minimum of each over the rounds and the ratio working tree / REV (below 1: faster).
# --instructions also counts instructions (valgrind --tool=callgrind, repeatable where wall time is
# not) of the README search run to the end (budget 1e6 s), about a minute per build per second of
# search. Unless --no-zoo, search_bench's whole table (--budget, default 10 s) runs once per build
# and the search's answers are printed side by side with their ratio.
#
# It needs cmake, ninja, Google Benchmark and jq; say the machine's load average with its figures.
set -euo pipefail

usage="usage: bench/compare.sh REV [--rounds N] [--zoo-budget SECONDS] [--no-zoo] [--instructions]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
rev=$1
shift
rounds=5 zoo=1 zoo_budget=10 instructions=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --zoo-budget) zoo_budget=$2; shift 2 ;;
    --no-zoo) zoo=0; shift ;;
    --instructions) instructions=1; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
sha=$(git -C "$root" rev-parse --short=12 "$rev^{commit}")
base=${COMPARE_DIR:-$root/build-compare}/$sha
new=${BUILD_DIR:-$root/build}
targets="flexpipe simulator_bench search_bench partitioner_bench"

build() {  # build SOURCE BUILD: the targets this revision has
  local have=()
  [ -f "$2/build.ninja" ] || cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLEXPIPE_RUNTIME=OFF \
    -DFLEXPIPE_TESTS=OFF -DFLEXPIPE_BENCH=ON >/dev/null
  for t in $targets; do ninja -C "$2" -t query "$t" >/dev/null 2>&1 && have+=("$t"); done
  ninja -C "$2" "${have[@]}" >/dev/null
}
if [ ! -d "$base/src" ]; then
  mkdir -p "$base/src"
  git -C "$root" archive "$sha" | tar -x -C "$base/src"
fi
echo "building $sha in $base/build and the working tree in $new" >&2
build "$base/src" "$base/build"
if [ -f "$new/build.ninja" ]; then ninja -C "$new" $targets >/dev/null; else build "$root" "$new"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
search_args=(search --model gpt3-1.3b -p 4 -m 8 --memory-limit 18.1e9 --threads 1 --json -q)
# Google Benchmark's CPU time of the first benchmark, in milliseconds whatever its unit.
in_ms='.benchmarks[0] | .cpu_time * ({"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1e3}[.time_unit])'

measure() {  # measure NAME BUILD: one round, appended to $tmp/NAME.*
  local b=$2
  if [ -x "$b/simulator_bench" ]; then
    "$b/simulator_bench" --benchmark_filter='BM_SimulateInterleaved64x512/record:0' --benchmark_format=json 2>/dev/null |
      jq -r "$in_ms" >>"$tmp/$1.sim"
  fi
  if [ -x "$b/partitioner_bench" ]; then
    "$b/partitioner_bench" --benchmark_filter='BM_Dawn2000Operators16Stages' --benchmark_format=json 2>/dev/null |
      jq -r "$in_ms" >>"$tmp/$1.part"
  fi
  if [ -x "$b/flexpipe" ] && "$b/flexpipe" search --help 2>&1 | grep -q time-budget; then
    for budget in 5 40; do
      "$b/flexpipe" "${search_args[@]}" --time-budget $budget |
        jq -r '"\(.search.seconds) \(.best.makespan) \(.search.exhausted) \(.search.evaluated) \(.search.pruned) \(.best.family)"' \
          >>"$tmp/$1.search$budget"
    done
  fi
}

for ((r = 0; r < rounds; ++r)); do
  echo "round $((r + 1)) of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if ((r % 2 == 0)); then measure base "$base/build"; measure new "$new"; else measure new "$new"; measure base "$base/build"; fi
done

minimum() { [ -s "$1" ] && sort -g "$1" | head -1 | awk '{ printf "%.4g", $1 }' || echo "-"; }
ratio() { if [ "$1" != - ] && [ "$2" != - ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; else echo -; fi; }
printf '\n%s against the working tree (%s), %s rounds, load average %s at the end\n\n' "$sha" \
  "$(git -C "$root" describe --always --dirty)" "$rounds" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '| measure | %s | working tree | ratio |\n| --- | --- | --- | --- |\n' "$sha"
a=$(minimum "$tmp/base.sim") b=$(minimum "$tmp/new.sim")
printf '| simulator_bench 64x512, recording off, ms (min) | %s | %s | %s |\n' "$a" "$b" "$(ratio "$b" "$a")"
a=$(minimum "$tmp/base.part") b=$(minimum "$tmp/new.part")
printf '| partitioner_bench 2,002 operators, ms (min) | %s | %s | %s |\n' "$a" "$b" "$(ratio "$b" "$a")"
for budget in 5 40; do
  fa=$tmp/base.search$budget fb=$tmp/new.search$budget
  a=$([ -s "$fa" ] && cut -d' ' -f1 "$fa" | sort -g | head -1 | awk '{ printf "%.3f", $1 }' || echo -)
  b=$([ -s "$fb" ] && cut -d' ' -f1 "$fb" | sort -g | head -1 | awk '{ printf "%.3f", $1 }' || echo -)
  printf '| README search, budget %s s: seconds (min) | %s | %s | %s |\n' "$budget" "$a" "$b" "$(ratio "$b" "$a")"
  a=$([ -s "$fa" ] && head -1 "$fa" | awk '{printf "%.2f ms, %s, %s / %s", $2, $3 == "true" ? "exhausted" : "stopped", $4, $5}' || echo -)
  b=$([ -s "$fb" ] && head -1 "$fb" | awk '{printf "%.2f ms, %s, %s / %s", $2, $3 == "true" ? "exhausted" : "stopped", $4, $5}' || echo -)
  printf '| README search, budget %s s: answer, evaluated / pruned | %s | %s | |\n' "$budget" "$a" "$b"
done

if ((instructions)); then
  count() {  # instructions of the README search run to its end
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1/flexpipe" "${search_args[@]}" --time-budget 1e6 \
      2>&1 >/dev/null | sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
  }
  a=$(count "$base/build") b=$(count "$new")
  printf '| README search to its end, instructions (callgrind) | %s | %s | %s |\n' "$a" "$b" "$(ratio "$b" "$a")"
fi

if ((zoo)); then
  echo "search_bench --budget $zoo_budget, once per build, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$base/build/search_bench" --budget "$zoo_budget" >"$tmp/base.zoo"
  "$new/search_bench" --budget "$zoo_budget" >"$tmp/new.zoo"
  # The first table's rows: | # | model | p | m | memory | comm | 1F1B | interleaved | best built-in |
  # search | 4 ratios | within 1% at | schedules |
  rows() { awk -F' *[|] *' 'NF == 18 && /^[|] [0-9]+ [|]/ { w = $16; gsub(" ", "", w); print $2, $3, $4, $5, $11, w }' "$1"; }
  printf '\n| # | model | p | m | search, %s | within 1%% at | working tree | within 1%% at | ratio |\n' "$sha"
  printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
  paste -d' ' <(rows "$tmp/base.zoo") <(rows "$tmp/new.zoo") | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %.4f |\n",
    $1, $2, $3, $4, $5, $6, $11, $12, $11 / $5 }'
  # The small instances: | model | p | m | memory | comm | heuristic | with branch and bound | proven | gap |
  small() { awk -F' *[|] *' 'NF == 11 && $7 ~ /^[0-9.]+$/ { p = $9; gsub(" ", "_", p); print $2, $3, $4, $8, p }' "$1"; }
  printf '\n| model | p | m | with branch and bound, %s | proven | working tree | proven |\n' "$sha"
  printf '| --- | --- | --- | --- | --- | --- | --- |\n'
  paste -d' ' <(small "$tmp/base.zoo") <(small "$tmp/new.zoo") | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n",
    $1, $2, $3, $4, $5, $9, $10 }'
fi
