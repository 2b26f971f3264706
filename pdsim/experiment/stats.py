"""Confidence intervals and paired significance tests across replicates, without SciPy.

Student's t distribution with ``df`` degrees of freedom:
- CDF through the regularized incomplete beta function: for t >= 0,
  F(t) = 1 - I_x(df/2, 1/2) / 2 with x = df / (df + t^2) (Abramowitz & Stegun 26.7.1 with
  26.5.27), or near the centre (t^2 < df) the same probability as 1/2 + I_y(1/2, df/2) / 2
  with y = t^2 / (df + t^2), which avoids cancelling 1 - ~1/2; I_x(a, b) by its continued
  fraction, evaluated with the modified Lentz method (Press et al., Numerical Recipes, 3rd
  ed., Sec. 6.4), swapping to 1 - I_{1-x}(b, a) where
  x > (a + 1) / (a + b + 2) so the fraction converges fast.
- quantile: the CDF inverted by bisection on a bracket that is widened until it holds the
  answer (monotone, so it converges; 200 halvings reach double precision).
Checked against published table values and, where SciPy happens to be installed, against it
(tests/test_experiment_stats.py).

- ``mean_ci``: mean and the two-sided t interval mean +- t_{(1+c)/2, n-1} x s / sqrt(n).
- ``paired``: the paired t-test of a policy against the baseline over the same replicates
  (common random numbers): d_i = x_i - y_i, t = mean(d) / (s_d / sqrt(n)), two-sided
  p = 2 (1 - F(|t|)), with the interval of mean(d). When every d_i is equal the test is
  degenerate: p = 0 if they differ from 0, else 1.
- ``holm``: Holm's step-down adjustment of a family of p-values (Holm 1979), for the several
  policies compared with one baseline on one metric.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_EPS = 1e-300
_TINY = 1e-15


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _EPS else _EPS)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _EPS else _EPS)
        c = 1.0 + aa / c
        c = c if abs(c) > _EPS else _EPS
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _EPS else _EPS)
        c = 1.0 + aa / c
        c = c if abs(c) > _EPS else _EPS
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _TINY:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), a, b > 0, x in [0, 1]."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    t2 = t * t
    if t2 < df:  # near the centre: P(0 < T < |t|) = I_y(1/2, df/2) / 2, y = t^2 / (df + t^2), no cancellation
        half = 0.5 * betainc(0.5, df / 2.0, t2 / (df + t2))
        return 0.5 + half if t >= 0 else 0.5 - half
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t2))
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The t value with P(T <= t) = ``p`` (0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1)
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0


def _clean(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]


def mean_ci(values, confidence: float = 0.95) -> Interval:
    """Mean of the finite ``values`` and its two-sided t interval (NaN bounds for n < 2)."""
    v = _clean(values)
    n = len(v)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan)
    m = float(v.mean())
    if n < 2:
        return Interval(1, m, math.nan, math.nan, math.nan)
    s = float(v.std(ddof=1))
    h = t_ppf(0.5 + confidence / 2.0, n - 1) * s / math.sqrt(n)
    return Interval(n, m, s, m - h, m + h)


@dataclass(frozen=True)
class PairedTest:
    n: int
    mean_diff: float
    low: float
    high: float
    t: float
    p_value: float


def paired(x, y, confidence: float = 0.95) -> PairedTest:
    """Paired t-test of ``x`` against ``y`` (same replicates, same order); pairs where either
    value is not finite are left out."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired samples need the same length, got {x.shape} and {y.shape}")
    keep = np.isfinite(x) & np.isfinite(y)
    d = x[keep] - y[keep]
    n = len(d)
    if n < 2:
        m = float(d.mean()) if n else math.nan
        return PairedTest(n, m, math.nan, math.nan, math.nan, math.nan)
    m = float(d.mean())
    s = float(d.std(ddof=1))
    if s == 0.0:
        p = 1.0 if m == 0.0 else 0.0
        t = 0.0 if m == 0.0 else math.copysign(math.inf, m)
        return PairedTest(n, m, m, m, t, p)
    se = s / math.sqrt(n)
    t = m / se
    h = t_ppf(0.5 + confidence / 2.0, n - 1) * se
    p = 2.0 * (1.0 - t_cdf(abs(t), n - 1))
    return PairedTest(n, m, m - h, m + h, t, min(1.0, max(0.0, p)))


def holm(p_values) -> list[float]:
    """Holm-adjusted p-values (same order); NaN stays NaN and does not count in the family."""
    p = [float(x) for x in p_values]
    idx = sorted((i for i, x in enumerate(p) if math.isfinite(x)), key=lambda i: p[i])
    m = len(idx)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
