"""Column order of each calibration data file (calibration/data/*.csv).

Standard library only, so the microbenchmarks (calibration/microbench) can write rows in this
order on a GPU machine that has torch but not pdsim's own dependencies (pandas, scipy, ...).
``pdsim.calibrate.data`` loads and checks the files; calibration/data/README.md gives the units.
"""
from __future__ import annotations

PROVENANCE = ("source", "hardware", "software", "date")

SCHEMAS: dict[str, tuple[str, ...]] = {
    "gemm": ("hardware", "dtype", "m", "n", "k", "us"),
    "attention": ("hardware", "phase", "batch", "new_tokens", "context", "heads", "kv_heads", "head_dim", "us"),
    "mla": ("hardware", "phase", "batch", "new_tokens", "context", "heads", "kv_lora", "rope_dim", "nope_dim", "v_dim", "us"),
    "moe": ("hardware", "dtype", "tokens", "hidden", "inter", "experts", "top_k", "tp", "ep", "distribution", "us"),
    "deepep_low_latency": ("hardware", "ep_size", "gpus_per_node", "tokens_per_rank", "hidden", "top_k", "experts",
                           "dispatch_us", "combine_us"),
    "deepep_normal": ("hardware", "ep_size", "gpus_per_node", "tokens_per_rank", "hidden", "top_k", "experts", "sms",
                      "leg", "dispatch_gbps", "combine_gbps", "dispatch_us", "combine_us"),
    "nccl_collectives": ("hardware", "op", "gpus", "nodes", "dtype", "message_bytes", "us", "busbw_gbps"),
    "mooncake_transfer": ("hardware", "nics", "nic_gbit", "bytes", "ms", "mode", "regime"),
    "forward": ("hardware", "model", "phase", "batch", "tokens", "context", "layers", "us"),
    "kv_transfer_chunks": ("hardware", "backend", "link", "chunks", "chunk_bytes", "bytes", "nics", "nic_gbit", "ms"),
    "step": ("hardware", "model", "phase", "tp", "dp", "ep", "batch", "tokens", "context", "tbo", "mtp_draft",
             "ms"),
    # copies: bytes = size of the copy, traffic_bytes = bytes read + written in HBM (d2d: 2x) or
    # crossing PCIe (h2d/d2h: 1x); gbps = traffic_bytes / us / 1e3
    "memcopy": ("hardware", "kind", "bytes", "traffic_bytes", "us", "gbps"),
    # host-side costs: per-kernel launch, and eager vs CUDA-graph time of a decoder layer / decode step
    "launch": ("hardware", "kind", "model", "batch", "context", "layers", "kernels", "us"),
    # two-batch-overlap parts on one GPU (calibration/microbench/gpu_overlap.py): a kernel with
    # ``held_sms`` carved out of its SM count, alone (beside none) or beside a communication proxy
    # on 24 SMs; a proxy's rows give its HBM rate alone (proxy_gbps) and its time beside a kernel
    "overlap": ("hardware", "kernel", "shape", "held_sms", "beside", "proxy_gbps", "us"),
}
# measurement columns a file may have beyond its schema, with the value a missing cell means
EXTRA: dict[str, dict[str, object]] = {
    "gemm": {"groups": 1},  # grouped GEMM: ``groups`` weight matrices, M rows each
    "step": {"redundant_experts": 0, "kv_dtype": "bf16", "accept_len": float("nan")},
    "mooncake_transfer": {"chunks": float("nan")},  # work requests per sender (fit_comm.fit_mooncake)
}
OPTIONAL = ("fit", "note")


def columns(name: str) -> list[str]:
    """Column order of ``<name>.csv``: measurement columns, fit/note, provenance."""
    return list(SCHEMAS[name]) + list(EXTRA.get(name, {})) + list(OPTIONAL) + ["source", "software", "date"]


