"""Two-batch overlap (TBO) of MoE layers, built from SGLang's own operation order (seconds).

SGLang's TBO (LMSYS blog 2025-05-05, "Two-batch Overlap", after DeepSeek's profile-data design)
splits a batch into two micro-batches A and B and runs both on **one** CUDA stream. Each layer is
a list of operations cut into *stages* by yield points
(sglang/srt/operations_strategy.py, ``_compute_moe_deepseek_blog_prefill`` / ``_decode``); the
executor (sglang/srt/operations.py, ``execute_overlapped_operations``) runs ``delta`` stages of A
alone, then alternates one stage of A, one of B, and finishes B's last ``delta`` stages.
A transfer hides behind whatever the stream runs between the stage that sends it and the
stage that receives it; a receive whose data has not arrived waits (LMSYS: decode kernels
"busy-waiting for data"). Per layer:

- **prefill** (``tbo_delta_stages = 0``; two stages per layer)::

      [shared experts and combine_b of the previous layer, attention, gate, top-k, dispatch_a]
      [dispatch_b, routed experts, combine_a]

  so A's dispatch hides behind B's attention, B's behind A's experts, and each combine behind
  the other micro-batch's experts and its own shared experts (``prefill_layer``). DeepEP's
  normal kernels are issued in the ``_b`` call, ready since the ``_a`` call's event, one after
  another on DeepEP's comm stream;
- **decode** (``tbo_delta_stages = 2``; five stages per layer, DeepSeek's "5-stage pipeline")::

      [attention prepare (projections, RoPE)]  [attention core, o_proj, gate, top-k]
      [dispatch_a, shared experts]  [dispatch_b, routed experts, combine_a]  [combine_b]

  so a dispatch hides behind its own shared experts and the other micro-batch's attention
  prepare, a combine behind the other's attention core; the routed experts hide nothing
  (``decode_layer``). The gain therefore follows the attention time (the context): LMSYS's
  simulated-MTP case with slowed attention gains most (+35%), and "SGLang's combine ... appears
  2x slower than DeepSeek's due to shorter attention computation, causing communication kernels
  to busy-wait". At small batches each micro-batch reads every weight again and pays every
  kernel latency again for little communication to hide: TBO gains nothing or loses.

Transfers are (SM seconds on the stream, fixed seconds, bandwidth seconds). DeepEP's normal
kernels (prefill) run on their comm stream one after another (``serial``): a kernel starts when
the previous one has finished. Low-latency kernels (decode) put their RDMA writes on the NIC:
their bytes queue behind the bytes already on it, their fixed latency (the completion round
trip) does not hold the NIC; their NVLink copy is SM work on the stream (DeepSeek profile-data
README: "after RDMA messages are issued, all GPU SMs are freed").

DeepEP's normal kernels hold a fixed SM partition (24 of 132 SMs in DeepEP's benchmarks,
``deepep_normal_sm_share``): SGLang limits DeepGEMM to the other SMs for the whole TBO prefill
(``deep_gemm_num_sms = total - DeepEPConfig.num_sms``), and other kernels lose those SMs while a
communication kernel runs beside them (``sm_partition.sm_stretch``, measured on an H100). LMSYS: "no-TBO 8k outperforms TBO 16k in
per-kernel speed ... reduced SMs with TBO".

Under TBO a low-latency kernel keeps part of its time on the stream (``ll_stream_legs``: its
launches and count polling, ``LL_STREAM_SHARE`` of the fitted intranode base, and its receive copy;
its per-remote-pair NIC messages stay in flight), and a
normal kernel runs ``NORMAL_OVERLAP_SLOWDOWN`` slower than alone (DeepSeek's own prefill profile
against DeepEP's unit test); both keep the no-TBO price of the kernel unchanged.

``tbo_forward`` runs the stage schedule for a few layers and extrapolates its steady period to
``n`` layers, so fill, drain and every dependency wait are priced; there is no loss constant.
``decode_forward`` / ``prefill_forward`` are the same schedules written out (the step model's
hot path).
"""
from __future__ import annotations

