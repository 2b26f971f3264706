"""Whole forward steps of the GPU session (gpu_session.py): a Llama-3.1-8B-shaped model with
random weights, all 32 layers, BF16, nothing downloaded.

transformers' ``LlamaForCausalLM(LlamaConfig(...))`` runs it (eager, SDPA attention, no CUDA
graphs); decode steps read a KV cache pre-filled with random K/V (``StaticCache``, else
``DynamicCache`` cropped back after each step), never built by running prefill. If transformers
is missing or its API refuses, the repo's own torch decoder (``TorchLlama``, also what the
CUDA-graph rows of gpu_system.py capture) runs instead; every row's note says which ran.
"""
from __future__ import annotations

# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json; workloads/models/llama-3.1-8b.yaml)
LLAMA8B = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=32, vocab=128256)
TINY = dict(hidden=128, heads=4, kv_heads=2, head_dim=32, ffn=256, layers=2, vocab=512)
KV_HEADROOM = 12 * 2**30  # activations, logits and the allocator's slack beside weights + KV


def shape(s) -> dict:
    return TINY if s.dry else LLAMA8B


def kv_bytes(c: dict, batch: int, context: int) -> int:
    """BF16 K and V of every layer for ``batch`` sequences of ``context`` tokens."""
    return batch * context * c["layers"] * 2 * c["kv_heads"] * c["head_dim"] * 2


