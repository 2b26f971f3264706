"""Record a real serving engine on a GPU: Hugging Face transformers' continuous batching.

No vLLM or SGLang can be installed on the lent GPU machine (no network, wheels over the
carry limit), but its image holds transformers, whose ``ContinuousBatchingManager`` is a
serving engine: a FIFO scheduler that puts running decodes first and then prefill chunks
inside one token budget per step (``max_batch_tokens``, the vLLM V1 rule), a paged KV cache
(``block_size`` tokens per block, prefix sharing), ``max_requests_per_batch``. This script
drives it in-process with timed arrivals, as ``pdsim replay`` drives a server over HTTP:

- the model is the Llama-3.1-8B shape with random bf16 weights (the step's work does not
  depend on the weights; EOS is off, so every request decodes exactly its output length);
- ``burst``: requests all sent at once give the engine's own capacity in req/s (or
  ``--capacity`` gives it); then Poisson runs at fractions of it (``--loads``); a repeated
  fraction, or ``--replay FILE``, sends the same requests again; ``--chunk-variant N`` replays the
  second load's requests with a token budget of N (the what-if);
- every run writes a bench_serving-format JSON (``input_lens``, ``output_lens``, ``ttfts``,
  ``itls``, ``start_times``: what ``pdsim validate`` reads) and a step trace (one row per
  engine step: its start and end, decodes, prefill tokens, context read), the engine's own
  view of its steps, which ``pdsim calibrate from-steps`` fits the host work to.

The TTFT here is measured from the call that hands the request to the engine to the host
seeing the first token: there is no HTTP server, tokenizer or stream between them.

Runs where torch and transformers >= 5.x are installed (calibration extra); on a CPU it runs
a tiny shape (``--shape tiny``) for tests. Times are seconds unless a name says otherwise.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout

# Llama-3.1-8B's config.json (meta-llama/Llama-3.1-8B), Qwen2.5-14B's (Qwen/Qwen2.5-14B: 48 layers,
# QKV bias; workloads/models/qwen2.5-14b.yaml) and tiny shapes of each architecture for CPU tests.
SHAPES = {
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                         max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5),
    "qwen2.5-14b": dict(arch="qwen2", hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                        num_attention_heads=40, num_key_value_heads=8, vocab_size=152064,
                        max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-5),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                 max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-5),
    "tiny-qwen2": dict(arch="qwen2", hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                       max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-5),
}


@dataclass(frozen=True)
class Engine:
    """The engine's settings, all explicit so a scenario can state the same ones."""
    block_size: int = 256          # tokens per KV block (transformers' default)
    num_blocks: int = 1024         # KV capacity = block_size * num_blocks tokens
    max_batch_tokens: int = 2048   # the step's token budget (chunked prefill size)
    max_requests_per_batch: int = 64
    cuda_graphs: bool = False      # paged|sdpa needs a mask: transformers' default is eager
    async_batching: bool = False   # its default without CUDA graphs


