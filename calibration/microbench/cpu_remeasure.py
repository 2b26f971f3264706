"""``cpu_profile.py remeasure``: measure + overhead + profile on the machine at hand, bounded to a
few minutes (see cpu_profile.py's docstring for each step and validation/README.md for its use)."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout

from cpu_overhead import overhead  # noqa: E402  (step 2)
from cpu_profile_fit import profile  # noqa: E402  (step 3)


def _worker_binding(log: Path) -> str:
    """What vLLM's CPU worker says it bound its OpenMP threads to (its start-up log), or ''."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    hits = [ln.split("ompmultiprocessing.py", 1)[1].split("]", 1)[-1].strip() for ln in text.splitlines()
            if "ompmultiprocessing.py" in ln and ("core ids" in ln or "VLLM_CPU_OMP_THREADS_BIND" in ln)]
    return "; ".join(dict.fromkeys(hits))[:400]


def remeasure(args) -> None:
    """measure + overhead + profile on the machine at hand, bounded to a few minutes: the kernels
    pinned (``taskset``) to the core vLLM's worker binds to, the server started here with the
    validation engine's arguments (vLLM binds its worker itself, the API server and engine core
    float), the overhead client pinned to the other core; writes ``--yaml`` (a fresh profile,
    its kernels fitted on this folder's rows only) and ``remeasure.json`` (what ran where, how long)."""
    import shutil
    import subprocess

    from pdsim.replay.local_server import ENGINE_ARGS, VLLMServer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().with_name("cpu_profile.py")  # its measure subcommand, in the engine venv
    cpus = sorted(os.sched_getaffinity(0))
    # vLLM's auto-binding (utils/ompmultiprocessing.py) gives its worker the first CPUs and keeps the
    # last one for its API server and engine core (its log: "core ids=[0]" on 2 CPUs): the kernels
    # are timed on the worker's core, the overhead client runs on the other one
    kernel_core, client_core = cpus[0], cpus[-1]
    taskset = shutil.which("taskset")
    pin = [taskset, "-c", str(kernel_core)] if taskset else []
    t0 = time.monotonic()
    subprocess.run(pin + [str(args.python), str(here), "measure", "--out", str(out), "--name", args.name,
                          "--model", args.model, "--repeat", str(args.repeat), "--attention", args.attention],
                   check=True)
    t_measure = time.monotonic() - t0
    import contextlib

    log = Path(args.server_log) if getattr(args, "endpoint", None) else out / "vllm-server.log"
    t1 = time.monotonic()
    server = VLLMServer(args.python, args.engine_model, args.port, log=log)
    with (contextlib.nullcontext(argparse.Namespace(url=args.endpoint)) if getattr(args, "endpoint", None)
          else server) as srv:
        t_start = time.monotonic() - t1
        binding = _worker_binding(log)
        own = os.sched_getaffinity(0)
        if len(cpus) > 1:
            os.sched_setaffinity(0, {client_core})  # the client off the worker's core
        fifo = getattr(args, "client_fifo", None)  # each token read when it comes (pdsim/replay/priority.py)
        try:
            overhead(argparse.Namespace(out=str(out), endpoint=srv.url, repeats=args.repeats, batches=args.batches,
                                        prompts=args.prompts, output_tokens=args.output_tokens,
                                        client_fifo=fifo))
        finally:
            os.sched_setaffinity(0, own)
    t_overhead = time.monotonic() - t1 - t_start
    bounds = [f"--repeat {args.repeat}", f"--repeats {args.repeats}"]
    for flag, v in (("--batches", args.batches), ("--prompts", args.prompts), ("--output-tokens", args.output_tokens)):
        if v:
            bounds.append(f"{flag} {' '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}")
    if fifo:
        bounds.append(f"--client-fifo {fifo}")
    profile(argparse.Namespace(out=str(out), model=args.model, name=args.name, yaml=args.yaml, fresh=True,
                               bounds=" ".join(bounds)))
    info = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "kernels_core": kernel_core if taskset else None, "client_core": client_core if len(cpus) > 1 else None,
            "engine_args": getattr(args, "engine_args", None) or " ".join(ENGINE_ARGS),
            "attention_kernel": args.attention, "worker_binding": binding or "not logged",
            "seconds": {"measure": round(t_measure, 1), "server_start": round(t_start, 1),
                        "overhead": round(t_overhead, 1), "total": round(time.monotonic() - t0, 1)},
            "overhead_repeats": args.repeats, "yaml": str(args.yaml)}
    (out / "remeasure.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
