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
``drift``: requests in a batch are correlated, so this is far above multinomial noise): EPLB's
residual imbalance (LMSYS 2025-05-05: default-with-EPLB 1.18x slower than uniform routing).

The step waits for the busiest GPU, so the price takes the expected maximum over the GPUs of the
sum of each GPU's experts' loads in one step of A assignments. Rank j's load is about normal with
mean A q_j and variance A q_j (multinomial sampling of the step's finite tokens) +
(A drift)^2 x sum over its slots of (slot load)^2 (the batch's drift), so

    imbalance(A) = E[max_j L_j] / (A / ranks),  E[max_j L_j] = integral of 1 - prod_j Phi((x - mu_j) / s_j) dx

(for x > 0), evaluated on a log grid of A at construction and interpolated (``imbalance``). Two
limits show why this is the right statistic rather than "the hottest placed share plus a noise
tail": when one rank's expected share stands far above the rest (a heavy Zipf head no EPLB can
split without redundant slots) the expected maximum is that rank's mean (its own noise averages
out); when the shares are level it is the mean plus the expected maximum of ``ranks`` normal
deviates (1.77 s.d. at 16 ranks, 2.07 at 32; sqrt(2 ln ranks) = 2.35 / 2.63 is only a bound), the
sampling and drift deviations adding in quadrature, not linearly. At small batches (32 sequences
x top-8 = 256 activations per rank) the sampling noise is as large as the head and the two no
longer add. Without EPLB the expectation is averaged over ``PLACEMENTS`` seeded random placements
(experts sit on ranks in id order, unrelated to popularity). Experts that are TP-sharded (EP = 1)
put a slice of every expert on every GPU: no imbalance at all. ``a`` (the placed head, ranks x
the largest expected share) and ``b`` (the old normal-tail coefficient) are kept for reports.

The expected number of distinct experts a batch of N tokens touches (weights read once per
touched expert) is  sum_i 1 - (1 - k p_i)^N ; for uniform routing E (1 - (1 - k/E)^N).
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr

PLACEMENTS = 256  # random expert placements averaged for q_max without EPLB
MAX_PLACEMENTS = 8  # random placements the expected-maximum table averages (cost: one table per configuration)
GRID = 33  # assignments per step on a log grid from 1 to 1e7 (two points per factor e)
INTEGRATION_POINTS = 161  # grid of the expected-maximum integral over +-6 s.d.


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


def _rank_moments(p: np.ndarray, ranks: int, redundant: int, eplb: bool, uniform: bool,
                  seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per placement: (q_j expected share of each rank, d_j = sqrt(sum of its squared slot
    loads)), one placement with EPLB or uniform routing, ``MAX_PLACEMENTS`` random ones else."""
    if uniform:
        return [(np.full(ranks, 1.0 / ranks), np.zeros(ranks))]  # no drift without skew
    if eplb:
        slots = len(p) + redundant
        per_rank = -(-slots // ranks)
        replicas = _replicas(p, redundant)
        loads = sorted(((float(p[i] / replicas[i])) for i in range(len(p)) for _ in range(replicas[i])), reverse=True)
        bins = [(0.0, r) for r in range(ranks)]
        heapq.heapify(bins)
        count = [0] * ranks
        q, sq = np.zeros(ranks), np.zeros(ranks)
        for x in loads:  # the packing of eplb_rank_shares, keeping each rank's squared slot loads
            load, r = heapq.heappop(bins)
            q[r] = load + x
            sq[r] += x * x
            count[r] += 1
            if count[r] < per_rank:
                heapq.heappush(bins, (q[r], r))
        return [(q, np.sqrt(sq))]
    rng = np.random.default_rng(seed)
    per = len(p) // ranks
    out = []
    for _ in range(MAX_PLACEMENTS):
        m = rng.permutation(p)[: per * ranks].reshape(ranks, per)
        out.append((m.sum(axis=1), np.sqrt((m ** 2).sum(axis=1))))
    return out


def expected_max_share(q: np.ndarray, d: np.ndarray, assignments: float, drift: float) -> float:
    """E[max_j L_j] / (A / ranks) for rank loads L_j ~ normal(A q_j, A q_j + (A drift d_j)^2)
    (a normal approximation of multinomial sampling plus per-expert drift), by integrating
    1 - prod_j Phi over a grid (loads are positive). ``q`` and ``d`` may carry a leading axis of
    placements: the result is then their mean."""
    q, d = np.atleast_2d(q), np.atleast_2d(d)
    A = float(assignments)
    mu = A * q
    sd = np.sqrt(np.maximum(A * q + (A * drift * d) ** 2, 1e-12))
    lo = max(0.0, float(np.min(mu - 6.0 * sd)))
    hi = float(np.max(mu + 6.0 * sd))
    xs = np.linspace(lo, hi, INTEGRATION_POINTS)
    cdf = np.prod(ndtr((xs[None, :, None] - mu[:, None, :]) / sd[:, None, :]), axis=2)
    e_max = lo + (1.0 - cdf).sum(axis=1) * (xs[1] - xs[0])
    return float(np.mean(e_max)) / (A / q.shape[1])


@dataclass(frozen=True)
class ExpertLoad:
    """Imbalance and touched-expert model of one MoE instance (see the module docstring)."""

    a: float  # ranks x the largest expected rank share (the placed head)
    b: float  # ranks x sqrt(2 ln ranks x q_max): the normal-tail bound (reports only)
    num_experts: int
    top_k: int
    p: tuple[float, ...]  # popularity, most popular first
    uniform: bool
    grid: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # (log A, imbalance) of the expected maximum

    def imbalance(self, assignments: float) -> float:
        """Busiest rank's assignments over the mean, for ``assignments`` in the instance: the
        expected maximum over ranks (module docstring), interpolated in log A on the uniform
        grid of ``_imbalance_grid`` (xs[0] = 0, step xs[1])."""
        xs, ys = self.grid
        if not xs:
            return self.a
        if assignments <= 1.0:
            return ys[0]
        u = math.log(assignments) / xs[1]
        i = int(u)
        if i >= len(ys) - 1:
            return ys[-1]
        return ys[i] + (ys[i + 1] - ys[i]) * (u - i)

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
    a = ranks * qmax
    b = ranks * math.sqrt(2.0 * math.log(ranks) * qmax)
    return ExpertLoad(a, b, num_experts, top_k, tuple(p), uniform,
                      _imbalance_grid(tuple(p), ranks, redundant, use_eplb, uniform, seed, float(drift)))


@lru_cache(maxsize=256)
def _imbalance_grid(p: tuple, ranks: int, redundant: int, eplb: bool, uniform: bool, seed: int,
                    drift: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(log A, expected max / mean) on ``GRID`` points of A from 1 to 1e7, averaged over the
    placements of ``_rank_moments`` (cached: every instance of a group shares it)."""
    moments = _rank_moments(np.asarray(p), ranks, redundant, eplb, uniform, seed)
    q, d = np.array([m[0] for m in moments]), np.array([m[1] for m in moments])
    xs = np.linspace(0.0, math.log(1e7), GRID)
    ys = [expected_max_share(q, d, math.exp(x), 0.0 if uniform else drift) for x in xs]
    return tuple(float(x) for x in xs), tuple(ys)


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
