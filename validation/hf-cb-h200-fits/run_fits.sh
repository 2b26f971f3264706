#!/usr/bin/env bash
# The host work of transformers' continuous batching on the H200 (calibration/sessions/h200-2026-11-28),
# fitted two ways, each on some runs and checked on the others:
#   steps-*.yaml  `pdsim calibrate from-steps`: the engine's own step traces (each step's time against its
#                 price; linear, no simulation): the three host constants and the packed attention kernel's
#                 rate (--param attention). The hf-cb-h200-* cases use these, never fitted on their run:
#                   steps-knee.yaml        (the knee's trace)            -> light, burst, chunk512, knee-repeat, overload
#                   steps-light-burst.yaml (the light and burst traces)  -> knee
#   runs-*.yaml   `pdsim calibrate from-runs`: the end-to-end TTFT/ITL of whole runs (simulated), for comparison:
#                   runs-light-burst.yaml  fitted on the light load and the burst, the mid loads held out
#                   runs-mid-loads.yaml    fitted on the knee, its repeat and the overload, light and burst held out
#   PYTHONPATH=. bash validation/hf-cb-h200-fits/run_fits.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=validation/hf-cb-h200-fits
S=(--scenario workloads/scenarios/hf-cb-h200-llama8b.yaml --set hardware=h200)  # from the bare profile
R=calibration/sessions/h200-2026-11-28
P="--param step_overhead_us --param seq_overhead_us --param ctx_overhead_ns"
A="$P --param attention"
t() { echo "$R/$1.steps.json"; }
h() { for x in "$@"; do echo "--holdout $(t "$x")"; done; }
# shellcheck disable=SC2046
python -m pdsim calibrate from-steps $(t run1/load0.8) $(h run1/load0.3 run1/burst run1/chunk512 run2/load0.8-repeat run2/load1.3) \
  "${S[@]}" $A --out $HERE/steps-knee.yaml > $HERE/steps-knee.txt
# shellcheck disable=SC2046
python -m pdsim calibrate from-steps $(t run1/load0.3) $(t run1/burst) $(h run1/load0.8 run1/chunk512 run2/load0.8-repeat run2/load1.3) \
  "${S[@]}" $A --out $HERE/steps-light-burst.yaml > $HERE/steps-light-burst.txt
python -m pdsim calibrate from-runs $R/run1/load0.3.json $R/run1/burst.json \
  --holdout $R/run1/load0.8.json --holdout $R/run2/load0.8-repeat.json --holdout $R/run2/load1.3.json \
  "${S[@]}" --arrivals send_times $P --out $HERE/runs-light-burst.yaml > $HERE/runs-light-burst.txt
python -m pdsim calibrate from-runs $R/run1/load0.8.json $R/run2/load0.8-repeat.json $R/run2/load1.3.json \
  --holdout $R/run1/load0.3.json --holdout $R/run1/burst.json \
  "${S[@]}" --arrivals send_times $P --out $HERE/runs-mid-loads.yaml > $HERE/runs-mid-loads.txt
