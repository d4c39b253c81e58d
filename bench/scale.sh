#!/usr/bin/env bash
# The scale test (docs/performance.md, "Scale"): a GPT-style cost graph of 200 k operators
# (bench/chain_graph.py) through `search` and `partition` under their time budgets, with the wall time
# of each run, when its first progress line came, and whether the budget held (within 10%). Not a
# timed test: it prints figures, and exits non-zero only when a command fails (exit status 2 or more;
# 1 says that nothing fits, which is a result).
# Usage: bench/scale.sh [BUILD_DIR] [OPERATORS]   (defaults: build, 200000)
set -euo pipefail
build=${1:-build}
operators=${2:-200000}
flexpipe="$build/flexpipe"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
graph="$dir/chain.json"
limit=120e9  # keeping everything needs 172 GB on 1F1B's first device, the least memory 43 GB

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$(dirname "$0")/chain_graph.py" --operators "$operators" -o "$graph"

# run BUDGET COMMAND...: the command's wall time, its first progress line and the budget's margin.
run() {
  local budget=$1 start end first status=0
  shift
  start=$(date +%s.%N)
  "$flexpipe" "$@" > "$dir/out" 2> "$dir/err" || status=$?
  end=$(date +%s.%N)
  if [ "$status" -ge 2 ]; then
    cat "$dir/err" >&2
    exit "$status"
  fi
  first=$(sed -n 's/^\[ *\([0-9.]*\) s\].*/\1/p' "$dir/err" | head -1)
  python3 - "$start" "$end" "$budget" "${first:--}" "$*" <<'PY'
import sys
start, end, budget, first, command = sys.argv[1:]
wall = float(end) - float(start)
verdict = "" if budget == "-" else f", budget {budget} s {'held' if wall <= 1.1 * float(budget) else 'NOT HELD'}"
print(f"{wall:7.2f} s  (first progress line at {first} s{verdict})  flexpipe {command}")
PY
  grep -E "^(method|best: )|searched|does not fit" "$dir/out" | sed 's/^/           /' || true
}

run 3 search --model "$graph" -p 4 -m 8 --memory-limit $limit --time-budget 3
run 10 search --model "$graph" -p 4 -m 8 --memory-limit $limit --time-budget 10
run - partition --model "$graph" -p 4 -m 8 --memory-limit $limit --method pipedream
run 10 partition --model "$graph" -p 4 -m 8 --memory-limit $limit --time-budget 10
run 30 partition --model "$graph" -p 4 -m 8 --memory-limit $limit --time-budget 30
