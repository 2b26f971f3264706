"""Where an eager engine's host work goes: transformers' continuous batching, by structure.

The H200 recordings of 2026-11-28 (gpu_hf_serving.py) showed a host-bound engine: a decode step
of the Llama-3.1-8B shape takes 61-68 ms at 1-7 decodes where its GPU work is ~8 ms, and
``pdsim calibrate from-steps`` fitted that as 55 ms per step + 1.7 ms per sequence. A fit on one
model cannot say how much of that is per layer (Python around every decoder layer: module
calls, kernel launches, the paged cache's update) and how much per step (scheduling, building
the batch's tensors, sampling, updating the requests), yet that split decides what the same
engine does with a model of another depth. This probe measures it: the same engine, the same
model dimensions, only the layer count changed (``--layers``), at several decode batch sizes;
``b`` requests sent at once with a short prompt, so after their prefill every step is a pure
decode of exactly ``b`` sequences. Per step it records the step trace of gpu_hf_serving.py,
including the host's time inside the model runner's ``compute_batch`` (forward, logits and
sampling issued from Python), so the step splits into: schedule and prepare inputs, issue, and
wait-for-GPU plus update.

Writes ``structure.json``: provenance, the engine, and per (shape, layers, batch) the trace rows.
Runs where torch and transformers >= 5.x are installed; ``--shape tiny`` on a CPU for tests.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the driver beside it

from gpu_hf_serving import SHAPES, Engine, StepTrace, build_model, provenance, run_load  # noqa: E402


def probe(model, engine: Engine, batch: int, prompt: int, output: int, vocab: int, seed: int,
          trace: StepTrace, timeout_s: float) -> list[list[float]]:
    """``batch`` requests at once, ``prompt`` tokens in and ``output`` out: the step rows."""
    reqs = {"send_s": [0.0] * batch, "input_len": [prompt] * batch, "output_len": [output] * batch}
    got = run_load(model, engine, reqs, vocab, seed, trace, timeout_s)
    bad = [e for e in got["errors"] if e]
    if bad:
        raise RuntimeError(f"{len(bad)} of {batch} requests failed: {bad[0]}")
    return got["steps"]


def decode_median_ms(rows: list[list[float]], batch: int) -> float:
    """Median time of the steps that decoded exactly ``batch`` sequences and nothing else."""
    c = StepTrace.COLUMNS
    i_dec, i_pre = c.index("decodes"), c.index("prefill_tokens")
    took = [(r[1] - r[0]) * 1e3 for r in rows if r[i_dec] == batch and r[i_pre] == 0]
    return float(np.median(took)) if took else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for structure.json")
    ap.add_argument("--model", action="append", required=True, metavar="SHAPE:L1,L2,...",
                    help="a shape (gpu_hf_serving.SHAPES) and the layer counts to build it with")
    ap.add_argument("--batches", default="1,8,32,64", help="decode batch sizes")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens of each request")
    ap.add_argument("--output", type=int, default=33, help="tokens each request decodes")
    ap.add_argument("--num-blocks", type=int, default=Engine.num_blocks)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args(argv)
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batches = [int(b) for b in args.batches.split(",")]
    models = []
    for spec in args.model:
        shape, _, layers = spec.partition(":")
        if shape not in SHAPES or not layers:
            ap.error(f"--model {spec!r}: expected SHAPE:L1,L2,... with SHAPE one of {', '.join(sorted(SHAPES))}")
        models += [(shape, int(n)) for n in layers.split(",")]
    engine = Engine(num_blocks=args.num_blocks)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(device), "engine": engine.__dict__, "prompt": args.prompt,
           "output": args.output, "columns": StepTrace.COLUMNS, "probes": []}
    trace = StepTrace()
    trace.install()
    for shape, layers in models:
        t = time.perf_counter()
        model = build_model(shape, device, args.seed, layers)
        built = time.perf_counter() - t
        vocab = SHAPES[shape]["vocab_size"]
        probe(model, engine, 2, args.prompt, 8, vocab, args.seed, trace, args.timeout_s)  # warm-up
        for b in batches:
            rows = probe(model, engine, b, args.prompt, args.output, vocab, args.seed + b, trace, args.timeout_s)
            doc["probes"].append({"shape": shape, "layers": layers, "batch": b, "build_s": built, "rows": rows})
            (args.out / "structure.json").write_text(json.dumps(doc))
            print(json.dumps({"shape": shape, "layers": layers, "batch": b, "steps": len(rows),
                              "decode_ms": round(decode_median_ms(rows, b), 2)}), flush=True)
        del model
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
