"""Time attention with torch scaled_dot_product_attention for a model YAML's head layout:
prefill of ``n`` new tokens over ``prior`` cached tokens (causal), and decode (one query per
sequence over KV of length L). Rows: attention.csv (phase prefill / decode).

MLA models (DeepSeek) are timed as SGLang runs them and written to mla.csv: prefill without a
cached prefix as MHA on the non-absorbed heads (queries and keys of nope + rope = 192 dims,
values of 128), decode weight-absorbed: every head's query attends over one shared latent of
kv_lora + rope = 576 dims and reads values of kv_lora = 512 (MQA over the latent, FlashMLA's
shape). BF16 KV.

    python calibration/microbench/attention.py --model workloads/models/llama-3.1-8b.yaml --tp 1
    python calibration/microbench/attention.py --model workloads/models/deepseek-v3.yaml --tp 8
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
    if m.get("attention") == "mla":
        print(write_rows(args, "mla", mla_rows(m, args, dev)))
        return
    heads = max(1, m["num_heads"] // args.tp)
    kvh = max(1, (m.get("num_kv_heads") or m["num_heads"]) // args.tp)
    d = m["head_dim"]
    dt = torch.bfloat16
    lens = [64, 256] if args.dry_run else [512, 1024, 2048, 4096, 8192, 16384]
    priors = [0, 128] if args.dry_run else [0, 4096]
    batches = [1, 4] if args.dry_run else [1, 8, 32, 128, 512]
    rows = []
    for prior in priors:
        for n in lens:  # prefill of n new tokens after `prior` cached ones: query i sees prior + i + 1 keys
            q = torch.randn(1, heads, n, d, device=dev, dtype=dt)
            k = torch.randn(1, kvh, prior + n, d, device=dev, dtype=dt)
            mask = torch.ones(n, prior + n, device=dev, dtype=torch.bool).tril(diagonal=prior)
            us = time_us(lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=kvh != heads), args)
            rows.append({"phase": "prefill", "batch": 1, "new_tokens": n, "context": prior + n, "heads": heads,
                         "kv_heads": kvh, "head_dim": d, "us": us, "note": f"{m['name']} TP{args.tp}, torch SDPA"})
    for b in batches:
        for n in lens:
            q = torch.randn(b, heads, 1, d, device=dev, dtype=dt)
            k = torch.randn(b, kvh, n, d, device=dev, dtype=dt)
            us = time_us(lambda: F.scaled_dot_product_attention(q, k, k, enable_gqa=kvh != heads), args)
            rows.append({"phase": "decode", "batch": b, "new_tokens": 1, "context": n, "heads": heads, "kv_heads": kvh,
                         "head_dim": d, "us": us, "note": f"{m['name']} TP{args.tp}, torch SDPA"})
    print(write_rows(args, "attention", rows))


def mla_rows(m: dict, args, dev) -> list[dict]:
    import torch
    import torch.nn.functional as F

    ml = m["mla"]
    heads = max(1, m["num_heads"] // args.tp)
    nope, rope, vd, lora = ml["qk_nope_dim"], ml["qk_rope_dim"], ml["v_head_dim"], ml["kv_lora_rank"]
    if args.dry_run:
        heads, nope, rope, vd, lora = 4, 16, 8, 16, 32
    dt = torch.bfloat16
    lens = [64, 256] if args.dry_run else [512, 1024, 2048, 4096, 8192, 16384]
    batches = [1, 4] if args.dry_run else [1, 8, 32, 128, 512]
    shape = {"heads": heads, "kv_lora": lora, "rope_dim": rope, "nope_dim": nope, "v_dim": vd}
    rows = []
    for n in lens:  # prefill as MHA on the non-absorbed heads (SGLang without a cached prefix)
        q = torch.randn(1, heads, n, nope + rope, device=dev, dtype=dt)
        k = torch.randn(1, heads, n, nope + rope, device=dev, dtype=dt)
        v = torch.randn(1, heads, n, vd, device=dev, dtype=dt)
        us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args)
        rows.append({"phase": "prefill", "batch": 1, "new_tokens": n, "context": n, **shape, "us": us,
                     "note": f"{m['name']} TP{args.tp}, MHA (non-absorbed), torch SDPA"})
    for b in batches:
        for n in lens:  # decode, weight-absorbed: MQA over the latent (one KV head of lora + rope)
            q = torch.randn(b, heads, 1, lora + rope, device=dev, dtype=dt)
            k = torch.randn(b, 1, n, lora + rope, device=dev, dtype=dt)
            v = k[..., :lora]
            us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), args)
            rows.append({"phase": "decode", "batch": b, "new_tokens": 1, "context": n, **shape, "us": us,
                         "note": f"{m['name']} TP{args.tp}, absorbed MLA decode (MQA over the latent), torch SDPA"})
    return rows


if __name__ == "__main__":
    main()
