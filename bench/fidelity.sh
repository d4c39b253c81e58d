#!/usr/bin/env bash
# How well the simulator predicts a real step (docs/fidelity.md, docs/performance.md "Fidelity"):
# every built-in schedule trains the default model on 2 and 4 ranks of this machine, and the report's
# median measured step (over the steps after the timing warm-up) is set against the simulator's step
# from the mean action times. Then `train --schedule auto` trains the search's answer next to the
# best built-in, both measured, to see whether the speedup the search predicts is real: once with
# --auto-margin 0 (the search's own program whenever it is predicted faster at all), once as by
# default. Prints tables; not a timed test. Each run is repeated REPEATS times and the median of the
# runs' medians is shown, with the range of their gaps: on a shared 2-core VM one run's gap swings by
# up to 7% either way (docs/performance.md, "Fidelity"), so five runs of 60 steps by default.
# Usage: bench/fidelity.sh [BUILD_DIR] [STEPS] [RANKS] [REPEATS]   (defaults: build, 60, "2 4", 5)
set -euo pipefail
build=${1:-build}
steps=${2:-60}
ranks=${3:-"2 4"}
repeats=${4:-5}
flexpipe="$(cd "$build" && pwd)/flexpipe"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $steps steps per run, $repeats runs"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# report LABEL FILES...: one row from the `train --json` reports of the repeated runs.
report() {
  /usr/bin/python3 - "$@" <<'EOF'
import json, statistics, sys
label, files = sys.argv[1], sys.argv[2:]
runs = []
for path in files:
    text = open(path).read()
    runs.append(json.loads(text[text.index("{"):])["runs"][0])
measured = statistics.median(r["measured_makespan_ms"] for r in runs)
predicted = statistics.median(r["predicted_makespan_ms"] for r in runs)
gaps = [r["gap_percent"] for r in runs]
link = runs[0]["measured_link_ms"]
note = " (ranks share cores)" if "prediction_note" in runs[0] else ""
print(f"{label:<26} {runs[0]['schedule']:<44.44} {measured:9.2f} {predicted:9.2f} {statistics.median(gaps):7.1f}% "
      f"{min(gaps):6.1f}..{max(gaps):.1f}%  latency {1e3 * link['latency']:4.0f} us, rendezvous {1e3 * link['rendezvous']:4.0f} us, "
      f"send {1e3 * link['send_cpu']:3.0f} us"
      f"{note}")
EOF
}

for p in $ranks; do
  echo
  echo "p = $p: built-in schedules on the default model (measured and simulated: median step, ms; gap: measured - simulated, % of measured)"
  printf '%-26s %-44s %9s %9s %8s %13s\n' "run" "schedule" "measured" "simulated" "gap" "gap range"
  for schedule in gpipe 1f1b interleaved-1f1b looped-bfs zb-h1 zb-h2 zb-v zb-v-adaptive v-half v-min dualpipev dualpipe; do
    files=()
    for r in $(seq "$repeats"); do
      out="$dir/$schedule-$p-$r.json"
      if ! "$flexpipe" train -p "$p" --steps "$steps" --schedule "$schedule" --json >"$out" 2>"$dir/err"; then
        echo "$schedule on $p ranks: not run: $(head -n 1 "$dir/err")"
        continue 2
      fi
      files+=("$out")
    done
    report "built-in" "${files[@]}"
  done
  # The search's answer, with the measured operator times of a profile taken once: its own program
  # whatever the margin (--auto-margin 0), then what `--schedule auto` trains by default.
  for margin in 0 0.05; do
    files=()
    for r in $(seq "$repeats"); do
      out="$dir/auto-$p-$margin-$r.json"
      "$flexpipe" train -p "$p" --steps "$steps" --schedule auto --auto-margin "$margin" --profile "$dir/profile.json" \
        --json >"$out" 2>"$dir/err"
      grep -h '^auto:' "$out" | head -n 1 >"$dir/auto-$p.choice"
      files+=("$out")
    done
    report "auto, --auto-margin $margin" "${files[@]}"
    echo "  $(cat "$dir/auto-$p.choice")"
  done
  rm -f "$dir/profile.json"
done
