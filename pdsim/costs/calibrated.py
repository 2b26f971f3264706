"""Calibrated step cost: the roofline's physics with fitted communication constants.

Same formula as RooflineStepCost (see roofline.py) except:
- MoE all-to-all uses the fitted DeepEP models (deepep.py): low-latency kernels for decode
  batches, normal kernels for prefill, per ``deepep_mode``;
- TP all-reduce uses the measured NCCL bus bandwidth (calibration/data/nccl_allreduce.csv)
  inside a node or across nodes;
- GEMM efficiency eff x M/(M + m_half) per weight dtype and prefill-attention efficiency and
  kernel latency are fitted to measured kernel tables (calibration/data/gemm.csv,
  attention.csv: SGLang 0.5.14 on H100/H200, from AIConfigurator; other GPUs derived).
"""
from __future__ import annotations

from .deepep import ll_time_s, normal_time_s
from .roofline import RooflineStepCost


class CalibratedStepCost(RooflineStepCost):
    name = "calibrated"

    def __init__(self, hw, model, group, role, nic_gbit=None):
        super().__init__(hw, model, group, role, nic_gbit=nic_gbit)
        cal = hw.calibration
        self.ll_d = cal.get("deepep_ll_dispatch")
        self.ll_c = cal.get("deepep_ll_combine")
        self.nm_d = cal.get("deepep_normal_dispatch")
        self.nm_c = cal.get("deepep_normal_combine")
        scale = (nic_gbit / hw.node.nic_gbit) if nic_gbit else 1.0  # what-if fabric: RDMA leg scales
        if scale != 1.0:
            for name in ("ll_d", "ll_c", "nm_d", "nm_c"):
                p = getattr(self, name)
                if p is not None:
                    setattr(self, name, dict(p, rdma_gbps=float(p["rdma_gbps"]) * scale))
        gemm = cal.get(f"gemm_{model.weight_dtype}") or cal.get("gemm_bf16")
        if gemm:
            self.gemm_eff, self.m_half = float(gemm["eff"]), float(gemm["m_half"])
        att = cal.get("attention")
        if att:
            self.attn_eff = float(att["eff"])
            self.attn_lat = float(att["latency_us"]) * 1e-6
        ar = cal.get("allreduce")
        if ar:
            self.ar_bw = float(ar["intranode_gbps"] if self.attn_tp <= self.gpn else ar["internode_gbps"]) * 1e9

    def _all_to_all(self, tokens_per_rank: float, low_latency: bool) -> float:
        d, c = (self.ll_d, self.ll_c) if low_latency else (self.nm_d, self.nm_c)
        if d is None or c is None:
            return super()._all_to_all(tokens_per_rank, low_latency)
        fn = ll_time_s if low_latency else normal_time_s
        W, h, k, g = self.world, self.hidden, self.k, self.gpn
        return fn(d, tokens_per_rank, h, k, W, g, 1.0) + fn(c, tokens_per_rank, h, k, W, g, 2.0)
