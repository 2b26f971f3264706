"""Expert load across EP ranks: skewed expert popularity, EPLB redundant experts, routing noise.

Expert popularity is a Zipf law over the routed experts, p_i proportional to i^-s (rank i of
popularity), s = ``ExpertLoadSpec.skew`` (0 = uniform routing; default ``DEFAULT_SKEW``, fitted to
LMSYS's EPLB figures, specs/features.py; set per workload); no expert can take more than 1/top_k
of the assignments (a token picks top_k distinct experts).
A rank's expected share of the assignments, q_j, is the sum of the popularities it holds:

- without EPLB, experts sit on ranks in id order, which is unrelated to popularity: q_max is
  the expected largest share over random placements (Monte Carlo over ``PLACEMENTS`` seeded
  permutations, so every run gets the same number);
- with EPLB (DeepSeek's deepseek-ai/EPLB: replicate the heaviest experts into the redundant
  slots, then pack replicas onto ranks by load), each replica carries its expert's load divided
  by its replica count and ranks are packed greedily (largest load first onto the least
  loaded rank with a free slot), so q_max approaches 1/ranks.

EPLB places by long-run statistics; one batch's per-expert loads stray from them (relative s.d.
``drift``: requests in a batch are correlated, so this is far above multinomial noise), so the
busiest rank's expected share grows by sqrt(2 ln ranks) x drift x the rms spread of a rank's
slot loads (``rank_spread``): EPLB's residual imbalance (LMSYS 2025-05-05: default-with-EPLB
1.18x slower than uniform routing).

Per step, assignments scatter around those shares (multinomial counts): the busiest rank holds
about  A q_max + sqrt(2 ln ranks x A q_max)  of A assignments (the normal tail of the maximum
of ``ranks`` counts), so the imbalance (busiest / mean) is

    imbalance(A) = ranks q_max + ranks sqrt(2 ln ranks x q_max / A) = a + b / sqrt(A).

Uniform routing without EPLB gives a = 1 and the Poisson tail the old model used. Experts that
are TP-sharded (EP = 1) put a slice of every expert on every GPU: no imbalance at all.

The expected number of distinct experts a batch of N tokens touches (weights read once per
touched expert) is  sum_i 1 - (1 - k p_i)^N ; for uniform routing E (1 - (1 - k/E)^N).
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass

import numpy as np

PLACEMENTS = 256  # random expert placements averaged for q_max without EPLB


def popularity(num_experts: int, top_k: int, skew: float) -> np.ndarray:
    """Share of the assignments each expert receives (sums to 1), most popular first."""
    p = np.arange(1, num_experts + 1, dtype=float) ** -float(skew)
    p /= p.sum()
    cap = 1.0 / top_k  # an expert appears at most once per token
    for _ in range(num_experts):  # water-fill the excess of capped experts onto the others
        over = p > cap
        if not over.any():
            break
        excess = (p[over] - cap).sum()
        p[over] = cap
        free = ~over
        p[free] += excess * p[free] / p[free].sum()
    return p


def _replicas(p: np.ndarray, redundant: int) -> np.ndarray:
    """Replicas per expert after EPLB gives ``redundant`` extra ones, each to the expert with the
    heaviest load per replica at that point."""
    replicas = np.ones(len(p), int)
    heap = [(-float(x), i) for i, x in enumerate(p)]
    heapq.heapify(heap)
    for _ in range(redundant):
        _, i = heapq.heappop(heap)
        replicas[i] += 1
        heapq.heappush(heap, (-float(p[i] / replicas[i]), i))
    return replicas


def eplb_rank_shares(p: np.ndarray, ranks: int, redundant: int) -> np.ndarray:
    """Rank shares after EPLB: ``redundant`` extra replicas for the heaviest experts (by load
    per replica), then replicas packed onto ``ranks`` ranks of equal slot counts by load."""
    slots = len(p) + redundant
    per_rank = -(-slots // ranks)  # ranks hold whole slots: some one more when they do not divide
    replicas = _replicas(p, redundant)
    loads = sorted((float(p[i] / replicas[i]) for i in range(len(p)) for _ in range(replicas[i])), reverse=True)
    bins = [(0.0, r) for r in range(ranks)]  # (load, rank) heap of ranks with free slots
    count = [0] * ranks
    share = np.zeros(ranks)
    for x in loads:
        load, r = heapq.heappop(bins)
        share[r] = load + x
        count[r] += 1
        if count[r] < per_rank:
            heapq.heappush(bins, (share[r], r))
    return share


def rank_spread(p: np.ndarray, ranks: int, redundant: int, eplb: bool) -> float:
    """Root-mean-square, over ranks, of sqrt(sum of the squared slot loads a rank holds): with
    per-expert loads deviating by a relative s.d. ``drift`` from ``p``, a rank's share deviates
    by drift x this (independent experts)."""
    slots = len(p) + (redundant if eplb else 0)
    if eplb:
        replicas = _replicas(p, redundant)
        sq = float(np.sum(replicas * (p / replicas) ** 2))
    else:
        sq = float(np.sum(p ** 2))
    return math.sqrt(sq / ranks) if slots else 0.0


def random_rank_qmax(p: np.ndarray, ranks: int, seed: int = 0) -> float:
    """Expected largest rank share when experts sit on ranks in an order unrelated to their
    popularity (``len(p) / ranks`` experts per rank)."""
    rng = np.random.default_rng(seed)
    per = len(p) // ranks
    qs = [rng.permutation(p)[: per * ranks].reshape(ranks, per).sum(axis=1).max() for _ in range(PLACEMENTS)]
    return float(np.mean(qs))


@dataclass(frozen=True)
class ExpertLoad:
    """Imbalance and touched-expert model of one MoE instance (see the module docstring)."""

    a: float  # ranks x q_max
    b: float  # ranks x sqrt(2 ln ranks x q_max)
    num_experts: int
    top_k: int
    p: tuple[float, ...]  # popularity, most popular first
    uniform: bool

    def imbalance(self, assignments: float) -> float:
        """Busiest rank's assignments over the mean, for ``assignments`` in the instance."""
        return self.a + self.b / math.sqrt(assignments if assignments > 1.0 else 1.0)

    def distinct(self, tokens: float) -> float:
        """Expected distinct experts touched by ``tokens`` tokens (top_k each)."""
        if tokens <= 0:
            return 0.0
        E, k = self.num_experts, self.top_k
        if self.uniform:
            return E * (1.0 - (1.0 - min(k, E) / E) ** tokens)
        return float(np.sum(1.0 - (1.0 - np.minimum(k * np.asarray(self.p), 1.0)) ** tokens))


