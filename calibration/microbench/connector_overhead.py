"""What vLLM's ExampleConnector (kv_both) adds to a CPU server's decode steps, per request in the
step: the input of ``transfer: {backend: shared_storage, params: {step_seq_us: ...}}``
(pdsim/sim/transports/shared_storage.py).

Four server lifetimes, plain / connector / plain / connector (interleaved: the host's speed drifts
by more than the effect within minutes), the scenario's engine arguments, the worker bound to CPU 1
and this client to CPU 0. On each: 8 warm-up requests, then decode steps at batch 1 (3 requests of
64 + 200 tokens, one at a time) and batch 4 (8 requests, 4 at a time), each step's time (schedule
start -> end) from ``vllm_step_trace``. Per lifetime and batch the median of the pure-decode steps;
per pair and batch (connector - plain) / batch; ``step_seq_us`` the median of the four.

    PYTHONPATH=. python calibration/microbench/connector_overhead.py --python VENV/bin/python \
        --model TINY_LLAMA_DIR --out TRACE_DIR --json connector_overhead.json

Measured: 360 us a request on the Zen 1 host (2026-11-27, the bundled default; the analysis then
done by hand), 36 us on the Intel host of 2026-11-28 (validation/cpu-vllm-calibration/*/host-contention/).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1])); sys.path.insert(0, str(HERE))
from pdsim.replay import ReplayConfig, replay  # noqa: E402
from pdsim.replay.local_server import ENGINE_ARGS, VLLMServer, shared_storage_args  # noqa: E402
from pdsim.workload.table import RequestTable  # noqa: E402
import vllm_step_trace  # noqa: E402

ORDER = ("plain", "conn", "plain", "conn")
BATCHES = (1, 4)


def lifetime(python: str, model: str, port: int, cfg: str, trace: Path) -> dict:
    """One server lifetime: its pure-decode steps' median time per batch (ms)."""
    extra = shared_storage_args(Path(tempfile.mkdtemp(prefix="kvx-"))) if cfg == "conn" else ()
    env = {"VLLM_CPU_OMP_THREADS_BIND": "1", **vllm_step_trace.trace_env(trace)}
    with VLLMServer(python, model, port, args=ENGINE_ARGS + tuple(extra), env=env, log=trace.with_suffix(".log")) as s:
        replay(RequestTable(np.zeros(8), np.full(8, 200), np.full(8, 16), max_concurrency=2), ReplayConfig(s.url, seed=1),
               name="warm")
        marks = {}
        for b in BATCHES:
            n = 2 * b if b > 1 else 3
            t = RequestTable(np.zeros(n), np.full(n, 64), np.full(n, 200), max_concurrency=b)
            a = time.monotonic()
            replay(t, ReplayConfig(s.url, seed=2 + b), name=f"b{b}")
            marks[b] = (a, time.monotonic())
    steps, _workers = vllm_step_trace.read_trace(trace)
    out = {}
    for b, (a, z) in marks.items():
        st = [x for x in steps if a <= x["t_schedule"] <= z and x["decodes"] == b and not x["prefill_tokens"]]
        out[f"batch{b}"] = {"steps": len(st),
                            "step_ms_median": round(1e3 * float(np.median([x["t_end"] - x["t_schedule"] for x in st])), 3),
                            "decode_ctx_median": float(np.median([x["decode_ctx"] for x in st]))}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="python of the vLLM venv")
    ap.add_argument("--model", required=True, help="tiny Llama folder (tests/engine/make_tiny_llama.py)")
    ap.add_argument("--out", required=True, help="folder for the four servers' step traces and logs")
    ap.add_argument("--json", required=True, help="write the figures here")
    ap.add_argument("--port", type=int, default=8100, help="the first server's port (each lifetime the next)")
    a = ap.parse_args(argv)
    for name in ("python", "model"):
        if not Path(getattr(a, name)).exists():
            ap.error(f"--{name} {getattr(a, name)}: no such file or folder")
    if not hasattr(os, "sched_setaffinity") or not {0, 1} <= os.sched_getaffinity(0):
        ap.error("needs Linux and CPUs 0 and 1 (the client on 0, the worker on 1)")
    os.sched_setaffinity(0, {0})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {f"{cfg}{k}": lifetime(a.python, a.model, a.port + k, cfg, out / f"{cfg}{k}") for k, cfg in enumerate(ORDER)}
    per_req = [(runs[c][f"batch{b}"]["step_ms_median"] - runs[p][f"batch{b}"]["step_ms_median"]) / b * 1e3
               for p, c in (("plain0", "conn1"), ("plain2", "conn3")) for b in BATCHES]
    res = {"what": __doc__.splitlines()[0], "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "script": "calibration/microbench/connector_overhead.py", "runs": runs,
           "per_request_us": [round(x, 1) for x in per_req], "step_seq_us": round(float(np.median(per_req)), 1)}
    Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: res[k] for k in ("per_request_us", "step_seq_us")}))
    return res


if __name__ == "__main__":
    main()
