"""Failure and scaling studies of issue 14: three ways to serve DeepSeek-R1 decode on 64 H800 GPUs.

1. Ten GPUs fail one minute apart (workloads/scenarios/dsr1-h800-decode64-{monolithic,tp16,eaas}.yaml):
   a monolithic EP64 group stops at every failure until it restarts; TP16 units lose one unit at
   a time; expert-as-a-service clients fail over to replicas. Printed per design: requests
   completed/dropped/retried, goodput share, TTFT and TPOT, the worst minute's output tokens/s
   against the healthy level, and GPU-hours.
2. A traffic step down to 62.5 % (8192 -> 5120 concurrent requests in the issue's words; here the
   open-loop arrival rate) with a schedule autoscaler that removes what each design can remove
   at its own granularity: whole EP32 groups, 16-GPU TP units, or 8-GPU attention clients and
   single expert servers. Printed: GPUs held before/after, GPU-hours, goodput after the step.

    python benchmarks/study_failures.py [--requests N]   (a smaller N runs faster)
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import pdsim

DESIGNS = ("monolithic", "tp16", "eaas")


def minute_throughput(res) -> np.ndarray:
    """Output tokens per second in each minute of the run (decode steps' tokens)."""
    tl = res.timeline
    inst = tl[(tl["kind"] == "instance") & (tl["role"] != "prefill")]
    if inst.empty:
        return np.zeros(1)
    bins = np.arange(0, inst["time_s"].max() + 60, 60)
    h, _ = np.histogram(inst["time_s"], bins=bins, weights=inst["running_batch"])
    return h / 60.0


def row(name: str, res) -> dict:
    s = res.summary()
    tp = minute_throughput(res)
    busy = tp[2:-2] if len(tp) > 6 else tp
    return {"design": name, "completed": s["completed"], "dropped": s["dropped"],
            "retried": int(res.requests["retries"].gt(0).sum()), "goodput": s["goodput_share"],
            "mean_ttft_s": (s["mean_ttft_ms"] or 0) / 1e3, "p99_ttft_s": (s["p99_ttft_ms"] or 0) / 1e3,
            "mean_tpot_ms": s["mean_tpot_ms"], "worst_min_tok_s": float(busy.min()), "median_tok_s": float(np.median(busy)),
            "gpu_hours": res.record.stats["gpu_hours"]}


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    fmt = {int: "{:>10d}", float: "{:>10.3g}", str: "{:<12}"}
    out = ["  ".join(f"{c:>10}" if i else f"{c:<12}" for i, c in enumerate(cols))]
    for r in rows:
        out.append("  ".join(fmt[type(r[c])].format(r[c]) for c in cols))
    return "\n".join(out)


def failures(n: int) -> list[dict]:
    rows = []
    for d in DESIGNS:
        for faults in (False, True):
            sets = [f"workload.num_requests={n}"] + ([] if faults else ["faults=null"])
            res = pdsim.simulate(pdsim.load_scenario(f"dsr1-h800-decode64-{d}", sets))
            rows.append(row(f"{d}{'' if faults else ' (ok)'}", res))
    return rows


def step_trace(path: Path, rate: float, seconds: float, factor: float, seed: int = 0) -> None:
    """A Mooncake-format trace: Poisson arrivals at ``rate`` for ``seconds``, then at ``factor``
    times that for as long again; lengths as in the failure study."""
    rng = np.random.default_rng(seed)
    t, rows = 0.0, []
    while t < 2 * seconds:
        r = rate if t < seconds else rate * factor
        t += rng.exponential(1.0 / r)
        rows.append({"timestamp": int(t * 1000), "input_length": int(rng.integers(1000, 2001)),
                     "output_length": int(rng.integers(500, 1001))})
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))


# what each design can shed after the step to 62.5 % (its granularity), at step time + 60 s
SCALE = {
    "monolithic": ({"nodes": 4, "dp": 32, "ep": 32, "count": 2, "ep_num_redundant_experts": 32}, "decode", 2, None),
    "tp16": ({}, "decode", 3, None),
    "eaas": ({}, "decode", 3, 20),
}


def step_down(n: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "step.jsonl"
        seconds = n / 20.0 / (1 + 0.625)
        step_trace(trace, 20.0, seconds, 0.625)
        for d in DESIGNS:
            group, role, count, servers = SCALE[d]
            sets = ["faults=null", "workload.kind=trace", f"workload.trace={{path: {trace}, format: mooncake}}"]
            for k, v in group.items():
                key = f"cluster.decode.engine.{k}" if k == "ep_num_redundant_experts" else f"cluster.decode.{k}"
                sets.append(f"{key}={v}")
            at = seconds + 60.0
            params = {"steps": [{"at_s": at, "count": count, "role": role}]}
            if servers is not None:
                params["expert_servers"] = [[at, servers]]
            sets.append("autoscaler=" + json.dumps({"policy": "schedule", "params": params, "interval_s": 10.0}))
            res = pdsim.simulate(pdsim.load_scenario(f"dsr1-h800-decode64-{d}", sets))
            df = res.requests
            after = df[df["arrival_s"] > at + 120]
            alloc = res.record.stats["allocated_gpus"]
            rows.append({"design": d, "gpus_before": alloc[0][1], "gpus_after": alloc[-1][1],
                         "gpu_hours": res.record.stats["allocated_gpu_hours"],
                         "goodput_after": float(after["meets_slo"].mean()) if len(after) else float("nan"),
                         "p99_ttft_after_s": float(after["ttft_s"].quantile(0.99)) if len(after) else float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=16000)
    args = ap.parse_args()
    print("== ten GPU failures one minute apart (t = 120..660 s); (ok) = the same run without failures")
    print(table(failures(args.requests)))
    print("\n== traffic step down to 62.5 %, schedule autoscaler at each design's granularity")
    print(table(step_down(args.requests)))


if __name__ == "__main__":
    main()
