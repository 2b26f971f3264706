"""Two-batch overlap (TBO) of MoE layers, built from its parts (seconds).

SGLang's TBO (LMSYS 2025-05-05, "Two-batch Overlap"; DeepSeek's profile-data design) splits a
batch into two micro-batches and runs each layer's operations in this order per micro-batch:
attention, dispatch, experts, combine, with a yield after the attention and after the experts,
so the GPU sees two streams:

    compute stream:  A1  A2  M1  M2 | A1' A2' M1' M2' | ...
    comm stream:         D1  D2  C1  C2 | D1' ...

- A_i: micro-batch i's attention (projections, core, attention-TP all-reduce) and whatever part
  of its dispatch runs on the SMs; M_i: its experts (routed + shared) and the SM part of its
  combine;
- D_i / C_i: the part of micro-batch i's dispatch / combine that is in flight on the comm stream.
- Dependencies: D_i starts when A_i ends; M_i needs D_i; C_i needs M_i; the next layer's A_i
  needs C_i. A micro-batch's compute never hides its own communication, only the other's.

``tbo_moe_layers`` runs this schedule for a few layers (the pattern is periodic after the first)
and extrapolates to ``n`` layers, so a layer costs max(compute, comm) only where the two
streams really interleave, plus the pipeline's fill and the waits the dependencies force.

DeepEP's normal kernels (prefill) run on a fixed SM partition while they overlap compute (24 of
132 SMs in DeepEP's benchmarks, ``deepep_normal_sm_share``): DeepGEMM is held to the other SMs
for the whole TBO forward, other compute while it runs beside them (``sm_partition``). LMSYS observed exactly this in its prefill breakdown
("no-TBO 8k outperforms TBO 16k in per-kernel speed ... reduced SMs with TBO"). Low-latency
kernels (decode) hold SMs only while they copy (the NVLink leg; LMSYS: they "either fully
utilize SMs (during send/receive) or none (during inflight waiting)"): that part is on the
compute stream, the in-flight part on the comm stream.

At small decode batches a micro-batch's GEMMs read the same weights as the whole batch (weight
reads dominate), so TBO doubles them and its per-micro-batch fixed costs, while the
communication it hides is small: TBO loses (LMSYS ablation: -27% at 32 tokens per device). At
large batches compute and communication are comparable and TBO wins (+25.5% at 256).
"""
from __future__ import annotations


def sm_partition(a: float, m: float, d: float, c: float, share: float, a_gemm: float = 0.0,
                 m_gemm: float = 0.0) -> tuple[float, float]:
    """Compute legs (a, m) of one micro-batch stretched by the SMs normal DeepEP kernels hold.

    SGLang runs the whole TBO prefill forward with DeepGEMM limited to the SMs DeepEP leaves
    (two_batch_overlap.py: ``configure_deep_gemm_num_sms(total SMs - DeepEPConfig.num_sms)``),
    so the DeepGEMM part of each leg (``a_gemm``, ``m_gemm``) runs on 1 - ``share`` of the SMs
    throughout; the other kernels (attention core, small kernels) share the SMs only while a
    communication kernel runs beside them (at most all of the time: comm d + c against compute
    a + m per micro-batch)."""
    comp = a + m
    if comp <= 0.0 or share <= 0.0:
        return a, m
    overlap = (d + c) / comp
    f = 1.0 + (overlap if overlap < 1.0 else 1.0) * share / (1.0 - share)
    g = 1.0 / (1.0 - share)
    return a_gemm * g + (a - a_gemm) * f, m_gemm * g + (m - m_gemm) * f


def tbo_moe_layers(a: float, m: float, d: float, c: float, n: int) -> float:
    """Seconds of ``n`` consecutive MoE layers under two-batch overlap, per-micro-batch legs
    ``a`` (attention side compute), ``m`` (expert side compute), ``d`` (dispatch in flight),
    ``c`` (combine in flight); see the module docstring for the schedule."""
    if n <= 0:
        return 0.0
    comp_free = comm_free = c1 = c2 = 0.0
    ends = []
    for _ in range(3):
        a1 = (comp_free if comp_free > c1 else c1) + a
        a2 = (a1 if a1 > c2 else c2) + a
        d1 = (comm_free if comm_free > a1 else a1) + d
        d2 = (d1 if d1 > a2 else a2) + d
        m1 = (a2 if a2 > d1 else d1) + m
        m2 = (m1 if m1 > d2 else d2) + m
        c1 = (d2 if d2 > m1 else m1) + c
        c2 = (c1 if c1 > m2 else m2) + c
        comp_free, comm_free = m2, c2
        ends.append(m2 if m2 > c2 else c2)
    period = (ends[2] - ends[0]) / 2.0
    return ends[0] + (n - 1) * period