def build_model(shape: str, device: str, seed: int, layers: int = 0):
    """The shape's model with random bf16 weights; ``layers`` > 0 replaces its layer count (the
    structure probe, gpu_hf_structure.py)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    dims = dict(SHAPES[shape])
    config, model_class = ((Qwen2Config, Qwen2ForCausalLM) if dims.pop("arch", "llama") == "qwen2"
                           else (LlamaConfig, LlamaForCausalLM))
    if layers:
        dims["num_hidden_layers"] = layers
    cfg = config(**dims, tie_word_embeddings=False, attn_implementation="paged|sdpa", dtype="bfloat16")
    with torch.device(device):
        model = model_class(cfg).to(torch.bfloat16)
    return model.eval()


def make_requests(rng: np.random.Generator, n: int, rate: float | None, lens: dict) -> dict:
    """Poisson arrivals at ``rate`` req/s (all at 0 when ``rate`` is None), uniform lengths."""
    gaps = rng.exponential(1.0 / rate, size=n) if rate else np.zeros(n)
    send = np.cumsum(gaps) - (gaps[0] if rate else 0.0)
    inp = rng.integers(lens["input_min"], lens["input_max"] + 1, size=n)
    out = rng.integers(lens["output_min"], lens["output_max"] + 1, size=n)
    return {"send_s": send.tolist(), "input_len": inp.tolist(), "output_len": out.tolist()}


class StepTrace:
    """Wraps the scheduler and the batch update: one row per engine step."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []
        self._open: list[float] | None = None

    def install(self) -> None:
        from transformers.generation.continuous_batching import continuous_api as api
        from transformers.generation.continuous_batching.model_runner import ModelRunner
        from transformers.generation.continuous_batching.scheduler import FIFOScheduler
        trace = self
        schedule, update = FIFOScheduler.schedule_batch, api.ContinuousBatchProcessor.update_batch
        compute = ModelRunner.compute_batch

        def compute_batch(runner, model, batch_data):  # the host's issue of forward + sampling
            t0 = time.perf_counter()
            compute(runner, model, batch_data)
            if trace._open is not None:
                trace._open[8:10] = [t0, time.perf_counter()]

        def schedule_batch(sched, token_budget, cache_budget):
            t0 = time.perf_counter()
            out = schedule(sched, token_budget, cache_budget)
            batch = out[0]
            if batch:
                dec = [f for f in batch if f.query_length == 1]
                pre = [f for f in batch if f.query_length > 1]
                trace._open = [t0, 0.0, len(dec), len(pre), sum(f.query_length for f in pre),
                               sum(f.state.position_offset for f in dec),
                               sum(f.state.position_offset for f in pre),
                               sum(f.query_length * (f.state.position_offset + f.query_length / 2) for f in pre),
                               t0, t0]
            return out

        def update_batch(proc):
            update(proc)
            if trace._open is not None:
                trace._open[1] = time.perf_counter()
                trace.rows.append(trace._open)
                trace._open = None

        FIFOScheduler.schedule_batch = schedule_batch
        api.ContinuousBatchProcessor.update_batch = update_batch
        ModelRunner.compute_batch = compute_batch

    # pdsim/calibrate/from_steps.py reads these (prefill_attn: sum over chunks of tokens x
    # (computed + tokens / 2); the traces of 2026-11-28 predate it). issue_start_s / issue_end_s:
    # the host inside the model runner's compute_batch (forward, logits, sampling issued; eager,
    # so every kernel launched from Python); before it the step schedules and builds its inputs,
    # after it the host waits for the GPU and updates the requests (traces from 2026-11-29 on).
    COLUMNS = ["start_s", "end_s", "decodes", "prefills", "prefill_tokens", "decode_context",
               "prefill_context", "prefill_attn", "issue_start_s", "issue_end_s"]


