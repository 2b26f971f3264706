"""The per-step arithmetic of the roofline step models, as one closure over per-instance constants.

``make_coeffs(c)`` returns ``coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens, q)
-> (parts, c_attn, c_ctx)``: the seconds of every component that does not depend on the
attention work (``parts``, order of ``PARTS``, attention core holding only its kernel
latencies), and the seconds per unit of ``prefill_attn`` and of ``decode_ctx``. The step time is
``sum(parts) + c_attn x prefill_attn + c_ctx x decode_ctx``: exactly linear in the two
attention arguments (base.py states the contract). ``c`` is the RooflineStepCost whose
coefficients (roofline.py) are bound here as closure variables, because attribute lookups would
cost more than the arithmetic.

Per layer and per GPU (M = tokens on the busiest DP rank, n = tokens in the instance):

- attention projections: GEMM(M) over the rank's attention weights, plus the small memory-bound
  kernels around them (norm, quantisation, RoPE, residual: elementwise.py); TP all-reduce
  (attention TP > 1) of M x hidden BF16;
- attention core: linear in the work (prefill pairs plus ``row_pairs`` per prefill token, decode
  context tokens x query tokens); where the profile measured ``kv_residency`` the decode KV is read
  at the cache's rate while the step's KV and weights fit the last-level cache, at DRAM's past it
  (roofline.py: such a step is priced at its own context, not linear); under ``attention_backend: sdpa_packed`` (transformers'
  paged|sdpa: one ``scaled_dot_product_attention`` call over the packed batch with a 4-D mask,
  transformers/integrations/sdpa_paged.py) every query token of the step meets every key the step
  reads, so the work is (prefill tokens + decodes) x (decode context + decodes + the chunks'
  computed and new tokens), at the prefill kernel's rate, and each key read is first gathered out
  of the paged cache and copied out to every query head (attention_backends.packed_key_bytes), so
  per key a layer the copies plus the larger of the SDPA's arithmetic and its reads of the copies;
- dense MLP: GEMM(M) over the dense weights / attention TP (data-parallel dense layers under DP
  attention, SGLang's large-EP setup) + its all-reduce;
- MoE (with its small kernels: gating, activation, permutation, elementwise.py): routed experts on the busiest GPU (imbalance x mean assignments, moe_load.py), each
  touched expert's rows padded to the GEMM tile; shared experts GEMM(M); DeepEP dispatch +
  combine sized by the busiest sender or the hottest receiver (``moe_a2a_backend: none``: an
  all-reduce of the partial outputs over the world instead); TP-sharded experts all-reduce;
- two-batch overlap (TBO, tbo.py): SGLang's stage schedule over the MoE layers (the dense layers
  run the whole batch before it), two micro-batches of n/2 tokens. Each pays its own GEMM weight
  reads, kernel latencies, DeepEP latencies and launches (computed at n/2). Prefill: a
  micro-batch's attention hides the other's dispatch, its experts the other's dispatch and
  combine; decode: only the attention stages (and a micro-batch's own shared experts) hide the
  DeepEP legs, the routed experts hide nothing. DeepEP's normal kernels hold SMs while they
  overlap compute (``deepep_normal_sm_share``) and run slower beside it; a low-latency kernel's
  launches, polling and receive copy stay on the stream (tbo.py). No loss constant. The attention core enters the
  schedule at the shape's least work in prefill (equal prompts, no cached prefix: the step stays
  linear); in decode at the step's own context (``decode_ctx`` given: the decode TBO cost is not
  linear, roofline.py sets ``linear`` False) or, in the coefficient triple, at its kernel latency
  only (an upper bound);
- LM head GEMM over the sequences' logits; DP-attention synchronisation (one small collective
  per step over the world); kernel launches: a CUDA graph replay (``launch_graph``, added), or
  eager launches, which are asynchronous: the host issues kernels ahead of the GPU and only the
  part of its issue time (``launch_eager``: kernels x per-kernel issue cost, costs/host.py) that
  exceeds the GPU work is exposed, so the ``launch`` part is max(graph replay, issue - GPU
  work) and the step ~ max(GPU, issue) + the rest. The floor at the graph replay's cost keeps an
  eager step from pricing below the same step replayed as a graph, so the step stays monotone
  where the batch crosses ``cuda_graph_max_bs``. The GPU work counted as hiding it is the step's parts that do
  not depend on ``prefill_attn`` / ``decode_ctx`` (projections, MLP, MoE, comm, LM head), so the
  step stays exactly linear in those two (base.py); the attention core is not counted as
  hiding, a lower bound on the hiding (an upper bound on the step). Under ``sdpa_packed``
  (transformers' eager engine, whose host issue is most of its step) the decode attention is
  counted too: its key copies grow with the batch's context and the issue hides them until they
  outgrow it (the H200 knee's decode steps, 3k to 35k keys read: 0.97-1.06 of their price with
  both, 0.97-1.52 with neither); the cost is then priced step by step (roofline.py sets ``linear``
  False). Measured on an H100
  (calibration/data/forward.csv, the repo's torch Llama-8B): prefill 2048 tokens eager 65.3 ms vs
  graph 63.9 ms (hidden), 128 tokens 31.5 vs 10.2 ms (host-bound); per-step host overhead
plus a per-sequence share (input preparation, sampling, output processing: ``seq_overhead_us``) and
a share per prompt token of the step (``prefill_token_ns``: work outside the timed kernels that grows
with the prefill, as a CPU engine's torch-native elementwise ops), and
a share per context token of the decode batch (``ctx_overhead_ns``: host work that grows with the
sequences' lengths, measured on the CPU engine; 0 on GPUs).
"""
from __future__ import annotations

