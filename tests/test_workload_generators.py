"""Generators and load shaping: deterministic by seed, matching their stated distributions."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.specs import SpecError
from pdsim.specs._convert import build
from pdsim.specs.workload import LengthDist, WorkloadSpec, genai_scenario
from pdsim.workload import (PRESETS, RequestTable, arrivals, closed_loop, materialize, open_loop, prefix_reuse_ratio,
                            rate_sweep, sample_lengths, scale_sweep, scale_time, shared_prefix_ids)


def spec(**kw) -> WorkloadSpec:
    return build(WorkloadSpec, kw)


def same(a: RequestTable, b: RequestTable) -> bool:
    eq = (np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_len, b.input_len)
          and np.array_equal(a.output_len, b.output_len) and a.max_concurrency == b.max_concurrency)
    if a.hash_ids is None or b.hash_ids is None:
        return eq and a.hash_ids is b.hash_ids
    return eq and len(a.hash_ids) == len(b.hash_ids) and all(
        np.array_equal(x, y) for x, y in zip(a.hash_ids, b.hash_ids))


SPECS = [
    dict(kind="fixed_batch", batch_size=16, input={"dist": "uniform", "min": 10, "max": 900}),
    dict(kind="synthetic", num_requests=150, rate=5.0, burstiness=0.3,
         input={"dist": "random_ratio", "value": 2000, "range_ratio": 0.5}),
    dict(kind="synthetic", num_requests=150, input={"dist": "random_range", "value": 1000, "range_ratio": 0.3},
         shared_prefix_tokens=1024, prefix_groups=3, max_concurrency=8),
    dict(kind="synthetic", num_requests=150, rate=2.0, arrival="poisson", preset="sharegpt"),
    dict(kind="synthetic", num_requests=150, rate=2.0, arrival="constant", preset="sonnet", block_size=64),
    dict(kind="synthetic", num_requests=150, rate=3.0, scenario="N(480,240)/(300,150)"),
    dict(kind="synthetic", num_requests=150, rate=3.0, scenario="P(1500,300)/100"),
    dict(kind="multi_turn", conversation={"sessions": 20, "system_prompt_tokens": 700}),
    dict(kind="tool_agent"),
]
WITH_IDS = {2, 4, 6, 7, 8}


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(range(len(SPECS))))
def test_every_generator_is_deterministic_by_seed_and_well_formed(seed, which):
    s = spec(**SPECS[which])
    a, b = materialize(s, seed), materialize(s, seed)
    assert same(a, b)
    assert len(a) >= 1 and (a.input_len >= 1).all() and (a.output_len >= 1).all()
    assert a.arrival_s[0] == 0.0 and (np.diff(a.arrival_s) >= 0).all()
    # prompts carry block ids exactly when they share prefixes (shared prefix, sonnet, P(...), sessions)
    assert (a.hash_ids is not None) == (which in WITH_IDS)
    assert a.hash_ids is None or all(len(h) == -(-int(n) // a.block_size) for h, n in zip(a.hash_ids, a.input_len))


@pytest.mark.parametrize("which", [1, 3, 5, 7])
def test_another_seed_gives_another_table(which):
    s = spec(**SPECS[which])
    assert not same(materialize(s, 1), materialize(s, 2))


@pytest.mark.parametrize("d, mean, std", [
    (LengthDist("uniform", min=100, max=300), 200.0, np.sqrt((201 ** 2 - 1) / 12)),
    (LengthDist("normal", mean=1000, std=100, min=1, max=10_000), 1000.0, 100.0),
    (LengthDist("lognormal", mean=500, std=400, min=1, max=10**7), 500.0, 400.0),
    # SGLang random dataset: uniform integers in [v * r, v]
    (LengthDist("random_ratio", value=1000, range_ratio=0.5), 750.0, np.sqrt((501 ** 2 - 1) / 12)),
    # vLLM random dataset: uniform integers in [v (1 - r), v (1 + r)]
    (LengthDist("random_range", value=1000, range_ratio=0.2), 1000.0, np.sqrt((401 ** 2 - 1) / 12)),
])
def test_length_distributions_match_their_moments(d, mean, std):
    x = sample_lengths(d, 200_000, np.random.default_rng(3))
    assert abs(x.mean() - mean) / mean < 0.01
    assert abs(x.std() - std) / std < 0.03
    assert abs(d.expected_mean - mean) / mean < 1e-3


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 100_000), st.floats(0.0, 0.99), st.integers(0, 2**16))
def test_random_range_stays_in_vllms_interval(value, ratio, seed):
    x = sample_lengths(LengthDist("random_range", value=value, range_ratio=ratio), 500, np.random.default_rng(seed))
    assert x.min() >= max(1, np.floor(value * (1 - ratio))) and x.max() <= np.ceil(value * (1 + ratio))


@pytest.mark.parametrize("name, mean_in, mean_out", [("sharegpt", 161, 338), ("sonnet", 550, 150)])
def test_presets_reproduce_their_published_means(name, mean_in, mean_out):
    t = materialize(spec(num_requests=100_000, preset=name), 0)
    assert abs(t.input_len.mean() - mean_in) / mean_in < 0.03
    assert abs(t.output_len.mean() - mean_out) / mean_out < 0.03
    if name == "sharegpt":
        assert t.hash_ids is None  # no shared prefix, nothing for a prefix cache
    else:  # every prompt starts with the same 200 tokens: with 50-token blocks, its first 4 ids
        t = materialize(spec(num_requests=200, preset=name, block_size=50), 0)
        assert PRESETS[name].prefix_tokens == 200
        assert {tuple(h[:4].tolist()) for h in t.hash_ids} == {(0, 1, 2, 3)}
        assert all(len(set(h[4:].tolist()) & {0, 1, 2, 3}) == 0 for h in t.hash_ids)


@pytest.mark.parametrize("text, inp, out, prefix", [
    ("D(2000,200)", ("fixed", 2000, 2000), ("fixed", 200, 200), 0),
    ("N(480,240)/(300,150)", ("normal", 1, 480 + 6 * 240), ("normal", 1, 300 + 6 * 150), 0),
    ("U(50,100)/(200,250)", ("uniform", 50, 100), ("uniform", 200, 250), 0),
    ("U(100,200)", ("uniform", 1, 100), ("uniform", 1, 200), 0),  # genai-bench short form: min 1
    ("P(2000,500)/200", ("fixed", 500, 500), ("fixed", 200, 200), 2000),
])
def test_genai_bench_scenarios_parse(text, inp, out, prefix):
    s = genai_scenario(text)
    for d, (kind, lo, hi) in ((s.input, inp), (s.output, out)):
        assert d.dist == kind
        if kind == "fixed":
            assert d.value == lo
        else:
            assert (d.min, d.max) == (lo, hi)
    assert s.prefix_tokens == prefix


@pytest.mark.parametrize("text", ["X(1,2)", "D(1,2)/(3,4)", "N(5,1)", "U(10,5)/(1,2)", "D(0,5)", "P(10,0)/5", ""])
def test_bad_genai_scenarios_name_the_field(text):
    with pytest.raises(SpecError, match="scenario"):
        spec(scenario=text)


def test_genai_normal_scenario_matches_its_moments():
    t = materialize(spec(num_requests=100_000, scenario="N(2000,300)/(400,80)"), 5)
    assert abs(t.input_len.mean() - 2000) < 10 and abs(t.input_len.std() - 300) < 6
    assert abs(t.output_len.mean() - 400) < 2 and abs(t.output_len.std() - 80) < 2


@pytest.mark.parametrize("rate, burst, process", [(4.0, 1.0, "gamma"), (10.0, 0.25, "gamma"), (2.0, 4.0, "gamma"),
                                                  (3.0, 1.0, "poisson")])
def test_arrivals_have_the_stated_rate_and_burstiness(rate, burst, process):
    t = arrivals(100_000, rate, burst, np.random.default_rng(1), process)
    gaps = np.diff(t)
    assert t[0] == 0 and abs(gaps.mean() * rate - 1) < 0.02
    assert abs((gaps.std() / gaps.mean()) ** 2 - 1 / burst) < 0.05 / burst + 0.02  # gamma: CV^2 = 1/shape


def test_constant_arrivals_are_evenly_spaced():
    t = materialize(spec(num_requests=101, rate=4.0, arrival="constant"), 0).arrival_s
    assert np.allclose(np.diff(t), 0.25) and t[-1] == pytest.approx(25.0)


def test_spec_checks_arrival_and_prefix_fields():
    with pytest.raises(SpecError, match="burstiness: arrival poisson has burstiness 1"):
        spec(rate=1.0, arrival="poisson", burstiness=0.5)
    with pytest.raises(SpecError, match="input.range_ratio: must be in \\[0, 1\\)"):
        spec(input={"dist": "random_range", "value": 100, "range_ratio": 1.0})
    with pytest.raises(SpecError, match="shared_prefix_tokens"):
        spec(scenario="P(100,10)/5", shared_prefix_tokens=64)
    with pytest.raises(SpecError, match="prefix_groups: must be >= 1"):
        spec(prefix_groups=0)
    with pytest.raises(SpecError, match="rate: give rate"):
        spec(kind="trace", rate=2.0, trace={"path": "x.jsonl", "time_scale": 0.5})


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 4), st.sampled_from([16, 64, 512]), st.integers(0, 2**16))
def test_shared_prefix_ids_share_exactly_the_whole_prefix_blocks(prefix, groups, block, seed):
    rng = np.random.default_rng(seed)
    inp = prefix + rng.integers(1, 3000, size=40)
    group = rng.integers(0, groups, size=40)
    ids = shared_prefix_ids(inp, group, prefix, groups, block)
    pb = prefix // block
    owner: dict[int, set] = {}
    for k, h in enumerate(ids):
        assert len(h) == -(-int(inp[k]) // block)
        for j, x in enumerate(h.tolist()):
            owner.setdefault(x, set()).add((j, int(group[k]) if j < pb else k))
    # an id is shared only at the same position by requests of the same group, within the prefix
    assert all(len(v) == 1 for v in owner.values())


def test_p_scenario_reuse_ratio_is_the_shared_whole_blocks():
    t = materialize(spec(num_requests=400, scenario="P(2000,500)/200"), 0)
    # 3 whole 512-token blocks of the 2000-token prefix are reusable after the first request
    assert prefix_reuse_ratio(t) == pytest.approx(3 * 512 / 2500 * (399 / 400))


def _prefix_chained(t: RequestTable) -> bool:
    """Every id always sits at the same position after the same predecessor."""
    where: dict[int, tuple[int, int]] = {}
    for h in t.hash_ids:
        prev = -1
        for j, x in enumerate(h.tolist()):
            if where.setdefault(x, (j, prev)) != (j, prev):
                return False
            prev = x
    return True


@pytest.mark.parametrize("kind", ["multi_turn", "tool_agent"])
def test_sessions_reuse_a_growing_prefix_with_prefix_chained_ids(kind):
    t = materialize(spec(kind=kind, conversation={"sessions": 30, "system_prompt_tokens": 1500,
                                                  "turns": {"dist": "uniform", "min": 2, "max": 6}}), 3)
    assert _prefix_chained(t)
    sys_ids = {0, 1}  # the shared system prompt's whole blocks (1500 // 512 = 2)
    assert all(set(h[:2].tolist()) == sys_ids for h in t.hash_ids)
    assert prefix_reuse_ratio(t) > 0.5
    # a prompt's partial last block is never reused: its id is unique to that request
    tails = [int(h[-1]) for h, n in zip(t.hash_ids, t.input_len) if n % 512]
    counts = np.unique(np.concatenate(t.hash_ids), return_counts=True)
    once = dict(zip(counts[0].tolist(), counts[1].tolist()))
    assert all(once[x] == 1 for x in tails)


def test_fixed_batch_is_all_at_zero():
    t = materialize(spec(kind="fixed_batch", batch_size=64, input={"dist": "fixed", "value": 4096},
                         output={"dist": "fixed", "value": 8}))
    assert len(t) == 64 and not t.arrival_s.any() and set(t.input_len) == {4096} and set(t.output_len) == {8}


def test_open_and_closed_loop_reshape_a_table():
    base = materialize(spec(num_requests=500, rate=2.0), 0)
    o = open_loop(base, 50.0, burstiness=1.0, seed=4)
    assert np.array_equal(o.input_len, base.input_len) and abs(len(o) / o.duration_s - 50) < 8
    c = closed_loop(base, 16)
    assert c.max_concurrency == 16 and not c.arrival_s.any()
    with pytest.raises(SpecError, match="max_concurrency"):
        closed_loop(base, 0)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 50.0), st.integers(0, 1000))
def test_time_scaling_scales_duration_and_keeps_order(k, seed):
    t = materialize(spec(num_requests=300, rate=3.0, burstiness=0.5), seed)
    s = scale_time(t, k)
    assert s.duration_s == pytest.approx(k * t.duration_s, rel=1e-12)
    assert (np.diff(s.arrival_s) >= 0).all() and s.arrival_s[0] == t.arrival_s[0]
    assert np.allclose(np.diff(s.arrival_s), k * np.diff(t.arrival_s))
    assert np.array_equal(s.input_len, t.input_len) and np.array_equal(s.output_len, t.output_len)


def test_sweeps_return_specs():
    base = spec(num_requests=100, rate=1.0)
    specs = rate_sweep(base, [1, 2.5, 10])
    assert [s.rate for s in specs] == [1.0, 2.5, 10.0] and all(s.num_requests == 100 for s in specs)
    with pytest.raises(SpecError, match="rates must be > 0"):
        rate_sweep(base, [1, 0])
    tr = spec(kind="trace", trace={"path": "t.jsonl"})
    assert [s.trace.time_scale for s in scale_sweep(tr, [0.5, 2])] == [0.5, 2.0]
    with pytest.raises(SpecError, match="kind: trace"):
        scale_sweep(base, [0.5])
    with pytest.raises(SpecError, match="time_scale"):
        scale_time(materialize(base), 0)