def run_load(model, engine: Engine, reqs: dict, vocab: int, seed: int, trace: StepTrace,
             timeout_s: float) -> dict:
    """Send ``reqs`` at their times; return per-request token times (perf_counter seconds)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    rng = np.random.default_rng(seed)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=16)
    cb = ContinuousBatchingConfig(block_size=engine.block_size, num_blocks=engine.num_blocks,
                                  max_batch_tokens=engine.max_batch_tokens,
                                  max_requests_per_batch=engine.max_requests_per_batch,
                                  use_cuda_graph=engine.cuda_graphs,
                                  use_async_batching=engine.async_batching)
    n = len(reqs["send_s"])
    prompts = [rng.integers(10, vocab - 10, size=k).tolist() for k in reqs["input_len"]]
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    results: dict[str, object] = {}
    done = threading.Event()

    def collect() -> None:
        while len(results) < n and manager.is_running():
            out = manager.get_result(timeout=1.0)
            if out is not None and out.is_finished():
                results[out.request_id] = out
        done.set()

    sent = [0.0] * n
    trace.rows.clear()
    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        wait = t0 + reqs["send_s"][i] - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sent[i] = time.perf_counter()
        if manager.add_request(prompts[i], request_id=f"r{i}", max_new_tokens=reqs["output_len"][i],
                               record_timestamps=True, eos_token_id=-1) is None:
            raise RuntimeError(f"the engine refused request {i}: its generation thread stopped")
    done.wait(timeout=timeout_s)  # what has not finished by then is reported as not finished
    manager.stop(block=True)
    model.destroy_cached_continuous_batching_manager()
    tokens, errors = [], []
    for i in range(n):
        out = results.get(f"r{i}")
        ts = list(out.timestamps or []) if out is not None else []
        tokens.append([t - t0 for t in ts])
        errors.append("" if out is not None and out.error is None
                      else (out.error if out is not None else "not finished"))
    steps = [[r[0] - t0, r[1] - t0, *r[2:8], r[8] - t0, r[9] - t0] for r in trace.rows]
    return {"send": [s - t0 for s in sent], "tokens": tokens, "errors": errors, "steps": steps}


def bench_json(reqs: dict, got: dict, meta: dict) -> dict:
    """vLLM bench_serving's result keys (the per-request lists pdsim validate reads)."""
    ok = [i for i, e in enumerate(got["errors"]) if not e and got["tokens"][i]]
    ttft = [got["tokens"][i][0] - got["send"][i] for i in ok]
    itls = [list(np.diff(got["tokens"][i])) for i in ok]
    flat = [x for xs in itls for x in xs]
    e2e = [got["tokens"][i][-1] - got["send"][i] for i in ok]
    end = max((got["tokens"][i][-1] for i in ok), default=0.0)

    def stats(name: str, xs: list[float]) -> dict:
        a = np.asarray(xs, dtype=float) * 1e3
        if not a.size:
            return {}
        return {f"mean_{name}_ms": float(a.mean()), f"median_{name}_ms": float(np.median(a)),
                f"p90_{name}_ms": float(np.percentile(a, 90)), f"p99_{name}_ms": float(np.percentile(a, 99))}

    return {"backend": "transformers-cb", "model_id": meta["shape"], "date": meta["date"],
            "request_rate": meta["rate"], "duration": end, "completed": len(ok),
            "total_input_tokens": int(sum(reqs["input_len"][i] for i in ok)),
            "total_output_tokens": int(sum(len(got["tokens"][i]) for i in ok)),
            **stats("ttft", ttft), **stats("itl", flat), **stats("e2e_latency", e2e),
            "input_lens": [int(reqs["input_len"][i]) for i in ok],
            "output_lens": [len(got["tokens"][i]) for i in ok],
            "requested_output_lens": [int(reqs["output_len"][i]) for i in ok],
            "ttfts": ttft, "itls": [[float(x) for x in xs] for xs in itls],
            "start_times": [got["send"][i] for i in ok],
            "errors": [got["errors"][i] for i in ok],
            "pdsim_meta": {"kind": "real", **meta,
                           "not_completed": [i for i in range(len(got["errors"])) if i not in set(ok)]}}


def provenance(device: str) -> dict:
    """pdsim's machine fingerprint (specs/machine.py: CPU model and flags, cores, GPU and driver,
    library versions) and what torch says of the GPU."""
    import torch

    from pdsim.specs.machine import fingerprint  # stdlib only: the GPU machine has no simpy
    info = fingerprint(("torch", "transformers"))
    if device == "cuda":
        info["gpu_mib"] = torch.cuda.get_device_properties(0).total_memory // 2**20
        info["cuda"] = torch.version.cuda
    return info


