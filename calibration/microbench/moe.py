"""Time a grouped-GEMM MoE layer (SwiGLU experts) at given tokens per expert: ``--experts``
experts on this GPU, each with t tokens: (t x hidden) @ (hidden x 2 inter), SiLU-gate, then
@ (inter x hidden), as one batched matmul (the grouped GEMM's balanced case). Rows: moe.csv,
written as ``experts`` experts, top_k 1 and ``tokens`` = experts x t, which the MoE form reads
as t assignments per expert on every expert.

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
    print(write_rows(args, "moe", rows))


if __name__ == "__main__":
    main()
