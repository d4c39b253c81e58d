#!/usr/bin/env bash
# Installs the build dependencies, builds FlexPipe and runs the main job: simulate the built-in 1F1B
# and ZB-H1 schedules on 4 devices and 8 micro-batches, print their reports and write SVG timelines;
# then train a GPT-style model with both for real on 4 processes (libtorch + Gloo), check the result
# against a single-process run, and write the measured timelines next to the simulated ones.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p out
for schedule in 1f1b zb-h1; do
  ./build/flexpipe simulate "$schedule" -p 4 -m 8 --uniform-costs 1,1,1,0 --grid \
    --svg "out/$schedule.svg" --trace "out/$schedule.trace.json"
  echo
done
./build/flexpipe launch -n 4 -- ./build/flexpipe run 1f1b zb-h1 -m 8 --layers 4 --steps 3 --verify --dtype float64 \
  --svg out/measured.svg --trace out/measured.trace.json
