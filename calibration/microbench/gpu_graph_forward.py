"""Whole forward steps the way serving engines run them (family ``graphs_forward`` of
gpu_session.py): the repo's torch Llama decoder (gpu_forward.TorchLlama, Llama-3.1-8B shape, all
32 layers, random BF16 weights, static KV cache of random K/V) timed eager and as one CUDA-graph
replay (vLLM and SGLang capture decode steps in CUDA graphs; prefill runs eager there).

- decode: one new token per sequence at batch {1, 8, 32, 64, 128} x context {512, 2048, 8192}
  where weights + KV + headroom fit in the GPU's memory;
- prefill: {128 .. 8192} new tokens at batch 1 (causal, no cached prefix), eager and graph.

Rows go to forward.csv, the note saying ``CUDA graph replay`` or ``eager``; every point warms up
three times first (a first eager call at a new shape can be 10x slower: cuBLAS heuristics, the
caching allocator).

Family ``mixed_forward`` (``mixed_forward``): mixed steps, a prefill chunk of {128, 512, 2048}
tokens batched with {8, 32, 64} decodes at 2048 context (``TorchLlama.mixed_step``: projections
and MLP over all tokens at once, attention per part), each beside the pure decode and the chunk's
pure prefill at the same shapes, timed in the same minute; phase ``mixed`` rows carry ``batch`` =
the decodes, ``tokens`` = the chunk, ``context`` = the decodes' cached tokens.
"""
from __future__ import annotations

from gpu_forward import KV_HEADROOM, TorchLlama, kv_bytes, shape
from gpu_system import _graph

WARMUP = 3


def _weights_bytes(c: dict) -> int:
    return 2 * (c["layers"] * (c["hidden"] * (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
                               + c["heads"] * c["head_dim"] * c["hidden"] + 3 * c["hidden"] * c["ffn"])
                + c["vocab"] * c["hidden"])


def graphs_forward(s, out: dict) -> None:
    torch, dev = s.torch, s.dev
    c = shape(s)
    rows = out.setdefault("forward", [])
    mem = 64 * 2**30 if s.dry else torch.cuda.get_device_properties(0).total_memory
    prefills = (16, 32) if s.dry else (128, 512, 2048, 8192, 1024, 4096)
    grid = [(1, 32), (4, 64)] if s.dry else [(b, ctx) for ctx in (512, 2048, 8192) for b in (1, 8, 32, 64, 128)]
    grid = [(b, ctx) for b, ctx in grid if _weights_bytes(c) + kv_bytes(c, b, ctx) + KV_HEADROOM <= mem]
    base = TorchLlama(torch, dev, c, 1, 1)
    note = f"llama-3.1-8b shape, random BF16 weights, {c['layers']} layers; repo TorchLlama (gpu_forward.py), F.linear on (out, in) weights"
    with torch.no_grad():
        for phase, points in (("decode", grid), ("prefill", [(1, n) for n in prefills])):
            for b, n in points:
                if not s.ok():
                    continue
                decode = phase == "decode"
                ctx = n + 1 if decode else n  # decode: the new token's K/V after n cached ones
                model = TorchLlama(torch, dev, c, b, ctx, weights=base)
                x = torch.randn(b, 1 if decode else n, c["hidden"], device=dev, dtype=torch.bfloat16)
                pos = torch.tensor([n], device=dev) if decode else torch.arange(n, device=dev)

                def step():
                    return model.step(x, pos, ctx)
                row = {"model": "llama-3.1-8b", "phase": phase, "batch": b, "tokens": b if decode else n,
                       "context": n, "layers": c["layers"]}
                kv = "static random K/V" if decode else "no cached prefix"
                rows.append({**row, "us": s.time_us(lambda _i: step(), warmup=WARMUP), "note": f"{note}, eager, {kv}"})
                if not s.dry:  # no CUDA graphs on CPU: the eager rows check the harness
                    g = _graph(s, step)
                    rows.append({**row, "us": s.time_us(lambda _i: g.replay(), warmup=WARMUP),
                                 "note": f"{note}, CUDA graph replay, {kv}"})
                    del g
                del model, x
                s.free()


def mixed_forward(s, out: dict) -> None:
    torch, dev = s.torch, s.dev
    c = shape(s)
    rows = out.setdefault("forward", [])
    ctx = 32 if s.dry else 2048
    batches, chunks = ((2, 4), (16,)) if s.dry else ((8, 32, 64), (512, 128, 2048))
    base = TorchLlama(torch, dev, c, 1, 1)
    note = (f"llama-3.1-8b shape, random BF16 weights, {c['layers']} layers; repo TorchLlama (gpu_forward.py), "
            "F.linear on (out, in) weights")
    hd = c["hidden"]

    def timed(row, fn, what):
        rows.append({**row, "us": s.time_us(lambda _i: fn(), warmup=WARMUP), "note": f"{note}, eager, {what}"})
        if not s.dry:
            g = _graph(s, fn)
            rows.append({**row, "us": s.time_us(lambda _i: g.replay(), warmup=WARMUP),
                         "note": f"{note}, CUDA graph replay, {what}"})
            del g
    with torch.no_grad():
        for n in chunks:
            if not s.ok():
                continue
            pre = TorchLlama(torch, dev, c, 1, n, weights=base)
            xp = torch.randn(1, n, hd, device=dev, dtype=torch.bfloat16)
            pp = torch.arange(n, device=dev)
            timed({"model": "llama-3.1-8b", "phase": "prefill", "batch": 1, "tokens": n, "context": n,
                   "layers": c["layers"]}, lambda: pre.step(xp, pp, n), "no cached prefix (beside the mixed rows)")
            for b in batches:
                if not s.ok():
                    continue
                dec = TorchLlama(torch, dev, c, b, ctx + 1, weights=base)
                xd = torch.randn(b, 1, hd, device=dev, dtype=torch.bfloat16)
                pd = torch.tensor([ctx], device=dev)
                if n == chunks[0]:  # the pure decode once per batch
                    timed({"model": "llama-3.1-8b", "phase": "decode", "batch": b, "tokens": b, "context": ctx,
                           "layers": c["layers"]}, lambda: dec.step(xd, pd, ctx + 1),
                          "static random K/V (beside the mixed rows)")
                timed({"model": "llama-3.1-8b", "phase": "mixed", "batch": b, "tokens": n, "context": ctx,
                       "layers": c["layers"]}, lambda: dec.mixed_step(pre, xd, pd, ctx + 1, xp, pp),
                      f"mixed: {b} decodes over {ctx} static random K/V + one {n}-token prefill chunk "
                      "(no cached prefix); projections and MLP over all tokens at once, attention per part")
                del dec, xd
                s.free()
            del pre, xp
            s.free()
