#!/usr/bin/env bash
# A captured model against the built-in one in the runtime (docs/performance.md, "Runtime: a captured
# model"): the executor's overhead per action (what an action costs apart from compute, transfers and
# waiting), as the median over the steps after the first, and the timing report's measured step (its
# median over the timed steps) against the simulator's prediction from the mean measured action times
# and the link (docs/fidelity.md). The captured model is the transformer classifier of
# python/tests/models.py (2 encoder layers, width 32), cut in two by `flexpipe partition`. Prints
# figures; not a timed test.
# Usage: bench/captured_train.sh [BUILD_DIR] [STEPS]   (defaults: build, 30)
set -euo pipefail
build=${1:-build}
steps=${2:-30}
flexpipe="$(cd "$build" && pwd)/flexpipe"
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$flexpipe" capture "$root/python/tests/models.py:transformer_classifier" --input 8x6x16 --loss cross_entropy \
  -o "$dir/model.graph.json" > /dev/null 2>&1
"$flexpipe" partition --model "$dir/model.graph.json" -p 2 -m 8 --memory-limit 8e10 -o "$dir/plan.json" > /dev/null

# summarize NAME: medians over the steps after the first of a `train --json` report on stdin.
summarize() {
  /usr/bin/python3 -c '
import json, statistics, sys
text = sys.stdin.read()
run = json.loads(text[text.index("{"):])["runs"][0]
steps = run["steps"][1:]
overhead = statistics.median(statistics.mean(s["overhead_us_per_action"]) for s in steps)
step = statistics.median(s["seconds"] for s in steps) * 1e3
name, measured, simulated = run["schedule"], run["measured_makespan_ms"], run["predicted_makespan_ms"]
print(f"{sys.argv[1]:<28} {name:<6} overhead {overhead:5.1f} us/action, median step "
      f"{step:6.2f} ms; timed steps: measured {measured:6.2f} ms, simulated {simulated:6.2f} ms")
' "$1"
}

for schedule in 1f1b zb-h1; do
  "$flexpipe" train --model "$dir/model.graph.json" --plan "$dir/plan.json" --schedule "$schedule" -p 2 -m 8 \
    --steps "$steps" --export-dir "$dir/export" --json | summarize "captured (transformer)"
  "$flexpipe" train --schedule "$schedule" -p 2 -m 8 --steps "$steps" --json | summarize "built-in (GPT, default size)"
done
