#!/usr/bin/env bash
# The partitioner's benchmark table (docs/partitioner.md): every zoo model under 1F1B at an 80 GiB
# limit, largest trainable micro-batch and step time per method. Devices: 4 below 10B parameters, 8
# above, doubled (up to 64) while no method fits micro-batch 1. Usage: bench/partition_zoo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
limit=$((80 * 1024 * 1024 * 1024))
json=$(mktemp)  # the plans of the largest models overflow a command line
trap 'rm -f "$json"' EXIT
echo "| model | p | uniform | params | pipedream | vpipe | dawn | dawn / pipedream | dawn / vpipe | step at vpipe's b: vpipe | dawn |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for model in $("$build/flexpipe" model list | awk 'NR > 1 {print $1}'); do
  p=4
  case $model in *70b|*175b|mixtral*|*13b|deepseek*) p=8 ;; esac
  while :; do
    "$build/flexpipe" partition --model "$model" -p $p -m $((2 * p)) --memory-limit $limit --compare --max-batch \
      --max-batch-limit 16384 --json > "$json" || true
    fits=$(python3 -c "import json,sys; print(any(m.get('max_microbatch_size') for m in json.load(open(sys.argv[1]))['methods']))" "$json")
    if [ "$fits" = True ] || [ $p -ge 64 ]; then break; fi
    p=$((2 * p))
  done
  row=$(python3 - "$json" <<'PY'
import json, sys
methods = {m["method"]: m for m in json.load(open(sys.argv[1]))["methods"]}
b = {k: (v.get("max_microbatch_size") or 0) for k, v in methods.items()}
ratio = lambda a, c: f"{a / c:.2f}x" if c else ("inf" if a else "-")
print(" | ".join(str(b[k]) for k in ["uniform", "params", "pipedream", "vpipe", "dawn"]) + " | " +
      ratio(b["dawn"], b["pipedream"]) + " | " + ratio(b["dawn"], b["vpipe"]))
PY
)
  # Step time at the vPipe-like baseline's largest micro-batch, both methods.
  vb=$(python3 -c "import json,sys; print(max(1, [m for m in json.load(open(sys.argv[1]))['methods'] if m['method']=='vpipe'][0].get('max_microbatch_size') or 1))" "$json")
  steps=""
  for method in vpipe dawn; do
    s=$("$build/flexpipe" partition --model "$model" -p $p -m $((2 * p)) --memory-limit $limit --microbatch-size "$vb" --method $method --json 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['step_time']:.0f} ms\" if d.get('fits') else 'no fit')" || true)
    steps="$steps | $s"
  done
  echo "| $model | $p | $row$steps |"
done
