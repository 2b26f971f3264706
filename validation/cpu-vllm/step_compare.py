"""Compare the real engine's steps (a ``vllm_step_trace`` recording) with pdsim's simulated steps
of the same case, step by step in distribution.

    PYTHONPATH=. python validation/cpu-vllm/step_compare.py --trace T/steps.jsonl \
        --span cpu-vllm-here-trace-knee --case validation/cpu-vllm-here-trace-knee [--json OUT]

Real side, per step (engine core's clock): ``cycle`` = this step's end - the previous step's end
(what every running decoder waits between two tokens), split into ``host`` (previous end -> this
schedule start: the engine core's loop, output queue, new requests), ``schedule``, ``hop`` (to the
worker and back, the worker's own Python around the model) and ``worker`` (the model runner's
execute_model + sample_tokens, worker process), ``update`` (update_from_output). Simulated side:
the scenario's step log. Both: prefill tokens, prefill chunks (real only) and decodes per step,
and the decode-weighted cycle histogram (< 40, 40-100, > 100 ms), which is the ITL gaps' shape.

With ``--case``, ``host_speed``: each real step's time (schedule start -> end) over its own price
by the case's profile (the step-cost contract on what the step carried: prefill chunks with their
cached prefix, decodes and their context), for pure-decode and prefill steps, over the whole
recording and by thirds of it. A ratio that moves from third to third while the prices stay put
is the host's speed drifting under the recording, not a model error (2026-11-27, zen1: prefill
steps 0.98-1.00x their price in every recording, decode steps 0.82x at 11:20 and 0.95x at 11:38).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "calibration" / "microbench"))

BINS_MS = (40.0, 100.0)


def _q(x) -> dict:
    x = np.asarray(x, dtype=float)
    if not len(x):
        return {"n": 0}
    return {"n": int(len(x)), "mean": round(float(x.mean()), 2),
            **{f"p{p}": round(float(np.percentile(x, p)), 2) for p in (10, 50, 90, 99)},
            "max": round(float(x.max()), 2)}


def _weighted_bins(cycle_ms, weight) -> dict:
    cycle_ms, weight = np.asarray(cycle_ms, float), np.asarray(weight, float)
    lo, hi = BINS_MS
    out = {}
    for name, m in ((f"<{lo:g}", cycle_ms < lo), (f"{lo:g}-{hi:g}", (cycle_ms >= lo) & (cycle_ms <= hi)),
                    (f">{hi:g}", cycle_ms > hi)):
        out[name] = {"gaps": int(weight[m].sum()), "seconds": round(float((cycle_ms[m] * weight[m]).sum() / 1e3), 1)}
    return out


def real_steps(trace: str, span: tuple[float, float] | None) -> dict:
    """Per-step columns of the real engine within ``span`` (monotonic seconds)."""
    from vllm_step_trace import read_trace

    steps, calls = read_trace(trace)
    if span is not None:
        steps = [s for s in steps if span[0] <= s["t_schedule"] <= span[1]]
    if len(steps) < 2:
        raise SystemExit(f"{trace}: fewer than 2 steps in the span {span}")
    t0 = np.array([s["t_schedule"] for s in steps])
    t1 = np.array([s["t_scheduled"] for s in steps])
    t2 = np.array([s["t_model_done"] for s in steps])
    t3 = np.array([s["t_end"] for s in steps])
    # the worker's time inside each step: its calls that start within [t_scheduled, t_model_done]
    c0 = np.array([c["t0"] for c in calls])
    c1 = np.array([c["t1"] for c in calls])
    worker = np.zeros(len(steps))
    if len(c0):
        lo = np.searchsorted(c0, t1)
        hi = np.searchsorted(c0, t2)
        cs = np.concatenate([[0.0], np.cumsum(c1 - c0)])
        worker = cs[hi] - cs[lo]
    return {"t_schedule": t0, "t_end": t3, "schedule": t1 - t0, "exec": t2 - t1, "worker": worker,
            "hop": (t2 - t1) - worker, "update": t3 - t2,
            "host": np.concatenate([[np.nan], t0[1:] - t3[:-1]]),
            "cycle": np.concatenate([[np.nan], t3[1:] - t3[:-1]]),
            "prefill_tokens": np.array([s["prefill_tokens"] for s in steps]),
            "chunks": np.array([len(s["prefill_chunks"]) for s in steps]),
            "decodes": np.array([s["decodes"] for s in steps]),
            "running": np.array([s["running"] for s in steps]),
            "waiting": np.array([s["waiting"] for s in steps]),
            "preempted": int(sum(s["preempted"] for s in steps)),
            "chunk_sizes": [c["tokens"] for s in steps for c in s["prefill_chunks"]],
            "prefill_attn": np.array([sum(c["tokens"] * (c["computed"] + c["tokens"] / 2.0) for c in s["prefill_chunks"])
                                      for s in steps], float),
            "decode_ctx": np.array([s["decode_ctx"] for s in steps], float)}


def step_prices(real: dict, cost) -> np.ndarray:
    """Each real step's price (seconds) by ``cost`` (a StepCost): what it carried, priced alone."""
    return np.array([cost.step_time(int(pt), float(pa), int(ch), int(d), float(ctx)) for pt, pa, ch, d, ctx in
                     zip(real["prefill_tokens"], real["prefill_attn"], real["chunks"], real["decodes"],
                         real["decode_ctx"])], float)