YIELD = None  # a yield point between stages
SIM_LAYERS = 5  # layers simulated before the steady period is extrapolated
# HBM passes of each byte a DeepEP normal kernel moves over a link, on one GPU: read where it
# leaves, written where it lands, read and written again by the NVLink forwarding or by the
# receiver's copy into the expert layout (a reading of DeepEP's internode path). Assumption 4,
# range 2-6 (``pdsim sensitivity`` perturbs it).
COPY_HBM_PASSES = 4.0
# Share of a low-latency DeepEP kernel's intranode fixed latency (``base_us``, deepep.py) that is
# kernel time on the compute stream (launching the send and the receive kernel, issuing the
# sends, the grid sync, polling each pair's count), not time in flight. With the receive hook
# SGLang runs both kernels on its one stream (DeepEP legacy internode_ll.cu: a send phase and a
# receive phase), so that part cannot hide behind the other micro-batch. The part per remote
# pair (``pair_us`` x remote pairs: one NIC atomic per pair, deepep.py) is in flight: it exists
# only where the NIC carries the pair. Derived: the fitted intranode bases are 12.8 us
# (dispatch) and 13.6 us (combine) on H100 (H100's measured one-token EP8 times 13.2 / 14.4 us);
# of these only the NVLink latency, ~1 us, is in flight: (12.8 - 1) / 12.8 = 0.92, 0.93
# (calibration/data/deepep_low_latency.csv, AIConfigurator's SGLang tables). Assumption 0.9,
# range 0.5-1.0 (``pdsim sensitivity``).
LL_STREAM_SHARE = 0.9
# How much slower a DeepEP normal kernel runs while compute kernels run beside it than alone
# (dispatch, combine): its copies share HBM and L2 with the compute on the other SMs. Measured on
# DeepSeek's own H800 prefill profile (EP32, 16K tokens per GPU, balanced routing, two
# micro-batches) against DeepEP's unit test of the same shapes, as LMSYS broke both down
# (blog 2025-05-05, "Prefill Time Breakdown" figure, ms per layer): dispatch core 9.4 vs 7.2,
# combine core 17.2 vs 14.2. LMSYS: "Both DeepSeek and SGLang have a communication time slower
# than unit test results, while the latter is achievable when disabling TBO". SGLang's own
# kernels in the same figure (simulated perfect EPLB, H100): 1.50 / 1.05. Range 1.0-1.5
# (``pdsim sensitivity``). The cross-rank barriers beside these kernels (DeepSeek: ~1 ms per
# call) are not priced: see docs/mechanisms/two-batch-overlap.md.
NORMAL_OVERLAP_SLOWDOWN = (9.4 / 7.2, 17.2 / 14.2)


def attention_core_share(model) -> float:
    """Share of one layer's attention weights (and their FLOPs) that decode runs *after* the
    attention kernel, in SGLang's ``op_core`` stage: MLA's w_vc absorption bmm and o_proj; GQA's
    o_proj. The rest (q/kv projections, MLA's q_b and w_kc) is the ``op_prepare`` stage."""
    h, H = model.hidden, model.num_heads
    if model.mla is not None:
        m = model.mla
        core = H * m.v_head_dim * h + m.kv_lora_rank * H * m.v_head_dim
    else:
        core = H * model.head_dim * h
    total = model.attn_params
    return core / total if total > 0 else 0.0


def copy_hbm_share(link_bytes_per_s: float, hbm_bytes_per_s: float) -> float:
    """Share of this GPU's achievable HBM bandwidth that a DeepEP normal kernel's copies take
    while it moves ``link_bytes_per_s`` over NVLink and RDMA (``COPY_HBM_PASSES`` per byte):
    memory-bound kernels beside it get the rest. H100 EP32 (RDMA-bound, ~70 GB/s of link bytes):
    ~0.1; one node (NVLink copies at ~300 GB/s): ~0.45."""
    if hbm_bytes_per_s <= 0.0:
        return 0.0
    share = COPY_HBM_PASSES * link_bytes_per_s / hbm_bytes_per_s
    return share if share < 0.9 else 0.9


