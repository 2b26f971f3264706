"""A 1P1D request's TTFT, segment by segment, in the real run (step traces) and in pdsim (issue 24 item 5).

    PYTHONPATH=. python validation/cpu-vllm-pd/handoff_trace.py \
        --case validation/cpu-vllm-here-pd-traced-knee \
        --trace validation/cpu-vllm-calibration/newuser/step-traces/pd-knee --load knee [--json OUT]

Real (both servers' step traces, run_case.py --trace-steps; the client's bench.json): each request
(in send order) is matched to the first unused P prefill chunk of its prompt length (whole prompts:
P runs --max-num-batched-tokens 32768) and to D's first step after P's step that carries a chunk of
the same prompt (the tail D recomputes, as pd_trace.py matches it). Per request:

- ``P step``: P's step that prefilled it (schedule start -> step end; ExampleConnector writes the
  files inside it, ``save_kv_layer`` in the forward), and the worker's share of it;
- ``hand-off``: P's step end -> D's schedule start of the tail step: P's answer to the proxy, the
  proxy's request to D, D's API server, D's engine core taking it in between two steps. Split by
  whether D was stepping back to back then (its previous step ended < 1 ms before: the request may
  have waited for that step to end, at most ``notice_max`` = since that step began) or idle (the
  engine core waited on its input queue: all of it is the way from P to D);
- ``D tail step``: the step that reads P's files, computes the tail and the batch's decodes, and
  samples the first token (``start_load_kv`` in the same forward);
- ``in`` (send -> P's schedule start: the proxy, P's API server, P's queue) and ``out`` (D's step end
  -> the client has the token): their sum is exact (TTFT minus the traced segments); the split needs
  the offset between the client's clock and the traces' (monotonic), which the recordings do not
  store: the midpoint of the offsets for which every request's ``in`` and ``out`` are >= 0 (the
  width of that range is printed; half of it bounds the error of each).

Simulated: the same case through ``pdsim validate``'s alignment (pdsim.validate.align), from the
run record's per-request times: ``in`` = arrival -> P's prefill start, ``P step``, ``hand-off`` =
P's step end -> D's admission (P's file write, the proxy's hop on placed cores, D's next step),
``D tail`` = D's admission -> the engine's first token (``d_tail_priced``: its price alone, file read +
tail), ``out`` = -> the client's (``router_ms``, half of it behind the proxy on placed cores, + its
hop's wait).
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


def _q(x) -> dict:
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return {"n": 0}
    return {"n": int(len(x)), "mean": round(float(x.mean()), 1), "min": round(float(x.min()), 1),
            "p50": round(float(np.median(x)), 1), "p90": round(float(np.percentile(x, 90)), 1)}


def real_segments(trace: Path, load: str, bench: Path) -> dict:
    """Per-request segments of the real run (ms), summarised."""
    from vllm_step_trace import read_trace

    host_file = trace / f"host-{load}.json"
    try:
        span = json.loads(host_file.read_text())["span_monotonic"]
        b = json.loads(bench.read_text())
        send, ttft, lens = np.asarray(b["start_times"]), np.asarray(b["ttfts"]), b["input_lens"]
    except json.JSONDecodeError as e:
        raise ValueError(f"{host_file} or {bench}: not JSON ({e.msg}, line {e.lineno})") from None
    except (KeyError, TypeError) as e:
        raise ValueError(f"{host_file} / {bench}: no field {e}") from None
    p_steps, p_calls = read_trace(trace / "p")
    d_steps, _ = read_trace(trace / "d")
    inside = lambda rows: [r for r in rows if span[0] <= r["t_schedule"] <= span[1] + 30]  # noqa: E731
    p_steps, d_steps = inside(p_steps), inside(d_steps)
    p_chunks = [(s, c) for s in p_steps for c in s["prefill_chunks"] if c["computed"] == 0]
    d_chunks = [(k, s, c) for k, s in enumerate(d_steps) for c in s["prefill_chunks"]]
    p_used, d_used, rows = set(), set(), []
    for i in np.argsort(send, kind="stable"):
        pj = next((j for j, (s, c) in enumerate(p_chunks) if j not in p_used and c["prompt"] == lens[i]), None)
        if pj is None:
            continue
        p_used.add(pj)
        ps = p_chunks[pj][0]
        dj = next((j for j, (k, s, c) in enumerate(d_chunks) if j not in d_used and c["prompt"] == lens[i]
                   and s["t_schedule"] >= ps["t_end"]), None)
        if dj is None:
            continue
        d_used.add(dj)
        k, ds, _c = d_chunks[dj]
        prev = d_steps[k - 1] if k else None
        worker = sum(c["t1"] - c["t0"] for c in p_calls if ps["t_scheduled"] <= c["t0"] <= ps["t_model_done"])
        d_back_to_back = prev is not None and ds["t_schedule"] - prev["t_end"] < 1e-3 and prev["t_end"] > ps["t_end"]
        rows.append({
            "send": float(send[i]), "ttft": float(ttft[i]) * 1e3, "p_sched": ps["t_schedule"],
            "p_step": (ps["t_end"] - ps["t_schedule"]) * 1e3, "p_worker": worker * 1e3,
            "handoff": (ds["t_schedule"] - ps["t_end"]) * 1e3, "d_busy": d_back_to_back,
            "notice_max": (ds["t_schedule"] - max(prev["t_schedule"], ps["t_end"])) * 1e3 if d_back_to_back else 0.0,
            "d_tail": (ds["t_end"] - ds["t_schedule"]) * 1e3, "d_end": ds["t_end"]})
    if not rows:
        raise ValueError(f"{trace}: no request of {bench} matched a P and a D step")
    s = np.array([r["send"] for r in rows])
    p0 = np.array([r["p_sched"] for r in rows])
    d1 = np.array([r["d_end"] for r in rows])
    t = np.array([r["ttft"] for r in rows]) * 1e-3
    lo, hi = float(np.max(d1 - s - t)), float(np.min(p0 - s))  # offsets with every in, out >= 0
    off = (lo + hi) / 2
    for r in rows:
        r["in"] = (r["p_sched"] - r["send"] - off) * 1e3
        r["out"] = r["ttft"] - r["in"] - r["p_step"] - r["handoff"] - r["d_tail"]
    col = lambda k, rr=rows: [r[k] for r in rr]  # noqa: E731
    busy = [r for r in rows if r["d_busy"]]
    idle = [r for r in rows if not r["d_busy"]]
    return {
        "matched": f"{len(rows)} of {len(send)}", "clock_offset_range_ms": round((hi - lo) * 1e3, 1),
        "in": _q(col("in")), "p_step": _q(col("p_step")), "p_step_host": _q([r["p_step"] - r["p_worker"] for r in rows]),
        "handoff": _q(col("handoff")), "handoff_d_idle": _q(col("handoff", idle)),
        "handoff_d_busy": _q(col("handoff", busy)), "notice_max_d_busy": _q(col("notice_max", busy)),
        "d_tail": _q(col("d_tail")), "out": _q(col("out")),
        "d_tail_and_out": _q([r["d_tail"] + r["out"] for r in rows]), "ttft": _q(col("ttft")),
    }


def sim_segments(case: Path, overrides: list[str]) -> dict:
    """Per-request segments of the simulated case (ms), summarised."""
    from pdsim import api
    from pdsim.ingest import read_run
    from pdsim.validate.align import simulate_aligned
    from pdsim.validate.case import load_case

    c = load_case(case)
    ing = read_run(case / c["real"], c.get("format", "auto"))
    sc = api.load_scenario(case / c["scenario"], list(c.get("set") or []) + list(overrides))
    rec = simulate_aligned(ing.record, sc, c.get("arrivals", "auto")).sim.record
    r = rec.requests
    ms = lambda a: np.asarray(a, dtype=float) * 1e3  # noqa: E731
    # the first token's way out: router_ms (half of it behind the proxy on placed cores, world.py),
    # plus what its hop waited beyond that on placed cores (the record's first_shift)
    router = (sc.scenario.overheads.router_ms or 0.0) * 1e-3 if sc.scenario.overheads is not None else 0.0
    placed = sc.scenario.host is not None and bool(sc.scenario.host.placement)
    out = (router / 2 if placed and sc.scenario.transfer.backend == "shared_storage" else router) + (
        np.asarray(rec.tokens.first_shift) if rec.tokens.first_shift is not None else 0.0)
    engine_first = np.asarray(r["first_token_s"], dtype=float) - out
    return {
        "in": _q(ms(r["prefill_start_s"] - r["arrival_s"])), "p_step": _q(ms(r["prefill_end_s"] - r["prefill_start_s"])),
        "p_write": _q(ms(r["transfer_end_s"] - r["transfer_start_s"])),
        "handoff": _q(ms(r["decode_admit_s"] - r["prefill_end_s"])),
        "d_tail_priced": _q(ms(r["d_load_s"])), "d_tail": _q(ms(engine_first - r["decode_admit_s"])),
        "out": _q(ms(out) * np.ones(len(engine_first))),
        "d_tail_and_out": _q(ms(r["first_token_s"] - r["decode_admit_s"])),
        "ttft": _q(ms(r["first_token_s"] - r["arrival_s"])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, help="a 1P1D case folder of validation/")
    ap.add_argument("--trace", required=True, help="its step traces (run_case.py --trace-steps DIR)")
    ap.add_argument("--load", default="light", help="the load name of DIR/host-<load>.json")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="scenario override")
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()
    case = Path(args.case)
    from vllm_step_trace import summarise

    summarise(lambda: {"real": real_segments(Path(args.trace), args.load, case / "real" / "bench.json"),
                       "simulated": sim_segments(case, args.set)}, args.json)


if __name__ == "__main__":
    main()
