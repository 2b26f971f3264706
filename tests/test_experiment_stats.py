"""The experiment's statistics: Student's t without SciPy, intervals, paired tests, Holm."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdsim.experiment.stats import betainc, holm, mean_ci, paired, t_cdf, t_ppf

# two-sided 95 % and 99 % critical values (standard t tables, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
TABLE = [(1, 0.975, 12.7062047), (2, 0.975, 4.3026527), (3, 0.975, 3.1824463), (4, 0.975, 2.7764451),
         (9, 0.975, 2.2621572), (29, 0.975, 2.0452296), (100, 0.975, 1.9839715), (5, 0.995, 4.0321430),
         (10, 0.995, 3.1692727), (10, 0.95, 1.8124611)]


@pytest.mark.parametrize("df,p,want", TABLE)
def test_quantiles_match_the_tables(df, p, want):
    assert t_ppf(p, df) == pytest.approx(want, abs=2e-7)
    assert t_cdf(want, df) == pytest.approx(p, abs=1e-8)


def test_closed_forms():
    # df = 1 is Cauchy: F(t) = 1/2 + atan(t)/pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 1e4):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - sum_{j<2} C(4,j) .4^j .6^(4-j)
    assert t_ppf(0.5, 7) == 0.0 and t_cdf(math.inf, 3) == 1.0 and t_cdf(-math.inf, 3) == 0.0


def test_against_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 8, 20, 60, 1000):
        for p in (0.6, 0.9, 0.975, 0.999, 0.02):
            assert t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)
        for t in (-8.0, -1.0, 0.25, 2.0, 30.0):
            assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-11)
    x, y = [3.1, 2.8, 4.0, 3.3, 2.9], [2.7, 2.9, 3.1, 2.8, 2.2]
    want = stats.ttest_rel(x, y)
    got = paired(x, y)
    assert got.t == pytest.approx(want.statistic, rel=1e-12) and got.p_value == pytest.approx(want.pvalue, rel=1e-8)


@given(st.floats(-50, 50), st.floats(0.5, 300))
def test_cdf_is_symmetric_and_inverts(t, df):
    assert t_cdf(t, df) + t_cdf(-t, df) == pytest.approx(1.0, abs=1e-12)
    p = t_cdf(t, df)
    if 1e-9 < p < 1 - 1e-9:
        assert t_ppf(p, df) == pytest.approx(t, abs=1e-6 * max(1.0, abs(t)))


@given(st.floats(-20, 20), st.floats(-20, 20), st.floats(0.5, 100))
def test_cdf_is_monotone(a, b, df):
    lo, hi = min(a, b), max(a, b)
    assert t_cdf(lo, df) <= t_cdf(hi, df) + 1e-15


def test_mean_ci_is_mean_plus_minus_t_times_the_standard_error():
    v = [10.0, 12.0, 11.0, 13.0, 9.0]
    ci = mean_ci(v, 0.95)
    se = np.std(v, ddof=1) / math.sqrt(5)
    assert ci.mean == 11.0 and ci.high - ci.mean == pytest.approx(2.7764451 * se, rel=1e-7)
    assert mean_ci([1.0], 0.95).n == 1 and math.isnan(mean_ci([1.0]).low)
    assert mean_ci([1.0, float("nan"), 3.0]).n == 2  # non-finite values are left out


def test_paired_test_uses_the_differences():
    x = [5.0, 6.0, 7.5, 8.0]
    y = [4.0, 5.5, 6.0, 7.9]
    d = np.subtract(x, y)
    r = paired(x, y)
    assert r.mean_diff == pytest.approx(d.mean())
    assert r.t == pytest.approx(d.mean() / (d.std(ddof=1) / 2.0))
    assert r.p_value == pytest.approx(2 * (1 - t_cdf(abs(r.t), 3)))
    assert r.low < r.mean_diff < r.high
    # a constant shift is certain; no shift at all is no evidence
    assert paired([2, 3, 4], [1, 2, 3]).p_value == 0.0 and paired([1, 2], [1, 2]).p_value == 1.0
    # a pair with a missing value is left out
    assert paired([1.0, 2.0, float("nan"), 4.0], [0.0, 1.5, 1.0, 3.0]).n == 3
    with pytest.raises(ValueError):
        paired([1, 2], [1, 2, 3])


def test_holm_steps_down():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    out = holm([float("nan"), 0.02])
    assert math.isnan(out[0]) and out[1] == pytest.approx(0.02)
