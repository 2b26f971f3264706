"""The slowest GPU of an EP step: the expected maximum over GPUs of the sum of each GPU's experts'
loads, with the step's finite tokens (costs/moe_load.py, ``ExpertLoad.imbalance``).

Source of the phenomenon: Ant Group's H20 decode table (LMSYS blog 2025-09-26; calibration/data/
step.csv), EP32 at 32 sequences per GPU with MTP (32 x 2 tokens x top-8 = 512 activations per
GPU): measured 101.2 ms, priced +32% with the old statistic (the placed head plus a
sqrt(2 ln ranks) noise tail plus a separate drift tail, all added), +19% with this one. Figures
checked here are mathematical: a Monte Carlo of top-8 routing reproduces the priced expectation,
and the two limits (one hot rank; level ranks) are the known ones: the expected maximum of 16 / 32
standard normal deviates is 1.766 / 2.070 (order statistics tables, e.g. Harter 1961).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from pdsim.costs.moe_load import _rank_moments, expected_max_share, expert_load, popularity

E, K = 256, 8


def _monte_carlo(p: np.ndarray, owner: np.ndarray, ranks: int, tokens: int, reps: int, seed: int = 1) -> float:
    """E[max rank load] / mean over ``reps`` steps of ``tokens`` tokens: each token takes expert e
    with probability K p_e (at most once; K picks per token on average), so an expert's count is
    Binomial(tokens, K p_e) and a GPU's load the sum over its experts."""
    rng = np.random.default_rng(seed)
    counts = rng.binomial(tokens, np.minimum(K * p, 1.0), size=(reps, len(p)))
    loads = np.zeros((reps, ranks))
    np.add.at(loads, (slice(None), owner), counts)
    return float(np.mean(loads.max(axis=1) / loads.mean(axis=1)))


def test_priced_maximum_matches_a_monte_carlo_of_routing():
    # uniform routing, EP16, 8 tokens per GPU (64 activations per GPU): sampling noise only
    p = np.full(E, 1.0 / E)
    owner = np.repeat(np.arange(16), E // 16)
    priced = expert_load(E, K, 16).imbalance(8 * 16 * K)
    assert priced == pytest.approx(_monte_carlo(p, owner, 16, 8 * 16, 2000), rel=0.03)
    # the default Zipf head (0.55), no EPLB: experts in id order on 32 GPUs, 32 tokens per GPU
    pz = popularity(E, K, 0.55)
    rng = np.random.default_rng(0)
    perm = rng.permutation(E)  # one placement unrelated to popularity
    owner = np.empty(E, int)
    owner[perm] = np.repeat(np.arange(32), E // 32)
    q = np.bincount(owner, weights=pz, minlength=32)
    d = np.sqrt(np.bincount(owner, weights=pz ** 2, minlength=32))
    priced = expected_max_share(q, d, 32 * 32 * K, 0.0)
    assert priced == pytest.approx(_monte_carlo(pz, owner, 32, 32 * 32, 2000), rel=0.03)


@pytest.mark.parametrize("ranks, z", [(16, 1.766), (32, 2.070)])
def test_level_ranks_take_the_expected_maximum_of_normals_not_its_bound(ranks, z):
    a = 1e5
    got = expert_load(E, K, ranks).imbalance(a)
    sigma = math.sqrt(ranks / a)  # a rank's Poisson s.d. over its mean
    assert (got - 1.0) / sigma == pytest.approx(z, rel=0.03)
    assert (got - 1.0) / sigma < math.sqrt(2.0 * math.log(ranks))  # the old tail's bound


def test_one_hot_rank_costs_its_mean_not_its_mean_plus_a_tail():
    q = np.array([0.3] + [0.7 / 31] * 31)
    d = np.zeros(32)
    a = 1e5
    assert expected_max_share(q, d, a, 0.0) == pytest.approx(0.3 * 32, rel=0.005)


def test_h20_ep32_batch32_head_and_noise_do_not_add():
    """EP32 with EPLB and no redundant slots (8 experts per GPU), 512 activations per GPU: the
    placed Zipf head is 1.69x the mean; the old statistic added a drift tail and a sampling tail
    on top (2.11x), the expected maximum is 1.71x."""
    load = expert_load(E, K, 32, skew=0.55, redundant=0, eplb=True, drift=0.2)
    a = 32 * 32 * 2 * K
    new = load.imbalance(a)
    (q, d), = _rank_moments(np.asarray(load.p), 32, 0, True, False, 0)
    tail = math.sqrt(2.0 * math.log(32))
    spread = math.sqrt(float(np.sum(np.asarray(load.p) ** 2)) / 32)
    old = 32 * (q.max() + tail * 0.2 * spread) + load.b / math.sqrt(a)
    assert load.a == pytest.approx(32 * q.max())
    assert load.a <= new < 1.05 * load.a
    assert old > 1.15 * new
