"""Where a 1P1D request's time goes, from step traces of both servers (run_case.py --trace-steps DIR).

    PYTHONPATH=. python validation/cpu-vllm-pd/pd_trace.py --trace DIR --load light \
        --hardware validation/cpu-vllm-calibration/here/cpu-epyc-2c.yaml [--json OUT]

Per P step (engine core's clock, ``vllm_step_trace``): its duration (schedule start -> step end)
and its worker's time (execute_model + sample_tokens) against the profile's price of the same
prompts (pdsim's step cost, prefill attention = chunk x (computed + chunk / 2)), and how much of
the worker's time D's worker was computing too (overlap of the two servers' worker calls). The
handoff: each P prompt is matched to D's first step carrying a chunk of the same prompt length
after it (the tail D recomputes): gap = D's schedule start - P's step end (P's response to the
proxy, the proxy's request to D, D's file lookup and load), and D's first step against its price.
``DIR/host-<load>.json`` (CPU and run-queue wait per process, host_share.py; the core each process
ran on) is summarised alongside.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "calibration" / "microbench"))


HOST_FIELDS = ("span_monotonic", "share", "placement")  # run_case.py --trace-steps: host-<load>.json


def _q(x) -> dict:
    x = np.asarray(x, dtype=float)
    if not len(x):
        return {"n": 0}
    return {"n": int(len(x)), "mean": round(float(x.mean()), 3), "p10": round(float(np.percentile(x, 10)), 3),
            "p50": round(float(np.median(x)), 3), "p90": round(float(np.percentile(x, 90)), 3)}


def _overlap(t0: float, t1: float, iv: np.ndarray) -> float:
    """Seconds of [t0, t1] covered by the sorted, disjoint intervals ``iv`` (n x 2)."""
    if not len(iv):
        return 0.0
    lo = np.maximum(iv[:, 0], t0)
    hi = np.minimum(iv[:, 1], t1)
    return float(np.clip(hi - lo, 0.0, None).sum())


def _worker_in(step: dict, calls: list[dict]) -> float:
    return sum(c["t1"] - c["t0"] for c in calls if step["t_scheduled"] <= c["t0"] <= step["t_model_done"])


def _steps_within(t0: float, t1: float, spans: np.ndarray) -> float:
    """How many of the steps ``spans`` (n x 2: schedule start, end) ran within [t0, t1], each
    counted by the share of it inside."""
    if not len(spans):
        return 0.0
    inside = np.clip(np.minimum(spans[:, 1], t1) - np.maximum(spans[:, 0], t0), 0.0, None)
    return float((inside / np.maximum(spans[:, 1] - spans[:, 0], 1e-9)).sum())


def p_loss_fit(rows: list[dict]) -> dict:
    """What P's prefills lost beside D (worker time over price), fitted two ways by least squares
    through the origin over P's prefill steps: per D step that ran beside it (ms), and per second
    D's worker computed beside it; with each fit's R^2 on the steps' worker times. The first fits
    better in eleven of the thirteen traced recordings (2026-11-27: R^2 0.68-0.98 against
    0.64-0.97, 2.2-8.9 ms per D step; validation/README.md): what P loses follows D's step count
    (its per-step host work) more than D's compute."""
    if len(rows) < 3:
        return {"n": len(rows)}
    w = np.array([r["worker_ms"] for r in rows]) * 1e-3
    y = w - np.array([r["price_ms"] for r in rows]) * 1e-3
    out = {"n": len(rows)}
    for name, r2, unit, x in (("per_d_step_ms", "r2_d_steps", 1e3, np.array([r["d_steps"] for r in rows])),
                              ("per_d_busy_s", "r2_d_busy", 1.0, np.array([r["d_busy_s"] for r in rows]))):
        xx = float(x @ x)
        c = float(x @ y) / xx if xx > 0 else 0.0
        resid = y - c * x
        tot = float(((w - w.mean()) ** 2).sum())
        out[name] = round(c * unit, 3)
        out[r2] = round(1.0 - float(resid @ resid) / tot, 3) if tot else None
    return out


def _price(cost, step: dict) -> float:
    chunks = step["prefill_chunks"]
    attn = sum(c["tokens"] * (c["computed"] + c["tokens"] / 2.0) for c in chunks)
    n = step["decodes"]
    ctx = step["decode_ctx"] + n
    return cost.step_time(step["prefill_tokens"], attn, len(chunks), n, float(ctx))