def ll_recv_bytes(hidden: int, top_k: int, elem_bytes: float, combine: bool) -> float:
    """HBM bytes a low-latency receive kernel moves per token of its rank's batch: the dispatch
    receive reads each of the ``top_k`` messages a token sends on average and writes it into the
    packed expert layout (DeepEP legacy internode_ll.cu, "Copy tokens"); the combine receive reads
    the ``top_k`` expert outputs of each token and writes their weighted sum."""
    msg = hidden * elem_bytes
    return (top_k + 1) * msg if combine else 2.0 * top_k * msg


def ll_stream_legs(legs: tuple, recv_bytes: tuple, hbm_bytes_per_s: float, pairs: tuple = (0.0, 0.0)) -> tuple:
    """Low-latency DeepEP kernels under TBO as (stream fixed s, flight fixed s, stream s per
    token, flight s per token), dispatch then combine, from their fitted (fixed s, SM s per token,
    flight s per token) ``legs`` (deepep.linear_coeffs), of whose fixed seconds ``pairs`` are
    the per-remote-pair part (in flight). ``LL_STREAM_SHARE`` of the rest (the intranode base)
    and the receive kernel's copy (``recv_bytes`` per token at ``hbm_bytes_per_s``, taken out of
    the flight: the fitted time already holds it) move onto the stream; the totals stay the
    fitted kernel times. The receive's copy is charged with the send (the stream time is the
    same)."""
    out = []
    for (fixed, sm, fl), rb, pr in zip(legs, recv_bytes, pairs):
        copy = rb / hbm_bytes_per_s if hbm_bytes_per_s > 0.0 else 0.0
        if copy > fl:
            copy = fl  # one node: no flight leg, the fitted NVLink time holds the copy
        base = fixed - pr
        out.append((LL_STREAM_SHARE * base, (1.0 - LL_STREAM_SHARE) * base + pr, sm + copy, fl - copy))
    return tuple(out)


def prefill_layer(attn: float, shared: float, experts: float, d: tuple, c: tuple, normal: bool = True) -> list:
    """One MoE layer of one micro-batch in SGLang's prefill TBO order. ``attn``: attention
    (projections, core, norms, gate, top-k, attention-TP all-reduce); ``shared`` / ``experts``:
    shared and routed experts; ``d`` / ``c``: dispatch / combine as (SM seconds on the stream,
    fixed seconds, bandwidth seconds). What follows the last yield (shared experts, combine_b)
    runs in the next layer's first stage, as SGLang's concatenated operation lists do.

    ``normal``: DeepEP's normal kernels. SGLang's ``dispatch_a`` / ``combine_a`` only record an
    event; ``dispatch_b`` / ``combine_b`` call ``Buffer.dispatch`` / ``Buffer.combine``
    (token_dispatcher/deepep.py, ``_DeepEPDispatcherImplNormal``), which put the kernel on
    DeepEP's one comm stream, to start once that event has passed. A transfer therefore enters
    the comm stream in the order of the ``_b`` calls, ready since its ``_a`` (``event`` /
    ``issue``). The dispatch's ``_b`` also blocks the CPU until the notify kernel has counted the
    tokens (LMSYS: the yield between ``_a`` and ``_b`` exists so the other micro-batch's
    compute is queued before that block); with the other micro-batch's stage already queued the
    block leaves the GPU busy, so it is not priced.
    Low-latency kernels (``normal`` False) send in ``_a`` and receive in ``_b``."""
    if normal:
        return [("c", attn), ("event", "d"), YIELD, ("issue", "d") + tuple(d), ("recv", "d"), ("c", experts),
                ("event", "c"), YIELD, ("c", shared), ("issue", "c") + tuple(c), ("recv", "c")]
    return [("c", attn), ("send", "d") + tuple(d), YIELD, ("recv", "d"), ("c", experts), ("send", "c") + tuple(c),
            YIELD, ("c", shared), ("recv", "c")]


