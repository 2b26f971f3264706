"""First-principles roofline price of one engine step on one instance.

Per GPU and per layer every kernel is a roofline of *this* GPU (compute.py): seconds =
latency + soft max(FLOPs / (peak x efficiency), bytes / (HBM x hbm efficiency)), GEMM rows
padded to the kernel's tile; then communication, launches and per-step overheads. step.py has
the per-step arithmetic and its formulas (attention projections, attention core, dense MLP,
MoE with skewed expert load and EPLB, DeepEP, TP all-reduce, two-batch overlap, LM head,
DP-attention synchronisation, launch, overhead).

Constants: the profile's ``efficiency`` priors (hardware_profiles/<system>.yaml, each sourced or
labelled an assumption). CalibratedStepCost (calibrated.py) keeps these formulas and replaces the
kernel constants (``_kernels``) with the ones ``pdsim calibrate fit`` writes for each GPU.

Speed: everything that does not depend on the step's shape is folded into coefficients at
construction; ``step_coeffs`` is a few dozen float operations, and the world may memoise it per
batch shape (base.py).
"""
from __future__ import annotations

from types import SimpleNamespace

from ..specs.errors import SpecError
from ..specs.features import ExpertLoadSpec
from ..specs.hardware import HardwareProfile
from ..specs.memory import dense_tp, kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec
from .comm import FP8_DISPATCH_BYTES, deepep_legs
from . import attention_backends as ab
from . import elementwise as ew
from .compute import INF_SHARP
from .host import eager_layer_s
from .moe_kernels import expert_gemm
from .moe_load import DistinctTable
from .moe_load import expert_load as build_expert_load
from .step import PARTS, make_coeffs

W4A16_DEQUANT = 0.15  # extra tensor-core-side work of dequantising 4-bit weights in the GEMM (assumption)


