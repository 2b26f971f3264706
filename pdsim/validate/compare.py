"""Simulated vs real, metric by metric: signed error, KS distance, verdict against a tolerance.

Metrics (bench_serving names): ``{mean,median,p90,p99}_{ttft,itl,tpot,e2e_latency}_ms`` and
``output_throughput`` / ``request_throughput``. Signed error = (simulated - real) / real: positive
means pdsim predicts slower latency (or higher throughput). Per family the two-sample
Kolmogorov-Smirnov distance (largest gap between the empirical CDFs, 0 = same distribution,
1 = disjoint) of the per-request values (every gap for ITL). Per request (aligned one to one):
the median absolute relative error of TTFT and E2E.

Verdicts: a metric named in the tolerances passes when |error| <= its tolerance (``pass`` or
``FAIL``); every other metric is reported as ``info``. Beside each latency metric, the real run's
own 90 % sampling interval (spread.py): a failure whose simulated value lies inside it is one the
run is too short to tell from sampling; the verdict stays as the tolerance says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..metrics.results import Results
from .spread import sampling_intervals, within

FAMILIES = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e_latency", "E2E"))
STATS = ("mean", "median", "p90", "p99")
THROUGHPUT = ("output_throughput", "request_throughput")
# the target: TTFT and ITL mean and p90 within 20 %
DEFAULT_TOLERANCES = {"mean_ttft_ms": 0.2, "p90_ttft_ms": 0.2, "mean_itl_ms": 0.2, "p90_itl_ms": 0.2}


@dataclass(frozen=True)
class Row:
    metric: str
    real: float | None
    simulated: float | None
    error: float | None  # signed relative error (sim - real) / real
    tolerance: float | None
    verdict: str  # pass | FAIL | info | n/a
    # the real run's own 90 % sampling interval of the metric (spread.py); None where not drawn
    real_low: float | None = None
    real_high: float | None = None
    # the simulated value with every engine step a few % faster / slower than priced
    # (step_speed.py); None where not simulated
    step_fast: float | None = None
    step_slow: float | None = None
    # the simulated value with the profile re-measured just after the recording (case.yaml
    # ``after``; the verdict is the profile's measured before it); None where the case has none
    after: float | None = None
    # the range of the real values over the recordings of the same requests (repeats.py), this one's
    # included; None where the case has no repeat
    repeat_low: float | None = None
    repeat_high: float | None = None

    @property
    def in_spread(self) -> bool:
        """The simulated value lies inside the real run's own sampling interval: the run cannot
        tell it from the real value."""
        return within(self.simulated, None if self.real_low is None else (self.real_low, self.real_high))

    @property
    def in_step_band(self) -> bool:
        """A failing metric that would pass were every step as many % faster or slower as the band
        was drawn at: the tolerance window around the real value meets the simulated range."""
        if self.step_fast is None or self.step_slow is None or self.real is None or self.tolerance is None:
            return False
        lo, hi = sorted((self.step_fast, self.step_slow))
        r, t = self.real, self.tolerance
        return lo <= r * (1 + t) and hi >= r * (1 - t)

    @property
    def bracketed(self) -> bool:
        """The real value lies between the simulated ones with the profiles measured just before and
        just after the recording: the host's own drift across the recording spans the error."""
        if self.after is None or self.simulated is None or self.real is None:
            return False
        lo, hi = sorted((self.simulated, self.after))
        return lo <= self.real <= hi

    @property
    def in_repeats(self) -> bool:
        """The simulated value lies within the range the engine itself gave on repeats of the same
        requests (repeats.py)."""
        return within(self.simulated, None if self.repeat_low is None else (self.repeat_low, self.repeat_high))

    def step_elasticity(self, frac: float) -> float | None:
        """Relative change of the simulated metric per relative change of every step's price
        (1: proportional; 5: a 1% price error moves the metric 5%), from the band drawn at
        ±``frac``; None where not drawn."""
        if self.step_fast is None or self.step_slow is None or not self.simulated or frac <= 0:
            return None
        return (self.step_slow - self.step_fast) / (2.0 * frac * self.simulated)

    @property
    def spread(self) -> float | None:
        """The interval's half width relative to the real value (0.25: the run resolves the metric
        to about ±25 %); None where not drawn."""
        if self.real_low is None or not self.real:
            return None
        return (self.real_high - self.real_low) / 2 / abs(self.real)


def number(v) -> float | None:
    """A summary's value as a float; None where it has none."""
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def ks_distance(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b| (NaN ignored); None if empty."""
    a = np.sort(np.asarray(a, dtype=float)[~np.isnan(a)])
    b = np.sort(np.asarray(b, dtype=float)[~np.isnan(b)])
    if not a.size or not b.size:
        return None
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def _err(real, sim) -> float | None:
    if real is None or sim is None or not math.isfinite(real) or not math.isfinite(sim) or real == 0:
        return None
    return (sim - real) / real


def _values(res: Results, fam: str) -> np.ndarray:
    df = res.requests[res.requests["finished"]]
    col = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e_latency": "e2e_s"}.get(fam)
    # a replayed run is small: its gaps are expanded for the KS distance
    return np.asarray(res.itls if fam == "itl" else df[col].to_numpy(dtype=float)) * 1e3


def compare(real: Results, sim: Results, tolerances: dict[str, float] | None = None,
            pairs: np.ndarray | None = None, spread: bool = True) -> tuple[list[Row], dict]:
    """(rows, extras): one row per metric; extras = KS distances per family and per-request errors.

    ``pairs``: (real index, simulated index) of aligned requests, for the per-request errors.
    ``spread``: draw the real run's own sampling interval of each latency metric (spread.py) into
    the rows; it never changes a verdict."""
    tol = DEFAULT_TOLERANCES if tolerances is None else tolerances
    sr, ss = real.summary(), sim.summary()
    band = sampling_intervals(real) if spread else {}
    rows = []
    names = [f"{s}_{f}_ms" for f, _ in FAMILIES for s in STATS] + list(THROUGHPUT)
    for m in names:
        r, s = sr.get(m), ss.get(m)
        e = _err(r, s)
        t = tol.get(m)
        if t is None:
            verdict = "info"
        elif e is None:
            verdict = "n/a"
        else:
            verdict = "pass" if abs(e) <= t else "FAIL"
        lo, hi = band.get(m, (None, None))
        rows.append(Row(m, r, s, e, t, verdict, lo, hi))
    unknown = sorted(set(tol) - set(names))
    if unknown:
        raise ValueError(f"unknown metric(s) in tolerances: {', '.join(unknown)}; expected some of {', '.join(names)}")
    extras: dict = {"ks": {}, "per_request": {}}
    for fam, label in FAMILIES:
        extras["ks"][label] = ks_distance(_values(real, fam), _values(sim, fam))
    if pairs is not None and len(pairs):
        rq, sq = real.requests, sim.requests
        for col, label in (("ttft_s", "TTFT"), ("e2e_s", "E2E")):
            a = rq[col].to_numpy(dtype=float)[pairs[:, 0]]
            b = sq[col].to_numpy(dtype=float)[pairs[:, 1]]
            ok = np.isfinite(a) & np.isfinite(b) & (a > 0)
            extras["per_request"][label] = {
                "median_abs_rel_error": float(np.median(np.abs(b[ok] - a[ok]) / a[ok])) if ok.any() else None,
                "requests": int(ok.sum())}
    return rows, extras


def failed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.verdict == "FAIL"]
