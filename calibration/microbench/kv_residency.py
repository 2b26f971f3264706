"""Time vLLM's CPU decode attention kernel against the step's KV working set (kv_residency.csv).

A decode step runs each layer's attention over that layer's KV cache, layer after layer; the
next step sweeps the same caches again. This times the kernel the same way: ``layers`` distinct
KV caches (the model's layer count), one call each in turn, repeated, at a fixed batch and a
growing context, so the working set ``layers x batch x context x KV bytes per token per layer``
runs from a few MiB to past the last-level cache. Each row is the per-layer call's time per
context token. Where the working set outgrows the cache the time per token jumps to the DRAM
rate (pdsim/calibrate/kv_residency.py fits the two levels and the cliff).

The sweep doubles the working set from ``START_MIB`` until the points stand at least ``MIN_STEP``
above the first point's level from some set on and the sweep is ``PLATEAU`` times past it and at
``MIN_TOP_MIB`` (or the ``--max-mib`` cap): a host's cliff can be soft (other tenants share the
cache), and the DRAM level is the median of the points past it. Then it bisects the cliff
(geometric midpoints) ``REFINE`` times.

Run inside the engine's venv (``cpu_profile.py measure`` calls ``sweep`` with ``--attention
vllm``); standalone:

    /work/venvs/vllm/bin/python calibration/microbench/kv_residency.py --out DIR [--model M.yaml]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling common.py

from pdsim.calibrate.kv_residency import MIN_STEP  # noqa: E402

START_MIB = 8.0
MAX_MIB = 1024.0
MIN_TOP_MIB = 512.0  # the sweep reaches at least this far (a soft cliff's DRAM level needs points past it)
PLATEAU = 4.0  # and this many times the first working set at the DRAM level
REFINE = 3
BATCH = 32
CALLS = 16  # kernel calls per timing (all layers at least twice)


def kernel(torch, ops, isa, heads: int, kvh: int, d: int, bs: int, batch: int, ctx: int, layers: int = 1,
           new: int = 1):
    """A function ``run(i)`` calling vLLM's CPU attention op (``cpu_attention_with_kv_cache``, what
    its CPU backend calls) for ``batch`` requests of ``new`` query tokens over ``ctx`` tokens of a
    paged KV cache of ``bs``-token blocks, on layer ``i mod layers`` of that many fresh caches; and
    the KV bytes of one layer's cache. (``cpu_profile.py`` times one cache: its attention.csv rows.)"""
    dt_ = torch.bfloat16
    blocks = -(-ctx // bs)
    caches = [torch.randn(batch * blocks, kvh, bs * 2, d, dtype=dt_).chunk(2, dim=2) for _ in range(layers)]
    table = torch.arange(batch * blocks, dtype=torch.int32).view(batch, blocks)
    q = torch.randn(batch * new, heads, d, dtype=dt_)
    out = torch.empty_like(q)
    qsl = torch.arange(0, batch * new + 1, new, dtype=torch.int32)
    seq = torch.full((batch,), ctx, dtype=torch.int32)
    meta = ops.cpu_attn_get_scheduler_metadata(num_reqs=batch, num_heads=heads, num_kv_heads=kvh, head_dim=d,
                                               seq_lens=seq, dtype=dt_, query_start_loc=qsl, causal=True,
                                               sliding_window_size=-1, isa=isa, enable_kv_split=False)

    def run(i: int) -> None:
        kc, vc = caches[i % layers]
        ops.cpu_attention_with_kv_cache(query=q, key_cache=kc, value_cache=vc, output=out, query_start_loc=qsl,
                                        seq_lens=seq, scale=d ** -0.5, causal=True, alibi_slopes=None,
                                        sliding_window=-1, block_table=table, softcap=0.0,
                                        scheduler_metadata=meta, s_aux=None)
    return run, batch * blocks * bs * kvh * 2 * d * 2


def sweep(m: dict, block_size: int, repeat: int, prov: dict, max_mib: float = MAX_MIB) -> list[dict]:
    """kv_residency.csv rows for model ``m`` (pdsim model YAML as a dict)."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    heads, kvh, d, layers = m["num_heads"], m["num_kv_heads"], m["head_dim"], m["num_layers"]
    isa = _get_attn_isa(torch.bfloat16, block_size, d, "auto")
    kv_tok = kvh * 2 * d * 2  # bytes per token per layer (K and V, BF16)

    def point(mib: float) -> dict:
        ctx = max(block_size, round(mib * 2**20 / (layers * BATCH * kv_tok) / block_size) * block_size)
        run, layer_bytes = kernel(torch, ops, isa, heads, kvh, d, block_size, BATCH, ctx, layers=layers)
        for i in range(2 * layers):  # warm: every cache touched, the sweep in its steady state
            run(i)
        best = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            for i in range(CALLS):
                run(i)
            best = min(best, (time.perf_counter() - t0) / CALLS)
        return {**{k: prov[k] for k in ("hardware",)}, "heads": heads, "kv_heads": kvh, "head_dim": d,
                "layers": layers, "batch": BATCH, "context": ctx, "kv_bytes_per_token": kv_tok,
                "working_set_bytes": layers * layer_bytes, "us": best * 1e6,
                "ns_per_token": best * 1e9 / (BATCH * ctx),
                "note": f"vLLM cpu_attention_with_kv_cache, isa {isa}, block {block_size}, {layers} caches in turn",
                **{k: prov[k] for k in ("source", "software", "date")}}

    rows = [point(START_MIB)]
    base = rows[0]["ns_per_token"]
    mib, first_high = START_MIB, None
    while mib < max_mib:
        mib *= 2
        rows.append(point(mib))
        high = rows[-1]["ns_per_token"] >= MIN_STEP * base
        if high and first_high is None:
            first_high = mib
        if not high:
            first_high = None
        if first_high is not None and mib >= PLATEAU * first_high and mib >= MIN_TOP_MIB:
            break  # well past the cliff: the DRAM level stands on several points, not on the transition
    if first_high is not None:  # bisect the cliff between the last low and the first high point
        lo, hi = first_high / 2, first_high
        for _ in range(REFINE):
            mid = math.sqrt(lo * hi)
            r = point(mid)
            rows.append(r)
            if r["ns_per_token"] >= MIN_STEP * base:
                hi = mid
            else:
                lo = mid
    return sorted(rows, key=lambda r: r["working_set_bytes"])


def main() -> None:
    import datetime as dt

    import yaml

    from common import write_csv
    from pdsim.specs.machine import cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write kv_residency.csv into")
    ap.add_argument("--model", default="workloads/models/tiny-llama.yaml", help="pdsim model YAML")
    ap.add_argument("--name", default="cpu-epyc-2c", help="profile key (the rows' hardware column)")
    ap.add_argument("--block-size", type=int, default=128, help="KV page (vLLM --block-size)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (vLLM's CPU worker: 1)")
    ap.add_argument("--max-mib", type=float, default=MAX_MIB, help="largest working set tried")
    args = ap.parse_args()
    if args.repeat < 1 or args.max_mib < 2 * START_MIB:
        ap.error(f"--repeat must be >= 1 and --max-mib >= {2 * START_MIB:g}")
    import torch

    torch.set_num_threads(args.threads)
    m = yaml.safe_load(open(args.model))
    prov = {"source": "measured", "hardware": args.name, "date": dt.date.today().isoformat(),
            "software": f"torch {torch.__version__}, {args.threads} thread(s), {cpu_model()}"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = sweep(m, args.block_size, args.repeat, prov, args.max_mib)
    write_csv(out / "kv_residency.csv", rows)
    for r in rows:
        print(f"{r['working_set_bytes'] / 2**20:8.1f} MiB  {r['ns_per_token']:6.1f} ns/token/layer")


if __name__ == "__main__":
    main()
