#!/usr/bin/env bash
# Cross-validated `pdsim calibrate from-runs` on the bundled CPU recordings: each load (both of its
# recordings) is held out in turn and predicted by constants fitted on the other two loads. Writes
# <load>-heldout.yaml (the profile overlay) and <load>-heldout.txt (the before/after table) here.
#   PYTHONPATH=. bash validation/cpu-vllm-from-runs/run_fits.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=validation/cpu-vllm-from-runs
S=workloads/scenarios/cpu-vllm-tiny-llama.yaml
runs() { for l in "$@"; do echo "validation/cpu-vllm-$l/real/bench.json validation/cpu-vllm-$l-repeat/real/bench.json"; done; }
held() { for r in $(runs "$1"); do echo "--holdout $r"; done; }
fit() {  # held-out load, then the two fitted loads
  # shellcheck disable=SC2046
  python -m pdsim calibrate from-runs $(runs "$2" "$3") $(held "$1") --scenario "$S" --max-evals 12 \
    --out "$HERE/$1-heldout.yaml" > "$HERE/$1-heldout.txt"
}
fit light knee overload
fit knee light overload
fit overload light knee
