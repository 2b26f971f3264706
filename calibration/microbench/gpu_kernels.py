"""Kernel families of the GPU session (gpu_session.py): GEMM, grouped MoE GEMM, attention.

Each family takes the Session and a dict it fills with ``{csv name: rows}`` as it goes, so rows
measured before a failure or the end of the budget are still written.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from gemm import shapes

MODELS = Path(__file__).resolve().parents[2] / "workloads" / "models"
L2_FALLBACK = 50 * 2**20  # H100 SXM: 50 MB L2 (NVIDIA H100 datasheet), if torch does not say
M_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# coarse points first, so a budget cut leaves a coarser grid over every shape, not fewer shapes
M_ORDER = (1, 16, 256, 4096, 16384, 64, 1024, 8192, 4, 128, 2048, 2, 8, 32, 512)
# Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json): hidden 8192, 64 heads, 8 KV heads, d 128,
# ffn 28672; at TP8 each GPU holds 8 query heads, 1 KV head, 1/8 of the MLP
LLAMA70B_TP8 = (("qkv", 8192, (8 + 2 * 1) * 128), ("o_proj", 8 * 128, 8192),
                ("mlp_up_gate", 8192, 2 * 28672 // 8), ("mlp_down", 28672 // 8, 8192))


def gemm_shapes() -> list[tuple[str, str, int, int]]:
    """(model, GEMM, K, N): DeepSeek-V3 at TP1 (MLA projections, dense MLP, one expert),
    Llama-3.1-8B at TP1, Llama-3.1-70B at TP8."""
    out = []
    for name in ("deepseek-v3", "llama-3.1-8b"):
        m = yaml.safe_load(open(MODELS / f"{name}.yaml"))
        out += [(name, g, k, n) for g, k, n in shapes(m)]
    return out + [("llama-3.1-70b TP8", g, k, n) for g, k, n in LLAMA70B_TP8]


def _l2_bytes(s) -> int:
    if s.dry:
        return 2**20
    return int(getattr(s.torch.cuda.get_device_properties(0), "L2_cache_size", 0) or L2_FALLBACK)


def _calls(est_us: float, dry: bool) -> int:
    """Back-to-back calls per timed sample: enough for ~300 us, so launch gaps hide behind the queue."""
    return 1 if dry else max(1, min(50, math.ceil(300.0 / max(est_us, 1.0))))


def gemm(s, out: dict) -> None:
    """BF16 F.linear (weights N x K row-major, as nn.Linear keeps them) and FP8 per-tensor
    torch._scaled_mm (e4m3, scale 1, A row-major, B column-major as cuBLASLt needs: the same
    N x K bytes), weights cold: each call uses the next of n weight copies,
    n copies totalling at least 2x the L2 (one copy where a weight alone exceeds that)."""
    torch, dev = s.torch, s.dev
    rows = out.setdefault("gemm", [])
    l2 = _l2_bytes(s)
    ms = (1, 64) if s.dry else M_ORDER
    fp8 = hasattr(torch, "_scaled_mm") and (s.dry or torch.cuda.get_device_capability() >= (8, 9))
    one = torch.ones((), device=dev, dtype=torch.float32)
    todo = [(m, sh) for m in ms for sh in (gemm_shapes()[::6] if s.dry else gemm_shapes())]
    cache: dict = {}
    fp8_errors = 0
    for m, (model, g, k, n) in todo:
        if not s.ok():
            continue
        if s.dry:
            k, n = min(k, 256), min(n, 256)
        if (k, n) not in cache:  # every shape's copies stay: a few GB on an 80 GB GPU
            copies = max(1, min(32, math.ceil(2 * l2 / (k * n * 2))))
            # (N, K) row-major, as nn.Linear stores them: x @ W^T is the layout serving engines run
            # (F.linear; cuBLAS "TN"). Runs 1-2 used (K, N) row-major weights ("NN"), 1.22x slower at M >= 1024
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
            w8 = [w.to(torch.float8_e4m3fn).t() for w in ws] if fp8 else []  # (K, N) column-major for _scaled_mm
            cache[(k, n)] = (ws, w8)
        ws, w8 = cache[(k, n)]
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        est = 2 * m * k * n / 600e12 * 1e6 + k * n * 2 / 3e12 * 1e6 + 3
        cold = f"weights cold ({len(ws)} copies rotated, >= 2x L2)" if len(ws) > 1 else "weights cold (one copy > 2x L2)"
        us, how = s.time_kernel_us(lambda i: torch.nn.functional.linear(x, ws[i % len(ws)]), calls=_calls(est, s.dry))
        rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "us": us, "groups": 1,
                     "note": f"{model} {g}, F.linear (weights N x K row-major), {cold}, {how}"})
        if fp8:
            try:
                x8 = x.to(torch.float8_e4m3fn)
                us, how = s.time_kernel_us(lambda i: torch._scaled_mm(x8, w8[i % len(w8)], scale_a=one, scale_b=one,
                                                                      out_dtype=torch.bfloat16), calls=_calls(est / 2, s.dry))
                rows.append({"dtype": "fp8", "m": m, "n": n, "k": k, "us": us, "groups": 1,
                             "note": f"{model} {g}, torch._scaled_mm per-tensor e4m3 (cuBLASLt), {cold}, {how}"})
            except Exception as e:  # this FP8 point refused: BF16 rows go on, the log says why (3 times at most)
                fp8_errors += 1
                if fp8_errors <= 3:
                    print(f"  gemm: fp8 m={m} k={k} n={n} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)


def zipf_counts(total: int, groups: int, exponent: float, seed: int = 0) -> list[int]:
    """``total`` assignments over ``groups`` experts, expert popularity ~ 1 / rank^exponent
    (ranks shuffled), rounded so the counts add up to ``total``."""
    import random

    w = [1.0 / (r + 1) ** exponent for r in range(groups)]
    random.Random(seed).shuffle(w)
    raw = [total * x / sum(w) for x in w]
    counts = [int(c) for c in raw]
    for j in sorted(range(groups), key=lambda j: counts[j] - raw[j])[: total - sum(counts)]:
        counts[j] += 1
    return counts


MOE_EXPERTS, MOE_TOP_K, MOE_EP = 256, 8, 8  # DeepSeek-V3: 256 routed experts, top-8; EP8 -> 32 on a GPU
ZIPF = 1.0


def moe(s, out: dict) -> None:
    """DeepSeek-V3 experts (hidden 7168, expert ffn 2048, SwiGLU) on one GPU of EP8: 32 local
    experts, T assignments for a batch of T tokens (T x top-8 / EP8). Up+gate grouped GEMM, SiLU
    x gate, down grouped GEMM, BF16, with torch._grouped_mm (CUTLASS grouped GEMM; offsets = end
    row of each expert), else a per-expert torch.matmul loop; the note says which ran. Balanced:
    T/32 rows per expert; zipf: the same T rows over the 32 experts with popularity ~ 1/rank
    (skew within the GPU, same work), kept out of the balanced fit (fit = no)."""
    torch, dev = s.torch, s.dev
    rows = out.setdefault("moe", [])
    ds = yaml.safe_load(open(MODELS / "deepseek-v3.yaml"))
    h, f = ds["hidden"], ds["moe"]["expert_ffn"]
    e = MOE_EXPERTS // MOE_EP
    if s.dry:
        h, f = 128, 64
    w1 = torch.randn(e, h, 2 * f, device=dev, dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(e, f, h, device=dev, dtype=torch.bfloat16) * 0.02
    grouped = hasattr(torch, "_grouped_mm")
    why = "" if grouped else " (torch has no _grouped_mm)"
    totals = (128, 512) if s.dry else (128, 2048, 32768, 512, 8192)
    for t in totals:
        for dist in ("balanced", f"zipf{ZIPF:g}"):
            if not s.ok():
                continue
            counts = [t // e + (j < t % e) for j in range(e)] if dist == "balanced" else zipf_counts(t, e, ZIPF)
            offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
            x = torch.randn(t, h, device=dev, dtype=torch.bfloat16)

            def grouped_layer(_i=0):
                a, b = torch._grouped_mm(x, w1, offs=offs).chunk(2, dim=-1)
                return torch._grouped_mm(torch.nn.functional.silu(a) * b, w2, offs=offs)

            def loop_layer(_i=0):
                start, ys = 0, []
                for j, c in enumerate(counts):
                    a, b = (x[start:start + c] @ w1[j]).chunk(2, dim=-1)
                    ys.append((torch.nn.functional.silu(a) * b) @ w2[j])
                    start += c
                return torch.cat(ys)
            if grouped:
                try:
                    us, kernel = s.time_us(grouped_layer), "torch._grouped_mm (CUTLASS grouped GEMM)"
                except Exception as ex:  # the loop below still measures the layer; the note says why
                    grouped, why = False, f" (torch._grouped_mm failed: {type(ex).__name__})"
            if not grouped:
                us, kernel = s.time_us(loop_layer), f"per-expert torch.matmul loop{why}"
            skew = "" if dist == "balanced" else f", rows per expert max {max(counts)} min {min(counts)}"
            rows.append({"dtype": "bf16", "tokens": t, "hidden": h, "inter": f, "experts": MOE_EXPERTS,
                         "top_k": MOE_TOP_K, "tp": 1, "ep": MOE_EP, "distribution": dist, "us": us,
                         "fit": "yes" if dist == "balanced" else "no",
                         "note": (f"deepseek-v3 experts at EP8 ({e} local, {t} assignments{skew}), up+gate, "
                                  f"SiLU x gate, down, {kernel}"
                                  + ("" if dist == "balanced" else "; skewed: the balanced MoE form does not price it"))})


def _sdpa_backends(torch):
    from torch.nn.attention import SDPBackend

    names = [("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
             ("math", "MATH")]
    return [(n, getattr(SDPBackend, a)) for n, a in names if hasattr(SDPBackend, a)]


def _point(s, run, what: str, calls: int = 1) -> tuple[float, str] | None:
    """One attention point, or None (logged) when no backend runs it (e.g. out of memory)."""
    try:
        return _first_backend(s, run, calls)
    except RuntimeError as ex:
        print(f"  attention: {what} skipped: {str(ex)[:300]}", flush=True)
        s.free()
        return None


def _first_backend(s, run, calls: int = 1) -> tuple[float, str]:
    """Time ``run`` under the first SDPA backend that accepts it (flash, cudnn, efficient, math)."""
    from torch.nn.attention import sdpa_kernel

    errors = []
    for name, backend in _sdpa_backends(s.torch):
        try:
            with sdpa_kernel([backend]):
                us, how = s.time_kernel_us(run, calls=calls)
                return us, f"{name}, {how}"
        except RuntimeError as ex:  # this backend refuses the shape/mask: try the next one
            errors.append(f"{name}: {str(ex)[:80]}")
    raise RuntimeError("no SDPA backend ran: " + "; ".join(errors))


def attention(s, out: dict) -> None:
    """Llama-3.1-8B heads (32 query, 8 KV, d 128), BF16, torch SDPA with native GQA
    (enable_gqa). Prefill: n new tokens, causal, after a cached prefix of 0 or n tokens (lower-
    right causal mask: query i sees prefix + i + 1 keys). Decode: one query per sequence over
    its context. The note names the backend that ran (first of flash, cudnn, efficient, math)."""
    torch, dev = s.torch, s.dev
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    rows = out.setdefault("attention", [])
    heads, kvh, d = (4, 2, 32) if s.dry else (32, 8, 128)
    dt = torch.bfloat16
    news = (64, 128) if s.dry else (512, 2048, 8192, 16384, 1024, 4096)
    for n in news:
        for prefix in (0, n):
            if not s.ok():
                continue
            q = torch.randn(1, heads, n, d, device=dev, dtype=dt)
            k = torch.randn(1, kvh, prefix + n, d, device=dev, dtype=dt)
            v = torch.randn(1, kvh, prefix + n, d, device=dev, dtype=dt)
            if prefix:
                mask = causal_lower_right(n, prefix + n)
                run = lambda _i: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # noqa: E731
            else:
                run = lambda _i: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
            est = 4 * heads * d * n * (prefix + n / 2) / 4e14 * 1e6 + 5
            timed = _point(s, run, f"prefill n={n} prefix={prefix}", calls=_calls(est, s.dry))
            del q, k, v
            if timed is None:
                continue
            us, be = timed
            rows.append({"phase": "prefill", "batch": 1, "new_tokens": n, "context": prefix + n, "heads": heads,
                         "kv_heads": kvh, "head_dim": d, "us": us,
                         "note": f"llama-3.1-8b TP1, causal, cached prefix {prefix}, torch SDPA backend {be}, GQA native"})
    grid = [(1, 64), (4, 256)] if s.dry else [(b, c) for c in (1024, 4096, 16384) for b in (1, 8, 32, 128)]
    for b, c in grid:
        if not s.ok():
            continue
        q = torch.randn(b, heads, 1, d, device=dev, dtype=dt)
        k = torch.randn(b, kvh, c, d, device=dev, dtype=dt)
        v = torch.randn(b, kvh, c, d, device=dev, dtype=dt)
        timed = _point(s, lambda _i: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                       f"decode batch={b} context={c}", calls=_calls(b * c * kvh * d * 4 / 3e12 * 1e6 + 3, s.dry))
        del q, k, v
        if timed is None:
            continue
        us, be = timed
        rows.append({"phase": "decode", "batch": b, "new_tokens": 1, "context": c, "heads": heads, "kv_heads": kvh,
                     "head_dim": d, "us": us,
                     "note": f"llama-3.1-8b TP1, one query per sequence, torch SDPA backend {be}, GQA native"})
