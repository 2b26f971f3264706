"""Large-M GEMM / fused-MoE efficiency is a property of each GPU's SMs (calibrate/fit.py
``_per_sm``), and multi-node all-reduce bandwidth follows each system's own links
(``_derive_internode``).

Figures and sources:
- Ant Group, LMSYS blog 2025-09-26 "Together with SGLang: Best Practices for Serving
  DeepSeek-R1 on H20-96G": TP8 prefill on one H20 node at 4,096-token prompts, 16.5k input
  tokens per second per node (the physics review found pdsim at 8.1k: the H100's fused-MoE
  fraction of peak carried to H20);
- H20: 296 TFLOP/s FP8 dense, 78 SMs; H100: 1,979 TFLOP/s, 132 SMs (DOMAIN.md s2, profiles);
- H800 SuperPod NCCL all-reduce: 213 GB/s bus bandwidth in one node, 171 across two
  (DOMAIN.md s2, seed measurement).
"""
from __future__ import annotations

import pytest

from pdsim.specs.scenario import EngineSpec, GroupSpec

from ._deepseek import DSR1, H20, H100, H800, prefill_s


def test_h20_tp8_prefill_matches_ant_groups_node_throughput():
    g = GroupSpec(nodes=1, engine=EngineSpec(kv_cache_dtype="fp8", moe_runner="triton", cuda_graph_max_bs=0))
    tok_s_node = 8192 / prefill_s(H20, DSR1, g, 8192, 4096)
    assert tok_s_node == pytest.approx(16_500, rel=0.15)


def test_fused_moe_is_tensor_bound_on_h20_and_not_on_h100():
    """Per SM, H20's FP8 tensor cores (296/78 = 3.8 TFLOP/s) are slower than the rate the fused
    MoE's per-tile CUDA-core work sustains on H100 (0.235 x 1979/132 = 3.5): the H20 kernel runs
    at its tensor-core fraction, far above H100's 0.235; H800 has H100's SMs and keeps it."""
    h100 = H100.calibration["moe_fp8_block"]["eff"]
    h20 = H20.calibration["moe_fp8_block"]["eff"]
    assert h20 > 2.5 * h100
    assert h20 <= H20.calibration["gemm_bf16"]["eff"] + 1e-9  # never beyond the tensor-bound fraction
    assert H800.calibration["moe_fp8_block"]["eff"] == pytest.approx(h100, rel=0.1)


def test_internode_allreduce_follows_each_systems_links():
    """Hierarchical NCCL: min(in-node bus bandwidth x H800's two-node ratio 171/213, the NIC leg
    2 x 8 x NIC/GPU x nic efficiency). H20 no longer takes A100's 17.5 GB/s, H100/H200 no
    longer H800's NVLink-bound 171."""
    ratio = 171.0 / 213.0
    for hw in (H20, H100):
        ar = hw.calibration["allreduce"]
        nic = 2 * hw.gpus_per_node * hw.nic_bytes_per_gpu * hw.efficiency.nic / 1e9
        assert ar["internode_gbps"] == pytest.approx(min(ar["intranode_gbps"] * ratio, nic), rel=1e-6)
    assert H20.calibration["allreduce"]["internode_gbps"] > 10 * 17.5
    assert H100.calibration["allreduce"]["internode_gbps"] > 171.0
