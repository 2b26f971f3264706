"""Does ExampleConnector (kv_both) slow a vLLM CPU server's decode steps? Plain vs connector, interleaved."""
import os, sys, time, tempfile, json
from pathlib import Path
import numpy as np
ROOT = Path("/work/main"); sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
os.sched_setaffinity(0, {0})
from pdsim.replay import ReplayConfig, replay
from pdsim.replay.local_server import ENGINE_ARGS, VLLMServer, shared_storage_args
from pdsim.workload.table import RequestTable
import vllm_step_trace
PY = "/work/venvs/vllm/bin/python"; MODEL = "/work/venvs/vllm-models/tiny-llama"
out = Path("/tmp/conn"); out.mkdir(exist_ok=True); res = {}
for rnd, cfg in enumerate(["plain", "conn", "plain", "conn"]):
    extra = shared_storage_args(Path(tempfile.mkdtemp(prefix="kvx-"))) if cfg == "conn" else ()
    env = {"VLLM_CPU_OMP_THREADS_BIND": "1", **vllm_step_trace.trace_env(out / f"{cfg}{rnd}")}
    t0 = time.time()
    with VLLMServer(PY, MODEL, 8100 + rnd, args=ENGINE_ARGS + tuple(extra), env=env, log=out / f"{cfg}{rnd}.log") as s:
        print(cfg, rnd, "up in", round(time.time() - t0), "s", flush=True)
        warm = RequestTable(np.zeros(8), np.full(8, 200), np.full(8, 16), max_concurrency=2)
        replay(warm, ReplayConfig(s.url, seed=1), name="warm")
        marks = {}
        for b in (1, 4):
            n = 2 * b if b > 1 else 3
            t = RequestTable(np.zeros(n), np.full(n, 64), np.full(n, 200), max_concurrency=b)
            a = time.monotonic(); replay(t, ReplayConfig(s.url, seed=2 + b), name=f"b{b}"); marks[b] = (a, time.monotonic())
        res[f"{cfg}{rnd}"] = marks
        print(cfg, rnd, "done", flush=True)
json.dump(res, open(out / "marks.json", "w"))