def expert_load(num_experts: int, top_k: int, ranks: int, skew: float = 0.0, redundant: int = 0,
                eplb: bool | None = None, expert_parallel: bool = True, seed: int = 0,
                drift: float = 0.0) -> ExpertLoad:
    """The imbalance model of ``num_experts`` routed experts (``top_k`` per token) over
    ``ranks`` EP ranks with ``redundant`` extra slots; ``eplb`` None = EPLB on when there are
    redundant slots (SGLang runs EPLB with ``--ep-num-redundant-experts``); ``drift``: relative
    s.d. of one batch's per-expert loads around ``p`` (the residual imbalance EPLB cannot
    remove: it places by long-run statistics)."""
    p = popularity(num_experts, top_k, skew)
    uniform = skew == 0.0
    if not expert_parallel or ranks <= 1:
        return ExpertLoad(1.0, 0.0, num_experts, top_k, tuple(p), uniform)
    use_eplb = (redundant > 0) if eplb is None else eplb
    if use_eplb:
        qmax = float(eplb_rank_shares(p, ranks, redundant).max())
    elif uniform:
        qmax = 1.0 / ranks
    else:
        qmax = random_rank_qmax(p, ranks, seed)
    tail = math.sqrt(2.0 * math.log(ranks))
    if drift > 0.0:  # the busiest rank of this batch: the placed share plus the drift's normal tail
        qmax += tail * drift * rank_spread(p, ranks, redundant, use_eplb)
    a = ranks * qmax
    b = ranks * math.sqrt(2.0 * math.log(ranks) * qmax)
    return ExpertLoad(a, b, num_experts, top_k, tuple(p), uniform)


class DistinctTable:
    """``ExpertLoad.distinct`` interpolated on a log grid of token counts (the step models' hot
    path: a sum over experts per step would cost more than the rest of the step)."""

    def __init__(self, load: ExpertLoad, max_tokens: float = 4e6, points: int = 96):
        self.load = load
        self.uniform = load.uniform
        if not self.uniform:
            self.xs = [math.exp(x) for x in np.linspace(0.0, math.log(max_tokens), points)]
            self.ys = [load.distinct(x) for x in self.xs]
        E, k = load.num_experts, load.top_k
        self.E = E
        self.log_q = math.log(1.0 - min(k, E) / E) if k < E else -math.inf

    def __call__(self, tokens: float) -> float:
        if tokens <= 0:
            return 0.0
        if self.uniform:
            return self.E * (1.0 - math.exp(tokens * self.log_q))
        xs, ys = self.xs, self.ys
        if tokens <= xs[0]:
            return ys[0] * tokens
        if tokens >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_left(xs, tokens)
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (tokens - x0) / (x1 - x0)