def analyse(trace: Path, load: str, hardware: str) -> dict:
    from vllm_step_trace import read_trace

    from pdsim import api
    from pdsim.costs.registry import build_step_cost

    host_file = trace / f"host-{load}.json"
    try:
        host = json.loads(host_file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{host_file}: not JSON ({e.msg}, line {e.lineno})") from None
    for field in HOST_FIELDS:  # what host_share wrote around the run; refused here, not a KeyError below
        if not isinstance(host, dict) or field not in host:
            raise ValueError(f"{host_file}: no field {field!r} (expected {', '.join(HOST_FIELDS)})")
    span = host["span_monotonic"]
    p_steps, p_calls = read_trace(trace / "p")
    d_steps, d_calls = read_trace(trace / "d")
    inside = lambda rows, key: [r for r in rows if span[0] <= r[key] <= span[1] + 30]  # noqa: E731
    p_steps, d_steps = inside(p_steps, "t_schedule"), inside(d_steps, "t_schedule")
    p_calls, d_calls = inside(p_calls, "t0"), inside(d_calls, "t0")
    sc = api.load_scenario(ROOT / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml", [f"hardware={hardware}"])
    p_cost = build_step_cost("auto", sc.hardware, sc.model, sc.scenario.cluster.prefill[0], "prefill")
    d_cost = build_step_cost("auto", sc.hardware, sc.model, sc.scenario.cluster.decode[0], "decode")
    d_iv = np.array([[c["t0"], c["t1"]] for c in d_calls]) if d_calls else np.zeros((0, 2))
    p_iv = np.array([[c["t0"], c["t1"]] for c in p_calls]) if p_calls else np.zeros((0, 2))

    d_run = [s for s in d_steps if s["decodes"] or s["prefill_tokens"]]
    d_span = np.array([[s["t_schedule"], s["t_end"]] for s in d_run]) if d_run else np.zeros((0, 2))
    rows = []
    for s in p_steps:
        if not s["prefill_tokens"]:
            continue
        w = _worker_in(s, p_calls)
        price = _price(p_cost, s)
        w0, w1 = s["t_scheduled"], s["t_model_done"]
        d_busy_s = _overlap(w0, w1, d_iv)
        rows.append({"tokens": s["prefill_tokens"], "prompts": len(s["prefill_chunks"]),
                     "step_ms": (s["t_end"] - s["t_schedule"]) * 1e3, "worker_ms": w * 1e3, "price_ms": price * 1e3,
                     "d_busy": d_busy_s / max(w1 - w0, 1e-9), "d_busy_s": d_busy_s,
                     "d_steps": _steps_within(w0, w1, d_span), "t_end": s["t_end"],
                     "prompt_lens": [c["prompt"] for c in s["prefill_chunks"]]})
    ratio = np.array([r["worker_ms"] / r["price_ms"] for r in rows])
    step_ratio = np.array([r["step_ms"] / r["price_ms"] for r in rows])
    busy = np.array([r["d_busy"] for r in rows])
    per_tok = np.array([r["worker_ms"] / r["tokens"] for r in rows])

    # handoff: each P prompt -> D's first step with a chunk of the same prompt length after P's end
    d_first = [(s, c) for s in d_steps for c in s["prefill_chunks"]]
    used, gaps, d_tail, d_tail_ratio, tail_tokens = set(), [], [], [], []
    for r in rows:
        for L in r["prompt_lens"]:
            for k, (s, c) in enumerate(d_first):
                if k in used or c["prompt"] != L or s["t_schedule"] < r["t_end"]:
                    continue
                used.add(k)
                gaps.append((s["t_schedule"] - r["t_end"]) * 1e3)
                d_tail.append((s["t_end"] - s["t_schedule"]) * 1e3)
                d_tail_ratio.append((s["t_end"] - s["t_schedule"]) / _price(d_cost, s))
                tail_tokens.append(c["tokens"])
                break
    d_dec = [s for s in d_steps if not s["prefill_tokens"] and s["decodes"]]
    d_dec_ms = np.array([(s["t_end"] - s["t_schedule"]) * 1e3 for s in d_dec])
    d_dec_price = np.array([_price(d_cost, s) * 1e3 for s in d_dec])
    d_p_busy = np.array([_overlap(s["t_scheduled"], s["t_model_done"], p_iv) /
                         max(s["t_model_done"] - s["t_scheduled"], 1e-9) for s in d_dec])
    # D's cycle: a decode step's schedule to the next one's, for steps back to back (< 50 ms apart)
    nxt = {id(a): b for a, b in zip(d_steps, d_steps[1:])}
    d_cyc = [(nxt[id(s)]["t_schedule"] - s["t_schedule"]) * 1e3 / d_dec_price[k] for k, s in enumerate(d_dec)
             if id(s) in nxt and nxt[id(s)]["t_schedule"] - s["t_end"] <= 0.05]
    p_work = float(sum(c["t1"] - c["t0"] for c in p_calls))
    d_work = float(sum(c["t1"] - c["t0"] for c in d_calls))
    wall = span[1] - span[0]
    return {
        "span_s": round(wall, 1),
        "p_prefill_steps": len(rows),
        "p_worker_over_price": _q(ratio), "p_step_over_price": _q(step_ratio),
        "p_worker_ms_per_token": _q(per_tok),
        "p_worker_over_price_d_busy>0.5": _q(ratio[busy > 0.5]),
        "p_worker_over_price_d_idle<0.1": _q(ratio[busy < 0.1]),
        "p_host_ms_around_worker": _q([r["step_ms"] - r["worker_ms"] for r in rows]),
        "handoff_gap_ms": _q(gaps), "d_tail_step_ms": _q(d_tail), "d_tail_over_price": _q(d_tail_ratio),
        "d_tail_tokens": _q(tail_tokens), "matched": f"{len(gaps)} of {sum(len(r['prompt_lens']) for r in rows)}",
        "d_decode_step_ms": _q(d_dec_ms), "d_decode_over_price": _q(d_dec_ms / d_dec_price) if len(d_dec) else {},
        "d_decode_over_price_p_busy>0.5": _q((d_dec_ms / d_dec_price)[d_p_busy > 0.5]) if len(d_dec) else {},
        "d_decode_over_price_p_idle<0.1": _q((d_dec_ms / d_dec_price)[d_p_busy < 0.1]) if len(d_dec) else {},
        "d_cycle_over_price": _q(d_cyc),
        "p_time_lost_to_d": p_loss_fit(rows),
        "worker_busy_share": {"P": round(p_work / wall, 3), "D": round(d_work / wall, 3)},
        "host": {"share": host["share"], "placement": host["placement"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="run_case.py --trace-steps DIR")
    ap.add_argument("--load", default="light")
    ap.add_argument("--hardware", default="validation/cpu-vllm-calibration/here/cpu-epyc-2c.yaml")
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()
    from vllm_step_trace import summarise

    summarise(lambda: analyse(Path(args.trace), args.load, args.hardware), args.json)


if __name__ == "__main__":
    main()
