"""Time GEMMs over the shapes pdsim's models use: M tokens x (K -> N) for each weight matrix
of a model YAML (attention projections, MLP, one expert), in BF16 (and FP8 where supported).

    python calibration/microbench/gemm.py --model workloads/models/llama-3.1-8b.yaml --hardware h100
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def shapes(model: dict) -> list[tuple[str, int, int]]:
    h, heads, d = model["hidden"], model["num_heads"], model["head_dim"]
    kv = model.get("num_kv_heads") or heads
    out = [("qkv", h, (heads + 2 * kv) * d), ("o_proj", heads * d, h)]
    if model.get("ffn"):
        out += [("mlp_up_gate", h, 2 * model["ffn"]), ("mlp_down", model["ffn"], h)]
    if model.get("moe"):
        e = model["moe"]["expert_ffn"]
        out += [("expert_up_gate", h, 2 * e), ("expert_down", e, h)]
    return out


def main() -> None:
    ap = parser(__doc__)
    args = ap.parse_args()
    import torch

    dev = device(args)
    model = yaml.safe_load(open(args.model))
    ms = [1, 8, 64] if args.dry_run else [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    rows = []
    for name, k, n in shapes(model):
        if args.dry_run:
            k, n = min(k, 256), min(n, 256)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            us = time_us(lambda: x @ w, args)
            rows.append({"model": model["name"], "op": name, "m": m, "k": k, "n": n, "dtype": "bf16", "us": us,
                         "tflops": 2 * m * k * n / us / 1e6})
    print(write_rows(args, "gemm", rows))


if __name__ == "__main__":
    main()
