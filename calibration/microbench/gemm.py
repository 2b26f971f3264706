"""Time GEMMs over the shapes a pdsim model uses: M tokens x (K -> N) for each weight matrix of
a model YAML (attention projections, dense MLP, one expert), in BF16, and in FP8 with
per-tensor scales (torch._scaled_mm) where the GPU has FP8 tensor cores. Rows: gemm.csv.

    python calibration/microbench/gemm.py --model workloads/models/llama-3.1-8b.yaml
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def shapes(model: dict) -> list[tuple[str, int, int]]:
    """(name, K, N) of the model's weight GEMMs (unsharded)."""
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
    ms = [1, 8, 64] if args.dry_run else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    fp8 = dev.type == "cuda" and torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm")
    rows = []
    for name, k, n in shapes(model):
        if args.dry_run:
            k, n = min(k, 256), min(n, 256)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        w8 = w.t().contiguous().to(torch.float8_e4m3fn).t() if fp8 else None  # column-major for _scaled_mm
        one = torch.ones((), device=dev)
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            note = f"{model['name']} {name}, torch.matmul"
            rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "us": time_us(lambda: x @ w, args), "note": note})
            if fp8:
                x8 = x.to(torch.float8_e4m3fn)
                us = time_us(lambda: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), args)
                rows.append({"dtype": "fp8", "m": m, "n": n, "k": k, "us": us, "note": f"{model['name']} {name}, torch._scaled_mm"})
    print(write_rows(args, "gemm", rows))


if __name__ == "__main__":
    main()
