"""First-principles roofline price of one engine step on one instance.

Per GPU and per layer kind, time = max(FLOPs / (peak x efficiency), bytes / (HBM BW x 0.8))
plus a memory-op latency, summed over layers; then communication and launch overheads:

    t_step = sum_layers [ attn_proj + attn_core + mlp_or_moe + comm ] + lm_head + launch + overhead

- attention projections: 2 x tokens_per_rank x attn_params / attn_tp FLOPs; weights read once.
- attention core: prefill 'pair' FLOPs (ModelSpec.attn_flops_per_token_pair) x causal pairs;
  decode reads every context token's KV (bytes) and does absorbed-MLA / GQA pair FLOPs.
- dense MLP: 2 x tokens x params / world FLOPs (TP over the world, as SGLang's dense layers).
- MoE: routed expert FLOPs 2 x tokens x top_k x expert_params / world x imbalance; weights of
  the experts the batch touches (expected distinct experts, ``comm.expected_distinct``).
- TP all-reduce (ring, NVLink inside a node, NIC across) twice per layer without DP attention.
- DeepEP dispatch (FP8) + combine (BF16) per MoE layer, legs over NVLink and RDMA.
- two-batch overlap: MoE communication hidden behind compute (max instead of sum).
- launch: eager per-layer cost for prefill or batches above cuda_graph_max_bs, else graph replay.

GEMM efficiency grows with the GEMM's M dimension: eff(M) = gemm x M / (M + gemm_m_half).
Constants: hardware_profiles/<system>.yaml ``efficiency`` (sources there).
"""
from __future__ import annotations

from ..specs.hardware import HardwareProfile
from ..specs.memory import kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec
from .comm import deepep_legs, expected_distinct, moe_imbalance, ring_allreduce_s


