"""Predictions a router can make from read-only instance views and pdsim's own prices.

A predictive router (Mooncake's Conductor, an SLO-aware policy) estimates, per candidate
instance, how long a request would wait and run there. The estimates use the same price
functions the world charges (``view.step_cost``: pdsim.costs.StepCost; costs/transfer.py for
KV transfers) applied to the load an instance exposes (queued prompt tokens, running batch),
so a prediction is only as wrong as the load summary it starts from:

- ``queue_time_s``: the instance's queued prompt tokens prefilled in full chunks (its
  ``chunked_prefill_size`` per step, spread over its DP ranks), their attention estimated as
  if every queued prompt had the mean queued length (the view exposes totals, not each
  prompt). Queued tokens whose prefix will hit the cache count until their prompt is admitted,
  so the estimate errs high under prefix reuse. The step in flight is not counted.
- ``prefill_time_s``: the request's uncached tokens prefilled alone, chunk by chunk, each
  chunk attending to the cached prefix and the chunks before it (one DP rank holds the
  request, as SGLang's DP controller places it).
- ``transfer_time_s``: moving the prompt's KV P -> D unloaded: the transport's fixed overhead
  plus the bytes at the pair's flow cap or the slower end's NICs (``transfer_plan``,
  ``flow_cap``, ``instance_nic_capacity``); contention with
  other transfers on the same NICs is not predicted.
- ``decode_step_s``: the decode step (time between tokens) of an instance once this request
  joins: every request it runs or has queued, with the context its KV pool holds.
- ``decode_wait_s``: how long a decode instance whose KV pool is full keeps a new request
  waiting for pre-allocation (the KV the prompts ahead of it and its own need, freed at the
  rate the running batch finishes).

All times are seconds. Nothing here changes the world or draws random numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...costs.transfer import flow_cap, instance_nic_capacity, transfer_plan
from ...specs.scenario import TransferSpec


@dataclass(frozen=True)
class TTFTPrediction:
    """Predicted time to first token of one request on one (P, D) pair, seconds."""

    queue_s: float
    prefill_s: float
    transfer_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.queue_s + self.prefill_s + self.transfer_s


def _chunk(view) -> int:
    return max(1, view.rank_prefill_tokens)


def prefill_time_s(view, new_tokens: int, cached_tokens: int = 0) -> float:
    """Seconds to prefill ``new_tokens`` after ``cached_tokens`` of cached prefix on ``view``'s
    instance with nothing else in the batch: one step per chunk of its per-rank budget."""
    if new_tokens <= 0:
        return 0.0
    cost = view.step_cost
    dp = max(1, view.dp)
    chunk = _chunk(view)
    done = cached_tokens
    left = new_tokens
    t = 0.0
    while left > 0:
        c = chunk if left > chunk else left
        pairs = c * (done + c / 2.0)
        # under DP attention one rank carries the request: the price takes dp x that rank's
        # attention pairs and its token count (base.py contract)
        if dp > 1:
            t += cost.step_time(c, pairs * dp, 1, 0, 0, rank_tokens=c)
        else:
            t += cost.step_time(c, pairs, 1, 0, 0)
        done += c
        left -= c
    return t


def queue_time_s(view) -> float:
    """Seconds until ``view``'s instance has prefilled what is queued on it now (see the
    module docstring for the approximation)."""
    tokens = view.queued_prefill_tokens
    if tokens <= 0:
        return 0.0
    prompts = max(1, view.queued_prompts)
    mean_len = tokens / prompts
    pairs_per_token = mean_len / 2.0  # a prompt of L tokens has ~L^2/2 causal pairs
    per_step = _chunk(view) * max(1, view.dp)
    full, rest = divmod(tokens, per_step)
    cost = view.step_cost
    seqs = max(1, min(prompts, round(per_step / mean_len)))
    t = 0.0
    if full:
        t += full * cost.step_time(per_step, per_step * pairs_per_token, seqs, 0, 0)
    if rest:
        t += cost.step_time(rest, rest * pairs_per_token, max(1, min(prompts, round(rest / mean_len))), 0, 0)
    return t


def transfer_time_s(src, dst, tokens: int, spec: TransferSpec | None = None) -> float:
    """Seconds to move ``tokens`` of KV from ``src`` to ``dst`` with nothing else on the wire
    (RDMA; ``spec`` is the scenario's ``transfer`` block, default Mooncake batched)."""
    if tokens <= 0 or src is dst:
        return 0.0
    spec = spec or TransferSpec()
    # nothing else on the wire and no one else's pages: an idle server's prompt is one run
    plan = transfer_plan(src.model, src.hardware, spec, tokens, src.attn_tp, src.page_size, src.kv_cache_dtype,
                         src.calibrated, dst_attn_tp=dst.attn_tp, runs=1)
    other = dst.hardware if dst.hardware is not src.hardware else None
    cap = flow_cap(src.hardware, plan.senders, min(src.gpus, dst.gpus), spec.nic_gbit, spec.backend, src.calibrated,
                   dst_hw=other, dst_gpus=dst.gpus)
    # alone on the fabric, a flow runs at its own cap or the slower end's NICs
    rate = min(cap, instance_nic_capacity(src.hardware, src.gpus, spec.nic_gbit, spec.backend, src.calibrated),
               instance_nic_capacity(dst.hardware, dst.gpus, spec.nic_gbit, spec.backend, dst.calibrated))
    return plan.fixed_s + plan.nbytes / rate


def decode_step_s(view, input_tokens: int = 0) -> float:
    """Predicted decode step (time between tokens) on ``view``'s instance once a request of
    ``input_tokens`` joins: its running and queued requests plus this one (capped at
    ``max_running``), over the context its KV pool holds plus this prompt."""
    n = min(view.running + view.decode_queued + 1, view.max_running)
    held = view.kv_used_frac * view.kv_capacity_tokens
    ctx = max(float(view.decode_ctx_tokens), held) + input_tokens
    return view.step_cost.step_time(0, 0.0, 0, n, ctx)


def decode_wait_s(view, input_tokens: int) -> float:
    """Seconds until ``view``'s decode instance can allocate KV for a prompt of
    ``input_tokens`` behind the prompts already waiting for pre-allocation (first in, first
    served). Zero while its free pool, less the reserve it keeps for the running requests'
    next tokens, holds them all. Otherwise the running requests are walked in the order they
    will finish (``decode_release_schedule``): each returns its KV, the ones still running grow
    by a token per step, and the reserve shrinks with the tokens still owed (SGLang's reserve
    is a ratio of them), until the missing tokens are free. Steps take the current predicted
    decode step. If the whole batch frees too little, the rest is assumed to free at the rate
    the batch freed its own (a stationary turnover of the pool): the requests that will run
    next are not visible one by one."""
    page = view.page_size
    need = view.prealloc_tokens + input_tokens
    reserve = view.kv_reserved_pages * page
    free = view.kv_free_pages * page
    if need <= free - reserve:
        return 0.0
    schedule = view.decode_release_schedule()
    if not schedule:
        return 0.0  # nothing running to wait for: the queue ahead is served as its KV arrives
    n = len(schedule)
    owed = [0] * (n + 1)  # owed[k]: steps the requests finishing after the k-th still owe
    for k in range(n - 1, -1, -1):
        owed[k] = owed[k + 1] + schedule[k][0]
    owed0 = owed[0]
    step = view.step_cost.step_time(0, 0.0, 0, n, float(view.decode_ctx_tokens))
    net, prev = 0, 0
    for k, (steps, tokens) in enumerate(schedule):
        net += tokens - (steps - prev) * (n - k)  # its KV back, minus the others' growth meanwhile
        prev = steps
        left = owed[k + 1] - steps * (n - k - 1)  # tokens the requests still running owe then
        if free + net - reserve * left / owed0 >= need:
            return steps * step
    # the running batch drained and it was not enough: the KV of requests that have not
    # started decoding yet (pre-allocated, or queued ahead) frees later; assume it turns over
    # at the rate this batch freed its own
    drained = prev * step
    freed = sum(tokens for _s, tokens in schedule)
    missing = need - (free + net)
    return drained + missing * drained / freed if freed > 0 and drained > 0 else drained


def cached_tokens(view, req, offload: bool = False) -> int:
    """Prompt tokens of ``req`` resident in ``view``'s HBM prefix cache, or with ``offload``
    also in its offload tiers (whole blocks; at least one prompt token is always computed, as
    an engine samples from the last one). Blocks in a tier are counted as free: loading them
    is priced by the engine when the prompt is admitted, not predicted here."""
    hids = getattr(req, "hash_ids", None)
    if hids is None or not view.has_prefix_cache:
        return 0
    blocks = view.offload_match(hids) if offload else view.prefix_match(hids)
    return max(0, min(blocks * view.block_tokens, req.input_len - 1))


def predict_ttft(p, d, req, spec: TransferSpec | None = None, offload: bool = False) -> TTFTPrediction:
    """Queue + prefill of the uncached part on ``p``, or D's wait for KV if longer (D
    pre-allocates while P prefills), + the KV transfer to ``d`` (0 when P is D)."""
    hit = cached_tokens(p, req, offload)
    queue = queue_time_s(p)
    prefill = prefill_time_s(p, req.input_len - hit, hit)
    if d is not p:
        queue = max(queue, decode_wait_s(d, req.input_len) - prefill)
    return TTFTPrediction(queue, prefill, transfer_time_s(p, d, req.input_len, spec))
