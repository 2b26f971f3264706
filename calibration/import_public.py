"""Import published kernel measurements (other than AIConfigurator) into calibration/data/*.csv.

Two sources, each row with provenance:

- DeepGEMM README at commit a6d97a1 (2025-02-25, deepseek-ai/DeepGEMM, MIT): FP8 block-scaled
  GEMM throughput on H800 SXM5 for the DeepSeek-V3 shapes (dense, grouped contiguous, grouped
  masked). The README gives TFLOPS; a row's time is 2 M N K groups / TFLOPS (its GB/s column
  agrees with the bytes of gemm_table to 1%). The table is restated below, not parsed.
- Vidur (microsoft/vidur, MIT) profiling data, A100 80GB (SXM, DGX A100):
  data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv (HEAD 7d47513) for the
  BF16 projection GEMMs at TP1 and TP2 (median ms); data/profiling/a100/attention.csv
  (commit e2d00e9) for FlashAttention prefill/decode at Llama-2-70B TP2 head layouts;
  data/profiling/network/a100_dgx/all_reduce.csv (HEAD) for NCCL all-reduce (``size`` is
  bytes: an 8-GPU 64 MB all-reduce then runs at 172 GB/s bus bandwidth, the DGX A100 range).

    git clone https://github.com/microsoft/vidur /tmp/vidur
    python calibration/import_public.py --vidur /tmp/vidur

Rows of other sources already in a CSV are kept; rows whose source starts with one of this
script's prefixes are replaced.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pdsim.calibrate import data  # noqa: E402

DEEPGEMM = "DeepGEMM README @a6d97a1 (deepseek-ai/DeepGEMM, MIT)"
VIDUR = "Vidur profiling data (microsoft/vidur, MIT)"
VIDUR_HEAD = "7d47513"
VIDUR_ATTN = "e2d00e9"

# (groups, M per group, N, K, TFLOPS, layout) -- DeepGEMM README "Performance", H800, NVCC 12.8
DEEPGEMM_ROWS = [
    (1, 64, 2112, 7168, 206, "normal"), (1, 64, 24576, 1536, 289, "normal"), (1, 64, 32768, 512, 219, "normal"),
    (1, 64, 7168, 16384, 336, "normal"), (1, 64, 4096, 7168, 287, "normal"), (1, 64, 7168, 2048, 295, "normal"),
    (1, 128, 2112, 7168, 352, "normal"), (1, 128, 24576, 1536, 535, "normal"), (1, 128, 32768, 512, 358, "normal"),
    (1, 128, 7168, 16384, 645, "normal"), (1, 128, 4096, 7168, 533, "normal"), (1, 128, 7168, 2048, 510, "normal"),
    (1, 4096, 2112, 7168, 1058, "normal"), (1, 4096, 24576, 1536, 990, "normal"), (1, 4096, 32768, 512, 590, "normal"),
    (1, 4096, 7168, 16384, 1358, "normal"), (1, 4096, 4096, 7168, 1304, "normal"), (1, 4096, 7168, 2048, 1025, "normal"),
    (4, 8192, 4096, 7168, 1297, "contiguous"), (4, 8192, 7168, 2048, 1099, "contiguous"),
    (8, 4096, 4096, 7168, 1288, "contiguous"), (8, 4096, 7168, 2048, 1093, "contiguous"),
    (1, 1024, 4096, 7168, 1233, "masked"), (1, 1024, 7168, 2048, 925, "masked"),
    (2, 512, 4096, 7168, 1040, "masked"), (2, 512, 7168, 2048, 916, "masked"),
    (4, 256, 4096, 7168, 932, "masked"), (4, 256, 7168, 2048, 815, "masked"),
]


def deepgemm_rows() -> pd.DataFrame:
    rows = []
    for g, m, n, k, tflops, layout in DEEPGEMM_ROWS:
        us = 2.0 * g * m * n * k / (tflops * 1e12) * 1e6
        rows.append({"hardware": "h800", "dtype": "fp8_block", "m": m, "n": n, "k": k, "groups": g, "us": round(us, 4),
                     "note": f"{layout} layout, {tflops} TFLOPS in the README",
                     "source": f"{DEEPGEMM}, Performance table (H800 SXM5)", "software": "DeepGEMM, NVCC 12.8",
                     "date": "2025-02-25"})
    return pd.DataFrame(rows)


def _git_show(repo: Path, commit: str, path: str) -> pd.DataFrame:
    out = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=True).stdout
    return pd.read_csv(io.BytesIO(out))


TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]


def vidur_gemm_rows(repo: Path) -> pd.DataFrame:
    """Llama-3-8B projection GEMMs on A100 80GB at TP1 and TP2 (hidden 4096, 32/8 heads x 128,
    FFN 14336, gated: up+gate fused)."""
    path = "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
    d = _git_show(repo, "HEAD", path)
    rows = []
    for tp in (1, 2):
        s = d[(d["num_tensor_parallel_workers"] == tp) & d["num_tokens"].isin(TOKENS)]
        shapes = {"attn_pre_proj": (4096, (32 + 2 * 8) * 128 // tp), "attn_post_proj": (32 * 128 // tp, 4096),
                  "mlp_up_proj": (4096, 2 * 14336 // tp), "mlp_down_proj": (14336 // tp, 4096)}
        for op, (k, n) in shapes.items():
            med = s.groupby("num_tokens")[f"time_stats.{op}.median"].median()
            for m, ms in med.items():
                rows.append({"hardware": "a100-80gb", "dtype": "bf16", "m": int(m), "n": n, "k": k, "groups": 1,
                             "us": round(float(ms) * 1e3, 3), "note": f"Llama-3-8B {op} TP{tp}",
                             "source": f"{VIDUR} {path} @{VIDUR_HEAD} (median)", "software": "vLLM-based Vidur profiler, PyTorch",
                             "date": "2024-11-19 (commit)"})
    return pd.DataFrame(rows)


def vidur_attention_rows(repo: Path) -> pd.DataFrame:
    """FlashAttention on A100 80GB, Llama-2-70B at TP2: 32 query / 4 KV heads of 128 per GPU."""
    path = "data/profiling/a100/attention.csv"
    d = _git_show(repo, VIDUR_ATTN, path)
    rows = []
    pf = d[d["is_prefill"] & d["prefill_chunk_size"].isin([512, 1024, 2048, 4096]) & d["kv_cache_size"].isin([0, 1024, 2048, 4096])]
    for (n, prior), r in pf.groupby(["prefill_chunk_size", "kv_cache_size"]):
        rows.append(dict(phase="prefill", batch=1, new_tokens=int(n), context=int(n + prior),
                         us=float(r["time_stats.attn_prefill.median"].median()) * 1e3))
    dc = d[~d["is_prefill"] & d["batch_size"].isin([1, 8, 32, 64, 128]) & d["kv_cache_size"].isin([512, 1024, 2048, 4096])]
    for (b, c), r in dc.groupby(["batch_size", "kv_cache_size"]):
        rows.append(dict(phase="decode", batch=int(b), new_tokens=1, context=int(c),
                         us=float(r["time_stats.attn_decode.median"].median()) * 1e3))
    out = pd.DataFrame(rows)
    out = out.assign(hardware="a100-80gb", heads=32, kv_heads=4, head_dim=128, us=out["us"].round(3),
                     note="Llama-2-70B TP2, FlashAttention (vLLM)", source=f"{VIDUR} {path} @{VIDUR_ATTN} (median)",
                     software="vLLM-based Vidur profiler, FlashAttention", date="2024-05-08 (commit)")
    return out[out["us"] > 0]


def vidur_allreduce_rows(repo: Path) -> pd.DataFrame:
    """NCCL all-reduce on DGX A100 (8 GPUs/node, NVSwitch; 2 nodes over 8x 200 Gb/s HDR). The
    collection's times carry ~30-40 us of host timing overhead (a 2-GPU 2 KB all-reduce takes
    43 us, NCCL's is ~7 us on NVLink), so its latencies are not fitted: timed rows of 4 and 16
    MB are kept as ``fit: no`` and the 64 MB rows (where the overhead is < 10%) become bus
    bandwidths, inside a node and across 2 nodes."""
    path = "data/profiling/network/a100_dgx/all_reduce.csv"
    d = _git_show(repo, "HEAD", path)
    d = d[d["rank"] == 0]
    rows = []
    sizes = [4 * 2**20, 16 * 2**20, 64 * 2**20]
    for n in (2, 4, 8):
        s = d[(d["num_workers"] == n) & (d["devices_per_node"] == n)]
        for size in sizes:
            near = s.iloc[(s["size"] - size).abs().argsort()[:1]]
            b = float(near["size"].iloc[0])
            us = float(near["time_stats.all_reduce.median"].iloc[0]) * 1e3
            busbw = 2 * (n - 1) / n * b / us / 1e3
            if size == sizes[-1]:
                rows.append(dict(gpus=n, nodes=1, message_bytes=np.nan, us=np.nan, busbw_gbps=busbw, fit="",
                                 note=f"{b / 2**20:.0f} MB all-reduce as bus bandwidth"))
            else:
                rows.append(dict(gpus=n, nodes=1, message_bytes=b, us=us, busbw_gbps=busbw, fit="no",
                                 note="host timing overhead (~30-40 us) in this collection: not fitted"))
    s = d[(d["num_workers"] == 16) & (d["devices_per_node"] == 8)]
    big = s.iloc[(s["size"] - 64 * 2**20).abs().argsort()[:1]]
    b, us = float(big["size"].iloc[0]), float(big["time_stats.all_reduce.median"].iloc[0]) * 1e3
    rows.append(dict(gpus=16, nodes=2, message_bytes=np.nan, us=np.nan, busbw_gbps=2 * 15 / 16 * b / us / 1e3, fit="",
                     note="2-node 64 MB all-reduce as bus bandwidth"))
    out = pd.DataFrame(rows)
    out = out.assign(hardware="a100-80gb", op="all_reduce", dtype="bytes", source=f"{VIDUR} {path} @{VIDUR_HEAD} (median)",
                     software="NCCL via PyTorch (Vidur profiler)", date="2024-11-19 (commit)")
    out["busbw_gbps"] = out["busbw_gbps"].round(2)
    return out


def merge(name: str, new: pd.DataFrame, prefixes: tuple[str, ...]) -> Path:
    old = pd.read_csv(data.data_dir() / f"{name}.csv")
    keep = old[~old["source"].astype(str).str.startswith(prefixes)]
    out = pd.concat([keep, new], ignore_index=True)
    for col, default in data.EXTRA.get(name, {}).items():  # cells older rows lack: the default
        out[col] = out[col].fillna(default).astype(type(default)) if col in out else default
    return data.write(name, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, help="a git checkout of microsoft/vidur")
    args = ap.parse_args()
    gemm = [deepgemm_rows()]
    if args.vidur:
        gemm.append(vidur_gemm_rows(args.vidur))
        print(merge("attention", vidur_attention_rows(args.vidur), (VIDUR,)))
        print(merge("nccl_collectives", vidur_allreduce_rows(args.vidur), (VIDUR,)))
    print(merge("gemm", pd.concat(gemm, ignore_index=True), (DEEPGEMM, VIDUR) if args.vidur else (DEEPGEMM,)))


if __name__ == "__main__":
    main()