class TorchLlama:
    """A Llama decoder in plain torch with a static KV cache: RMSNorm, fused QKV, RoPE, SDPA
    (native GQA), O, SwiGLU MLP, residuals; decode steps write K/V at a fixed position, so a
    step is capturable in a CUDA graph."""

    def __init__(self, torch, dev, c: dict, batch: int, max_ctx: int, layers: int | None = None,
                 weights: "TorchLlama | None" = None):
        """Random weights, or those of ``weights`` (another TorchLlama: only the KV cache is new)."""
        self.torch, self.c = torch, c
        h, d, hd = c["hidden"], c["head_dim"], c["heads"] * c["head_dim"]
        kvd = c["kv_heads"] * d
        dt = torch.bfloat16
        self.n = weights.n if weights is not None else (layers or c["layers"])

        def w(*s):
            return torch.randn(*s, device=dev, dtype=dt) * 0.02
        if weights is not None:
            self.L, self.head = weights.L, weights.head
        else:
            # weights as nn.Linear holds them, (out, in), applied with F.linear (cuBLAS TN): the layout
            # serving engines run; (in, out) with x @ W ran 1.22x slower at large M in this session
            self.L = [dict(n1=torch.ones(h, device=dev, dtype=dt), qkv=w(hd + 2 * kvd, h), o=w(h, hd),
                           n2=torch.ones(h, device=dev, dtype=dt), up=w(2 * c["ffn"], h), down=w(h, c["ffn"]))
                      for _ in range(self.n)]
            self.head = w(c["vocab"], h)
        self.k = [torch.randn(batch, c["kv_heads"], max_ctx, d, device=dev, dtype=dt) for _ in range(self.n)]
        self.v = [torch.randn(batch, c["kv_heads"], max_ctx, d, device=dev, dtype=dt) for _ in range(self.n)]
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        ang = torch.arange(max_ctx, device=dev, dtype=torch.float32)[:, None] * inv[None]
        self.cos, self.sin = torch.cat([ang.cos()] * 2, -1).to(dt), torch.cat([ang.sin()] * 2, -1).to(dt)

    def _norm(self, x, w):
        x32 = x.float()
        return (x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def _rope(self, x, pos):
        cos, sin = self.cos[pos], self.sin[pos]
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + self.torch.cat([-x2, x1], dim=-1) * sin

    def layer(self, x, i: int, pos, ctx: int):
        """Layer ``i`` on ``x`` (batch, n, hidden), new tokens at positions ``pos`` (tensor of n),
        attending over the cache's first ``ctx`` positions (a prefill with ctx = n is causal)."""
        F = self.torch.nn.functional
        c, L = self.c, self.L[i]
        b, n, _ = x.shape
        hd, kvd, d = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"], c["head_dim"]
        q, k, v = F.linear(self._norm(x, L["n1"]), L["qkv"]).split([hd, kvd, kvd], dim=-1)
        q = self._rope(q.view(b, n, c["heads"], d).transpose(1, 2), pos)
        k = self._rope(k.view(b, n, c["kv_heads"], d).transpose(1, 2), pos)
        self.k[i].index_copy_(2, pos, k)
        self.v[i].index_copy_(2, pos, v.view(b, n, c["kv_heads"], d).transpose(1, 2))
        a = F.scaled_dot_product_attention(q, self.k[i][:, :, :ctx], self.v[i][:, :, :ctx], is_causal=n > 1,
                                           enable_gqa=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, n, hd), L["o"])
        g, u = F.linear(self._norm(x, L["n2"]), L["up"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, L["down"])

    def mixed_step(self, chunk: "TorchLlama", xd, pos_d, ctx: int, xp, pos_p):
        """One forward of a mixed batch, as serving engines batch a prefill chunk into decode
        steps: the projections and the MLP run once over the decode tokens and the chunk's tokens
        together (``b + n`` rows), the attention runs per part: ``self``'s ``b`` sequences decode
        one token (``xd``, positions ``pos_d``) over their first ``ctx`` cached positions, and one
        sequence (``chunk``: a TorchLlama with the same weights and its own cache) prefills ``n``
        tokens (``xp``, positions ``pos_p``, causal). The LM head reads every sequence's last token."""
        torch = self.torch
        F = torch.nn.functional
        c = self.c
        b, n, h = xd.shape[0], xp.shape[1], c["hidden"]
        hd, kvd, d = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"], c["head_dim"]
        x = torch.cat([xd.reshape(b, h), xp.reshape(n, h)])
        for i in range(self.n):
            L = self.L[i]
            q, k, v = F.linear(self._norm(x, L["n1"]), L["qkv"]).split([hd, kvd, kvd], dim=-1)
            parts = []
            for cache, rows, seqs, m, pos, kv_len, causal in ((self, slice(0, b), b, 1, pos_d, ctx, False),
                                                               (chunk, slice(b, b + n), 1, n, pos_p, n, True)):
                qi = cache._rope(q[rows].view(seqs, m, c["heads"], d).transpose(1, 2), pos)
                ki = cache._rope(k[rows].view(seqs, m, c["kv_heads"], d).transpose(1, 2), pos)
                cache.k[i].index_copy_(2, pos, ki)
                cache.v[i].index_copy_(2, pos, v[rows].view(seqs, m, c["kv_heads"], d).transpose(1, 2))
                a = F.scaled_dot_product_attention(qi, cache.k[i][:, :, :kv_len], cache.v[i][:, :, :kv_len],
                                                   is_causal=causal, enable_gqa=True)
                parts.append(a.transpose(1, 2).reshape(seqs * m, hd))
            x = x + F.linear(torch.cat(parts), L["o"])
            g, u = F.linear(self._norm(x, L["n2"]), L["up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, L["down"])
        last = torch.cat([x[:b], x[b + n - 1:]])
        return F.linear(last, self.head)

    def step(self, x, pos, ctx: int):
        """All layers, then the LM head on the last token only (what an engine samples from)."""
        for i in range(self.n):
            x = self.layer(x, i, pos, ctx)
        return self.torch.nn.functional.linear(x[:, -1], self.head)


def _hf_model(torch, dev, c: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=c["hidden"], intermediate_size=c["ffn"], num_hidden_layers=c["layers"],
                      num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"],
                      vocab_size=c["vocab"], max_position_embeddings=131072)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval(), cfg


def _hf_decode(s, model, cfg, c, b: int, ctx: int, kinds=("static", "dynamic")) -> tuple[float, str]:
    """One decode step of ``b`` sequences over ``ctx`` cached random K/V: StaticCache, else
    DynamicCache cropped back to ``ctx`` after each timed step."""
    torch, dev = s.torch, s.dev
    ids = torch.randint(0, c["vocab"], (b, 1), device=dev)
    pos = torch.full((b, 1), ctx, device=dev, dtype=torch.long)
    errors = []
    slack = s.args.repeat + 8  # StaticCache writes each step one slot further on
    for kind in kinds:
        try:
            from transformers import DynamicCache, StaticCache

            cache = (StaticCache(config=cfg, max_cache_len=ctx + slack) if kind == "static"
                     else DynamicCache(config=cfg))
            for i in range(c["layers"]):
                k = torch.randn(b, c["kv_heads"], ctx, c["head_dim"], device=dev, dtype=torch.bfloat16)
                cache.update(k, torch.randn_like(k), i, {"cache_position": torch.arange(ctx, device=dev)})
                del k
            cpos = torch.tensor([ctx], device=dev)

            def step(_i=0):
                return model(input_ids=ids, position_ids=pos, cache_position=cpos, past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
            between = None if kind == "static" else (lambda: cache.crop(ctx - cache.get_seq_length()))  # negative: drop
            us = s.time_us(step, repeat=None, warmup=1, between=between)
            how = (f"StaticCache (attends over ctx + {slack} slots, masked)" if kind == "static"
                   else "DynamicCache (torch.cat copies every layer's KV each step; cropped back between steps)")
            del cache
            return us, how
        except Exception as ex:  # the next cache kind (or the torch decoder) still measures the step
            errors.append(f"{kind}: {type(ex).__name__}: {str(ex)[:120]}")
            s.free()
    raise RuntimeError("; ".join(errors))


def forward(s, out: dict) -> None:
    """Prefill at batch 1 ({128..8192} tokens, no cached prefix, LM head on the last token) and
    decode (one token per sequence, batch {1..128} x context {512, 2048, 8192} where weights +
    KV + headroom fit in the GPU's memory), median of ``--repeat`` steps (CUDA events)."""
    torch, dev = s.torch, s.dev
    c = shape(s)
    rows = out.setdefault("forward", [])
    prefills = (16, 32) if s.dry else (128, 512, 1024, 2048, 4096, 8192)
    grid = [(1, 32), (4, 64)] if s.dry else [(b, ctx) for ctx in (512, 2048, 8192) for b in (1, 8, 32, 64, 128)]
    mem = 64 * 2**30 if s.dry else torch.cuda.get_device_properties(0).total_memory
    weights = 2 * (c["layers"] * (c["hidden"] * (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
                                  + c["heads"] * c["head_dim"] * c["hidden"] + 3 * c["hidden"] * c["ffn"])
                   + 2 * c["vocab"] * c["hidden"])
    grid = [(b, ctx) for b, ctx in grid if weights + kv_bytes(c, b, ctx) + KV_HEADROOM <= mem]
    engine, why = "transformers", ""
    try:
        import transformers

        model, cfg = _hf_model(torch, dev, c)
        engine = f"transformers {transformers.__version__} LlamaForCausalLM, eager, SDPA, no CUDA graphs"
    except Exception as ex:  # the repo's own decoder below measures the same shapes; the note says why
        model, why = None, f" (transformers failed: {type(ex).__name__}: {str(ex)[:100]})"
    base = f"llama-3.1-8b shape, random BF16 weights, {c['layers']} layers"
    with torch.no_grad():
        for n in prefills:
            if not s.ok():
                continue
            if model is not None:
                ids = torch.randint(0, c["vocab"], (1, n), device=dev)
                us = s.time_us(lambda _i: model(input_ids=ids, use_cache=False, logits_to_keep=1))
                how = f"{engine}, use_cache=False, logits of the last token"
            else:
                tl = TorchLlama(torch, dev, c, 1, n)
                x = torch.randn(1, n, c["hidden"], device=dev, dtype=torch.bfloat16)
                p = torch.arange(n, device=dev)
                us = s.time_us(lambda _i: tl.step(x, p, n))
                how = f"repo TorchLlama (gpu_forward.py), eager{why}"
                del tl
            rows.append({"model": "llama-3.1-8b", "phase": "prefill", "batch": 1, "tokens": n, "context": n,
                         "layers": c["layers"], "us": us, "note": f"{base}; {how}"})
        for b, ctx in grid:
            if not s.ok():
                continue
            us = None
            if model is not None:
                try:
                    us, cache_how = _hf_decode(s, model, cfg, c, b, ctx)
                    how = f"{engine}, {cache_how}, random K/V prefill"
                except RuntimeError as ex:
                    why = f" (transformers decode failed: {str(ex)[:160]})"
            if us is None:
                tl = TorchLlama(torch, dev, c, b, ctx + 1)
                x = torch.randn(b, 1, c["hidden"], device=dev, dtype=torch.bfloat16)
                p = torch.tensor([ctx], device=dev)
                us = s.time_us(lambda _i: tl.step(x, p, ctx + 1))
                how = f"repo TorchLlama (gpu_forward.py), eager, static random K/V{why}"
                del tl
            rows.append({"model": "llama-3.1-8b", "phase": "decode", "batch": b, "tokens": b, "context": ctx,
                         "layers": c["layers"], "us": us, "note": f"{base}; {how}"})
            s.free()
