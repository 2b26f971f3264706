"""Pareto frontiers: non-dominated and complete, on hand-built cases and generated ones."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim.explore import frontier, pareto_mask


def dominates(a, b, maximize) -> bool:
    s = np.where(maximize, 1.0, -1.0)
    a, b = np.asarray(a) * s, np.asarray(b) * s
    return bool((a >= b).all() and (a > b).any())


def test_hand_built_cases():
    pts = np.array([[1, 5], [2, 4], [3, 3], [2, 2], [1, 1], [3, 3]])
    assert list(pareto_mask(pts, [True, True])) == [True, True, True, False, False, True]  # duplicates both stay
    assert list(pareto_mask(pts, [False, False])) == [False, False, False, False, True, False]
    assert list(pareto_mask(pts, [True, False])) == [False, False, True, True, True, True]
    # throughput per GPU vs per user: the classic staircase, one point inside it
    tp = np.array([[100, 80], [300, 50], [500, 20], [250, 40], [600, 5]])
    assert list(pareto_mask(tp, [True, True])) == [True, True, True, False, True]
    assert list(pareto_mask(np.array([[1.0, np.nan], [0.5, 0.5]]), [True, True])) == [False, True]
    assert pareto_mask(np.zeros((0, 2)), [True, True]).shape == (0,)


def test_frontier_of_a_table_is_sorted_and_ignores_missing():
    df = pd.DataFrame({"config_id": list("abcde"), "x": [3.0, 1.0, 2.0, None, 0.5], "y": [1.0, 3.0, 2.0, 9.0, 2.5]})
    fr = frontier(df, "x", "y")
    assert list(fr["config_id"]) == ["b", "c", "a"]
    assert frontier(df.iloc[0:0], "x", "y").empty


points_2d = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40)
points_3d = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.floats(0, 5, allow_nan=False)),
                     min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(points_2d, st.tuples(st.booleans(), st.booleans()))
def test_2d_frontier_is_non_dominated_and_complete(points, maximize):
    _check(np.array(points, dtype=float), list(maximize))


@settings(max_examples=100, deadline=None)
@given(points_3d, st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_3d_frontier_is_non_dominated_and_complete(points, maximize):
    _check(np.array(points, dtype=float), list(maximize))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=5, max_size=60))
def test_chunking_does_not_change_the_answer(points):
    p = np.array(points, dtype=float)
    assert (pareto_mask(p, [True, False], chunk=3) == pareto_mask(p, [True, False])).all()


def _check(p: np.ndarray, maximize: list[bool]) -> None:
    m = pareto_mask(p, maximize)
    on = np.flatnonzero(m)
    assert len(on) >= 1
    for i in range(len(p)):
        dominated = any(dominates(p[j], p[i], maximize) for j in range(len(p)))
        assert m[i] == (not dominated)  # non-dominated exactly when on the frontier
        if not m[i]:  # complete: every point off it is dominated by a point on it
            assert any(dominates(p[j], p[i], maximize) for j in on)
