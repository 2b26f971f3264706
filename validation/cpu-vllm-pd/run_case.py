"""Record the CPU vLLM 1P1D validation case: two vLLM servers handing KV over through files.

P and D are vLLM CPU servers with the engine configuration of the colocated cases
(pdsim.replay.local_server.ENGINE_ARGS) plus ``--kv-transfer-config`` with vLLM's
``ExampleConnector`` (``kv_both``, one shared_storage_path); P's worker is bound to core 0 and
D's to core 1 (``VLLM_CPU_OMP_THREADS_BIND``). ExampleConnector supports no chunked prefill (it saves the
KV a step computes), so P takes whole prompts, uncached (PREFILL_ARGS: a 32,768-token budget no
batch of waiting prompts can split, no prefix caching). ``pdsim.replay.pd_proxy`` sends each request to P
with max_tokens 1, then to D, and relays D's stream. The workload of
``workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml`` is replayed through the proxy with Poisson
arrivals at a light load; the case goes to ``validation/cpu-vllm-pd-light/``.

    PYTHONPATH=. python validation/cpu-vllm-pd/run_case.py --python /work/venvs/vllm/bin/python \
        --model /work/venvs/vllm-models/tiny-llama
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCENARIO = "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"
LOADS = {"light": (3.0, 150)}


def session_tasks(sid: int) -> list[int]:
    """Every thread of every process in session ``sid`` (a server started in a session of its own;
    its processes: pdsim.replay.local_server.session_processes)."""
    from pdsim.replay.local_server import session_processes

    out = []
    for pid in session_processes(sid):
        try:
            out.extend(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue  # gone meanwhile
    return out


class SessionPinner:
    """Keeps every thread of each server's session on its own core (``--pin-servers``): the API
    server, engine core and worker of P on P's core, D's on D's, re-applied every ``period_s`` for
    threads started later; the proxy and the client stay free. What it changes: a spinning engine
    core never sits on the other server's core (host.poll_away 0), and under autogroup no server's
    group loads the other's core (validation/README.md, 'Each server on its own cores')."""

    def __init__(self, cores: dict[int, int], period_s: float = 0.5):
        self.cores, self.period_s = cores, period_s  # session id -> core
        self.pinned = 0
        self._stop = threading.Event()
        self._pin()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _pin(self) -> None:
        for sid, core in self.cores.items():
            for tid in session_tasks(sid):
                try:
                    if os.sched_getaffinity(tid) != {core}:
                        os.sched_setaffinity(tid, {core})
                        self.pinned += 1
                except OSError:
                    continue

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._pin()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="python of the vLLM venv")
    ap.add_argument("--model", required=True, help="tiny Llama folder (tests/engine/make_tiny_llama.py)")
    ap.add_argument("--port", type=int, default=8140, help="P's port; D +1, the proxy +2")
    ap.add_argument("--loads", nargs="*", default=list(LOADS))
    ap.add_argument("--rate", type=float, help="req/s instead of the load's (a slower host)")
    ap.add_argument("--requests", type=int, help="requests instead of the load's")
    ap.add_argument("--workload", metavar="YAML", help="record this workload (a workload or scenario YAML, "
                    "workloads/specs/ style) instead of the scenario's; each case folder keeps a copy as workload.yaml")
    ap.add_argument("--seed", type=int, help="the workload's seed (default the scenario's)")
    ap.add_argument("--prefix", default="cpu-vllm-pd", help="case name: PREFIX-<load>")
    ap.add_argument("--trace-steps", metavar="DIR",
                    help="record each server's steps (calibration/microbench/vllm_step_trace.py: DIR/p.<pid>, "
                         "DIR/d.<pid>), its processes' CPU and run-queue wait (host_share.py) and the core each "
                         "process ran on (sampled every 0.2 s) into DIR/host-<load>.json")
    ap.add_argument("--client-fifo", type=int, metavar="PRIO",
                    help="read the streams at SCHED_FIFO priority PRIO (root): each token is stamped when it "
                         "arrives instead of after the servers' processes had their turn (pdsim/replay/priority.py)")
    ap.add_argument("--pin-servers", action="store_true",
                    help="keep every thread of P's server on core 0 and D's on core 1 (SessionPinner)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="scenario overrides written into the case (a profile re-measured on this host: "
                         "hardware=PATH, overheads.router_ms=...)")
    args = ap.parse_args()
    # bad arguments are named before minutes of server start-up (exit status 2)
    if args.client_fifo is not None:  # named now, not after minutes of start-up
        from pdsim.replay.priority import fifo_refusal

        if refusal := fifo_refusal(args.client_fifo):
            ap.error(f"--client-fifo: {refusal}")
    if args.rate is not None and not args.rate > 0:
        ap.error(f"--rate: expected req/s > 0, got {args.rate:g}")
    if args.requests is not None and args.requests < 1:
        ap.error(f"--requests: expected >= 1, got {args.requests}")
    from pdsim import api

    sc = api.load_scenario(ROOT / SCENARIO)
    seed = sc.scenario.seed if args.seed is None else args.seed
    requests = None
    if args.workload:  # named now, not after minutes of start-up
        from pdsim.cli.workload_stats import workload_for_engine
        from pdsim.replay.local_server import MAX_MODEL_LEN

        requests = workload_for_engine(ap, args.workload, seed, MAX_MODEL_LEN)
    for load in args.loads:
        if load not in LOADS and not (args.rate and args.requests):
            ap.error(f"--loads {load}: no default rate and size for this load (known: {', '.join(LOADS)}); give "
                     "--rate and --requests")

    import numpy as np

    from pdsim.replay import ReplayConfig, replay
    from pdsim.replay.local_server import (ENGINE_ARGS, ENGINE_ENV, PREFILL_ARGS, PDProxy, VLLMServer,
                                           shared_storage_args)
    from pdsim.validate.case import write_case
    from pdsim.workload import materialize
    from pdsim.workload.shaping import open_loop
    from pdsim.workload.table import RequestTable

    if requests is not None:  # the workload's own requests (lengths, prefix blocks), sent at the load's rate
        source = args.workload
    else:
        requests, source = materialize(sc.scenario.workload, seed=seed), f"{SCENARIO} workload"
    store = Path(tempfile.mkdtemp(prefix="pdsim-kv-"))
    kv = shared_storage_args(store)
    p_env, d_env = {"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    tdir = None
    if args.trace_steps:
        sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
        import host_share
        import vllm_step_trace
        from host_share import CoreSampler

        tdir = Path(args.trace_steps)
        tdir.mkdir(parents=True, exist_ok=True)
        p_env.update(vllm_step_trace.trace_env(tdir / "p"))
        d_env.update(vllm_step_trace.trace_env(tdir / "d"))
    p_srv = VLLMServer(args.python, args.model, args.port, args=PREFILL_ARGS + kv,
                       env=p_env, log=f"/tmp/pdsim-vllm-p-{args.port}.log")
    d_srv = VLLMServer(args.python, args.model, args.port + 1, args=ENGINE_ARGS + kv,
                       env=d_env, log=f"/tmp/pdsim-vllm-d-{args.port}.log")
    pinner = None
    try:
        with p_srv, d_srv, PDProxy(sys.executable, p_srv.url, d_srv.url, args.port + 2) as proxy:
            # each server was started in a session of its own: its session id is its pid
            pinner = SessionPinner({p_srv.proc.pid: 0, d_srv.proc.pid: 1}) if args.pin_servers else None
            warm = materialize(sc.scenario.workload, seed=99)
            replay(RequestTable(np.zeros(16), warm.input_len[:16], np.full(16, 16), max_concurrency=4),
                   ReplayConfig(proxy.url, seed=99), name="warm-up")
            for k, load in enumerate(args.loads):
                rate, n = LOADS.get(load, (None, None))  # another load name: --rate and --requests (checked above)
                rate, n = args.rate or rate, args.requests or n
                name = f"{args.prefix}-{load}"
                t = open_loop(requests.head(n), rate, 1.0, seed, "poisson")
                t.meta["request_rate"] = rate
                if tdir is not None:  # every process of P, D and the proxy, and this one (the client)
                    groups = {"P": p_srv.proc.pid, "D": d_srv.proc.pid, "proxy": proxy.proc.pid}
                    procs = {pid: f"{g}:{name}" for g, s_ in groups.items()
                             for pid, name in host_share.processes(s_).items()}
                    procs[os.getpid()] = "client:" + Path(sys.argv[0]).name
                    sampler = CoreSampler(procs)
                    snap0 = host_share.snapshot(procs)
                    span = [time.monotonic()]
                rec = replay(t, ReplayConfig(proxy.url, timeout_s=300, seed=2000 + k, fifo=args.client_fifo),
                             name=name,
                             description=f"vLLM 0.32 CPU 1P1D (shared-storage KV), tiny-llama, Poisson {rate:g} "
                                         f"req/s ({load})",
                             hardware="cpu-epyc-2c (this machine, 2 cores)", model_label="tiny-llama",
                             workload_source=f"{source}, seed {seed}, Poisson {rate:g} req/s")
                if tdir is not None:
                    span.append(time.monotonic())
                    snap1 = host_share.snapshot(procs)
                    placement = sampler.stop()
                    gone = host_share.keep_exited(snap0, snap1, sampler)
                    host = {"span_monotonic": span, "cores": os.cpu_count(),
                            "share": host_share.share(snap0, snap1, span[1] - span[0], os.cpu_count() or 1),
                            "placement": placement, "loadavg": os.getloadavg(),
                            "exited": [f"{procs[pid]}[{pid}]" for pid in gone]}
                    (tdir / f"host-{load}.json").write_text(json.dumps(host, indent=1) + "\n")
                rec.meta.update(engine_command=" ".join(p_srv.command), engine_env=ENGINE_ENV,
                                engine_args=f"P: {' '.join(PREFILL_ARGS + kv)}; D: {' '.join(ENGINE_ARGS + kv)}")
                hits = Path(d_srv.log).read_text(errors="replace").count("External Cache Hit!")
                s = write_case(
                    rec, ROOT / "validation" / name, name=name,
                    description="vLLM 0.32 CPU build as 1P1D (P and D servers, one core each, KV handed over "
                                "through files by ExampleConnector, pdsim.replay.pd_proxy in front), tiny Llama, "
                                + (f"the workload of workload.yaml (from {args.workload}), " if args.workload else "")
                                + f"Poisson arrivals at {rate:g} req/s ({load}), {n} requests",
                    what="recorded here by validation/cpu-vllm-pd/run_case.py (pdsim replay through "
                         "pdsim.replay.pd_proxy)",
                    provenance=f"{rec.meta.get('server_version')} x2 at 127.0.0.1, {rec.meta['date']}, "
                               f"engine: {' '.join(ENGINE_ARGS)} (P: --max-num-batched-tokens 32768 "
                               f"--no-enable-prefix-caching) + ExampleConnector kv_both, VLLM_CPU_KVCACHE_SPACE=1; "
                               f"D logged {hits} external cache hits"
                               + (f"; client at SCHED_FIFO priority {args.client_fifo}" if args.client_fifo else "")
                               + ("; every thread of P's server session on core 0 and D's on core 1 "
                                  "(run_case.py --pin-servers)" if pinner is not None else ""),
                    scenario=f"../../{SCENARIO}")
                if args.workload:
                    (ROOT / "validation" / name / "workload.yaml").write_bytes(Path(args.workload).read_bytes())
                if tdir is not None:  # the cores each process was allowed and ran on, in the provenance
                    import yaml

                    cf = ROOT / "validation" / name / "case.yaml"
                    case = yaml.safe_load(cf.read_text())
                    # keep the pid: a server has two processes named python (its API server and an
                    # idle helper), told apart only by it (and by their CPU in host-<load>.json)
                    where = "; ".join(f"{k} {v['affinity']} ran on "
                                      + "/".join(f"{c}:{share:.0%}" for c, share in v["ran_on"].items())
                                      for k, v in host["placement"].items() if v["ran_on"])
                    case["source"]["provenance"] += (f"; cores (taskset -p affinity, /proc/PID/stat field 39 every "
                                                     f"0.2 s): {where}; step traces and CPU per process: {tdir}")
                    cf.write_text(yaml.safe_dump(case, sort_keys=False, width=110))
                if args.set:  # validated against these overrides (e.g. the profile re-measured on this host)
                    import yaml

                    cf = ROOT / "validation" / name / "case.yaml"
                    case = yaml.safe_load(cf.read_text())
                    case["set"] = list(args.set)
                    cf.write_text(yaml.safe_dump(case, sort_keys=False, width=110))
                print(json.dumps({"load": load, "rate": rate, "hits": hits, "mean_ttft_ms": s["mean_ttft_ms"],
                                  "pinned_threads": pinner.pinned if pinner is not None else None,
                                  "p90_ttft_ms": s["p90_ttft_ms"], "mean_itl_ms": s["mean_itl_ms"],
                                  "p90_itl_ms": s["p90_itl_ms"], "output_throughput": s["output_throughput"]}),
                      flush=True)
    finally:
        if pinner is not None:
            pinner.stop()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
