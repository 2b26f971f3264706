"""Calibrated step cost: the roofline's formulas (roofline.py, step.py) with fitted kernel constants.

Same step formula as RooflineStepCost; ``_kernels`` takes its constants from the profile's
``calibration:`` block (written by ``pdsim calibrate fit``, each GPU fitted on its own rows or
derived from its architecture's measured GPUs at fractions of *its own* peaks) instead of the
``efficiency`` priors:

- dense GEMMs (attention projections, dense MLP, shared experts): ``gemm_<kernel>`` (eff,
  m_tile, hbm_eff, latency_us, sharp) for the checkpoint's GEMM kind: block-scaled FP8
  (DeepGEMM, ``gemm_fp8_block``), per-tensor FP8 (``gemm_fp8``), INT8 W8A8 (the per-tensor
  8-bit fit at the INT8 peak, else the BF16 fit), BF16 and weight-only W4A16 (``gemm_bf16``,
  with the dequantisation overhead of roofline.py); LM head ``gemm_bf16``.
  Data: calibration/data/gemm.csv.
- routed experts (GEMM form at M = tokens per touched expert, padded to the tile): TP-sharded
  experts run SGLang's fused Triton MoE kernel, ``moe_<dtype>`` (moe.csv); expert parallelism
  runs DeepEP + DeepGEMM's grouped FP8-block GEMM, ``gemm_fp8_block`` (gemm.csv: the dense
  kernel and DeepGEMM's own grouped contiguous/masked rows). The engine's ``moe_runner`` picks:
  ``deepgemm`` (default), ``deepgemm_swapab`` (the same kernel with skinny experts padded to 32
  rows), ``triton`` (the fused Triton MoE fit under EP too); DeepGEMM's weight stream at its
  cold-L2 bandwidth (moe_kernels.py).
- decode KV reads by working set: ``kv_residency`` (kv_residency.csv, calibrate/kv_residency.py),
  where a profile measured it: the KV read rate from the last-level cache while the step's KV and
  weights fit it, from DRAM once they do not (roofline.py).
- attention: GQA ``attention_prefill`` / ``attention_decode`` (attention.csv); MLA decode
  ``mla_decode`` (mla.csv: weight-absorbed, reads the latent), else the FlashMLA prior. MLA
  prefill without a cached prefix runs in SGLang as MHA through FA3 on the non-absorbed heads,
  so it takes ``mla_prefill`` where a profile has it and else the FA3 fit ``attention_prefill``,
  on ModelSpec.attn_flops_per_token_pair (see calibration/data/README.md on the MLA prefill rows).
- DeepEP: ``deepep_{ll,normal}_{dispatch,combine}`` (deepep.py; deepep_*.csv); an RDMA
  bandwidth what-if (``nic_gbit``) scales the fitted RDMA bandwidth by the line-rate ratio.
- TP all-reduce: ``allreduce`` (comm.allreduce_s: launch, per-rank latency, bus bandwidth inside
  a node and across nodes; nccl_collectives.csv).

A constant the profile lacks keeps its roofline prior. The eager launch cost per kernel comes from
``calibration.host`` where a GPU session measured it (costs/measured.py, which also says why the
measured copy bandwidth does not replace the small kernels' HBM efficiency); per-step CPU
overheads have no microbenchmark data and stay on the profile's ``efficiency`` values (labelled
assumptions).
"""
from __future__ import annotations

from types import SimpleNamespace

from .compute import effective_sharp
from .deepep import ELEM_BYTES, linear_coeffs, remote_pairs
from .measured import with_measured_system
from .moe_kernels import expert_gemm
from .roofline import RooflineStepCost


def gemm_consts(p: dict, peak: float) -> SimpleNamespace:
    """Kernel constants of one fitted GEMM model (calibration block entry) at ``peak`` FLOP/s."""
    return SimpleNamespace(peak=peak, eff=float(p["eff"]), m_tile=float(p.get("m_tile", 1.0)),
                           hbm_eff=float(p["hbm_eff"]), lat=float(p["latency_us"]) * 1e-6,
                           sharp=effective_sharp(p.get("sharp")))


GEMM_ORDER = {
    "fp8_block": ("gemm_fp8_block", "gemm_fp8", "gemm_bf16"),
    "fp8": ("gemm_fp8", "gemm_fp8_block", "gemm_bf16"),
    "w8a8_fp8": ("gemm_fp8", "gemm_fp8_block", "gemm_bf16"),
    "w8a8_int8": ("gemm_fp8", "gemm_bf16"),
}