def host_speed(real: dict, price: np.ndarray) -> dict:
    """Real step time over price for pure-decode and prefill steps: all, and the median of each
    third of the recording (by time)."""
    took = real["t_end"] - real["t_schedule"]
    thirds = np.minimum((3 * (real["t_schedule"] - real["t_schedule"][0])
                         / max(real["t_schedule"][-1] - real["t_schedule"][0], 1e-9)).astype(int), 2)
    out = {}
    for kind, m in (("pure decode", (real["prefill_tokens"] == 0) & (real["decodes"] > 0)),
                    ("with prefill", real["prefill_tokens"] > 0)):
        m = m & (price > 0)  # a step that carried nothing has no price to compare with
        ratio = took[m] / price[m]
        out[f"real_over_price, {kind}"] = {**_q(ratio), "median_by_third": [
            round(float(np.median(ratio[thirds[m] == k])), 3) if (thirds[m] == k).any() else None
            for k in range(3)]}
    return out


def sim_steps(case: str) -> dict:
    """The simulated step log of one validation case (as ``pdsim validate`` simulates it)."""
    from pdsim import api
    from pdsim.ingest import read_run
    from pdsim.validate.align import simulate_aligned
    from pdsim.validate.case import load_case

    folder = Path(case)
    c = load_case(folder)
    ing = read_run(folder / c["real"], c.get("format", "auto"))
    sc_path = folder / c["scenario"]
    sc = api.load_scenario(sc_path, list(c.get("set") or []))
    al = simulate_aligned(ing.record, sc, c.get("arrivals", "auto"), c.get("max_concurrency"))
    cols = al.sim.record.steps[0]  # one instance: its step log's columns
    t = np.asarray(cols["time_s"], float)
    d = np.asarray(cols["step_s"], float)
    end = t + d
    return {"step": d, "host": np.concatenate([[np.nan], t[1:] - end[:-1]]),
            "cycle": np.concatenate([[np.nan], end[1:] - end[:-1]]),
            "prefill_tokens": np.asarray(cols["prefill_tokens"]),
            "decodes": np.asarray(cols["running_batch"]), "aligned": al, "cost": _case_cost(sc)}


def _case_cost(sc):
    """The step cost the case's one instance steps with, as the world builds it."""
    from pdsim.metrics.step_physics import step_cost

    role = "colocated" if sc.scenario.cluster.colocated else "prefill"
    return step_cost(sc, role, 0, sc.hardware_of(role, 0))


def summary(real: dict, sim: dict | None) -> dict:
    ms = 1e3
    r_dec = real["decodes"]
    out = {"real": {
        "steps": int(len(r_dec)),
        "step_ms (schedule start -> end)": _q((real["t_end"] - real["t_schedule"]) * ms),
        "host_between_steps_ms": _q(real["host"][1:] * ms),
        "schedule_ms": _q(real["schedule"] * ms), "hop_ms": _q(real["hop"] * ms),
        "worker_ms": _q(real["worker"] * ms), "update_ms": _q(real["update"] * ms),
        "prefill_tokens_per_step (steps with prefill)": _q(real["prefill_tokens"][real["prefill_tokens"] > 0]),
        "steps_with_prefill": int((real["prefill_tokens"] > 0).sum()),
        "chunks_per_prefill_step": _q(real["chunks"][real["chunks"] > 0]),
        "chunk_tokens": _q(real["chunk_sizes"]),
        "decodes_per_step": _q(r_dec), "preemptions": real["preempted"],
        "decode_weighted_cycles": _weighted_bins(real["cycle"][1:] * ms, r_dec[1:]),
    }}
    for kind, m in (("pure decode", real["prefill_tokens"] == 0), ("with prefill", real["prefill_tokens"] > 0)):
        m = m.copy()
        m[0] = False
        out["real"][f"cycle_ms, {kind}"] = _q(real["cycle"][m] * ms)
        out["real"][f"worker_ms, {kind}"] = _q(real["worker"][m] * ms)
        out["real"][f"host+schedule+hop+update_ms, {kind}"] = _q(
            (real["cycle"][m] - real["worker"][m]) * ms)
    if sim is not None:
        s_dec = sim["decodes"]
        out["sim"] = {
            "steps": int(len(s_dec)), "step_ms": _q(sim["step"] * ms),
            "host_between_steps_ms": _q(sim["host"][1:] * ms),
            "prefill_tokens_per_step (steps with prefill)": _q(sim["prefill_tokens"][sim["prefill_tokens"] > 0]),
            "steps_with_prefill": int((sim["prefill_tokens"] > 0).sum()),
            "decodes_per_step": _q(s_dec),
            "decode_weighted_cycles": _weighted_bins(sim["cycle"][1:] * ms, s_dec[1:]),
        }
        for kind, m in (("pure decode", sim["prefill_tokens"] == 0), ("with prefill", sim["prefill_tokens"] > 0)):
            out["sim"][f"step_ms, {kind}"] = _q(sim["step"][m] * ms)
        if sim.get("cost") is not None:
            out["host_speed"] = host_speed(real, step_prices(real, sim["cost"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="the FILE given to here.py --trace-steps")
    ap.add_argument("--span", help="the recording to cut out (a name in FILE.loads.json); default all steps")
    ap.add_argument("--case", help="the validation case of that recording (simulated for the comparison)")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()
    span = None
    if args.span:
        f = Path(args.trace + ".loads.json")
        spans = json.loads(gzip.decompress(Path(str(f) + ".gz").read_bytes()) if not f.exists() else f.read_text())
        if args.span not in spans:
            raise SystemExit(f"{args.trace}.loads.json: no span {args.span!r} (has {', '.join(spans)})")
        span = tuple(spans[args.span])
    try:
        real = real_steps(args.trace, span)
    except (OSError, ValueError) as e:  # a missing or malformed trace: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    sim = sim_steps(args.case) if args.case else None
    out = summary(real, sim)
    from vllm_step_trace import emit_summary

    emit_summary(out, args.json)


if __name__ == "__main__":
    main()
