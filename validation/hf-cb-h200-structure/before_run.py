"""Written and run before the H200 structure run of 2026-11-28: the held-out model's requests, and
what pdsim predicts for them under two hypotheses about where the engine's host work goes.

transformers' continuous batching serving Qwen2.5-14B (48 layers) on the H200, an engine and a
GPU whose host work pdsim knows only from Llama-3.1-8B (32 layers) recordings: 55.2 ms per step
+ 1.70 ms per sequence (``validation/hf-cb-h200-fits/steps-knee.yaml``). Two readings of it:

- ``per-step``: it is the engine's per-step Python (schedule, inputs, sampling, request updates),
  which a deeper model does not change: the 8B fit as it is;
- ``per-layer``: it is Python around each decoder layer, so 48 layers carry 48/32 of it
  (``before-per-layer.yaml``).

The structure probe of the same run (calibration/microbench/gpu_hf_structure.py: the same engine
at 2, 16 and 32 layers of the 8B's dimensions) measures the split instead; the held-out model's
loads then say which reading, if either, carries to another model.

The requests: 24 at 0.3x and 40 at 0.8x of the capacity pdsim predicts for a burst of 128 (the
geometric mean of the two readings' capacities, since the run cannot wait for a burst), Poisson,
input 128-2048 tokens, output 32-256, uniform (gpu_hf_serving.make_requests, seed 14).
Writes ``light.json``, ``knee.json`` (what the GPU run sends) and ``predicted.json``.

    PYTHONPATH=. python validation/hf-cb-h200-structure/before_run.py
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from calibration.microbench.gpu_hf_serving import make_requests  # noqa: E402
from pdsim import api  # noqa: E402
from pdsim.workload.table import RequestTable  # noqa: E402

SCENARIO = REPO / "workloads/scenarios/hf-cb-h200-llama8b.yaml"
READINGS = {"per-step": str(REPO / "validation/hf-cb-h200-fits/steps-knee.yaml"),
            "per-layer": str(HERE / "before-per-layer.yaml")}
LENS = {"input_min": 128, "input_max": 2048, "output_min": 32, "output_max": 256}
LOADS = {"light": (0.3, 24), "knee": (0.8, 40)}
SEED = 14


METRICS = ("mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms")


def predict(scenario: Path, sets: list[str], reqs: dict) -> dict:
    """pdsim's latencies for ``reqs`` (send_s, input_len, output_len) on ``scenario`` with ``sets``."""
    sc = api.load_scenario(str(scenario), sets)
    table = RequestTable(np.asarray(reqs["send_s"]), np.asarray(reqs["input_len"]), np.asarray(reqs["output_len"]))
    s = api.simulate(sc, table=table).summary()
    return {k: round(float(s[k]), 2) for k in METRICS} | {
        "duration_s": round(float(s["sim_time_s"]), 2), "completed": int(s["completed"])}


def simulate(reading: str, reqs: dict) -> dict:
    return predict(SCENARIO, ["model=qwen2.5-14b", f"hardware={READINGS[reading]}"], reqs)


def main() -> int:
    rng = np.random.default_rng(SEED)
    burst = make_requests(rng, 128, None, LENS)
    capacity = {r: 128 / simulate(r, burst)["duration_s"] for r in READINGS}
    cap = math.sqrt(capacity["per-step"] * capacity["per-layer"])
    out = {"capacity_rps": {**{k: round(v, 4) for k, v in capacity.items()}, "used": round(cap, 4)},
           "lens": LENS, "seed": SEED, "predicted": {}}
    for name, (frac, n) in LOADS.items():
        reqs = make_requests(rng, n, frac * cap, LENS)
        (HERE / f"{name}.json").write_text(json.dumps({"rate": frac * cap, **reqs}))
        out["predicted"][name] = {r: simulate(r, reqs) for r in READINGS}
    (HERE / "predicted.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