class RooflineStepCost:
    """Step-time model of one instance of ``group`` in ``role`` (prefill/decode/colocated).

    Keyword arguments beyond the group: ``nic_gbit`` (what-if NIC line rate), ``expert_load``
    (ExpertLoadSpec: expert popularity skew and EPLB), ``lm_head`` (False for a pipeline stage
    without the LM head), ``with_overhead`` (False for passes that run inside another step: a
    speculative draft, a later pipeline stage: no per-step CPU overhead of their own)."""

    name = "roofline"
    PARTS = PARTS

    def __init__(self, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                 nic_gbit: float | None = None, expert_load: ExpertLoadSpec | None = None, lm_head: bool = True,
                 with_overhead: bool = True):
        e = hw.efficiency
        self.hw, self.model, self.group, self.role = hw, model, group, role
        # a CPU 'device' (calibration/microbench/cpu_profile.py) was fitted on whole steps: the
        # small kernels and per-GEMM-kernel latencies of the GPU model are inside its overheads
        self.cpu_device = hw.gpu.arch == "cpu"
        gpn = hw.gpus_per_node
        self.gpn = gpn
        self.world = W = group.world(gpn)
        self.dp = D = group.dp
        self.attn_tp = A = W // D
        self.dense_tp = dense_tp(W, D)
        self.ep = group.ep
        eng = group.engine
        wb = model.weight_bytes_per_param
        L = model.num_layers
        self.layers, self.n_dense, self.n_moe = L, model.n_dense_layers, model.n_moe_layers
        self.hidden = model.hidden
        self.gemm_dtype = model.gemm_dtype
        self.peak = hw.gpu.peak_flops(self.gemm_dtype)
        self.peak_attn = hw.gpu.peak_flops("attn")
        self.hbm_peak = hw.gpu.hbm_gbps * 1e9
        # weight-only 4-bit GEMMs dequantise inside the kernel: more work per FLOP (Marlin-style)
        self.flop_scale = 1.0 + W4A16_DEQUANT if (model.quant and model.quant.weight_only) else 1.0
        self.nic_scale = (nic_gbit / hw.node.nic_gbit) if nic_gbit else 1.0
        nic_bw = (nic_gbit * 1e9 / 8 if nic_gbit else hw.node.nic_bytes_per_s) * hw.node.nics_per_node / gpn
        self.nvl_bw = hw.gpu.peer_bytes_per_s * e.nvlink
        self.rdma_bw = nic_bw * e.nic
        # per-GPU weight bytes and FLOPs per token of each GEMM kind (SimpleNamespace: f, w)
        self.g_attn = SimpleNamespace(f=2.0 * model.attn_params / A, w=model.attn_params * wb / A)
        T = self.dense_tp
        self.g_dense = SimpleNamespace(f=2.0 * model.dense_mlp_params / T, w=model.dense_mlp_params * wb / T)
        self.g_lm = SimpleNamespace(f=2.0 * model.vocab * model.hidden / A, w=model.vocab * model.hidden * 2 / A)
        self.lm_head_on = lm_head
        # attention core, per layer per GPU (its share of the heads)
        self.pair_flops = model.attn_flops_per_token_pair / L / A
        self.pair_flops_dec = model.attn_flops_per_token_pair_decode / L / A
        kvd = kv_dtype(model, eng.kv_cache_dtype)
        kvb = model.kv_bytes_per_token(kvd)
        self.kv_fp8 = kvd == "fp8"
        # bytes one GPU reads per context token per layer (MLA: whole latent; GQA: its heads)
        self.kv_read_tok = kvb / L * model.kv_replication(A) / A
        # the small memory-bound kernels between GEMMs (elementwise.py): bytes per token / assignment
        self.unfused = eng.elementwise == "unfused"
        if self.unfused:  # the layer module by module (elementwise.py; dense GQA/MHA only: scenario.py)
            q_w = model.num_heads * model.head_dim / A
            kv_w = model.num_kv_heads * model.head_dim * model.kv_replication(A) / A
            self.ew_attn_bytes = ew.unfused_attn_side_bytes(model.hidden, q_w, kv_w)
            self.ew_dense_bytes = ew.unfused_mlp_side_bytes(model.hidden, model.ffn / self.dense_tp)
        else:
            heads_v = model.num_heads * (model.mla.v_head_dim if model.mla else model.head_dim) / A
            self.ew_attn_bytes = ew.attn_side_bytes(model.hidden, heads_v)
            self.ew_dense_bytes = ew.mlp_side_bytes(model.hidden, model.ffn / self.dense_tp if model.ffn else 0.0)
        moe = model.moe
        self.ew_moe_bytes = self.ew_assign_bytes = 0.0
        if moe:
            self.ew_moe_bytes = ew.mlp_side_bytes(model.hidden, moe.num_shared_experts * moe.expert_ffn / A)
            self.ew_assign_bytes = ew.assignment_bytes(model.hidden, moe.expert_ffn, group.ep > 1) / (
                1 if group.ep > 1 else W)
        self.E = self.k = 0
        self.c_shared = None
        if moe:
            self.E, self.k = moe.num_experts, moe.top_k
            self.expert_bytes = model.expert_params * wb
            self.expert_flops_tok = 2.0 * model.expert_params
            slots = moe.num_experts + eng.ep_num_redundant_experts
            self.experts_per_gpu = slots / W if group.ep > 1 else moe.num_experts / W
            self.redundancy = slots / moe.num_experts
            self.g_shared = SimpleNamespace(f=moe.num_shared_experts * 2.0 * model.expert_params / A,
                                            w=moe.num_shared_experts * model.expert_params * wb / A)
            spec = expert_load or ExpertLoadSpec()
            red = eng.ep_num_redundant_experts if group.ep > 1 else 0
            self.expert_load = expert_load_model = build_expert_load(
                moe.num_experts, moe.top_k, W, spec.zipf, red, spec.eplb, expert_parallel=group.ep > 1,
                seed=spec.seed, drift=spec.batch_drift)
            # a decode batch's loads stray less from EPLB's statistics than a prefill batch's
            # (one token per sequence: specs/features.py DEFAULT_DECODE_DRIFT)
            self.expert_load_decode = expert_load_model if spec.decode_batch_drift == spec.batch_drift else \
                build_expert_load(moe.num_experts, moe.top_k, W, spec.zipf, red, spec.eplb,
                                  expert_parallel=group.ep > 1, seed=spec.seed, drift=spec.decode_batch_drift)
            self.distinct = DistinctTable(expert_load_model)
        self.tbo = eng.enable_two_batch_overlap
        # transformers' paged|sdpa: one dense attention over the packed batch with a mask
        # (costs/attention_backends.py), priced as every query against every key read
        self.packed_attention = eng.attention_backend == "sdpa_packed"
        self.packed_copy_s = self.packed_read_s = 0.0
        if self.packed_attention:  # seconds per key read per layer: its copies, the SDPA's reads
            rate = self.hbm_peak * e.hbm * ab.SDPA_PACKED_HBM
            copies, reads = ab.packed_key_bytes(model.num_heads / model.num_kv_heads, self.kv_read_tok)
            self.packed_copy_s, self.packed_read_s = copies / rate, reads / rate
        if self.packed_attention and self.tbo:
            raise SpecError("sdpa_packed (transformers' continuous batching) has no two-batch overlap",
                            field="engine.attention_backend")
        # decode TBO hides communication behind the attention core (tbo.py), so the step is not
        # linear in decode_ctx: the world prices each step (no memo by shape) and step_coeffs
        # holds the core at its least work
        # and an eager packed step hides its attention behind the host's issue too (step.py)
        self.linear = not (self.tbo and role != "prefill") and not self.packed_attention
        self.sm_share_normal = e.deepep_normal_sm_share
        self.graph_bs = eng.cuda_graph_max_bs
        self.launch_eager = eager_layer_s(model, group, e, A) * L  # costs/host.py: from the layer's structure
        self.launch_graph = e.graph_launch_us * 1e-6 * L
        self.step_overhead = e.step_overhead_us * 1e-6 if with_overhead else 0.0
        self.seq_overhead = e.seq_overhead_us * 1e-6 if with_overhead else 0.0
        self.ctx_overhead = e.ctx_overhead_ns * 1e-9 if with_overhead else 0.0
        self.prefill_token_overhead = e.prefill_token_ns * 1e-9 if with_overhead else 0.0
        # SGLang --moe-a2a-backend none: every EP rank runs its experts over all tokens of the
        # group and the partial outputs are summed (an all-reduce over the world), no DeepEP
        self.a2a_deepep = eng.moe_a2a_backend == "deepep"
        mode = eng.deepep_mode
        self.deepep_prefill_ll = mode == "low_latency"
        self.deepep_decode_ll = mode != "normal"
        mla = model.attention == "mla"
        ab.check_backend(eng.attention_backend, mla, hw.gpu.arch)
        self._coefficients(ab.apply(self._kernels(), eng.attention_backend, mla, hw.gpu.arch))

    # -- constants ---------------------------------------------------------------------------
    def _kernels(self) -> SimpleNamespace:
        """Kernel constants of the first-principles model (profile ``efficiency``); see
        compute.py for the forms. Calibrated models override this and nothing else."""
        e = self.hw.efficiency
        lat = e.mem_latency_us * 1e-6
        gemm = SimpleNamespace(peak=self.peak, eff=e.gemm, m_tile=e.m_tile(self.gemm_dtype), hbm_eff=e.hbm, lat=lat,
                               sharp=INF_SHARP)
        mla = self.model.attention == "mla"
        # MLA decode is FlashMLA-shaped: its own compute and KV-read fractions (FlashMLA README)
        dec_eff, dec_hbm = (e.mla_decode, e.mla_decode_hbm) if mla else (e.attention, e.hbm)
        runner = self.group.engine.moe_runner
        moe = expert_gemm(gemm, runner, self.ep > 1 and self.gemm_dtype == "fp8" and runner != "triton")
        return SimpleNamespace(
            gemm=gemm, lm_gemm=SimpleNamespace(**{**vars(gemm), "peak": self.peak_attn, "m_tile": e.gemm_m_tile}),
            moe=moe,
            prefill_attn=SimpleNamespace(pair_flops=self.pair_flops, eff=e.attention, lat=lat, row_pairs=0.0),
            decode_attn=SimpleNamespace(pair_flops=self.pair_flops_dec, eff=dec_eff, hbm_eff=dec_hbm, lat=lat),
            a2a_ll=self._a2a_first_principles(True), a2a_normal=self._a2a_first_principles(False),
            a2a_ll_pairs=(0.0, 0.0),
            allreduce=self._allreduce_first_principles)

    def _a2a_first_principles(self, low_latency: bool) -> tuple[tuple[float, float, float], ...]:
        """DeepEP dispatch (FP8 + scales) and combine (BF16) of one MoE layer, each as (base s,
        SM-driven s per token per rank, in-flight s per token per rank) (deepep.linear_coeffs):
        bytes per leg at the profile's NVLink / RDMA bandwidth, plus two point-to-point
        latencies per kernel. Low-latency kernels: the NVLink copy by the SMs, the RDMA leg in
        flight beside it; normal kernels: the slower leg bounds the kernel (both: the slower leg)."""
        if not self.k or self.ep <= 1:
            return ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
        base = 2 * self.hw.efficiency.p2p_latency_us * 1e-6
        legs = []
        for elem in (FP8_DISPATCH_BYTES, 2.0):
            nvl, rdma = deepep_legs(1.0, self.hidden, self.k, self.world, self.gpn, elem, not low_latency)
            if low_latency:  # the SMs' NVLink copy and the NIC's RDMA leg overlap (deepep.py)
                a, b = nvl / self.nvl_bw, rdma / self.rdma_bw
                legs.append((base, a, b - a if b > a else 0.0))
            else:
                legs.append((base, 0.0, max(nvl / self.nvl_bw, rdma / self.rdma_bw)))
        return tuple(legs)

    def _allreduce_first_principles(self, n: int) -> tuple[float, float]:
        """All-reduce over ``n`` ranks as (seconds fixed, seconds per byte): comm.allreduce_s
        with the profile's small-message base and per-rank latency; bus bandwidth NVLink (or
        PCIe peers) inside a node, across nodes the smaller of NVLink and the hierarchical NIC
        leg."""
        if n <= 1:
            return 0.0, 0.0
        e = self.hw.efficiency
        # across nodes NCCL is hierarchical: NVLink inside, 1/gpn of the data per GPU over its NIC
        # share, so the NIC leg allows gpn x NIC/GPU x nodes/(nodes - 1) in bus-bandwidth units
        nodes = -(-n // self.gpn)
        bw = self.nvl_bw if n <= self.gpn else min(self.nvl_bw, self.gpn * self.rdma_bw * nodes / (nodes - 1))
        return (e.allreduce_base_us + 2.0 * (n - 1) * e.allreduce_hop_us) * 1e-6, 2.0 * (n - 1) / n / bw

    def _gemm_coeffs(self, g, c, kernels: int = 1) -> tuple[float, float, float, float, float]:
        """(seconds per row, tile rows, seconds of the weight reads, latency, sharpness) of
        ``kernels`` GEMM kernels that together hold the weights ``g`` (each pays its latency)."""
        return (g.f * self.flop_scale / (c.peak * c.eff), c.m_tile, g.w / (self.hbm_peak * c.hbm_eff), kernels * c.lat,
                c.sharp)

    def _coefficients(self, k: SimpleNamespace) -> None:
        """Fold kernel constants and per-GPU sizes into per-step coefficients."""
        self.kernels = k
        hbm = self.hbm_peak
        # GEMM kernels per layer: MLA fused q_a/kv_a, q_b, kv_b (prefill, MHA form) or the two
        # weight-absorption bmm (decode), o_proj; GQA fused qkv, o_proj; an MLP gate_up + down
        mla = self.model.attention == "mla"
        one = self.cpu_device  # the CPU profile was fitted with one latency per GEMM group
        self.c_attn = self._gemm_coeffs(self.g_attn, k.gemm, 1 if one else (4 if self.role == "prefill" else 5) if mla else 2)
        self.c_dense = self._gemm_coeffs(self.g_dense, k.gemm, 1 if one else 2)
        self.c_lm = self._gemm_coeffs(self.g_lm, k.lm_gemm)
        pa = k.prefill_attn
        # FP8 KV: FA3-FP8 runs the prefill attention math on FP8 tensor cores too (LMSYS 2025-09-26, "Fa3-FP8")
        pf_peak = self.hw.gpu.peak_flops("fp8") if self.kv_fp8 and self.hw.gpu.fp8_tflops else self.peak_attn
        # (s per pair, latency, key columns of work per query row: compute.prefill_attention_s)
        self.c_pf = (pa.pair_flops / (pf_peak * pa.eff), pa.lat, getattr(pa, "row_pairs", 0.0))
        da = k.decode_attn
        # FP8 KV (FlashMLA-FP8 / FA3-FP8) runs the attention math on FP8 tensor cores
        dec_peak = self.hw.gpu.peak_flops("fp8") if self.kv_fp8 else self.peak_attn
        self.c_dec = (self.kv_read_tok / (hbm * da.hbm_eff), da.pair_flops / (dec_peak * da.eff), da.lat)
        # where the profile measured it (calibrate/kv_residency.py): a decode step sweeps every layer's
        # KV once and the next step sweeps it again, so while the step's KV and the weights it streams
        # fit the last-level cache its reads are hits, and past that nearly all come from DRAM (an
        # LRU-like cache under a cyclic sweep): the KV read rate depends on the step's own context,
        # and the step is not linear in decode_ctx (priced step by step)
        self.dec_kv_hot, self.kv_residency = None, None
        res = getattr(k, "kv_residency", None)
        if res is not None:
            self.c_dec = (self.kv_read_tok / res.dram_bps,) + self.c_dec[1:]
            self.dec_kv_hot = self.kv_read_tok / res.cache_bps
            # the step's working set per GPU: the weights it streams plus its KV (decode_ctx counts the
            # instance's context tokens; each DP rank holds its share), against the cache (compute.dram_share)
            self.kv_residency = (self.model.weight_bytes / self.world, self.kv_read_tok * self.layers / self.dp,
                                 res.cache_bytes, res.width)
            self.linear = False
        if self.k:
            m = k.moe
            self.c_moe = (self.expert_flops_tok * self.flop_scale / (m.peak * m.eff), m.m_tile,
                          self.expert_bytes / (hbm * m.hbm_eff), m.lat, m.sharp)
            self.c_shared = self._gemm_coeffs(self.g_shared, k.gemm, 1 if self.cpu_device else 2) if self.g_shared.w else None
            self.a2a_ll, self.a2a_normal = k.a2a_ll, k.a2a_normal
            # of each low-latency kernel's fixed seconds, the part per remote pair (deepep.ll_fixed_s)
            self.a2a_ll_pairs = getattr(k, "a2a_ll_pairs", (0.0, 0.0))
        # small kernels: (latency per layer, s per token) attention side, dense-MLP side, MoE side,
        # and s per routed assignment
        # (the profile's memory-kernel priors in both models: no microbenchmark isolates these kernels)
        e = self.hw.efficiency
        lat, bw = e.mem_latency_us * 1e-6, hbm * e.hbm
        if self.cpu_device:  # the CPU profile's whole-step fit already holds this work (its host overheads)
            lat, bw = 0.0, float("inf")
        if self.unfused:
            k_attn, k_mlp = ew.UNFUSED_ATTN_KERNELS, ew.UNFUSED_MLP_KERNELS
        else:
            k_attn, k_mlp = ew.ATTN_KERNELS, ew.MLP_KERNELS
        self.c_ew = (k_attn * lat, self.ew_attn_bytes / bw, k_mlp * lat, self.ew_dense_bytes / bw,
                     self.ew_moe_bytes / bw, self.ew_assign_bytes / bw)
        A, W = self.attn_tp, self.world
        self.c_ar_attn = k.allreduce(A) if A > 1 else (0.0, 0.0)
        self.c_ar_world = k.allreduce(W) if W > 1 else (0.0, 0.0)
        # DP attention: every step the ranks agree on their batch sizes (one small collective)
        self.c_dp_sync = self.c_ar_world[0] if self.dp > 1 else 0.0
        self._coeffs = make_coeffs(self)

    # -- the step ----------------------------------------------------------------------------
    def step_coeffs(self, prefill_tokens: int, prefill_seqs: int, decode_batch: int, *,
                    rank_tokens: float | None = None, decode_tokens_per_seq: int = 1) -> tuple[float, float, float]:
        """(c0, c_attn, c_ctx): the step takes c0 + c_attn x prefill_attn + c_ctx x decode_ctx
        seconds (base.py)."""
        parts, ca, cc = self._coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens, decode_tokens_per_seq)
        return sum(parts), ca, cc

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float, *, rank_tokens: float | None = None,
                  decode_tokens_per_seq: int = 1) -> float:
        if not self.linear:
            parts, ca, cc = self._coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens,
                                         decode_tokens_per_seq, decode_ctx)
            return sum(parts) + ca * prefill_attn + cc * decode_ctx
        c0, ca, cc = self.step_coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens,
                                      decode_tokens_per_seq=decode_tokens_per_seq)
        return c0 + ca * prefill_attn + cc * decode_ctx

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float, *, rank_tokens: float | None = None,
                  decode_tokens_per_seq: int = 1) -> dict[str, float]:
        """Seconds per component for one step (sums to ``step_time``)."""
        parts, ca, cc = self._coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens, decode_tokens_per_seq,
                                     None if self.linear else decode_ctx)
        out = dict(zip(self.PARTS, parts))
        host_ctx = self.ctx_overhead / self.dp if decode_batch else 0.0  # c_ctx's host share (step.py)
        out["attn_core"] += ca * prefill_attn + (cc - host_ctx) * decode_ctx
        out["overhead"] += host_ctx * decode_ctx
        return out
