"""Time GEMMs over the shapes a pdsim model uses: M tokens x (K -> N) for each weight matrix of
a model YAML (attention projections, dense MLP, one expert), in BF16, and in FP8 where the GPU
has FP8 tensor cores: per-tensor scales (torch._scaled_mm, dtype ``fp8``) and, for FP8
checkpoints (``weight_dtype: fp8``, DeepSeek's 128 x 128 block-scaled weights), DeepGEMM's
block-scaled kernel when the ``deep_gemm`` package is installed (dtype ``fp8_block``), which is
what SGLang runs for them. MLA models (DeepSeek) get their own projections: q_a (hidden ->
q_lora), q_b (q_lora -> heads x (nope + rope)), kv_a (hidden -> kv_lora + rope), kv_b (kv_lora ->
heads x (nope + v)), o (heads x v -> hidden). Rows: gemm.csv.

    python calibration/microbench/gemm.py --model workloads/models/deepseek-v3.yaml
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def shapes(model: dict) -> list[tuple[str, int, int]]:
    """(name, K, N) of the model's weight GEMMs (unsharded)."""
    h, heads, d = model["hidden"], model["num_heads"], model["head_dim"]
    if model.get("attention") == "mla":
        m = model["mla"]
        qk = m["qk_nope_dim"] + m["qk_rope_dim"]
        out = [("kv_a_proj", h, m["kv_lora_rank"] + m["qk_rope_dim"]),
               ("kv_b_proj", m["kv_lora_rank"], heads * (m["qk_nope_dim"] + m["v_head_dim"])),
               ("o_proj", heads * m["v_head_dim"], h)]
        if m.get("q_lora_rank"):
            out += [("q_a_proj", h, m["q_lora_rank"]), ("q_b_proj", m["q_lora_rank"], heads * qk)]
        else:
            out.append(("q_proj", h, heads * qk))
    else:
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
    block = block_gemm(model, dev)
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
            if block is not None:
                fn, note = block(m, n, k)
                rows.append({"dtype": "fp8_block", "m": m, "n": n, "k": k, "us": time_us(fn, args),
                             "note": f"{model['name']} {name}, {note}"})
    print(write_rows(args, "gemm", rows))


def block_gemm(model: dict, dev):
    """A factory of DeepGEMM block-scaled FP8 GEMM calls for FP8 checkpoints on a GPU with
    ``deep_gemm`` installed, else None (recorded in no row: the rows say which kernel ran)."""
    if model.get("weight_dtype") != "fp8" or dev.type != "cuda":
        return None
    try:
        import deep_gemm
    except ImportError:
        print("deep_gemm not installed: no fp8_block rows (pip install deep_gemm on Hopper)")
        return None
    import torch

    def make(m: int, n: int, k: int):
        x = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        xs = torch.ones(m, (k + 127) // 128, device=dev, dtype=torch.float32)  # per-token, per-128-channel scales
        w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
        ws = torch.ones((n + 127) // 128, (k + 127) // 128, device=dev, dtype=torch.float32)  # 128 x 128 blocks
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        xs = deep_gemm.get_col_major_tma_aligned_tensor(xs)
        return (lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((x, xs), (w, ws), out)), "DeepGEMM gemm_fp8_fp8_bf16_nt (block-scaled)"
    return make


if __name__ == "__main__":
    main()
