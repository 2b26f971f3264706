"""Time attention: prefill (causal, with prior context) and decode (one query over KV of
length L), with torch scaled_dot_product_attention, for a model YAML's head layout.

    python calibration/microbench/attention.py --model workloads/models/llama-3.1-8b.yaml --hardware h100
"""
from __future__ import annotations

import yaml

from common import device, parser, time_us, write_rows


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--tp", type=int, default=1, help="heads per GPU = heads / tp")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev = device(args)
    m = yaml.safe_load(open(args.model))
    heads = max(1, m["num_heads"] // args.tp)
    d = m["head_dim"]
    lens = [64, 256] if args.dry_run else [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    batches = [1, 4] if args.dry_run else [1, 8, 32, 128]
    rows = []
    for n in lens:  # prefill of n new tokens over n prior tokens
        q = torch.randn(1, heads, n, d, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(1, heads, 2 * n, d, device=dev, dtype=torch.bfloat16)
        mask = torch.ones(n, 2 * n, device=dev, dtype=torch.bool).tril(diagonal=n)
        us = time_us(lambda: F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask), args)
        rows.append({"model": m["name"], "phase": "prefill", "batch": 1, "new_tokens": n, "context": 2 * n,
                     "heads": heads, "head_dim": d, "us": us})
    for b in batches:
        for n in lens:
            q = torch.randn(b, heads, 1, d, device=dev, dtype=torch.bfloat16)
            kv = torch.randn(b, heads, n, d, device=dev, dtype=torch.bfloat16)
            us = time_us(lambda: F.scaled_dot_product_attention(q, kv, kv), args)
            rows.append({"model": m["name"], "phase": "decode", "batch": b, "new_tokens": 1, "context": n,
                         "heads": heads, "head_dim": d, "us": us})
    print(write_rows(args, "attention", rows))


if __name__ == "__main__":
    main()