class CalibratedStepCost(RooflineStepCost):
    name = "calibrated"

    def __init__(self, hw, *args, **kwargs):
        # the measured eager launch cost, where a GPU session measured it
        super().__init__(with_measured_system(hw), *args, **kwargs)

    def _kernels(self) -> SimpleNamespace:
        k = super()._kernels()
        cal = self.hw.calibration
        qm = self.model.quant_method
        order = GEMM_ORDER.get(qm, ("gemm_bf16",))
        g = next((cal[n] for n in order if n in cal), None)
        if g:
            k.gemm = gemm_consts(g, self.peak)
        if "gemm_bf16" in cal:
            k.lm_gemm = gemm_consts(cal["gemm_bf16"], self.peak_attn)
        # routed experts: SGLang's TP MoE runs the fused Triton kernel (moe.csv); its DeepEP MoE
        # (EP > 1) runs DeepGEMM's grouped GEMM, the FP8-block kernel of gemm.csv
        fp8 = self.gemm_dtype == "fp8"
        m = cal.get("moe_fp8_block" if fp8 else "moe_bf16")
        runner = self.group.engine.moe_runner
        if self.ep > 1 and fp8 and "gemm_fp8_block" in cal and runner != "triton":
            m = cal["gemm_fp8_block"]
        k.moe = gemm_consts(m, self.peak) if m else k.gemm
        k.moe = expert_gemm(k.moe, runner, self.ep > 1 and fp8 and runner != "triton")
        mla = self.model.attention == "mla"
        p = (cal.get("mla_prefill") if mla else None) or cal.get("attention_prefill")
        if p:  # MLA prefill runs MHA through FA3 (non-absorbed pair FLOPs): its MHA-row fit, else the GQA FA3 fit
            k.prefill_attn = SimpleNamespace(pair_flops=self.pair_flops, eff=float(p["eff"]), lat=float(p["latency_us"]) * 1e-6,
                                             row_pairs=float(p.get("row_pairs", 0.0)))
        d = cal.get("mla_decode" if mla else "attention_decode")
        if d:
            k.decode_attn = SimpleNamespace(pair_flops=self.pair_flops_dec, eff=float(d["eff"]),
                                            hbm_eff=float(d["hbm_eff"]), lat=float(d["latency_us"]) * 1e-6)
        r = cal.get("kv_residency")
        if r and float(r.get("cache_bytes", 0.0)) > 0.0:  # the decode KV read rate by working set (roofline.py)
            k.kv_residency = SimpleNamespace(cache_bytes=float(r["cache_bytes"]), cache_bps=float(r["cache_gbps"]) * 1e9,
                                             dram_bps=float(r["dram_gbps"]) * 1e9,
                                             width=float(r.get("cache_log_width", 0.0)))
        if self.k and self.ep > 1:
            for mode, ll in (("ll", True), ("normal", False)):
                ps = [cal.get(f"deepep_{mode}_{op}") for op in ("dispatch", "combine")]
                if all(ps):
                    experts = self.experts_per_gpu * self.world  # physical experts, redundant ones included
                    setattr(k, f"a2a_{mode}", tuple(
                        linear_coeffs(p, ll, self.hidden, self.k, self.world, self.gpn, ELEM_BYTES[op],
                                      experts, self.nic_scale)
                        for p, op in zip(ps, ("dispatch", "combine"))))
                    if ll:  # the per-remote-pair part of the fixed cost: NIC messages in flight (tbo.py)
                        k.a2a_ll_pairs = tuple(float(p.get("pair_us", 0.0)) * 1e-6 * remote_pairs(experts, self.world, self.gpn)
                                               for p in ps)
        ar = cal.get("allreduce")
        if ar:
            k.allreduce = self._allreduce_fitted(ar)
        return k

    def _allreduce_fitted(self, ar: dict):
        """All-reduce with the fitted launch cost, per-rank latency and bus bandwidth
        (comm.allreduce_s: t = base + 2 (n-1) x latency + 2 (n-1)/n x bytes / busbw)."""
        lat = float(ar["latency_us"]) * 1e-6
        base = float(ar.get("base_us", 0.0)) * 1e-6
        intra = float(ar["intranode_gbps"]) * 1e9
        inter = float(ar["internode_gbps"]) * 1e9 * self.nic_scale

        def fn(n: int) -> tuple[float, float]:
            if n <= 1:
                return 0.0, 0.0
            bw = intra if n <= self.gpn else min(intra, inter)
            return base + 2.0 * (n - 1) * lat, 2.0 * (n - 1) / n / bw
        return fn
