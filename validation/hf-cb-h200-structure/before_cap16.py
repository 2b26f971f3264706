"""Written and run before the second GPU call of 2026-11-28: what pdsim predicts for Qwen2.5-14B's
knee requests (``knee-cap16.json``, the same as ``knee.json``) when the engine carries at most 16
requests a step (``max_requests_per_batch`` 16, pdsim's ``max_running_requests``) instead of 64:
the what-if a user runs before changing ``--max-running-requests``. Priced with the structure
probe's host work (the scenario's hardware, ``probe.yaml``), no serving run fitted; the knee as
recorded with 64 passes every gated metric. Writes ``predicted-cap16.json``.

    PYTHONPATH=. python validation/hf-cb-h200-structure/before_cap16.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from before_run import METRICS, REPO, predict  # noqa: E402

SCENARIO = REPO / "workloads/scenarios/hf-cb-h200-qwen14b.yaml"


def simulate(cap: int, reqs: dict) -> dict:
    out = predict(SCENARIO, [f"cluster.colocated.0.engine.max_running_requests={cap}"], reqs)
    return {k: out[k] for k in METRICS}


def main() -> int:
    reqs = json.loads((HERE / "knee-cap16.json").read_text())
    base, cap = simulate(64, reqs), simulate(16, reqs)
    out = {"requests": "knee-cap16.json (= knee.json)", "cap64": base, "cap16": cap,
           "ratio_cap16_over_cap64": {k: round(cap[k] / base[k], 3) for k in METRICS}}
    (HERE / "predicted-cap16.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
