"""Does ExampleConnector (kv_both) slow a vLLM CPU server's decode steps? Plain vs connector, interleaved.

The zen1 run's script (../../zen1/host-contention/connector_overhead.py) with its analysis added:
four server lifetimes plain / connector / plain / connector, decode steps at batch 1 (3 requests
of 64 + 200 tokens one at a time) and batch 4 (8 requests, 4 at a time), each step's time
(schedule start -> end) from vllm_step_trace; per lifetime and batch the median of the pure-decode
steps; the connector's per-request work = (connector - plain) / batch for each pair, median of the
four. Worker bound to CPU 1, this client on CPU 0.

    PYTHONPATH=. python validation/cpu-vllm-calibration/emr2b/host-contention/connector_overhead.py OUT_DIR JSON
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
os.sched_setaffinity(0, {0})
from pdsim.replay import ReplayConfig, replay  # noqa: E402
from pdsim.replay.local_server import ENGINE_ARGS, VLLMServer, shared_storage_args  # noqa: E402
from pdsim.workload.table import RequestTable  # noqa: E402
import vllm_step_trace  # noqa: E402

PY = "/work/venvs/vllm/bin/python"; MODEL = "/work/venvs/vllm-models/tiny-llama"
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
runs = {}
for rnd, cfg in enumerate(["plain", "conn", "plain", "conn"]):
    extra = shared_storage_args(Path(tempfile.mkdtemp(prefix="kvx-"))) if cfg == "conn" else ()
    env = {"VLLM_CPU_OMP_THREADS_BIND": "1", **vllm_step_trace.trace_env(out / f"{cfg}{rnd}")}
    with VLLMServer(PY, MODEL, 8100 + rnd, args=ENGINE_ARGS + tuple(extra), env=env, log=out / f"{cfg}{rnd}.log") as s:
        replay(RequestTable(np.zeros(8), np.full(8, 200), np.full(8, 16), max_concurrency=2), ReplayConfig(s.url, seed=1),
               name="warm")
        marks = {}
        for b in (1, 4):
            n = 2 * b if b > 1 else 3
            t = RequestTable(np.zeros(n), np.full(n, 64), np.full(n, 200), max_concurrency=b)
            a = time.monotonic(); replay(t, ReplayConfig(s.url, seed=2 + b), name=f"b{b}"); marks[b] = (a, time.monotonic())
    steps, workers = vllm_step_trace.read_trace(out / f"{cfg}{rnd}")
    runs[f"{cfg}{rnd}"] = {}
    for b, (a, z) in marks.items():
        st = [x for x in steps if a <= x["t_schedule"] <= z and x["decodes"] == b and not x["prefill_tokens"]]
        runs[f"{cfg}{rnd}"][f"batch{b}"] = {"steps": len(st), "step_ms_median": round(1e3 * float(np.median(
            [x["t_end"] - x["t_schedule"] for x in st])), 3), "decode_ctx_median": float(np.median([x["decode_ctx"] for x in st]))}
per_req = [(runs[c][f"batch{b}"]["step_ms_median"] - runs[p][f"batch{b}"]["step_ms_median"]) / b * 1e3
           for p, c in (("plain0", "conn1"), ("plain2", "conn3")) for b in (1, 4)]
res = {"what": __doc__.splitlines()[0], "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs,
       "per_request_us": [round(x, 1) for x in per_req], "step_seq_us": round(float(np.median(per_req)), 1)}
Path(sys.argv[2]).write_text(json.dumps(res, indent=1) + "\n")
print(json.dumps({k: res[k] for k in ("per_request_us", "step_seq_us")}))
