"""Time a grouped-GEMM MoE layer (SwiGLU experts) at given tokens per expert: ``--experts``
experts on this GPU, each with t tokens: (t x hidden) @ (hidden x 2 inter), SiLU-gate, then
@ (inter x hidden), as one batched matmul (the grouped GEMM's balanced case). Rows: moe.csv,
written as ``experts`` experts, top_k 1 and ``tokens`` = experts x t, which the MoE form reads
as t assignments per expert on every expert. FP8 checkpoints (``weight_dtype: fp8``: DeepSeek)
are also timed with DeepGEMM's masked grouped FP8 GEMM (what SGLang's DeepEP MoE runs) when
``deep_gemm`` is installed, as ``fp8_block`` rows.

    python calibration/microbench/moe.py --model workloads/models/deepseek-v3.yaml --experts 8
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def main() -> None:
    ap = parser(__doc__, "workloads/models/deepseek-v3.yaml")
    ap.add_argument("--experts", type=int, default=8, help="experts on this GPU")
    args = ap.parse_args()
    import torch

    dev = device(args)
    m = yaml.safe_load(open(args.model))
    h, f = m["hidden"], m["moe"]["expert_ffn"]
    e = args.experts
    if args.dry_run:
        h, f, e = 128, 64, 2
    w1 = torch.randn(e, h, 2 * f, device=dev, dtype=torch.bfloat16)
    w2 = torch.randn(e, f, h, device=dev, dtype=torch.bfloat16)
    rows = []
    for t in ([1, 8] if args.dry_run else [1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]):
        x = torch.randn(e, t, h, device=dev, dtype=torch.bfloat16)

        def layer():
            a, b = torch.bmm(x, w1).chunk(2, dim=-1)
            return torch.bmm(torch.nn.functional.silu(a) * b, w2)

        rows.append({"dtype": "bf16", "tokens": e * t, "hidden": h, "inter": f, "experts": e, "top_k": 1, "tp": 1, "ep": 1,
                     "distribution": "balanced", "us": time_us(layer, args),
                     "note": f"{m['name']} experts, {t} tokens per expert, torch.bmm"})
        fp8 = fp8_layer(m, dev, e, t, h, f)
        if fp8 is not None:
            rows.append({"dtype": "fp8_block", "tokens": e * t, "hidden": h, "inter": f, "experts": e, "top_k": 1, "tp": 1,
                         "ep": 1, "distribution": "balanced", "us": time_us(fp8, args),
                         "note": f"{m['name']} experts, {t} tokens per expert, DeepGEMM m_grouped masked FP8"})
    print(write_rows(args, "moe", rows))


def fp8_layer(m: dict, dev, e: int, t: int, h: int, f: int):
    """Up+gate and down of ``e`` experts with ``t`` tokens each in DeepGEMM's masked grouped
    FP8 GEMM (block-scaled weights), or None without a GPU / deep_gemm / an FP8 checkpoint."""
    if m.get("weight_dtype") != "fp8" or dev.type != "cuda":
        return None
    try:
        import deep_gemm
    except ImportError:
        return None
    import torch

    def operands(k: int, n: int):
        x = torch.randn(e, t, k, device=dev).to(torch.float8_e4m3fn)
        xs = deep_gemm.get_col_major_tma_aligned_tensor(torch.ones(e, t, (k + 127) // 128, device=dev))
        w = torch.randn(e, n, k, device=dev).to(torch.float8_e4m3fn)
        ws = torch.ones(e, (n + 127) // 128, (k + 127) // 128, device=dev)
        return (x, xs), (w, ws), torch.empty(e, t, n, device=dev, dtype=torch.bfloat16)
    up, down = operands(h, 2 * f), operands(f, h)
    mask = torch.full((e,), t, device=dev, dtype=torch.int32)

    def layer():
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(up[0], up[1], up[2], mask, t)
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(down[0], down[1], down[2], mask, t)
    return layer


if __name__ == "__main__":
    main()
