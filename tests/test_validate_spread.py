"""The real run's own sampling interval beside every validation error (pdsim/validate/spread.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.ingest.common import real_record
from pdsim.metrics.results import Results
from pdsim.validate.spread import sampling_intervals, weighted_stats, within


def _run(ttfts, gaps_per_request) -> Results:
    """A real run: request i arrives at 10*i s, its first token after ttfts[i], then its gaps."""
    times = []
    for i, (t0, gaps) in enumerate(zip(ttfts, gaps_per_request)):
        start = 10.0 * i + t0
        times.append(list(start + np.concatenate([[0.0], np.cumsum(gaps)])))
    n = len(ttfts)
    rec = real_record("r", arrival_s=10.0 * np.arange(n), input_len=[100] * n,
                      output_len=[len(g) + 1 for g in gaps_per_request], token_times=times,
                      drop_reason=[None] * n, meta={})
    return Results(rec)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1e3, allow_nan=False), st.integers(0, 5)), min_size=1, max_size=40))
def test_weighted_stats_equal_numpy_on_the_repeated_array(pairs):
    vals = np.sort(np.array([v for v, _ in pairs]))
    counts = np.array([c for _, c in pairs])
    if counts.sum() == 0:
        counts[0] = 1
    rep = np.repeat(vals, counts)
    got = weighted_stats(vals, counts)
    want = (rep.mean(), np.percentile(rep, 50), np.percentile(rep, 90), np.percentile(rep, 99))
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9)


def test_mean_interval_matches_the_normal_theory_width():
    """n iid TTFTs: the bootstrap's 90 % interval of the mean is ~ mean ± 1.645 sigma / sqrt(n)."""
    rng = np.random.default_rng(1)
    n = 400
    ttft = rng.exponential(0.5, n)
    res = _run(ttft, [np.full(3, 0.01)] * n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        iv = sampling_intervals(res)
    lo, hi = iv["mean_ttft_ms"]
    half = (hi - lo) / 2
    theory = 1.645 * ttft.std() / np.sqrt(n) * 1e3
    assert half == pytest.approx(theory, rel=0.2)
    assert lo < ttft.mean() * 1e3 < hi


def test_a_p90_between_two_modes_is_unresolved_and_a_unimodal_one_is_tight():
    """The zen1 code-knee case's shape: ~10 % of the gaps wait ~800 ms behind a prefill chunk, the
    rest are ~8 ms decode steps. With the share of long gaps right at 10 %, the p90 gap's interval
    spans both modes; with every gap a decode step it is a few per cent wide."""
    rng = np.random.default_rng(2)
    n = 60
    bimodal, plain = [], []
    for i in range(n):
        g = rng.normal(0.008, 0.0005, 30)
        plain.append(g.copy())
        if i % 2:  # half the requests decode beside the prefill bursts: 6 of their 30 gaps are long
            g[rng.choice(30, 6, replace=False)] = 0.8
        bimodal.append(g)
    ttft = np.full(n, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        wide = sampling_intervals(_run(ttft, bimodal))["p90_itl_ms"]
        tight = sampling_intervals(_run(ttft, plain))["p90_itl_ms"]
    assert wide[0] < 20 and wide[1] > 400  # both modes inside: the run cannot resolve p90 ITL
    assert (tight[1] - tight[0]) / 2 / 8.6 < 0.05


def test_same_seed_same_intervals_and_every_gated_family_present():
    rng = np.random.default_rng(3)
    res = _run(rng.exponential(0.3, 30), [rng.exponential(0.02, 10) for _ in range(30)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        a, b = sampling_intervals(res, seed=5), sampling_intervals(res, seed=5)
    assert a == b
    for m in ("mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms", "p99_e2e_latency_ms"):
        assert a[m][0] <= a[m][1]
    assert within(a["mean_itl_ms"][0], a["mean_itl_ms"]) and not within(None, a["mean_itl_ms"])


def test_one_request_draws_no_interval():
    res = _run([0.2], [np.full(5, 0.01)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert sampling_intervals(res) == {}


def test_case_rows_carry_the_interval_and_mark_failures_inside_it():
    """The bundled zen1 code-knee case: its p90 ITL fails by -49 %, inside its own interval; its
    mean TTFT passes. The page names the failure 'in spread' and counts it."""
    from pdsim.validate.case import run_case
    from pdsim.validate.suite import failing_cell, tally

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_case("validation/cpu-vllm-zen1-code-knee")
    by = {row.metric: row for row in r.rows}
    p90 = by["p90_itl_ms"]
    assert p90.verdict == "FAIL" and p90.in_spread and p90.spread > 1.0
    assert by["mean_ttft_ms"].real_low < by["mean_ttft_ms"].real < by["mean_ttft_ms"].real_high
    assert by["output_throughput"].real_low is None
    assert "p90_itl_ms" in failing_cell(r) and "(in spread)" in failing_cell(r)
    assert "1 of 4 gated metrics fail, 1 of them" in tally([r]) and "2 of the 4 have an interval wider" in tally([r])