import math

from .compute import dram_share, soft_max_scalar
from .comm import FP8_DISPATCH_BYTES, deepep_legs
from . import tbo as tbo_mod
from .sm_partition import sm_stretch
from .tbo import attention_core_share, copy_hbm_share, decode_forward, ll_recv_bytes, ll_stream_legs, prefill_forward

NO_COMM = (0.0,) * 6
PARTS = ("attn_proj", "attn_core", "mlp", "moe", "comm", "lm_head", "launch", "overhead")


def _gemm(g):
    """t(M) = lat + softmax(cf max(M, tile), wt) for a GEMM coefficient tuple
    (cf, tile, wt, lat, sharp); cf = seconds per row, wt = seconds of the weight reads."""
    cf, tile, wt, lat, sharp = g
    hard = sharp >= 1e6

    def t(m: float) -> float:
        x = cf * (m if m > tile else tile)
        if hard:
            return lat + (x if x > wt else wt)
        return lat + soft_max_scalar(x, wt, sharp)
    return t


def make_coeffs(c):
    D, L, W = c.dp, c.layers, c.world
    attn_proj = _gemm(c.c_attn)
    dense_mlp = _gemm(c.c_dense)
    lm = _gemm(c.c_lm)
    pf_c, pf_lat, pf_rows = c.c_pf
    dec_kv, dec_fl, dec_lat = c.c_dec
    dec_hot, kv_res = c.dec_kv_hot, c.kv_residency  # KV from the cache or DRAM by working set (roofline.py)
    ar_a0, ar_a1 = c.c_ar_attn
    ar_w0, ar_w1 = c.c_ar_world
    sync = c.c_dp_sync
    n_dense, n_moe = c.n_dense, c.n_moe
    graph_bs, launch_graph, launch_eager = c.graph_bs, c.launch_graph, c.launch_eager
    overhead, seq_overhead, ctx_overhead = c.step_overhead, c.seq_overhead, c.ctx_overhead
    token_overhead = c.prefill_token_overhead
    lm_on = c.lm_head_on
    tbo = c.tbo
    packed = c.packed_attention
    pk_copy, pk_read = c.packed_copy_s, c.packed_read_s
    core_share = attention_core_share(c.model) if tbo else 0.0  # decode TBO's attention-core stage
    sm_share = c.sm_share_normal
    h2 = c.hidden * 2.0
    has_ar_attn = c.attn_tp > 1
    if n_moe:
        k, epg, ep = c.k, c.experts_per_gpu, c.ep > 1
        deepep = c.a2a_deepep
        load, distinct = c.expert_load, c.distinct
        # expected busiest rank / mean at A assignments (moe_load.py), prefill and decode batches
        imb_pf, imb_dec = load.imbalance, c.expert_load_decode.imbalance
        E = c.E
        m_cf, m_tile, m_wb, m_lat, m_sharp = c.c_moe
        m_hard = m_sharp >= 1e6
        shared = _gemm(c.c_shared) if c.c_shared is not None else None
        ll_dec, ll_pf = c.deepep_decode_ll, c.deepep_prefill_ll
        a2a_ll, a2a_nm = c.a2a_ll, c.a2a_normal
        sqrt, exp = math.sqrt, math.exp
        log_stay = math.log(1.0 - 1.0 / epg) if epg > 1.0 else 0.0  # P(an assignment misses one expert)
        hbm_share = 0.0  # of the HBM, the copies of a DeepEP normal kernel under TBO (tbo.py)
        if tbo and ep and deepep and a2a_nm[0][2] > 0.0:
            link = sum(deepep_legs(1.0, c.hidden, k, W, c.gpn, FP8_DISPATCH_BYTES, True))
            hbm_share = copy_hbm_share(link / a2a_nm[0][2], c.hbm_peak * c.hw.efficiency.hbm)
        # under TBO each kernel as (stream fixed, flight fixed, stream/token, flight/token) (tbo.py):
        # a low-latency kernel's launches, polling and receive copy run on the stream; a normal
        # kernel runs on its own comm stream and SMs, all of it off the compute stream
        tbo_ll = ll_stream_legs(a2a_ll, (ll_recv_bytes(c.hidden, k, FP8_DISPATCH_BYTES, False),
                                         ll_recv_bytes(c.hidden, k, 2.0, True)),
                                c.hbm_peak * c.hw.efficiency.hbm, c.a2a_ll_pairs) if tbo else None
        # normal kernels under TBO run slower beside the compute (tbo.NORMAL_OVERLAP_SLOWDOWN)
        tbo_nm = tuple((0.0, b * f, sm * f, fl * f) for (b, sm, fl), f in zip(a2a_nm, tbo_mod.NORMAL_OVERLAP_SLOWDOWN))

    ew_a0, ew_a1, ew_m0, ew_d1, ew_m1, ew_asg = c.c_ew

    def layer_costs(n_tok: float, m: float, prefill: bool, dec_share: float = 0.0):
        """(attention-projection, dense-MLP, MoE-compute, MoE-comm, attention-TP all-reduce,
        and the GEMM kernels' part of the attention projections and of the MoE compute)
        seconds of one layer of each kind for ``n_tok`` tokens (``m`` on the busiest rank, a
        ``dec_share`` of them decode tokens); the MoE comm in seconds, under TBO as (SM, fixed,
        bandwidth) seconds of the dispatch, then of the combine (tbo.py's transfers)."""
        ap_g = attn_proj(m)
        ap = ap_g + ew_a0 + ew_a1 * m
        ar = ar_a0 + ar_a1 * m * h2 if has_ar_attn else 0.0
        dm = dense_mlp(m) + ew_m0 + ew_d1 * m if n_dense else 0.0
        if not n_moe:
            return ap, dm, 0.0, (NO_COMM if tbo else 0.0), ar, ap_g, 0.0
        assign = n_tok * k
        touched = distinct(n_tok)
        if ep:  # experts split over the GPUs: the busiest GPU sets the pace
            # a mixed batch: the two imbalances weighted by the tokens of each kind (an
            # interpolation between the prefill and the decode drift)
            if dec_share <= 0.0:
                imb = imb_pf(assign)
            elif dec_share >= 1.0:
                imb = imb_dec(assign)
            else:
                imb = dec_share * imb_dec(assign) + (1.0 - dec_share) * imb_pf(assign)
            a_gpu = assign / W * imb
            # weights read on the busiest GPU: the experts its own assignments touch (its a_gpu
            # assignments over its epg experts), at least the average GPU's share of the batch's
            t_gpu = epg * touched / E
            t_hot = epg * (1.0 - exp(a_gpu * log_stay)) if epg > 1.0 else 1.0
            if t_hot > t_gpu:
                t_gpu = t_hot
            m_exp = a_gpu / (t_gpu if t_gpu > 1e-9 else 1e-9)
            if deepep:
                ll = ll_pf if prefill else ll_dec
                mean_rank = n_tok / W
                send = m / c.attn_tp
                hot = mean_rank * imb
                x = send if send > hot else hot
                if tbo:
                    (ds0, df0, ds1, df1), (cs0, cf0, cs1, cf1) = tbo_ll if ll else tbo_nm
                    comm = (ds0 + ds1 * x, df0, df1 * x, cs0 + cs1 * x, cf0, cf1 * x)
                else:
                    (db, dsm, dfl), (cb, csm, cfl) = a2a_ll if ll else a2a_nm
                    comm = db + cb + (dsm + dfl + csm + cfl) * x
            else:  # no a2a backend: the partial outputs of every rank's experts are summed (NCCL, on the SMs)
                comm = ar_w0 + ar_w1 * n_tok * h2
                if tbo:
                    comm = (0.0, 0.0, 0.0, comm, 0.0, 0.0)
        else:  # every GPU holds a 1/W slice of every expert: no imbalance
            a_gpu = assign / W
            t_gpu = touched / W
            m_exp = assign / (touched if touched > 1e-9 else 1e-9)
            # the all-reduce runs on the SMs (NCCL kernels): nothing for TBO to hide
            comm = ar_w0 + ar_w1 * n_tok * h2 if W > 1 else 0.0
            if tbo:
                comm = (0.0, 0.0, 0.0, comm, 0.0, 0.0)
        x = m_cf * a_gpu * (m_exp if m_exp > m_tile else m_tile) / (m_exp if m_exp > 1e-9 else 1e-9)
        y = m_wb * t_gpu
        routed = m_lat + ((x if x > y else y) if m_hard else soft_max_scalar(x, y, m_sharp))
        mo_g = routed
        if shared is not None:
            sh = shared(m)
            routed += sh
            mo_g += sh
        routed += ew_m0 + ew_m1 * m + ew_asg * a_gpu
        return ap, dm, routed, comm, ar, ap_g, mo_g

    def coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=None, q=1, decode_ctx=None):
        n_tok = prefill_tokens + decode_batch * q
        if n_tok <= 0:
            return (0.0,) * 8, 0.0, 0.0
        m = rank_tokens if rank_tokens is not None else n_tok / D
        prefill = prefill_tokens > 0
        ds = decode_batch * q / n_tok  # decode tokens' share (their batch drift, moe_load.py)
        split = 2.0 if tbo else 1.0
        # SGLang runs TBO over the MoE layers only: the dense layers before them run the whole
        # batch (DeepseekV2Model.forward: TBO starts at first_k_dense_replace)
        per_layer = (n_moe * split + n_dense) if tbo else L
        # attention core: linear in the work; kernel latencies once per micro-batch
        if packed:  # one masked dense attention over the packed batch: every query x every key
            # read (module doc); kv = decode_ctx + the decodes' new tokens + the chunks' keys,
            # sum(computed + tokens) = seqs x prefill_attn / tokens + tokens / 2 (equal chunks).
            # Per key a layer: its gather and expand copies, then the SDPA at the larger of its
            # arithmetic (every query) and its reads of the expanded keys (attention_backends.packed_key_bytes)
            per_key = pf_c * n_tok / D
            per_key = pk_copy + (per_key if per_key > pk_read else pk_read)
            c_attn = L * per_key * prefill_seqs / prefill_tokens if prefill else 0.0
            c_ctx = L * per_key + ctx_overhead if decode_batch else 0.0
            core = per_layer * pf_lat + L * per_key * (decode_batch * q + prefill_tokens / 2.0) / D
        else:
            c_attn = L * pf_c if prefill else 0.0
            core = 0.0
            if prefill:  # kernel latencies, and each query row's work beyond its pairs (compute.py)
                core = per_layer * pf_lat + L * pf_c * pf_rows * prefill_tokens / D
            c_ctx = 0.0
            if decode_batch:
                fl = dec_fl * q
                kv = dec_kv  # (no step context given: the DRAM rate, an upper bound)
                if kv_res is not None and decode_ctx is not None:
                    w0, per_ctx, cache, width = kv_res
                    kv = dec_hot + (dec_kv - dec_hot) * dram_share(w0 + per_ctx * decode_ctx, cache, width)
                c_ctx = L * (kv if kv > fl else fl) + ctx_overhead
                core += per_layer * dec_lat
        if tbo:
            proj = mlp = moe = comm = 0.0
            if n_dense:
                ap, dm, _, _, ar, _, _ = layer_costs(n_tok, m, prefill, ds)
                proj, mlp = n_dense * ap, n_dense * dm
                comm = n_dense * 2.0 * ar if has_ar_attn else 0.0  # after attention and after the MLP
            if n_moe:  # the stage schedule of SGLang's TBO (tbo.py), micro-batches of n/2
                mh = m / 2.0
                ap, _, mo, cm, ar, ap_g, mo_g = layer_costs(n_tok / 2.0, mh, prefill, ds)
                proj += n_moe * 2.0 * ap
                moe += n_moe * 2.0 * mo
                # attention core of one micro-batch at the shape's least work (see the docstring)
                seqs_rank = prefill_seqs / D if prefill_seqs > D else 1.0
                core_mb = (pf_c * (mh * mh / seqs_rank + pf_rows * mh) + pf_lat) if prefill else 0.0
                if decode_batch:
                    core_mb += dec_lat
                    if decode_ctx:  # the step's own context (a non-linear TBO cost, see the docstring)
                        core_mb += (dec_kv if dec_kv > fl else fl) * decode_ctx / (2.0 * D)
                sh = shared(mh) if shared is not None else 0.0
                ew_mlp = ew_m0 + ew_m1 * mh  # norm, quantisation, gate, top-k: before the dispatch
                ex = mo - sh - ew_mlp  # routed experts with their activation and permutation
                attn = ap + core_mb + ar + ew_mlp
                prep = ap - core_share * ap_g  # decode: the attention before its kernel (op_prepare)
                d, cmb = cm[:3], cm[3:]
                ll = ll_pf if prefill else ll_dec
                if ep and deepep and not ll:  # normal kernels hold SMs and HBM while they overlap
                    g, f, fm = sm_stretch(attn + mo, sum(cm), sm_share, hbm_share)
                    ex_g, mem = mo_g - sh, ap - ap_g + ew_mlp  # GEMMs; the small memory-bound kernels
                    attn = ap_g * g + (attn - ap_g - mem) * f + mem * fm
                    prep = (1.0 - core_share) * ap_g * g + (ap - ap_g) * fm
                    sh, ex = sh * g, ex_g * g + (ex - ex_g) * fm
                normal = ep and deepep and not ll
                if prefill:
                    layers = prefill_forward(attn, sh, ex, d, cmb, n_moe, normal)
                else:
                    layers = decode_forward(prep, attn - prep, sh, ex, d, cmb, n_moe, normal)
                comm += layers - n_moe * 2.0 * (ap + core_mb + mo)
        else:
            ap, dm, mo, cm, ar, _, _ = layer_costs(n_tok, m, prefill, ds)
            proj, mlp, moe = L * ap, n_dense * dm, n_moe * mo
            comm = L * ar + n_moe * cm + (n_dense * ar if n_dense else 0.0)
        if D > 1:
            comm += sync
        logits = (decode_batch * q + prefill_seqs) / D
        lm_head = lm(logits) if (lm_on and logits > 0) else 0.0
        launch = launch_graph * (per_layer / L)
        if prefill or m / q > graph_bs:  # eager: the issue time the GPU work does not cover (docstring)
            exposed = launch_eager * (per_layer / L) - (proj + mlp + moe + comm + lm_head)
            if packed and decode_ctx is not None:  # priced step by step (not linear): its attention hides the issue too
                exposed -= core + (c_ctx - ctx_overhead) * decode_ctx
            if exposed > launch:
                launch = exposed
        host = overhead + seq_overhead * (decode_batch + prefill_seqs) if seq_overhead else overhead
        if token_overhead and prefill_tokens:  # per rank's share of the step's prompt tokens
            host += token_overhead * prefill_tokens / D
        return (proj, core, mlp, moe, comm, lm_head, launch, host), c_attn / D, c_ctx / D

    return coeffs
