#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs the main job: train the default GPT-style
# model with 1F1B on 2 local ranks (libtorch + Gloo) for 100 steps, printing a line per step and
# then measured against simulated step time and memory per rank; the loss curve, the measured
# timeline and its Perfetto trace go to out/. Then simulate 1F1B and ZB-H1 on 4 devices for
# comparison, with their text grids, and search the schedule space for GPT-3 1.3B on 4 H100s at the
# memory 1F1B needs (the answer as a program in out/search.fps).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p out
./build/flexpipe train --curve out/loss.svg --svg out/train-timeline.svg --trace out/train.trace.json
echo
for schedule in 1f1b zb-h1; do
  ./build/flexpipe simulate "$schedule" -p 4 -m 8 --uniform-costs 1,1,1,0 --grid \
    --svg "out/$schedule.svg" --trace "out/$schedule.trace.json"
  echo
done
./build/flexpipe search --model gpt3-1.3b -p 4 -m 8 --memory-limit 18.1e9 --time-budget 5 -q -o out/search.fps \
  --costs-output out/search-costs.json