def read_requests(path: str) -> dict:
    """A requests file (``--requests``): rate, and send_s, input_len, output_len of equal length;
    a one-line error naming the file and what is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"--requests {path}: cannot read it: {err}") from None
    keys = ("send_s", "input_len", "output_len")
    if not isinstance(doc, dict) or any(not isinstance(doc.get(k), list) for k in keys):
        raise SystemExit(f"--requests {path}: expected a JSON object with the lists {', '.join(keys)} (and rate)")
    if len({len(doc[k]) for k in keys}) != 1 or not doc["send_s"]:
        raise SystemExit(f"--requests {path}: {', '.join(keys)} must be non-empty and of one length")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    ap.add_argument("--out", type=Path, required=True, help="folder for the run files")
    ap.add_argument("--loads", default="0.3,0.8,1.3", help="fractions of the capacity ('' for none)")
    ap.add_argument("--burst", type=int, default=128, help="requests in the capacity burst")
    ap.add_argument("--seconds", type=float, default=60.0, help="arrival window of each Poisson run")
    ap.add_argument("--max-requests", type=int, default=400)
    ap.add_argument("--lens", default="128,2048,64,384", help="input min,max, output min,max (tokens)")
    ap.add_argument("--num-blocks", type=int, default=Engine.num_blocks)
    ap.add_argument("--max-batch-tokens", type=int, default=Engine.max_batch_tokens,
                    help="the step's token budget (chunked prefill size)")
    ap.add_argument("--max-requests-per-batch", type=int, default=Engine.max_requests_per_batch,
                    help="requests one step carries at most (max running requests)")
    ap.add_argument("--chunk-variant", type=int, default=0,
                    help="also replay the second load's requests with this token budget (0: no)")
    ap.add_argument("--warmup", type=int, default=8, help="requests sent at once before the runs")
    ap.add_argument("--replay", action="append", default=[],
                    help="a run file this script wrote: its requests again (a repeat), first")
    ap.add_argument("--requests", action="append", default=[],
                    help="a requests file (rate, send_s, input_len, output_len: written before the run, "
                         "so pdsim's prediction can be too): a run named by its stem, after the replays")
    ap.add_argument("--capacity", type=float, default=0.0,
                    help="req/s the loads are fractions of (0: measure it with the burst)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args(argv)
    fixed = [(Path(p).stem, read_requests(p)) for p in args.requests]  # refused before the model is built
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lo_in, hi_in, lo_out, hi_out = (int(x) for x in args.lens.split(","))
    lens = {"input_min": lo_in, "input_max": hi_in, "output_min": lo_out, "output_max": hi_out}
    engine = Engine(num_blocks=args.num_blocks, max_batch_tokens=args.max_batch_tokens,
                    max_requests_per_batch=args.max_requests_per_batch)
    args.out.mkdir(parents=True, exist_ok=True)
    prov = provenance(device)
    t_build = time.perf_counter()
    model = build_model(args.shape, device, args.seed)
    prov["model_build_s"] = time.perf_counter() - t_build
    trace = StepTrace()
    trace.install()
    rng = np.random.default_rng(args.seed)
    vocab = SHAPES[args.shape]["vocab_size"]
    summary = {"provenance": prov, "engine": engine.__dict__, "lens": lens, "runs": []}

    def one(name: str, rate: float | None, n: int, reqs: dict | None = None,
            eng: Engine = engine) -> dict:
        reqs = reqs or make_requests(rng, n, rate, lens)
        date = datetime.now(timezone.utc).isoformat(timespec="seconds")
        t = time.perf_counter()
        got = run_load(model, eng, reqs, vocab, args.seed + len(summary["runs"]), trace, args.timeout_s)
        meta = {"shape": args.shape, "date": date, "rate": rate, "engine": eng.__dict__,
                "provenance": prov, "run": name, "step_columns": StepTrace.COLUMNS}
        bench = bench_json(reqs, got, meta)
        bench["pdsim_meta"]["requests"] = reqs
        (args.out / f"{name}.json").write_text(json.dumps(bench))
        (args.out / f"{name}.steps.json").write_text(json.dumps({"columns": StepTrace.COLUMNS,
                                                                 "rows": got["steps"]}))
        row = {"run": name, "rate": rate, "requests": n, "completed": bench["completed"],
               "wall_s": time.perf_counter() - t, "steps": len(got["steps"]),
               **{k: bench.get(k) for k in ("mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms")}}
        summary["runs"].append({**row, "engine": eng.__dict__})
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(row), flush=True)
        return bench

    one("warmup", None, args.warmup)
    for path in args.replay:  # a recorded run's requests again, at their send times
        old = json.loads(Path(path).read_text())
        reqs = old["pdsim_meta"]["requests"]
        one(f"{Path(path).stem}-repeat", old["request_rate"], len(reqs["send_s"]), reqs)
    for name, reqs in fixed:  # requests fixed before the run, at their send times
        one(name, reqs.pop("rate", None), len(reqs["send_s"]), reqs)
    loads = [float(x) for x in args.loads.split(",") if x]
    if not loads:  # no Poisson runs asked for: no capacity burst either
        return 0
    if args.capacity:
        capacity = args.capacity
    else:
        burst = one("burst", None, args.burst)
        capacity = burst["completed"] / burst["duration"]
    summary["capacity_rps"] = capacity
    names: list[str] = []
    replays: list[tuple[float, dict]] = []
    for frac in loads:
        rate = frac * capacity
        n = int(min(args.max_requests, max(30, rate * args.seconds)))
        name = f"load{frac:g}"
        again = next((r for f, r in zip(names, replays) if f == name), None)
        while name in names:  # a repeated fraction replays the same requests again
            name += "r"
        names.append(name)
        reqs = again[1] if again else None
        replays.append((rate, one(name, rate, n, reqs)["pdsim_meta"]["requests"]))
        if args.chunk_variant and len(replays) == 2:  # the knee's requests under a smaller budget
            one(f"chunk{args.chunk_variant}", rate, n, replays[1][1],
                dataclasses.replace(engine, max_batch_tokens=args.chunk_variant))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