class RooflineStepCost:
    """Step-time model of one instance of ``group`` in ``role`` (prefill/decode/colocated)."""

    name = "roofline"

    def __init__(self, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                 nic_gbit: float | None = None):
        e = hw.efficiency
        self.hw, self.model, self.group, self.role = hw, model, group, role
        gpn = hw.gpus_per_node
        self.world = W = group.world(gpn)
        self.dp = D = group.dp
        self.attn_tp = A = W // D
        self.ep = group.ep
        eng = group.engine
        wb = model.weight_bytes_per_param
        self.peak = hw.gpu.peak_flops(model.weight_dtype)
        self.peak_attn = hw.gpu.peak_flops("bf16")
        self.hbm = hw.gpu.hbm_gbps * 1e9 * e.hbm
        self.gemm_eff, self.m_half = e.gemm, e.gemm_m_half
        self.attn_eff = e.attention
        self.mem_lat = e.mem_latency_us * 1e-6
        self.attn_lat = self.mem_lat  # per prefill attention kernel
        self.p2p_lat = e.p2p_latency_us * 1e-6
        nic_bw = (nic_gbit * 1e9 / 8 if nic_gbit else hw.node.nic_bytes_per_s) * hw.node.nics_per_node / gpn
        self.nvl_bw = hw.gpu.nvlink_bytes_per_s * e.nvlink
        self.rdma_bw = nic_bw * e.nic
        L = model.num_layers
        self.layers = L
        self.n_dense = model.n_dense_layers
        self.n_moe = model.n_moe_layers
        # per-GPU weight bytes and FLOP coefficients
        self.attn_w_bytes = model.attn_params * wb / A
        self.attn_flops_tok = 2.0 * model.attn_params / A
        self.pair_flops = model.attn_flops_per_token_pair / L / A  # per layer per GPU share of heads
        self.pair_flops_dec = model.attn_flops_per_token_pair_decode / L / A
        kvb = model.kv_bytes_per_token(kv_dtype(model, eng.kv_cache_dtype))
        # bytes one GPU reads per context token per layer (MLA: whole latent; GQA: its heads)
        self.kv_read_tok = kvb / L * model.kv_replication(A) / A
        self.dense_w_bytes = model.dense_mlp_params * wb / W
        self.dense_flops_tok = 2.0 * model.dense_mlp_params / W
        self.hidden = model.hidden
        self.lm_w_bytes = model.vocab * model.hidden * 2 / A
        self.lm_flops_tok = 2.0 * model.vocab * model.hidden / A
        self.gpn = gpn
        moe = model.moe
        if moe:
            self.E, self.k = moe.num_experts, moe.top_k
            self.expert_bytes = model.expert_params * wb
            self.expert_flops_tok = 2.0 * model.expert_params
            slots = moe.num_experts + eng.ep_num_redundant_experts
            self.experts_per_gpu = slots / W if group.ep > 1 else moe.num_experts / W
            self.redundancy = slots / moe.num_experts
            self.shared_bytes = moe.num_shared_experts * model.expert_params * wb / A
            self.shared_flops_tok = moe.num_shared_experts * 2.0 * model.expert_params / A
        self.tbo = eng.enable_two_batch_overlap
        self.tbo_loss = e.tbo_overlap_loss
        self.graph_bs = eng.cuda_graph_max_bs
        self.launch_eager = e.layer_launch_us * 1e-6 * L
        self.launch_graph = e.graph_launch_us * 1e-6 * L
        self.step_overhead = e.step_overhead_us * 1e-6
        mode = eng.deepep_mode
        self.deepep_prefill_ll = mode == "low_latency"
        self.deepep_decode_ll = mode != "normal"
        # TP all-reduce bus bandwidth: NVLink inside a node, the NIC share across nodes
        self.ar_bw = self.nvl_bw if A <= gpn else min(self.nvl_bw, self.rdma_bw)

    # -- helpers ---------------------------------------------------------------------------
    def _gemm(self, m: float, flops: float, wbytes: float) -> float:
        """Roofline of one GEMM with M = m rows: compute at eff(M) vs weight read."""
        if m <= 0:
            return 0.0
        eff = self.gemm_eff * m / (m + self.m_half)
        return max(flops / (self.peak * eff), wbytes / self.hbm) + self.mem_lat

    def _all_to_all(self, tokens_per_rank: float, low_latency: bool) -> float:
        """DeepEP dispatch (FP8) + combine (BF16) of one MoE layer, seconds: bytes per leg at the
        profile's achievable NVLink / RDMA bandwidth, the slower leg bounding each kernel."""
        W = self.world
        nvl_d, rdma_d = deepep_legs(tokens_per_rank, self.hidden, self.k, W, self.gpn, 1.0, not low_latency)
        nvl_c, rdma_c = deepep_legs(tokens_per_rank, self.hidden, self.k, W, self.gpn, 2.0, not low_latency)
        return (max(nvl_d / self.nvl_bw, rdma_d / self.rdma_bw) +
                max(nvl_c / self.nvl_bw, rdma_c / self.rdma_bw) + 4 * self.p2p_lat)

    PARTS = ("attn_proj", "attn_core", "mlp", "moe", "comm", "lm_head", "launch", "overhead")

    def _parts(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
               decode_batch: int, decode_ctx: float) -> tuple[float, ...]:
        """Seconds per component (order of PARTS) for one step; see the module docstring."""
        D, A, W = self.dp, self.attn_tp, self.world
        n_tok = prefill_tokens + decode_batch
        if n_tok <= 0:
            return (0.0,) * 8
        m = n_tok / D  # tokens on one DP rank (balanced by SGLang's DP scheduler)
        L = self.layers
        attn_proj = L * self._gemm(m, self.attn_flops_tok * m, self.attn_w_bytes)
        t_att = 0.0  # attention core, per layer per GPU
        if prefill_tokens:
            t_att += (self.pair_flops * prefill_attn / D) / (self.peak_attn * self.attn_eff) + self.attn_lat
        if decode_batch:
            kv_bytes = self.kv_read_tok * decode_ctx / D
            fl = self.pair_flops_dec * decode_ctx / D
            t_att += max(kv_bytes / self.hbm, fl / (self.peak_attn * self.attn_eff)) + self.mem_lat
        attn_core = L * t_att
        # dense MLP layers: all DP ranks' tokens, TP over the world
        mlp = self.n_dense * self._gemm(n_tok, self.dense_flops_tok * n_tok, self.dense_w_bytes) if self.n_dense else 0.0
        ll = self.deepep_decode_ll if prefill_tokens == 0 else self.deepep_prefill_ll
        moe = comm = 0.0
        if self.n_moe:
            assign = n_tok * self.k  # token-expert assignments in the instance
            per_gpu = assign / W
            imb = moe_imbalance(per_gpu / max(self.experts_per_gpu, 1e-9), max(int(self.experts_per_gpu * W), 1))
            imb = 1.0 + (imb - 1.0) / self.redundancy  # redundant experts split the hot ones
            distinct = expected_distinct(n_tok, self.k, self.E)
            touched = distinct / self.E * self.experts_per_gpu
            # the busiest GPU (imbalance x mean load) sets the pace, and its experts see
            # imbalance x the mean tokens per expert as the GEMM's M
            m_exp = assign / max(distinct, 1e-9) * imb
            compute = self._gemm(m_exp, self.expert_flops_tok * per_gpu * imb, self.expert_bytes * touched)
            if self.shared_bytes:
                compute += self._gemm(m, self.shared_flops_tok * m, self.shared_bytes)
            if self.ep > 1:
                layer_comm = self._all_to_all(n_tok / W, ll)
            elif W > 1:
                layer_comm = ring_allreduce_s(m * self.hidden * 2, W, self.ar_bw, self.p2p_lat)
            else:
                layer_comm = 0.0
            if self.tbo:  # two micro-batches: communication hides behind compute, imperfectly
                layer = max(compute, layer_comm) + self.tbo_loss * min(compute, layer_comm)
            else:
                layer = compute + layer_comm
            moe = self.n_moe * compute
            comm = self.n_moe * (layer - compute)
        # TP all-reduces after attention (and after dense MLPs); none under pure DP attention
        if A > 1:
            comm += L * ring_allreduce_s(m * self.hidden * 2, A, self.ar_bw, self.p2p_lat)
        if self.n_dense and W > 1:
            comm += self.n_dense * ring_allreduce_s(n_tok * self.hidden * 2, W, self.ar_bw, self.p2p_lat)
        logits = (decode_batch + prefill_seqs) / D
        lm_head = self._gemm(logits, self.lm_flops_tok * logits, self.lm_w_bytes)
        graph = prefill_tokens == 0 and m <= self.graph_bs
        launch = self.launch_graph if graph else self.launch_eager
        return (attn_proj, attn_core, mlp, moe, comm, lm_head, launch, self.step_overhead)

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> dict[str, float]:
        """Seconds per component for one step."""
        return dict(zip(self.PARTS, self._parts(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx)))

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> float:
        return sum(self._parts(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx))
