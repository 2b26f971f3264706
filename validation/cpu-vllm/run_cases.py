"""Record the CPU vLLM validation cases: one Poisson workload replayed at three loads.

Starts vLLM (CPU build, its own venv) with the engine configuration of
``workloads/scenarios/cpu-vllm-tiny-llama.yaml`` (pdsim.replay.local_server.ENGINE_ARGS), replays the
scenario's workload (same lengths, same seed) with Poisson arrivals at a light load, near the
knee and overloaded, and writes one case folder per load next to this file's folder
(``validation/cpu-vllm-<load>/``: ``real/bench.json`` + ``real/summary.json`` + ``case.yaml``).
The step-overhead constant of the profile comes from a separate run (calibration/microbench/
cpu_profile.py overhead), never from these.

    PYTHONPATH=. python validation/cpu-vllm/run_cases.py --python /work/venvs/vllm/bin/python \
        --model /work/venvs/vllm-models/tiny-llama
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCENARIO = "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
# req/s: light (well below capacity), near the knee (TTFT starts to queue), overloaded (queue grows);
# the real server's decode capacity here is ~2.4k output tokens/s = ~11 req/s of this workload
LOADS = {"light": (4.0, 200), "knee": (10.0, 300), "overload": (20.0, 300)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="python of the vLLM venv")
    ap.add_argument("--model", required=True, help="tiny Llama folder (tests/engine/make_tiny_llama.py)")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--loads", nargs="*", default=list(LOADS))
    ap.add_argument("--endpoint", help="an already running server started with ENGINE_ARGS (default: start one)")
    ap.add_argument("--suffix", default="", help="case folder suffix (a second recording: --suffix=-repeat)")
    args = ap.parse_args()

    import numpy as np

    from pdsim import api
    from pdsim.replay import ReplayConfig, replay
    from pdsim.replay.local_server import ENGINE_ARGS, ENGINE_ENV, VLLMServer
    from pdsim.validate.case import write_case
    from pdsim.workload import materialize
    from pdsim.workload.shaping import open_loop

    sc = api.load_scenario(ROOT / SCENARIO)
    server = VLLMServer(args.python, args.model, args.port, log=f"/tmp/pdsim-vllm-{args.port}.log")
    with (contextlib.nullcontext(server) if args.endpoint else server) as srv:
        url = args.endpoint or srv.url
        # warm the server (compilation of new shapes) before any measured run
        warm = materialize(sc.scenario.workload, seed=99)
        from pdsim.workload.table import RequestTable
        replay(RequestTable(np.zeros(16), warm.input_len[:16], np.full(16, 16), max_concurrency=8),
               ReplayConfig(url, seed=99), name="warm-up")
        # a prompt seed per run: vLLM's prefix cache must not see one run's prompts again in the next
        for k, load in enumerate(args.loads):
            rate, n = LOADS[load]
            base = materialize(sc.scenario.workload, seed=sc.scenario.seed)
            t = RequestTable(base.arrival_s[:n], base.input_len[:n], base.output_len[:n], source=SCENARIO)
            t = open_loop(t, rate, 1.0, sc.scenario.seed, "poisson")
            t.meta["request_rate"] = rate
            rec = replay(t, ReplayConfig(url, timeout_s=300, seed=1000 + k), name=f"cpu-vllm-{load}",
                         description=f"vLLM 0.32 CPU, tiny-llama, Poisson {rate:g} req/s ({load})",
                         hardware="cpu-epyc-2c (this machine, 2 cores)", model_label="tiny-llama",
                         workload_source=f"{SCENARIO} workload, seed {sc.scenario.seed}, Poisson {rate:g} req/s")
            rec.meta.update(engine_command=" ".join(srv.command), engine_env=ENGINE_ENV,
                            engine_args=" ".join(ENGINE_ARGS))
            s = write_case(rec, ROOT / "validation" / f"cpu-vllm-{load}{args.suffix}", name=f"cpu-vllm-{load}{args.suffix}",
                           description=f"vLLM 0.32 CPU build (V1 engine) serving the tiny Llama on this 2-core "
                                       f"machine, Poisson arrivals at {rate:g} req/s ({load}), {n} requests",
                           what="recorded here by validation/cpu-vllm/run_cases.py (pdsim replay)",
                           provenance=f"{rec.meta.get('server_version')} at 127.0.0.1, {rec.meta['date']}, "
                                      f"engine: {' '.join(ENGINE_ARGS)}, VLLM_CPU_KVCACHE_SPACE=1",
                           scenario=f"../../{SCENARIO}")
            print(json.dumps({"load": load, "rate": rate, "mean_ttft_ms": s["mean_ttft_ms"],
                              "p90_ttft_ms": s["p90_ttft_ms"], "mean_itl_ms": s["mean_itl_ms"],
                              "p90_itl_ms": s["p90_itl_ms"], "output_throughput": s["output_throughput"],
                              "engine": rec.meta.get("engine_counters")}), flush=True)


if __name__ == "__main__":
    main()
