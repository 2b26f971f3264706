"""Least-squares helpers shared by the fits: relative-error objectives, held-out splits, errors.

Every fit minimises relative error (log residuals for the non-linear forms, rows scaled by
1/y for the linear ones) so a 10 us kernel and a 10 ms kernel weigh the same. The held-out
check is deterministic: ``heldout_mask`` holds out every third distinct key (a shape, an EP
size...) in sorted order, the fit never sees those rows, and ``heldout_mape`` is the mean
|relative error| of its predictions on them. Tables too small to split (fewer than
``LOO_BELOW`` points) use leave-one-out instead (``heldout: leave-one-out``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import least_squares

LOO_BELOW = 12


def heldout_mask(keys) -> np.ndarray:
    """True for rows whose key is every third distinct key (sorted), starting with the second."""
    keys = [tuple(k) if isinstance(k, (tuple, list)) else (k,) for k in keys]
    uniq = sorted(set(keys))
    held = {k for i, k in enumerate(uniq) if i % 3 == 1}
    return np.array([k in held for k in keys])


def mape(pred, y) -> float:
    pred, y = np.asarray(pred, float), np.asarray(y, float)
    return float(np.mean(np.abs(pred - y) / y)) if len(y) else float("nan")


def fit_log(model: Callable[[np.ndarray], np.ndarray], y: np.ndarray, starts: list[list[float]],
            lo: list[float], hi: list[float]) -> np.ndarray:
    """Parameters minimising sum (log model(p) - log y)^2 within bounds; best of ``starts``."""
    ly = np.log(y)
    best = None
    for x0 in starts:
        x0 = np.clip(np.asarray(x0, float), lo, hi)
        r = least_squares(lambda p: np.log(np.maximum(model(p), 1e-30)) - ly, x0, bounds=(lo, hi), method="trf")
        if best is None or r.cost < best.cost:
            best = r
    return best.x


def nnls_rel(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error (rows scaled by 1/y); a tiny active set."""
    Xs, ys = X / y[:, None], np.ones_like(y)
    active = list(range(X.shape[1]))
    coef = np.zeros(X.shape[1])
    while active:
        coef = np.zeros(X.shape[1])
        sol, *_ = np.linalg.lstsq(Xs[:, active], ys, rcond=None)
        coef[active] = sol
        neg = [a for a, c in zip(active, sol) if c < 0]
        if not neg:
            return coef
        active.remove(neg[0])
    return coef


def evaluate(fit_params: Callable[[np.ndarray], np.ndarray], predict: Callable[[np.ndarray], np.ndarray],
             y: np.ndarray, held: np.ndarray | None, loo_rows: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Fit, then measure: (parameters, errors).

    ``fit_params(train_mask)`` returns parameters fitted on those rows; ``predict(params)``
    returns predictions for every row. With a held-out mask the parameters come from the
    training rows only, so ``heldout_mape`` is the error of the constants that get written.
    With ``held`` None or too few rows, the parameters use every row and each point is
    predicted by a fit without it (leave-one-out), over ``loo_rows`` where given (rows whose
    parameter no other row pins, e.g. a table's single intranode row, cannot be held out)."""
    n = len(y)
    if held is None or n < LOO_BELOW or held.all() or not held.any():
        p = fit_params(np.ones(n, bool))
        out = {"fit_mape": mape(predict(p), y), "points": n}
        idx = [i for i in range(n) if loo_rows is None or loo_rows[i]]
        if n >= 3 and idx:
            loo = [abs(predict(fit_params(np.arange(n) != i))[i] - y[i]) / y[i] for i in idx]
            out.update(heldout_mape=float(np.mean(loo)), heldout="leave-one-out", heldout_points=len(idx))
        return p, out
    train = ~held
    p = fit_params(train)
    pred = predict(p)
    return p, {"fit_mape": mape(pred[train], y[train]), "heldout_mape": mape(pred[held], y[held]),
               "points": int(train.sum()), "heldout_points": int(held.sum()), "heldout": "every third key"}
