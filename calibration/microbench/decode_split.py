"""Where a vLLM CPU decode step's time goes, by batch and context: engine core or model worker.

Against a vLLM server started with the step tracer (``vllm_step_trace.trace_env``), B requests of
P prompt tokens at a time (``cpu_overhead.shape_output``: long enough that all B decode together
past the prefills), then for the decode-only steps with all B running: the cycle (schedule to
schedule), the engine core's schedule and update, the way to the worker and back, and the worker's
``execute_model``, medians in ms. A context-dependent cost that lives in ``execute_model`` is the
forward's (attention, the KV cache), not the engine's host work.

    python calibration/microbench/decode_split.py --python /work/venvs/vllm/bin/python \\
        --model /work/venvs/vllm-models/tiny-llama --out validation/cpu-vllm-calibration/emr3/decode-split
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

SHAPES = ((4, 32), (4, 2048), (16, 512), (32, 32), (32, 512), (32, 2048))


def split(steps: list[dict], calls: list[dict], b: int, t0: float, t1: float) -> dict:
    """Medians (ms) over the decode-only steps of ``b`` requests in [t0, t1]."""
    rows = [s for s in steps if t0 <= s["t_schedule"] <= t1 and s["decodes"] == b and not s["prefill_chunks"]]
    if len(rows) < 3:
        return {"steps": len(rows)}
    first, last = rows[0]["t_schedule"], rows[-1]["t_end"]

    def med(xs):
        return round(statistics.median(xs) * 1e3, 3) if xs else None
    return {"steps": len(rows), "decode_ctx": statistics.median(r["decode_ctx"] for r in rows),
            "cycle_ms": med([b2["t_schedule"] - a["t_schedule"] for a, b2 in zip(rows, rows[1:])]),
            "schedule_ms": med([r["t_scheduled"] - r["t_schedule"] for r in rows]),
            "to_worker_and_back_ms": med([r["t_model_done"] - r["t_scheduled"] for r in rows]),
            "worker_execute_ms": med([c["t1"] - c["t0"] for c in calls
                                      if c["call"] == "execute_model" and first <= c["t0"] <= last]),
            "update_ms": med([r["t_end"] - r["t_model_done"] for r in rows])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="the vLLM venv's python")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="folder for split.json and the raw trace")
    ap.add_argument("--port", type=int, default=8171)
    ap.add_argument("--client-fifo", type=int, default=10)
    args = ap.parse_args()
    import numpy as np
    import vllm_step_trace
    from cpu_overhead import shape_output

    from pdsim.replay import ReplayConfig, replay
    from pdsim.replay.local_server import VLLMServer
    from pdsim.workload.table import RequestTable

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "steps"
    for f in out.glob("steps.*"):
        f.unlink()
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # off the worker's core (it binds the first)
    spans, seed = {}, 500
    with VLLMServer(args.python, args.model, args.port, args=VLLMServer.default_args, log=out / "server.log",
                    env=vllm_step_trace.trace_env(trace)) as srv:
        for b, p in SHAPES:  # a fresh server's first steps of a shape run slow (cpu_overhead.py)
            seed += 1
            replay(RequestTable(np.zeros(b), np.full(b, p), np.full(b, 16), max_concurrency=b),
                   ReplayConfig(srv.url, max_concurrency=b, seed=seed), name="warm-up")
        for b, p in SHAPES:
            seed += 1
            t0 = time.monotonic()
            replay(RequestTable(np.zeros(b), np.full(b, p), np.full(b, shape_output(b, p, 48)[0]), max_concurrency=b),
                   ReplayConfig(srv.url, max_concurrency=b, seed=seed, fifo=args.client_fifo), name=f"b{b}-p{p}")
            spans[(b, p)] = (t0, time.monotonic())
    steps, calls = vllm_step_trace.read_trace(trace)
    rows = [{"batch": b, "prompt_tokens": p, **split(steps, calls, b, *spans[(b, p)])} for b, p in SHAPES]
    info = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
    (out / "split.json").write_text(json.dumps(info, indent=1) + "\n")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
