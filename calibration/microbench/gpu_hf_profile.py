"""What an eager step of transformers' continuous batching spends its host time on, counted.

gpu_hf_structure.py splits the engine's decode step into a part per layer and a part per step;
this counts what each part is made of. The same engine and model dimensions at two layer
counts (``--layers``), ``--batch`` requests decoding, under ``torch.profiler`` (CPU activity, all
threads): per run, every operator's calls and host time, and the CUDA runtime's kernel launches.
The difference between the two layer counts, divided by the layers added, is one decoder layer:
its kernels launched and its host time, which costs/host.py prices as kernels x the issue cost
of one kernel; what is left at zero layers is the step's own work.

Writes ``profile.json``: per layer count, the decode steps profiled and the operators (calls,
host microseconds, summed over the steps). Runs where torch and transformers >= 5.x are
installed; ``--shape tiny`` on a CPU for tests (there the launches are the operators' own).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the drivers beside it

from gpu_hf_serving import SHAPES, Engine, StepTrace, build_model  # noqa: E402
from gpu_hf_structure import decode_median_ms, probe  # noqa: E402

LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def profiled(model, engine: Engine, batch: int, output: int, vocab: int, trace: StepTrace, top: int) -> dict:
    """One probe (gpu_hf_structure.probe) under the profiler: its steps and operator table."""
    from torch.profiler import ProfilerActivity, profile
    from transformers.generation.continuous_batching import continuous_api as api
    loop, got = api.ContinuousBatchingManager._run_generation_loop, []

    def profiled_loop(manager) -> None:  # the profiler records the thread it was started on
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loop(manager)
        got.append(prof)

    api.ContinuousBatchingManager._run_generation_loop = profiled_loop
    try:
        rows = probe(model, engine, batch, 128, output, vocab, 0, trace, 120.0)
    finally:
        api.ContinuousBatchingManager._run_generation_loop = loop
    ops = sorted(got[0].key_averages(), key=lambda e: -e.self_cpu_time_total)
    table = {e.key: {"calls": int(e.count), "self_us": round(float(e.self_cpu_time_total), 1),
                     "total_us": round(float(e.cpu_time_total), 1)} for e in ops}
    launches = sum(table[k]["calls"] for k in LAUNCH if k in table)
    aten = sum(v["calls"] for k, v in table.items() if k.startswith("aten::"))
    keep = dict(list(table.items())[:top])
    for k in LAUNCH:
        if k in table:
            keep[k] = table[k]
    return {"steps": len(rows), "decode_ms": decode_median_ms(rows, batch), "kernel_launches": launches,
            "aten_calls": aten, "ops": keep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for profile.json")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    ap.add_argument("--layers", default="2,6", help="two layer counts")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--output", type=int, default=17, help="tokens each request decodes")
    ap.add_argument("--num-blocks", type=int, default=Engine.num_blocks)
    ap.add_argument("--top", type=int, default=60, help="operators kept, by host time")
    args = ap.parse_args(argv)
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    engine = Engine(num_blocks=args.num_blocks)
    trace = StepTrace()
    trace.install()
    vocab = SHAPES[args.shape]["vocab_size"]
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"shape": args.shape, "batch": args.batch, "output": args.output, "device": device,
                 "torch": torch.__version__, "runs": {}}
    for layers in (int(x) for x in args.layers.split(",")):
        model = build_model(args.shape, device, 0, layers)
        probe(model, engine, 2, 128, 8, vocab, 0, trace, 120.0)  # warm-up, unprofiled
        doc["runs"][str(layers)] = run = profiled(model, engine, args.batch, args.output, vocab, trace, args.top)
        (args.out / "profile.json").write_text(json.dumps(doc))
        print(json.dumps({"layers": layers, "steps": run["steps"], "decode_ms": round(run["decode_ms"], 2),
                          "kernel_launches": run["kernel_launches"], "aten_calls": run["aten_calls"]}), flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