def decode_layer(prepare: float, core: float, shared: float, experts: float, d: tuple, c: tuple) -> list:
    """One MoE layer of one micro-batch in SGLang's decode TBO order (five stages); ``prepare``
    / ``core``: the attention before / from the attention kernel on (``attention_core_share``)."""
    return [("c", prepare), YIELD, ("c", core), YIELD, ("send", "d") + tuple(d), ("c", shared), YIELD,
            ("recv", "d"), ("c", experts), ("send", "c") + tuple(c), YIELD, ("recv", "c"), YIELD]


def _stages(layer: list, n: int) -> list[list[tuple]]:
    """The stages of ``n`` consecutive layers: the layers' operation lists concatenated and cut
    at the yields (SGLang's ``_convert_operations_to_stages``), transfers keyed by layer."""
    stages, cur = [], []
    for i in range(n):
        for op in layer:
            if op is YIELD:
                stages.append(cur)
                cur = []
            elif op[0] == "c":
                cur.append(op)
            else:
                cur.append((op[0], (op[1], i)) + op[2:])
    if cur:
        stages.append(cur)
    return stages


def _run(stages: list[list[tuple]], delta: int, serial: bool) -> tuple[float, list[float]]:
    """Seconds until both micro-batches have run ``stages`` on one stream (A leads by ``delta``
    stages), and when A finished each stage."""
    t = 0.0
    link_free = 0.0
    arrive: dict = {}
    event: dict = {}
    a_done: list[float] = []
    n = len(stages)
    order = [("a", i) for i in range(delta)]
    for i in range(n - delta):
        order += [("a", delta + i), ("b", i)]
    order += [("b", n - delta + i) for i in range(delta)]
    for mb, s in order:
        for op in stages[s]:
            kind = op[0]
            if kind == "c":
                t += op[1]
            elif kind == "send" or kind == "issue":
                _, key, sm, fixed, bw = op
                t += sm
                ready = t if kind == "send" else event.get((mb, key), t)  # issue: since the event
                start = ready if ready > link_free else link_free
                link_free = start + bw + (fixed if serial else 0.0)
                arrive[(mb, key)] = start + bw + fixed
            elif kind == "event":
                event[(mb, op[1])] = t
            else:
                got = arrive.get((mb, op[1]))
                if got is not None and got > t:
                    t = got
        if mb == "a":
            a_done.append(t)
    return t, a_done


def tbo_forward(layer: list, n: int, delta: int, serial: bool) -> float:
    """Seconds of ``n`` consecutive MoE layers under TBO, both micro-batches, for the per-layer
    operation list ``layer`` (``prefill_layer`` / ``decode_layer``): the stage schedule of a few
    layers, extrapolated by its steady period (measured over two layers, so a schedule whose
    period spans two layers is priced right)."""
    if n <= 0:
        return 0.0
    k = n if n <= SIM_LAYERS else SIM_LAYERS
    stages = _stages(layer, k)
    total, a_done = _run(stages, delta, serial)
    if n == k:
        return total
    per = layer.count(YIELD)  # stages per layer
    period = (a_done[per * (k - 1) - 1] - a_done[per * (k - 3) - 1]) / 2.0
    return total + (n - k) * period


# -- the same two schedules as straight-line arithmetic: step.py prices every decode step with
# these (the step model's hot path); ``tbo_forward`` over ``prefill_layer`` / ``decode_layer`` is
# their reference (tests/mechanisms/test_tbo.py checks they agree)

def _extrapolate(total: float, ends: list[float], k: int, n: int) -> float:
    if n == k:
        return total
    return total + (n - k) * (ends[k - 2] - ends[k - 4]) / 2.0  # the steady period over two layers


