"""Where the ITL tail's stalled decode steps lose their time, from vLLM step traces (issue 24).

    PYTHONPATH=. python validation/cpu-vllm/stall_trace.py [--json OUT]

For every traced recording of ``validation/cpu-vllm-calibration/here/step-traces/`` (the span of
each case in ``<run>-steps.jsonl.loads.json.gz``), each step splits (engine core's and worker's
``time.monotonic()``) into ``hop1`` (schedule end -> the worker's execute_model starts),
``ex`` (execute_model), ``mid`` (execute_model end -> sample_tokens start: the result's round trip
through the engine core), ``sa`` (sample_tokens) and ``hop2`` (sample_tokens end -> the engine
core has the output). Pure decode steps are compared with the median ``ex`` of their batch size:

- ``stalled``: ex > 1.5 x its batch's median; the excess of steps > median + 12 ms, split by part;
- ``excess_over_median``: a stalled step's ex excess / its batch's median ex, by median length
  (a wait of bounded length, e.g. a scheduler tick per hop, does not grow with the step; a core
  shared for the whole step adds ~1x it);
- ``clustering``: P(stalled | the step before stalled) against P(stalled | not);
- ``duty``: 2 x sum(max(0, ex - 1.3 x median)) / sum(ex): the share of the worker's decode time it
  shared its core with one other process (a step slowed to 1/2 for t adds t/2);
- ``visits_ms``: runs of consecutive steps over 1.3x, each run's shared time added up;
- ``hop2_ms`` histogram (0.5 ms bins): the kernel's 4 ms tick (CONFIG_HZ=250) shows as peaks 4 ms apart;
- ``host``: host_share.py's figures where the run recorded them (other processes' CPU seconds
  over the span = ``host.background``; the worker's run-queue wait).
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
TRACES = ROOT / "validation/cpu-vllm-calibration/here/step-traces"
RUNS = {"trace": ["cpu-vllm-here-trace-knee"], "trace2": ["cpu-vllm-here-trace2-light", "cpu-vllm-here-trace2-knee"],
        "trace3": ["cpu-vllm-here-trace3-knee"], "trace4": ["cpu-vllm-here-trace4-knee"],
        "trace5": ["cpu-vllm-here2-light", "cpu-vllm-here2-knee"]}


def steps_of(run: str, span: tuple[float, float], traces: Path = TRACES) -> list[dict]:
    """One row per step of ``run`` within ``span`` with its parts (seconds), batch and prefill tokens."""
    from vllm_step_trace import read_trace

    steps, calls = read_trace(traces / f"{run}-steps.jsonl")
    steps = [s for s in steps if span[0] <= s["t_schedule"] <= span[1]]
    ex = [c for c in calls if c["call"] == "execute_model"]
    sa = [c for c in calls if c["call"] == "sample_tokens"]
    e0, s0 = np.array([c["t0"] for c in ex]), np.array([c["t0"] for c in sa])
    rows = []
    for s in steps:
        i = int(np.searchsorted(e0, s["t_scheduled"]))
        if i >= len(ex):
            continue
        e = ex[i]
        j = int(np.searchsorted(s0, e["t1"]))
        if j >= len(sa) or not (e["t0"] < s["t_model_done"] and sa[j]["t1"] <= s["t_model_done"] + 1e-6):
            continue  # a step whose worker calls were not both traced inside it
        a = sa[j]
        rows.append({"B": s["decodes"], "pf": s["prefill_tokens"], "t": s["t_schedule"], "t_end": s["t_end"],
                     "hop1": e["t0"] - s["t_scheduled"], "ex": e["t1"] - e["t0"], "mid": a["t0"] - e["t1"],
                     "sa": a["t1"] - a["t0"], "hop2": s["t_model_done"] - a["t1"]})
    return rows


def analyse(rows: list[dict]) -> dict:
    pd = [r for r in rows if r["pf"] == 0 and r["B"] > 0]
    if not pd:  # every figure below is over pure decode steps
        raise ValueError(f"no pure decode step in the span ({len(rows)} steps)")
    by_b = collections.defaultdict(list)
    for r in pd:
        by_b[r["B"]].append(r)
    for rs in by_b.values():
        m = float(np.median([r["ex"] for r in rs]))
        ms = float(np.median([r["t_end"] - r["t"] for r in rs]))
        for r in rs:
            r["m"], r["ms"] = m, ms
    ex = np.array([r["ex"] for r in pd])
    med = np.array([r["m"] for r in pd])
    ratio = ex / med
    out: dict = {"steps": len(rows), "pure_decode": len(pd), "stalled_1.5x": int((ratio > 1.5).sum()),
                 "stalled_share": round(float((ratio > 1.5).mean()), 3)}
    big = [r for r in pd if (r["t_end"] - r["t"]) - r["ms"] > 0.012]
    out["steps_12ms_over_median"] = len(big)
    parts = ("hop1", "ex", "mid", "sa", "hop2")
    part_med = {b: {k: float(np.median([r[k] for r in rs])) for k in parts} for b, rs in by_b.items()}
    out["their_excess_ms_by_part"] = {k: round(float(np.mean([r[k] - part_med[r["B"]][k] for r in big])) * 1e3, 2)
                                      if big else None for k in parts}
    st = ratio > 1.5
    xs, ms = (ex - med)[st] * 1e3, med[st] * 1e3
    out["excess_over_median"] = {}
    for lo, hi in ((0, 6), (6, 10), (10, 16), (16, 25), (25, 100)):
        m = (ms >= lo) & (ms < hi)
        if m.sum() > 3:
            out["excess_over_median"][f"median ex {lo}-{hi} ms"] = {
                "n": int(m.sum()), "excess_ms_p50": round(float(np.median(xs[m])), 1),
                "excess/median_p50": round(float(np.median(xs[m] / ms[m])), 2)}
    flags = [None if "m" not in r else r["ex"] > 1.5 * r["m"] for r in rows]
    pairs = [(a, b) for a, b in zip(flags[:-1], flags[1:]) if a is not None and b is not None]
    after = [b for a, b in pairs if a]
    out["clustering"] = {"P(stalled)": round(float(np.mean([b for _, b in pairs])), 3),
                         "P(stalled | before stalled)": round(float(np.mean(after)), 3) if after else None,
                         "P(stalled | before not)": round(float(np.mean([b for a, b in pairs if not a])), 3)}
    out["duty"] = round(float(2 * np.clip(ex - 1.3 * med, 0, None).sum() / ex.sum()), 3)
    runs, cur = [], 0.0
    for r in rows:
        if "m" in r and r["ex"] > 1.3 * r["m"]:
            cur += min(2 * (r["ex"] - r["m"]), r["ex"])
        elif cur > 0:
            runs.append(cur)
            cur = 0.0
    v = np.array(runs) * 1e3
    out["visits_ms"] = {"n": len(v), "mean": round(float(v.mean()), 1), "p50": round(float(np.median(v)), 1),
                        "p90": round(float(np.percentile(v, 90)), 1)} if len(v) else {"n": 0}
    for k in ("hop1", "mid", "hop2"):
        x = np.array([r[k] for r in pd]) * 1e3
        out[f"{k}_ms"] = {"mean": round(float(x.mean()), 2), "p50": round(float(np.median(x)), 2),
                          "p90": round(float(np.percentile(x, 90)), 2), "p99": round(float(np.percentile(x, 99)), 2)}
    h, _ = np.histogram(np.array([r["hop2"] for r in pd]) * 1e3, bins=np.arange(0, 12.01, 0.5))
    out["hop2_ms_histogram_0.5ms_bins"] = [int(c) for c in h]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()
    out = {}
    for run, cases in RUNS.items():
        try:
            loads = json.loads(gzip.decompress((TRACES / f"{run}-steps.jsonl.loads.json.gz").read_bytes()))
            for case in cases:
                res = analyse(steps_of(run, tuple(loads[case])))
                host = loads.get(f"{case}.host")
                if host:
                    worker = next((v for k, v in host["processes"].items() if k.startswith("VLLM::Worker")), {})
                    res["host"] = {"background": round(host["other_cpu_s"] / host["wall_s"], 3),
                                   "worker_wait_share": round(worker.get("wait_s", 0.0) / host["wall_s"], 3),
                                   "steal_s": host.get("steal_s")}
                out[case] = res
        except (OSError, ValueError, KeyError) as e:  # a missing or malformed trace: one line, exit 2
            print(f"error: {run}: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    from vllm_step_trace import emit_summary

    emit_summary(out, args.json)


if __name__ == "__main__":
    main()
