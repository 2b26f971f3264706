"""First-principles roofline price of one engine step on one instance.

Per GPU and per layer, every kernel is a roofline (compute.py): time = latency +
max(FLOPs / (peak x efficiency), bytes / (HBM BW x hbm efficiency)); then communication and
launch overheads:

    t_step = sum_layers [ attn_proj + attn_core + mlp_or_moe + comm ] + lm_head + launch + overhead

- attention projections: 2 x tokens_per_rank x attn_params / attn_tp FLOPs; weights read once.
- attention core: prefill 'pair' FLOPs (ModelSpec.attn_flops_per_token_pair) x causal pairs;
  decode reads every context token's KV (bytes) and does absorbed-MLA / GQA pair FLOPs.
- dense MLP: 2 x tokens x params / world FLOPs (TP over the world, as SGLang's dense layers).
- MoE: routed expert FLOPs 2 x tokens x top_k x expert_params / world x imbalance; weights of
  the experts the batch touches (expected distinct experts, ``comm.expected_distinct``); the
  busiest GPU (imbalance x mean load) sets the pace and its experts see imbalance x the mean
  tokens per expert as the GEMM's M.
- TP all-reduce (ring, NVLink inside a node, NIC across) after attention (and dense MLPs)
  without DP attention; MoE without EP all-reduces too.
- DeepEP dispatch (FP8) + combine (BF16) per MoE layer, legs over NVLink and RDMA.
- two-batch overlap: MoE communication hidden behind compute (max instead of sum) but for a
  ``tbo_overlap_loss`` share of the shorter one.
- launch: eager per-layer cost for prefill or batches above cuda_graph_max_bs, else graph replay.

GEMM efficiency grows with the GEMM's M dimension: eff(M) = gemm x M / (M + gemm_m_half).
Constants: hardware_profiles/<system>.yaml ``efficiency`` (sources there). CalibratedStepCost
(calibrated.py) keeps these formulas and replaces the constants (``_kernels``) with fitted ones.

Speed: everything that does not depend on the step's shape is folded into coefficients at
construction, so a call is a few dozen float operations (see ``_parts``).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from ..specs.hardware import HardwareProfile
from ..specs.memory import kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec
from .comm import deepep_legs


class RooflineStepCost:
    """Step-time model of one instance of ``group`` in ``role`` (prefill/decode/colocated)."""

    name = "roofline"
    PARTS = ("attn_proj", "attn_core", "mlp", "moe", "comm", "lm_head", "launch", "overhead")

    def __init__(self, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                 nic_gbit: float | None = None):
        e = hw.efficiency
        self.hw, self.model, self.group, self.role = hw, model, group, role
        gpn = hw.gpus_per_node
        self.gpn = gpn
        self.world = W = group.world(gpn)
        self.dp = D = group.dp
        self.attn_tp = A = W // D
        self.ep = group.ep
        eng = group.engine
        wb = model.weight_bytes_per_param
        L = model.num_layers
        self.layers, self.n_dense, self.n_moe = L, model.n_dense_layers, model.n_moe_layers
        self.hidden = model.hidden
        self.peak = hw.gpu.peak_flops(model.weight_dtype)
        self.peak_attn = hw.gpu.peak_flops("bf16")
        self.hbm_peak = hw.gpu.hbm_gbps * 1e9
        self.nic_scale = (nic_gbit / hw.node.nic_gbit) if nic_gbit else 1.0
        nic_bw = (nic_gbit * 1e9 / 8 if nic_gbit else hw.node.nic_bytes_per_s) * hw.node.nics_per_node / gpn
        self.nvl_bw = hw.gpu.nvlink_bytes_per_s * e.nvlink
        self.rdma_bw = nic_bw * e.nic
        # per-GPU weight bytes and FLOPs per token of each GEMM kind (SimpleNamespace: f, w)
        self.g_attn = SimpleNamespace(f=2.0 * model.attn_params / A, w=model.attn_params * wb / A)
        self.g_dense = SimpleNamespace(f=2.0 * model.dense_mlp_params / W, w=model.dense_mlp_params * wb / W)
        self.g_lm = SimpleNamespace(f=2.0 * model.vocab * model.hidden / A, w=model.vocab * model.hidden * 2 / A)
        # attention core, per layer per GPU (its share of the heads)
        self.pair_flops = model.attn_flops_per_token_pair / L / A
        self.pair_flops_dec = model.attn_flops_per_token_pair_decode / L / A
        kvb = model.kv_bytes_per_token(kv_dtype(model, eng.kv_cache_dtype))
        # bytes one GPU reads per context token per layer (MLA: whole latent; GQA: its heads)
        self.kv_read_tok = kvb / L * model.kv_replication(A) / A
        moe = model.moe
        self.E = self.k = 0
        if moe:
            self.E, self.k = moe.num_experts, moe.top_k
            self.expert_bytes = model.expert_params * wb
            self.expert_flops_tok = 2.0 * model.expert_params
            slots = moe.num_experts + eng.ep_num_redundant_experts
            self.experts_per_gpu = slots / W if group.ep > 1 else moe.num_experts / W
            self.redundancy = slots / moe.num_experts
            self.g_shared = SimpleNamespace(f=moe.num_shared_experts * 2.0 * model.expert_params / A,
                                            w=moe.num_shared_experts * model.expert_params * wb / A)
        self.tbo = eng.enable_two_batch_overlap
        self.tbo_loss = e.tbo_overlap_loss
        self.graph_bs = eng.cuda_graph_max_bs
        self.launch_eager = e.layer_launch_us * 1e-6 * L
        self.launch_graph = e.graph_launch_us * 1e-6 * L
        self.step_overhead = e.step_overhead_us * 1e-6
        mode = eng.deepep_mode
        self.deepep_prefill_ll = mode == "low_latency"
        self.deepep_decode_ll = mode != "normal"
        self._coefficients(self._kernels())

    # -- constants ---------------------------------------------------------------------------
    def _kernels(self) -> SimpleNamespace:
        """Kernel constants of the first-principles model (profile ``efficiency``); see
        compute.py for the forms. Calibrated models override this and nothing else."""
        e = self.hw.efficiency
        lat = e.mem_latency_us * 1e-6
        gemm = SimpleNamespace(peak=self.peak, eff=e.gemm, m_half=e.gemm_m_half, hbm_eff=e.hbm, lat=lat)
        return SimpleNamespace(
            gemm=gemm, lm_gemm=SimpleNamespace(**{**vars(gemm), "peak": self.peak_attn}),
            moe=gemm,
            prefill_attn=SimpleNamespace(pair_flops=self.pair_flops, eff=e.attention, lat=lat),
            decode_attn=SimpleNamespace(pair_flops=self.pair_flops_dec, eff=e.attention, hbm_eff=e.hbm, lat=lat),
            a2a_ll=self._a2a_first_principles(True), a2a_normal=self._a2a_first_principles(False),
            allreduce=self._allreduce_first_principles)

    def _a2a_first_principles(self, low_latency: bool) -> tuple[float, float]:
        """DeepEP dispatch (FP8) + combine (BF16) of one MoE layer, as (base s, s per token per
        rank): bytes per leg at the profile's NVLink / RDMA bandwidth, the slower leg bounding
        each kernel, plus two point-to-point latencies per kernel."""
        if not self.k or self.ep <= 1:
            return 0.0, 0.0
        slope = 0.0
        for elem in (1.0, 2.0):
            nvl, rdma = deepep_legs(1.0, self.hidden, self.k, self.world, self.gpn, elem, not low_latency)
            slope += max(nvl / self.nvl_bw, rdma / self.rdma_bw)
        return 4 * self.hw.efficiency.p2p_latency_us * 1e-6, slope

    def _allreduce_first_principles(self, n: int) -> tuple[float, float]:
        """Ring all-reduce over ``n`` ranks as (seconds fixed, seconds per byte): bus bandwidth
        NVLink inside a node, the NIC share across nodes; 2 (n-1) point-to-point latencies."""
        if n <= 1:
            return 0.0, 0.0
        bw = self.nvl_bw if n <= self.gpn else min(self.nvl_bw, self.rdma_bw)
        return 2.0 * (n - 1) * self.hw.efficiency.p2p_latency_us * 1e-6, 2.0 * (n - 1) / n / bw

    def _coefficients(self, k: SimpleNamespace) -> None:
        """Fold kernel constants and per-GPU sizes into per-step coefficients."""
        self.kernels = k
        hbm = self.hbm_peak

        def gemm(g, c):  # t(m) = lat + max(cf (m + m_half), wb)
            return (g.f / (c.peak * c.eff), c.m_half, g.w / (hbm * c.hbm_eff), c.lat)

        L = self.layers
        self.c_attn = gemm(self.g_attn, k.gemm)
        self.c_dense = gemm(self.g_dense, k.gemm)
        self.c_lm = gemm(self.g_lm, k.lm_gemm)
        pa = k.prefill_attn
        self.c_pf = (pa.pair_flops / (self.peak_attn * pa.eff) / self.dp, pa.lat)
        da = k.decode_attn
        self.c_dec = (max(self.kv_read_tok / (hbm * da.hbm_eff), da.pair_flops / (self.peak_attn * da.eff)) / self.dp,
                      da.lat)
        if self.k:
            m = k.moe
            self.c_moe = (self.expert_flops_tok / (m.peak * m.eff), m.m_half, self.expert_bytes / (hbm * m.hbm_eff), m.lat)
            self.c_shared = gemm(self.g_shared, k.gemm) if self.g_shared.w else None
            self.log_q = math.log(1.0 - min(self.k, self.E) / self.E) if self.k < self.E else -math.inf
            self.imb_ranks = max(int(self.experts_per_gpu * self.world), 1)
            self.a2a_ll, self.a2a_normal = k.a2a_ll, k.a2a_normal
        A, W = self.attn_tp, self.world
        h2 = self.hidden * 2.0  # bytes of one token's BF16 activation
        ar_a = k.allreduce(A)
        self.c_ar_attn = (L * ar_a[0], L * ar_a[1] * h2) if A > 1 else (0.0, 0.0)
        ar_w = k.allreduce(W)
        self.c_ar_dense = (self.n_dense * ar_w[0], self.n_dense * ar_w[1] * h2) if (self.n_dense and W > 1) else (0.0, 0.0)
        self.c_ar_moe = (ar_w[0], ar_w[1] * h2) if W > 1 else (0.0, 0.0)
        self._fn = self._make_parts()

    # -- the step ----------------------------------------------------------------------------
    def _make_parts(self):
        """The step function with every constant bound as a closure variable (attribute lookups
        would cost more than the arithmetic): returns seconds per component, order of PARTS."""
        D, L, W = self.dp, self.layers, self.world
        a_cf, a_mh, a_wb, a_lat = self.c_attn
        d_cf, d_mh, d_wb, d_lat = self.c_dense
        l_cf, l_mh, l_wb, l_lat = self.c_lm
        pf_c, pf_lat = self.c_pf
        dec_c, dec_lat = self.c_dec
        ar_a0, ar_a1 = self.c_ar_attn
        ar_d0, ar_d1 = self.c_ar_dense
        ar_m0, ar_m1 = self.c_ar_moe
        n_dense, n_moe = self.n_dense, self.n_moe
        graph_bs, launch_graph, launch_eager = self.graph_bs, self.launch_graph, self.launch_eager
        overhead = self.step_overhead
        zero = (0.0,) * 8
        sqrt, exp = math.sqrt, math.exp
        if n_moe:
            E, k, epg = self.E, self.k, self.experts_per_gpu
            log_q, ranks, red = self.log_q, self.imb_ranks, self.redundancy
            imb_c = 2.0 * math.log(ranks) if ranks > 1 else 0.0
            m_cf, m_mh, m_wb, m_lat = self.c_moe
            shared = self.c_shared is not None
            s_cf, s_mh, s_wb, s_lat = self.c_shared if shared else (0.0, 0.0, 0.0, 0.0)
            ep = self.ep > 1
            ll_dec, ll_pf = self.deepep_decode_ll, self.deepep_prefill_ll
            a2a_ll, a2a_nm = self.a2a_ll, self.a2a_normal
            tbo, tbo_loss = self.tbo, self.tbo_loss

        def parts(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx):
            n_tok = prefill_tokens + decode_batch
            if n_tok <= 0:
                return zero
            m = n_tok / D  # tokens on one DP rank (balanced by SGLang's DP scheduler)
            x = a_cf * (m + a_mh)
            attn_proj = L * ((x if x > a_wb else a_wb) + a_lat)
            t_att = 0.0  # attention core, per layer per GPU
            if prefill_tokens:
                t_att = pf_c * prefill_attn + pf_lat
            if decode_batch:
                t_att += dec_c * decode_ctx + dec_lat
            mlp = 0.0
            if n_dense:  # dense MLP layers: all DP ranks' tokens, TP over the world
                x = d_cf * (n_tok + d_mh)
                mlp = n_dense * ((x if x > d_wb else d_wb) + d_lat)
            # TP all-reduces after attention and dense MLPs (none under pure DP attention)
            comm = ar_a0 + ar_a1 * m + ar_d0 + ar_d1 * n_tok if (ar_a1 or ar_d1) else 0.0
            moe = 0.0
            if n_moe:
                assign = n_tok * k  # token-expert assignments in the instance
                per_gpu = assign / W
                mean = per_gpu / epg
                # comm.moe_imbalance (busiest / mean GPU), redundant experts splitting the hot ones
                imb = 1.0 + sqrt(imb_c / (mean if mean > 1.0 else 1.0)) / red
                distinct = E * (1.0 - exp(n_tok * log_q))  # comm.expected_distinct
                m_exp = assign / distinct * imb  # tokens per expert on the busiest GPU
                x = m_cf * per_gpu * imb * (m_exp + m_mh) / m_exp
                y = m_wb * distinct / E * epg
                compute = (x if x > y else y) + m_lat
                if shared:
                    x = s_cf * (m + s_mh)
                    compute += (x if x > s_wb else s_wb) + s_lat
                if ep:
                    base, slope = a2a_ll if (ll_dec if prefill_tokens == 0 else ll_pf) else a2a_nm
                    layer_comm = base + slope * (n_tok / W)
                else:
                    layer_comm = ar_m0 + ar_m1 * m if ar_m1 else 0.0
                if tbo:  # two micro-batches: communication hides behind compute, imperfectly
                    extra = (layer_comm if compute > layer_comm else compute) * tbo_loss
                    extra += layer_comm - compute if layer_comm > compute else 0.0
                else:
                    extra = layer_comm
                moe = n_moe * compute
                comm += n_moe * extra
            logits = (decode_batch + prefill_seqs) / D
            lm_head = 0.0
            if logits > 0:
                x = l_cf * (logits + l_mh)
                lm_head = (x if x > l_wb else l_wb) + l_lat
            launch = launch_graph if (prefill_tokens == 0 and m <= graph_bs) else launch_eager
            return (attn_proj, L * t_att, mlp, moe, comm, lm_head, launch, overhead)

        return parts

    def _parts(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
               decode_batch: int, decode_ctx: float) -> tuple[float, ...]:
        """Seconds per component (order of PARTS) for one step; see the module docstring."""
        return self._fn(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx)

    def breakdown(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> dict[str, float]:
        """Seconds per component for one step."""
        return dict(zip(self.PARTS, self._parts(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx)))

    def step_time(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float) -> float:
        return sum(self._fn(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx))
