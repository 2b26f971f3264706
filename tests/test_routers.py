"""The published routing baselines, one decision at a time, on hand-made instance views.

Each test states the published rule (sources in the routers' module docstrings) and checks
the router follows it on loads chosen so the rule decides.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdsim.sim.control.router import ROUTERS, Reject, Route
from pdsim.sim.control.routers.approx_index import ApproxPrefixIndex
from pdsim.sim.control.routers.dynamo import softmax_pick
from pdsim.sim.control.routers.llmd import kv_scores, queue_scores
from pdsim.specs.errors import SpecError


@dataclass
class View:
    """The InstanceView signals the load-based routers read."""

    iid: int
    queue_len: int = 0
    running: int = 0
    outstanding_tokens: int = 0
    kv_used_frac: float = 0.0
    gpus: int = 1
    cached: set = field(default_factory=set)
    block_tokens: int = 512
    role: str = "prefill"

    @property
    def has_prefix_cache(self) -> bool:
        return True

    def prefix_match(self, hash_ids, limit=None) -> int:
        n = 0
        for h in hash_ids:
            if h not in self.cached:
                break
            n += 1
        return n


class Members:
    def __init__(self, prefill, decode=(), colocated=()):
        self._v = {"prefill": list(prefill), "decode": list(decode), "colocated": list(colocated)}
        self.disaggregated = bool(prefill)

    def views(self, role):
        return self._v[role]


@dataclass
class Req:
    rid: int
    input_len: int
    hash_ids: object = None
    routed: float = 0.0
    output_len: int = 16


def make(key: str, params: dict | None = None, seed: int = 0):
    ref = ROUTERS.resolve(key, params or {}, "router.policy")
    return ref.create(rng=np.random.default_rng(seed))


def ids(*xs):
    return np.asarray(xs, dtype=np.int64)


# ---- approximate prefix index ------------------------------------------------------------
def test_approx_index_matches_leading_blocks_and_evicts_tails_first():
    idx = ApproxPrefixIndex(capacity_blocks=3)
    idx.insert(0, ids(1, 2, 3))
    assert idx.match(0, ids(1, 2, 9)) == 2 and idx.match(0, ids(5, 1)) == 0 and idx.match(1, ids(1)) == 0
    idx.insert(0, ids(1, 2, 4))  # 4 is new: the LRU block (3, the old tail) goes
    assert idx.size(0) == 3
    assert idx.match(0, ids(1, 2, 3)) == 2 and idx.match(0, ids(1, 2, 4)) == 3


@given(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=8), min_size=1, max_size=30),
       st.integers(1, 20))
def test_approx_index_never_exceeds_its_capacity(prompts, cap):
    idx = ApproxPrefixIndex(cap)
    for p in prompts:
        idx.insert(0, p)
        assert idx.size(0) <= cap
        # the prompt just inserted is the most recent: its head is always still there
        assert idx.match(0, p[:1]) == 1 or len(p) > cap


# ---- SGLang router: cache-aware ------------------------------------------------------------
def test_sglang_balanced_load_follows_the_longest_prefix_and_new_prompts_the_smallest_tree():
    r = make("sglang_cache_aware")
    a, b, c = View(0), View(1), View(2)
    # three distinct prompts fill three empty trees (smallest tree first: ties to the first)
    assert r.pick_prefill(Req(0, 2048, ids(1, 2, 3, 4)), [a, b, c]) is a
    assert r.pick_prefill(Req(1, 2048, ids(10, 11, 12, 13)), [a, b, c]) is b
    assert r.pick_prefill(Req(2, 512, ids(20)), [a, b, c]) is c
    # a follow-up sharing 3 of 4 blocks with prompt 1 (rate 0.75 > 0.3): its worker, b
    assert r.pick_prefill(Req(3, 2048, ids(10, 11, 12, 99)), [a, b, c]) is b
    # 1 block of 4 matched (0.25 <= 0.3): the smallest tree, c (1 block)
    assert r.pick_prefill(Req(4, 2048, ids(1, 50, 51, 52)), [a, b, c]) is c


def test_sglang_imbalance_needs_both_thresholds():
    req = Req(0, 2048, ids(1, 2, 3, 4))
    # absolute gap 100 > 64 and 100 > 0 x 1.5: imbalanced, least loaded wins over the cache
    r = make("sglang_cache_aware")
    r.tree.insert(0, ids(1, 2, 3, 4))
    hot, idle = View(0, queue_len=100), View(1)
    assert r.pick_prefill(req, [hot, idle]) is idle
    # gap 70 > 64 but 300 < 230 x 1.5: balanced, the cached worker keeps it
    r = make("sglang_cache_aware")
    r.tree.insert(0, ids(1, 2, 3, 4))
    assert r.pick_prefill(req, [View(0, queue_len=300), View(1, queue_len=230)]).iid == 0
    # gap 60 <= 64: balanced
    r = make("sglang_cache_aware")
    r.tree.insert(0, ids(1, 2, 3, 4))
    assert r.pick_prefill(req, [View(0, queue_len=60), View(1)]).iid == 0
    # the prompt is inserted in the tree of the worker that took it, even when balancing
    r = make("sglang_cache_aware")
    r.pick_prefill(req, [View(0, queue_len=100), View(1)])
    assert r.tree.match(1, req.hash_ids) == 4


def test_sglang_trees_are_trimmed_on_the_eviction_interval_only():
    r = make("sglang_cache_aware", {"max_tree_blocks": 2, "eviction_interval_s": 10.0})
    v = [View(0)]
    r.pick_prefill(Req(0, 2048, ids(1, 2, 3, 4), routed=0.0), v)
    assert r.tree.size(0) == 4  # not trimmed between intervals
    r.pick_prefill(Req(1, 512, ids(9), routed=5.0), v)
    assert r.tree.size(0) == 5
    r.pick_prefill(Req(2, 512, ids(8), routed=10.0), v)  # interval elapsed: trimmed, then inserted
    assert r.tree.size(0) == 3


def test_sglang_decode_goes_to_the_least_loaded():
    r = make("sglang_cache_aware")
    d = r.route(Req(0, 100, ids(1)), Members([View(0)], [View(1, running=5), View(2, running=2, queue_len=1)]))
    assert isinstance(d, Route) and d.decode.iid == 2


def test_sglang_prompts_without_block_ids_count_as_unique_content():
    r = make("sglang_cache_aware")
    a, b = View(0), View(1)
    assert r.pick_prefill(Req(0, 1024), [a, b]) is a  # two 512-token stand-in blocks
    assert r.pick_prefill(Req(1, 100), [a, b]) is b  # a's tree is larger now


def test_sglang_params_are_checked():
    with pytest.raises(SpecError, match="cache_threshold"):
        ROUTERS.resolve("sglang_cache_aware", {"cache_threshold": 1.5}, "router.policy", params_field="router.params")
    with pytest.raises(SpecError, match="balance_rel_threshold"):
        ROUTERS.resolve("sglang_cache_aware", {"balance_rel_threshold": 0.5}, "router.policy")


# ---- Dynamo KV router -------------------------------------------------------------------------
def test_dynamo_cost_is_overlap_weighted_prefill_blocks_plus_active_blocks():
    r = make("dynamo_kv", {"block_tokens": 512})
    req = Req(0, 4096, ids(1, 2, 3, 4, 5, 6, 7, 8))
    warm = View(0, outstanding_tokens=8192, cached={1, 2, 3, 4, 5, 6})  # 6 of 8 blocks cached
    cold = View(1, outstanding_tokens=2048)
    costs = r.costs(req, [warm, cold], 1.0)
    assert costs == pytest.approx([1.0 * (8 - 6) + (16 + 8), 1.0 * 8 + (4 + 8)])
    assert r.pick_prefill(req, [warm, cold]) is cold  # 26 > 20: load outweighs the overlap
    heavy = make("dynamo_kv", {"block_tokens": 512, "overlap_score_weight": 3.0})
    assert heavy.pick_prefill(req, [warm, cold]) is warm  # 3 x 2 + 24 = 30 < 3 x 8 + 12 = 36
    # the decode worker is chosen on load alone (overlap weight 0)
    assert r.pick_decode(req, [View(2, outstanding_tokens=5000), View(3, outstanding_tokens=100)]).iid == 3


def test_dynamo_softmax_probabilities_follow_the_scaled_costs():
    costs, t = [3.0, 5.0, 4.0], 0.5
    lo, hi = 3.0, 5.0
    w = np.exp(-(np.asarray(costs) - lo) / ((hi - lo) * t))
    p = w / w.sum()
    edges = np.cumsum(p)
    for u, want in [(0.0, 0), (edges[0] - 1e-9, 0), (edges[0] + 1e-9, 1), (edges[1] + 1e-9, 2), (0.999999, 2)]:
        assert softmax_pick(costs, t, u) == want
    assert softmax_pick([2.0, 2.0], 1.0, 0.75) == 1  # equal costs: uniform


def test_dynamo_temperature_zero_is_deterministic_and_sampling_is_seeded():
    req = Req(0, 1024, ids(1, 2))
    views = [View(0, outstanding_tokens=1000), View(1, outstanding_tokens=1500), View(2, outstanding_tokens=900)]
    r0 = make("dynamo_kv")
    assert {r0.pick_prefill(req, views).iid for _ in range(20)} == {2}
    picks = [make("dynamo_kv", {"router_temperature": 1.0}, seed=7).pick_prefill(req, views).iid for _ in range(3)]
    assert len(set(picks)) == 1  # same seed, same draw
    r = make("dynamo_kv", {"router_temperature": 1.0}, seed=3)
    seen = [r.pick_prefill(req, views).iid for _ in range(600)]
    costs = r.costs(req, views, 1.0)
    lo, hi = min(costs), max(costs)
    w = np.exp(-(np.asarray(costs) - lo) / (hi - lo))
    p = w / w.sum()
    freq = np.bincount(seen, minlength=3) / len(seen)
    assert np.abs(freq - p).max() < 0.06  # 600 draws: ~4 standard errors


def test_dynamo_without_kv_events_learns_from_its_own_routing():
    r = make("dynamo_kv", {"kv_events": False, "block_tokens": 512, "overlap_score_weight": 4.0})
    a, b = View(0, cached=set()), View(1, cached=set())
    first = r.pick_prefill(Req(0, 4096, ids(*range(8))), [a, b])
    a.outstanding_tokens = b.outstanding_tokens = 0
    # the engines report nothing (cached stays empty), yet the router remembers where it sent it
    assert r.pick_prefill(Req(1, 4096, ids(*range(8))), [a, b]) is first


# ---- llm-d scorers ---------------------------------------------------------------------------
def test_llmd_scorers_follow_the_gateway_extension():
    views = [View(0, queue_len=4, kv_used_frac=0.5), View(1, queue_len=0, kv_used_frac=0.9), View(2, queue_len=2)]
    assert queue_scores(views) == pytest.approx([0.0, 1.0, 0.5])
    assert queue_scores(views[:1] * 2) == [1.0, 1.0]
    assert kv_scores(views) == pytest.approx([0.5, 0.1, 1.0])


def test_llmd_weighted_sum_and_prefix_affinity():
    r = make("llmd", {"prefix_mode": "precise"})
    req = Req(0, 4096, ids(*range(8)))
    warm = View(0, queue_len=3, kv_used_frac=0.4, cached=set(range(8)))
    cold = View(1, queue_len=1, kv_used_frac=0.2)
    # warm: 2 x 0 + 2 x 0.6 + 3 x 1 = 4.2; cold: 2 x 1 + 2 x 0.8 + 3 x 0 = 3.6
    assert r.scores(req, [warm, cold]) == pytest.approx([4.2, 3.6])
    assert r.pick_prefill(req, [warm, cold]) is warm
    load_only = make("llmd", {"prefix_mode": "precise", "prefix_weight": 0.0})
    assert load_only.pick_prefill(req, [warm, cold]) is cold


def test_llmd_approximate_mode_remembers_what_it_routed():
    r = make("llmd")
    a, b = View(0), View(1)
    first = r.pick_prefill(Req(0, 4096, ids(*range(8))), [a, b])
    assert r.pick_prefill(Req(1, 4096, ids(*range(8))), [a, b]) is first


def test_llmd_ties_are_broken_by_the_seeded_generator():
    views = [View(i) for i in range(4)]
    picks = [make("llmd", seed=s).pick_prefill(Req(0, 10), views).iid for s in range(30)]
    assert len(set(picks)) > 1
    assert picks == [make("llmd", seed=s).pick_prefill(Req(0, 10), views).iid for s in range(30)]


def test_llmd_rejects_all_zero_weights():
    with pytest.raises(SpecError, match="prefix_weight"):
        ROUTERS.resolve("llmd", {"prefix_weight": 0, "queue_weight": 0, "kv_weight": 0}, "router.policy")


# ---- vLLM xPyD proxy --------------------------------------------------------------------------
def test_vllm_xpyd_shares_one_counter_between_p_and_d():
    r = make("vllm_xpyd")
    m = Members([View(0), View(1)], [View(10), View(11), View(12), View(13)])
    pairs = [(d.prefill.iid, d.decode.iid) for d in (r.route(Req(k, 10), m) for k in range(6))]
    assert pairs == [(0, 10), (1, 11), (0, 12), (1, 13), (0, 10), (1, 11)]


def test_vllm_xpyd_keeps_counting_when_the_lists_change():
    r = make("vllm_xpyd")
    for k in range(3):
        r.route(Req(k, 10), Members([View(0), View(1)], [View(10)]))
    d = r.route(Req(3, 10), Members([View(0), View(1), View(2)], [View(10)]))
    assert d.prefill.iid == 0  # count 3 mod 3; round_robin would have gone on to the next one


# ---- Mooncake Conductor (decisions; predictions are tested against the world) -------------------
def test_conductor_rejects_only_above_the_slo_with_margin(monkeypatch):
    import pdsim.sim.control.routers.mooncake as mc

    monkeypatch.setattr(mc, "queue_time_s", lambda v: 1.0 if v.iid == 0 else 3.0)
    monkeypatch.setattr(mc, "prefill_time_s", lambda v, new, hit: new * 1e-4)
    monkeypatch.setattr(mc, "transfer_time_s", lambda p, d, n, spec: 0.05)
    monkeypatch.setattr(mc, "decode_step_s", lambda v, n: 0.02 + 0.01 * v.running)
    monkeypatch.setattr(mc, "cached_tokens", lambda v, req, offload: 0)
    monkeypatch.setattr(mc, "decode_wait_s", lambda v, n: 0.0)
    m = Members([View(0), View(1)], [View(10, running=3), View(11, running=1)])
    req = Req(0, 5000)  # TTFT = 1 + 0.5 + 0.05 = 1.55 s on P0; TBT 30 ms on D11
    d = make("mooncake_conductor").route(req, m)
    assert (d.prefill.iid, d.decode.iid) == (0, 11)
    assert isinstance(make("mooncake_conductor", {"ttft_slo_ms": 1500}).route(req, m), Reject)
    assert isinstance(make("mooncake_conductor", {"ttft_slo_ms": 1500, "margin": 0.05}).route(req, m), Route)
    assert make("mooncake_conductor", {"tbt_slo_ms": 25}).route(req, m).reason == "tbt_slo"
    r = make("mooncake_conductor", {"ttft_slo_ms": 1000})
    assert r.route(req, m).reason == "ttft_slo" and r.last == pytest.approx((1.55, 0.03))


def test_every_baseline_is_registered_with_frozen_params_and_a_cited_source():
    import dataclasses
    import importlib

    for key in ("sglang_cache_aware", "dynamo_kv", "llmd", "mooncake_conductor", "vllm_xpyd"):
        ref = ROUTERS.resolve(key, None, "router.policy")
        assert ref.cls.__module__.startswith("pdsim.sim.control.routers.")
        assert "https://" in importlib.import_module(ref.cls.__module__).__doc__
        assert dataclasses.is_dataclass(ref.params) and type(ref.params).__dataclass_params__.frozen


def test_softmax_scales_costs_by_their_spread():
    # [0, 1e9] scales to [0, 1]: probabilities 1 / (1 + e^-1) = 0.731 and 0.269, whatever the units
    assert softmax_pick([0.0, 1e9], 1.0, 0.73) == 0
    assert softmax_pick([0.0, 1e9], 1.0, 0.74) == 1
    assert softmax_pick([0.0, 1e-9], 1.0, 0.74) == 1