def decode_forward(prep: float, core: float, shared: float, experts: float, d: tuple, c: tuple, n: int,
                   serial: bool = False) -> float:
    """``tbo_forward(decode_layer(prep, core, shared, experts, d, c), n, 2, serial)``, unrolled:
    per layer the stream runs A2 B0 A3 B1 A4 B2 A0' B3 A1' B4 (stage numbers of ``decode_layer``,
    A two stages ahead)."""
    if n <= 0:
        return 0.0
    dsm, dfx, dbw = d
    csm, cfx, cbw = c
    dhold = dbw + dfx if serial else dbw
    chold = cbw + cfx if serial else cbw
    k = n if n <= SIM_LAYERS else SIM_LAYERS
    link = 0.0
    t = prep + core  # A0 A1 of the first layer
    ends: list[float] = []
    for i in range(k):
        # A2: dispatch_a, shared experts
        t += dsm
        st = t if t > link else link
        link = st + dhold
        ad = st + dbw + dfx
        t += shared + prep  # B0: B's attention prepare
        # A3: dispatch_b, experts, combine_a
        if ad > t:
            t = ad
        t += experts + csm
        st = t if t > link else link
        link = st + chold
        ac = st + cbw + cfx
        t += core  # B1
        if ac > t:  # A4: combine_b
            t = ac
        ends.append(t)
        # B2: dispatch_a, shared experts
        t += dsm
        st = t if t > link else link
        link = st + dhold
        bd = st + dbw + dfx
        t += shared
        if i + 1 < k:
            t += prep  # A0 of the next layer
        if bd > t:  # B3: dispatch_b, experts, combine_a
            t = bd
        t += experts + csm
        st = t if t > link else link
        link = st + chold
        bc = st + cbw + cfx
        if i + 1 < k:
            t += core  # A1 of the next layer
        if bc > t:  # B4: combine_b
            t = bc
    return _extrapolate(t, ends, k, n)


def prefill_forward(attn: float, shared: float, experts: float, d: tuple, c: tuple, n: int,
                    normal: bool = True) -> float:
    """``tbo_forward(prefill_layer(attn, shared, experts, d, c, normal), n, 0, True)``."""
    if n <= 0:
        return 0.0
    dsm, dfx, dbw = d
    csm, cfx, cbw = c
    k = n if n <= SIM_LAYERS else SIM_LAYERS
    t = link = 0.0
    ev = [0.0, 0.0, 0.0, 0.0]  # dispatch / combine ready (event or send) of A, then of B
    arr = [0.0, 0.0, 0.0, 0.0]
    ends: list[float] = []
    for i in range(k + 1):
        for half in (0, 1):
            if i == k and half == 1:
                break
            for mb in (0, 1):
                if half == 0:  # [shared, combine_b of the previous layer | attention, dispatch_a]
                    if i > 0:
                        t += shared
                        if normal:
                            t += csm
                            st = ev[2 * mb + 1] if ev[2 * mb + 1] > link else link
                            link = st + cbw + cfx
                            arr[2 * mb + 1] = link
                        a = arr[2 * mb + 1]
                        if a > t:
                            t = a
                    if i == k:
                        continue
                    t += attn
                    if normal:
                        ev[2 * mb] = t
                    else:
                        t += dsm
                        st = t if t > link else link
                        link = st + dbw + dfx
                        arr[2 * mb] = link
                else:  # [dispatch_b, experts, combine_a]
                    if normal:
                        t += dsm
                        st = ev[2 * mb] if ev[2 * mb] > link else link
                        link = st + dbw + dfx
                        arr[2 * mb] = link
                    a = arr[2 * mb]
                    t = (a if a > t else t) + experts
                    if normal:
                        ev[2 * mb + 1] = t
                    else:
                        t += csm
                        st = t if t > link else link
                        link = st + cbw + cfx
                        arr[2 * mb + 1] = link
                    if mb == 0:
                        ends.append(t)
    return _extrapolate(t, ends, k, n)
