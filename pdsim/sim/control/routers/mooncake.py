"""Mooncake's Conductor: KV-cache-centric P/D selection with early rejection
(``mooncake_conductor``).

Source: R. Qin et al., "Mooncake: A KVCache-centric Disaggregated Architecture for LLM
Serving", FAST'25 (arXiv:2407.00079, https://arxiv.org/abs/2407.00079): Sec. 5 Algorithm 1
(KVCache-centric scheduling) and Sec. 7 (overload-oriented scheduling, early rejection and
prediction-based early rejection).

Per request:
1. for every prefill instance, predicted TTFT = its queue time + the prefill time of the
   prompt's uncached part there (its prefix-cache hit, in HBM and, with ``use_offload``, in
   its KV offload tiers: Mooncake's DRAM/SSD cache pool) — Algorithm 1's ``T_queue +
   T_prefill``; the instance with the smallest wins (ties: the first registered);
2. the decode instance that can take the request's KV soonest (a full KV pool keeps it
   waiting until running requests finish), then with the smallest predicted time between
   tokens once it joins (Algorithm 1's ``SelectDecodingInstance``: a TBT-driven load balance);
3. TTFT = max(P's queue + prefill, D's wait for KV) — D pre-allocates while P prefills —
   plus the P->D KV transfer of the prompt;
4. early rejection: if the predicted TTFT exceeds ``ttft_slo_ms`` x (1 + ``margin``), or the
   predicted TBT exceeds ``tbt_slo_ms`` x (1 + ``margin``), the request is rejected before any
   work is spent on it (dropped as ``rejected_ttft_slo`` / ``rejected_tbt_slo``). The decode
   prediction counts the requests already sent to the decode instance (queued and holding
   KV), which is the paper's point in predicting the decode load at the time the request will
   reach it rather than rejecting on the instantaneous load.

Predictions use pdsim's own prices (control/predict.py) on the views' load signals.

Not modelled: Algorithm 1's ``kvcache_balancing_threshold`` branch, which copies a long
cached prefix from another prefill instance (or the DRAM/SSD pool) before prefilling — pdsim
has no P->P KV copy — so a prefill instance is judged on its own cache only; and the
paper's hot-block replication.

The transfer prediction uses the scenario's ``transfer`` block (the world hands the router
its scenario) unless ``transfer`` is given. The rejection thresholds are the policy's own
(``ttft_slo_ms``/``tbt_slo_ms``; null: never reject on it), or with ``use_scenario_slo`` the
scenario's ``slo.ttft_ms`` and ``slo.tpot_ms`` (else ``slo.itl_ms``) where a threshold is null.
"""
from __future__ import annotations

from dataclasses import dataclass

from ....specs._convert import check
from ....specs.scenario import TransferSpec
from ..predict import cached_tokens, decode_step_s, decode_wait_s, prefill_time_s, queue_time_s, transfer_time_s
from ..router import ROUTERS, Hold, Reject, Route, Router


_DEFAULT_TRANSFER = TransferSpec()


@ROUTERS.register("mooncake_conductor")
class MooncakeConductor(Router):
    """See the module docstring."""

    @dataclass(frozen=True)
    class Params:
        ttft_slo_ms: float | None = None  # reject above this predicted TTFT (x (1 + margin))
        tbt_slo_ms: float | None = None  # reject above this predicted time between tokens
        margin: float = 0.0  # tolerated excess over the SLO before rejecting (0.2 = 20 %)
        transfer: TransferSpec | None = None  # null: the scenario's transfer block
        use_offload: bool = True  # count prefix blocks in the offload tiers (Mooncake's DRAM/SSD pool)
        use_scenario_slo: bool = False  # null thresholds take the scenario's slo.ttft_ms / slo.tpot_ms

        def __post_init__(self) -> None:
            check(self.ttft_slo_ms is None or self.ttft_slo_ms > 0, "must be > 0 or null", "ttft_slo_ms")
            check(self.tbt_slo_ms is None or self.tbt_slo_ms > 0, "must be > 0 or null", "tbt_slo_ms")
            check(self.margin >= 0, "must be >= 0", "margin")

    def __init__(self, params=None, rng=None):
        super().__init__(params, rng)
        self.last = None  # the last decision's prediction (ttft_s, tbt_s), for tests and traces

    def _transfer(self) -> TransferSpec:
        if self.params.transfer is not None:
            return self.params.transfer
        return self.scenario.transfer if self.scenario is not None else _DEFAULT_TRANSFER

    def _slos(self) -> tuple[float | None, float | None]:
        """(TTFT, TBT) rejection thresholds, ms (None: never reject on it)."""
        prm = self.params
        ttft, tbt = prm.ttft_slo_ms, prm.tbt_slo_ms
        if prm.use_scenario_slo and self.scenario is not None:
            slo = self.scenario.slo
            ttft = ttft if ttft is not None else slo.ttft_ms
            tbt = tbt if tbt is not None else (slo.tpot_ms if slo.tpot_ms is not None else slo.itl_ms)
        return ttft, tbt

    def best_prefill(self, req, instances):
        """(instance, queue_s + prefill_s) minimising predicted TTFT before the transfer."""
        best, best_t = None, None
        for v in instances:
            hit = cached_tokens(v, req, self.params.use_offload)
            t = queue_time_s(v) + prefill_time_s(v, req.input_len - hit, hit)
            if best_t is None or t < best_t:
                best, best_t = v, t
        return best, best_t

    @staticmethod
    def best_decode(req, instances):
        """(instance, its KV wait s, predicted TBT s): the shortest wait for KV, then the
        smallest predicted decode step."""
        best, best_key = None, None
        for v in instances:
            key = (decode_wait_s(v, req.input_len), decode_step_s(v, req.input_len))
            if best_key is None or key < best_key:
                best, best_key = v, key
        return best, best_key[0], best_key[1]

    def route(self, req, members):
        if members.disaggregated:
            ps, ds = members.views("prefill"), members.views("decode")
            if not ps or not ds:
                return Hold()
            p, t_p = self.best_prefill(req, ps)
            d, wait, tbt = self.best_decode(req, ds)
            # D pre-allocates while P prefills: the transfer starts when both are done
            ttft = max(t_p, wait) + transfer_time_s(p, d, req.input_len, self._transfer())
        else:
            cs = members.views("colocated")
            if not cs:
                return Hold()
            # one instance runs both phases: TTFT and TBT are judged on the same choice
            p, ttft = self.best_prefill(req, cs)
            d, tbt = p, decode_step_s(p, req.input_len)
        self.last = (ttft, tbt)
        prm = self.params
        ttft_slo, tbt_slo = self._slos()
        if ttft_slo is not None and ttft * 1e3 > ttft_slo * (1 + prm.margin):
            return Reject("ttft_slo")
        if tbt_slo is not None and tbt * 1e3 > tbt_slo * (1 + prm.margin):
            return Reject("tbt_slo")
        return Route(p, d)
