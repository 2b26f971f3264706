"""Executors: what running one engine step costs an instance.

``LocalExecutor`` prices the step on the instance's own GPUs with its step-cost model
(pdsim/costs): attention, dense layers and MoE layers (with the EP all-to-all) all local.
The executor is where a step whose MoE layers run elsewhere (expert servers) would be priced
differently; the engine loop only asks ``step_time``.

Prices are memoised per batch shape. The step-cost contract (costs/base.py) makes a step
exactly linear in the two attention arguments once the shape (prefill tokens, prefill
sequences, decode batch, busiest-rank tokens) is fixed, and ``step_time`` is computed as
``c0 + c_attn x prefill_attn + c_ctx x decode_ctx`` from ``step_coeffs``'s triple: keeping the
triple per shape gives bit-identical step times (no bucketing, no error). Runs repeat shapes:
the Mooncake trace through the P4D6 example prices 226k steps from a few thousand shapes.
"""
from __future__ import annotations

#: shapes kept per instance before the memo starts over (bounds memory on pathological traces;
#: each entry is a 4-tuple key and a 3-tuple of floats, ~300 bytes)
MEMO_SHAPES = 1 << 16


class LocalExecutor:
    """Every layer on the instance's GPUs: the step time is the cost model's. (Expert-service
    clients use sim/experts.py RemoteExpertExecutor, whose ``gate`` can stall the engine.)"""

    __slots__ = ("cost", "step_time", "_memo", "_coeffs", "linear", "_last_decode")
    gate = None  # never stalls
    pure = True  # step_time has no side effects: the engine may price a step it then does not run

    def idle(self) -> None:
        pass

    def __init__(self, cost):
        self.cost = cost
        coeffs = getattr(cost, "step_coeffs", None)
        self.linear = coeffs is not None and getattr(cost, "linear", True)  # decode_price is valid
        if not self.linear:
            self.step_time = cost.step_time  # no linearity contract (plug-in, pipeline round)
            return
        self._coeffs = coeffs
        self._memo: dict = {}
        self._last_decode = (-1, 0.0, 0.0)  # decode_price's last (batch, base, per_ctx)
        self.step_time = self._memoised

    def _memoised(self, prefill_tokens: int, prefill_attn: float, prefill_seqs: int,
                  decode_batch: int, decode_ctx: float, rank_tokens: float | None = None) -> float:
        """Seconds of one step: the cost model's ``step_time``, bit for bit."""
        key = (prefill_tokens, prefill_seqs, decode_batch, rank_tokens)
        memo = self._memo
        c = memo.get(key)
        if c is None:
            if len(memo) >= MEMO_SHAPES:
                memo.clear()
            c = memo[key] = self._coeffs(prefill_tokens, prefill_seqs, decode_batch, rank_tokens=rank_tokens)
        return c[0] + c[1] * prefill_attn + c[2] * decode_ctx

    def decode_price(self, decode_batch: int) -> tuple[float, float]:
        """``(base, per_ctx)`` of a decode-only step of ``decode_batch`` sequences: its
        ``step_time(0, 0.0, 0, decode_batch, ctx)`` is ``base + per_ctx * ctx`` bit for bit
        (``base`` is the ``c0 + c_attn * 0.0`` that ``_memoised`` adds first). Lets a loop of
        decode steps of one batch price each step without the memo lookup."""
        last = self._last_decode
        if last[0] == decode_batch:  # quiet runs of one batch follow each other: no lookup
            return last[1], last[2]
        key = (0, 0, decode_batch, None)
        memo = self._memo
        c = memo.get(key)
        if c is None:
            if len(memo) >= MEMO_SHAPES:
                memo.clear()
            c = memo[key] = self._coeffs(0, 0, decode_batch, rank_tokens=None)
        self._last_decode = (decode_batch, c[0] + c[1] * 0.0, c[2])
        return self._last_decode[1], c[2]
