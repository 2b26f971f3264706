"""Time a whole decoder forward built from a pdsim model YAML with random weights (nothing is
downloaded): ``--layers`` layers of attention (SDPA; MLA models run as MHA) + a dense SwiGLU MLP
(MoE models: one of width top_k x expert_ffn, the active parameters), at prefill and decode
shapes. Rows: forward.csv (not fitted: a check of the step prices against a whole forward).
Standard (GQA/MHA) attention only: an MLA model (DeepSeek) is refused, because a forward built
from standard attention and BF16 weights is not what SGLang runs for it (absorbed MLA, FP8
block-scaled weights); gemm.py, attention.py and moe.py time its real kernel shapes.

    python calibration/microbench/forward.py --model workloads/models/llama-3.1-8b.yaml --layers 4 --hardware h100
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev = device(args)
    m = yaml.safe_load(open(args.model))
    if m.get("attention") == "mla":
        raise SystemExit(f"error: {args.model}: attention: mla: a standard-attention forward is not what SGLang runs "
                         "for MLA models; time their kernels with gemm.py, attention.py and moe.py")
    h, heads, d = m["hidden"], m["num_heads"], m["head_dim"]
    kvh = m.get("num_kv_heads") or heads
    ffn = m.get("ffn") or m["moe"]["expert_ffn"] * m["moe"]["top_k"]
    if args.dry_run:
        h, heads, d, kvh, ffn = 128, 4, 32, 2, 256
    dt = torch.bfloat16
    layers = [dict(qkv=torch.randn(h, (heads + 2 * kvh) * d, device=dev, dtype=dt) * 0.02,
                   o=torch.randn(heads * d, h, device=dev, dtype=dt) * 0.02,
                   up=torch.randn(h, 2 * ffn, device=dev, dtype=dt) * 0.02,
                   down=torch.randn(ffn, h, device=dev, dtype=dt) * 0.02) for _ in range(args.layers)]

    def forward(x, ctx):
        b, n, _ = x.shape
        for L in layers:
            q, k, v = (x @ L["qkv"]).split([heads * d, kvh * d, kvh * d], dim=-1)
            q = q.view(b, n, heads, d).transpose(1, 2)
            k = k.view(b, n, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, dim=1)
            v = v.view(b, n, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, dim=1)
            if ctx is not None:
                k, v = torch.cat([ctx[0], k], dim=2), torch.cat([ctx[1], v], dim=2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=ctx is None)
            x = x + a.transpose(1, 2).reshape(b, n, heads * d) @ L["o"]
            g, u = (x @ L["up"]).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ L["down"]
        return x

    rows = []
    with torch.no_grad():
        for n in ([32] if args.dry_run else [512, 2048, 8192]):
            x = torch.randn(1, n, h, device=dev, dtype=dt)
            us = time_us(lambda: forward(x, None), args)
            rows.append({"model": m["name"], "phase": "prefill", "batch": 1, "tokens": n, "context": n,
                         "layers": args.layers, "us": us, "note": "random weights, dense layers, torch SDPA"})
        for b, c in ([(2, 64)] if args.dry_run else [(1, 1024), (32, 1024), (128, 1024), (32, 8192)]):
            x = torch.randn(b, 1, h, device=dev, dtype=dt)
            ctx = (torch.randn(b, heads, c, d, device=dev, dtype=dt), torch.randn(b, heads, c, d, device=dev, dtype=dt))
            us = time_us(lambda: forward(x, ctx), args)
            rows.append({"model": m["name"], "phase": "decode", "batch": b, "tokens": b, "context": c,
                         "layers": args.layers, "us": us, "note": "random weights, dense layers, torch SDPA"})
    print(write_rows(args, "forward", rows))


if __name__ == "__main__":
    main()
