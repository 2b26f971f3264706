"""Token times of a simulated run: the gap histogram (no gap expanded per token) holds exactly
the gaps a token-by-token walk finds, its quantiles equal NumPy's on the expanded gaps, and
each request's worst gap is the same whatever the chunk size of the worst-gap pass."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.sim.record import GapHistogram, StepTokens


@st.composite
def runs(draw):
    n_inst = draw(st.integers(1, 3))
    steps = [np.cumsum(draw(st.lists(st.floats(1e-4, 0.5), min_size=1, max_size=40))) for _ in range(n_inst)]
    n_req = draw(st.integers(1, 12))
    first = np.asarray(draw(st.lists(st.floats(0.0, 0.01), min_size=n_req, max_size=n_req)))
    seg = []
    for r in range(n_req):
        for _ in range(draw(st.integers(0, 2))):  # stretches on (possibly) several instances
            i = draw(st.integers(0, n_inst - 1))
            a = draw(st.integers(0, len(steps[i]) - 1))
            b = draw(st.integers(a, len(steps[i]) - 1))
            seg.append((r, i, a, b))
    finished = np.asarray(draw(st.lists(st.booleans(), min_size=n_req, max_size=n_req)))
    return steps, seg, first, finished


def walk(steps, seg, first, finished):
    """Every gap and each request's worst gap, token by token."""
    gaps, worst = [], np.full(len(first), np.nan)
    for r in range(len(first)):
        if not finished[r]:
            continue
        t_prev = first[r]
        for rr, i, a, b in seg:
            if rr != r:
                continue
            for s in range(a, b + 1):
                g = steps[i][s] - t_prev
                gaps.append(g)
                worst[r] = g if np.isnan(worst[r]) else max(worst[r], g)
                t_prev = steps[i][s]
    return np.asarray(gaps), worst


@settings(max_examples=60, deadline=None)
@given(runs(), st.sampled_from([1, 3, 1 << 22]))
def test_histogram_holds_exactly_the_gaps_of_a_token_walk(run, chunk):
    steps, seg, first, finished = run
    arr = np.asarray(seg, dtype=np.int64).reshape(-1, 4)
    tokens = StepTokens(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], steps)
    tokens.CHUNK_GAPS = chunk
    hist, worst = tokens.itl_histogram(first, finished)
    gaps, want_worst = walk(steps, seg, first, finished)
    got = hist.expand()
    assert np.allclose(np.sort(gaps), got, rtol=0, atol=1e-12)
    assert np.allclose(worst, want_worst, equal_nan=True, rtol=0, atol=1e-12)
    assert (hist.counts > 0).all()
    if len(got):
        for q in (0, 10, 50, 90, 99, 100):
            assert hist.percentile(q) == np.percentile(got, q)
        assert hist.mean() == pytest.approx(got.mean(), rel=1e-12)
        assert hist.std() == pytest.approx(got.std(), rel=1e-9, abs=1e-15)


@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(1, 50)), min_size=1, max_size=30),
       st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_quantiles_equal_numpy_on_the_expanded_samples(pairs, qs):
    h = GapHistogram(np.asarray([v for v, _ in pairs]), np.asarray([c for _, c in pairs], dtype=np.int64))
    x = h.expand()
    assert np.array_equal(h.quantiles(np.asarray(qs)), np.quantile(x, qs))
    s = h.sample(10, seed=1)
    assert len(s) == min(10, len(x)) and np.isin(s, x).all()
