"""``pdsim calibrate from-steps``: an engine's host work per step, fitted to its own step trace.

A step trace is the engine's own log of its steps: when each started and ended and what it
carried (decodes and their context, prefill chunks and their tokens). pdsim prices a step as
the GPU work of what it carries plus host work (costs/step.py):

    step = price_gpu(step) + step_overhead_us + seq_overhead_us x sequences + ctx_overhead_ns x context

linear in the three host constants. So each constant's column is the price of every traced step
with that constant at one unit, less its price with all three at zero (the same step-cost code
the simulator steps with, so the columns count sequences and context exactly as it does), and the
constants are the non-negative least squares of (real step time - GPU price) on those columns,
each step weighted by 1 / its real time (relative errors: a 60 ms step and a 600 ms step count
alike). No simulation: the trace says what each step carried and how long it took, so the fit
separates per-step from per-sequence work even where the end-to-end latencies of a few loads
cannot (from_runs.py).

One kernel constant can join them: ``--param attention``, the prefill attention kernel's fraction
of peak FLOP/s as the profile prices it (``calibration.attention_prefill.eff`` where the calibrated
cost model reads the profile's fitted kernel, else ``efficiency.attention``). The attention core's
seconds are work / (peak x that fraction), so the step price is linear in 1 / fraction wherever
nothing else reads it (under ``sdpa_packed``, transformers' one dense attention over the packed
batch; not beside a decode kernel's roofline max of HBM and FLOP time): its column is the
attention seconds at the profile's value (the price at half of it less the price at it), and the
fitted multiple s of that column gives fraction = profile's / s. The linearity is checked on every
traced step; where it does not hold the fit is refused, naming the step. The other kernels are
never refitted here (``pdsim calibrate fit``).

The traces (an engine's own JSON columns, or vLLM's own step rows with ``PATH@LOAD`` for one load
of a recording), the scenario's group whose engine they come from (``--group``) and the prices
of their steps are validate/traced_steps.py's.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..validate.traced_steps import (COLOCATED, Trace, attention_path, parse_group, prices, read_trace,  # noqa: F401
                                     step_cost_of, value_of)
from .from_runs import PARAMS, Param, constants_lines

HOST = ("efficiency.step_overhead_us", "efficiency.seq_overhead_us", "efficiency.ctx_overhead_ns")
ATTENTION = "attention"  # --param attention: the prefill attention kernel's rate (module doc)
_ATTN_WHAT = "prefill attention kernel's fraction of peak FLOP/s"
ATTENTION_PATHS = ("efficiency.attention", "calibration.attention_prefill.eff")
KNOWN = {**PARAMS, **{path: Param(path, "hardware", 0.1, "", _ATTN_WHAT) for path in ATTENTION_PATHS}}
BATCH_BINS = ((1, 3), (4, 15), (16, 31), (32, 63), (64, 10**9))


class NotLinear(SpecError):
    """The price is not linear in 1 / the attention rate on these steps."""


def design(sc, t: Trace, names: list[str], group: tuple[str, int] = COLOCATED,
           fixed: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the price with every fitted constant at zero, one column per constant: d price / d constant).
    For ``efficiency.attention`` the constant is the multiple of the attention seconds at the
    profile's value, and "at zero" means without them (module doc). ``fixed``: constants held at
    these values meanwhile."""
    host = [n for n in names if n in HOST]
    zero = {**(fixed or {}), **{n: 0.0 for n in host}}
    p0 = prices(step_cost_of(sc, zero, group), t)
    cols = {n: prices(step_cost_of(sc, {**zero, n: 1.0}, group), t) - p0 for n in host}
    for path in [n for n in names if n not in HOST]:  # the attention rate (module doc)
        a0 = value_of(sc, path, group)
        half = prices(step_cost_of(sc, {**zero, path: a0 / 2.0}, group), t)
        quarter = prices(step_cost_of(sc, {**zero, path: a0 / 4.0}, group), t)
        att = half - p0  # attention seconds at a0: K / a0, when the price is R + K / attention
        bent = np.flatnonzero(np.abs((quarter - half) - 2.0 * att) > 1e-9 * np.maximum(quarter, 1e-12))
        if len(bent):
            raise NotLinear(f"step {int(bent[0])}: the price is not linear in 1 / {path} for this engine "
                            "(its decode attention is a roofline of HBM and FLOP time); from-steps fits the attention "
                            "rate only where one attention kernel prices every query (engine.attention_backend: "
                            "sdpa_packed)", source=t.path, field="--param")
        cols[path] = att
        p0 = p0 - att
    return p0, np.column_stack([cols[n] for n in names])


def fit_steps(sc, traces: list[Trace], names: list[str],
              group: tuple[str, int] = COLOCATED) -> tuple[dict[str, float], dict[str, float]]:
    """Non-negative least squares of the host constants on the traces' steps (module doc): (the
    constants, each one's relative standard error: the least-squares covariance at the residuals'
    variance, the spread the steps leave it, not a bound on what a misfit form does to it).
    Where the price is not linear in 1 / the attention rate (an eager packed step hides its
    attention behind the host's issue: costs/step.py), the rate is searched in one dimension with
    the host constants refitted at each value (``_search_attention``)."""
    try:
        return _fit_linear(sc, traces, names, group)
    except NotLinear:
        attn = [n for n in names if n not in HOST]
        if len(attn) != 1 or not step_cost_of(sc, {}, group).packed_attention:
            raise
        return _search_attention(sc, traces, names, attn[0], group)


def _search_attention(sc, traces: list[Trace], names: list[str], path: str,
                      group: tuple[str, int]) -> tuple[dict[str, float], dict[str, float]]:
    """The attention rate in (0, 1] minimising the weighted squared residuals, the host constants
    fitted by least squares at each rate; its relative standard error from the residuals'
    curvature in log(rate)."""
    from scipy.optimize import minimize_scalar

    host = [n for n in names if n in HOST]

    def rss(log_a: float) -> tuple[float, dict, dict, int]:
        a = math.exp(log_a)
        if not host:
            r = np.concatenate([(t.took - prices(step_cost_of(sc, {path: a}, group), t)) / t.took for t in traces])
            return float(r @ r), {}, {}, len(r)
        out, se = _fit_linear(sc, traces, host, group, {path: a})
        cost = step_cost_of(sc, {**out, path: a}, group)
        r = np.concatenate([(t.took - prices(cost, t)) / t.took for t in traces])
        return float(r @ r), out, se, len(r)

    best = minimize_scalar(lambda x: rss(x)[0], bounds=(math.log(1e-3), 0.0), method="bounded",
                           options={"xatol": 1e-9})
    f0, out, se, n = rss(best.x)
    h = 0.02
    curv = (rss(best.x + h)[0] - 2.0 * f0 + rss(best.x - h)[0]) / (h * h)
    sigma2 = f0 / max(n - len(names), 1)
    se[path] = math.sqrt(2.0 * sigma2 / curv) if curv > 0 else math.inf  # of log(rate): a relative error
    a = math.exp(best.x)
    if a >= 0.999:
        raise SpecError("the fit gives the attention kernel its whole peak or more: these steps do not pin its rate "
                        "down (too little attention work beside the host's); fit the host constants alone",
                        field="--param")
    return {**out, path: a}, se


def _fit_linear(sc, traces: list[Trace], names: list[str], group: tuple[str, int],
                fixed: dict[str, float] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    from scipy.optimize import nnls

    ys, xs = [], []
    for t in traces:
        p0, x = design(sc, t, names, group, fixed)
        w = 1.0 / t.took
        ys.append((t.took - p0) * w)
        xs.append(x * w[:, None])
    x = np.vstack(xs)
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)  # columns of like size: nnls is not scale-free
    xs_, y = x / scale, np.concatenate(ys)
    theta, _ = nnls(xs_, y)
    out = {n: float(v) for n, v in zip(names, theta / scale)}
    dof = max(len(y) - len(names), 1)
    resid = y - xs_ @ theta
    se = np.sqrt(np.maximum(np.diag(np.linalg.pinv(xs_.T @ xs_)) * float(resid @ resid) / dof, 0.0))
    rel_se = {n: float(e / t) if t > 0 else math.inf for n, e, t in zip(names, se, theta)}
    for path in [n for n in names if n not in HOST]:  # the attention column's multiple s: a0 / s
        a0 = value_of(sc, path, group)
        s = out[path]
        if not s > 0 or a0 / s > 1.0:
            what = "no time" if not s > 0 else f"{a0 / s:.3g} of peak FLOP/s (above 1)"
            raise SpecError(f"the fit gives the attention kernel {what}: these steps do not pin its rate down "
                            "(too little attention work beside the host's); fit the host constants alone",
                            field="--param")
        out[path] = a0 / s  # a0 / s: to first order the same relative error as s
    return out, rel_se


@dataclass
class Row:
    trace: str
    role: str  # fit | held-out
    kind: str  # "decode 1-3" ... | "with prefill" | "all"
    steps: int
    real_ms: float  # median real step time
    before: float  # median real / price, the profile as it is
    after: float  # median real / price, the fitted constants


@dataclass
class StepsResult:
    params: list[str]
    before: dict[str, float]
    after: dict[str, float]
    rows: list[Row]
    fitted_on: list[str]
    heldout: list[str]
    idle: dict[str, int] = dataclasses.field(default_factory=dict)  # trace -> steps that carried no token
    group: tuple[str, int] = COLOCATED  # the scenario's group whose engine the traces were recorded on
    rel_se: dict[str, float] = dataclasses.field(default_factory=dict)  # constant -> its relative standard error


def _kinds(t: Trace) -> list[tuple[str, np.ndarray]]:
    pure = t.prefills == 0
    out = [("all", np.ones(len(t.took), bool))]
    out += [(f"decode {lo}-{hi}" if hi < 10**9 else f"decode {lo}+", pure & (t.decodes >= lo) & (t.decodes <= hi))
            for lo, hi in BATCH_BINS]
    out.append(("with prefill", ~pure))
    return [(k, m) for k, m in out if m.any()]


def from_steps(sc, paths: list[str], holdout: list[str] | None = None, names: list[str] | None = None,
               group: str | None = None) -> StepsResult:
    """Fit the host constants ``names`` (default the three of HOST) of the engine of the scenario's
    ``group`` (``ROLE[.INDEX]``, parse_group; default its colocated group) to the step traces
    ``paths``, less ``holdout``; report every trace's real/price."""
    if not paths:
        raise SpecError("give at least one step trace", field="TRACE")
    holdout = list(holdout or [])
    paths = list(paths) + [h for h in holdout if h not in paths]
    grp = parse_group(sc, group)
    names = [n if n in PARAMS else f"efficiency.{n}" for n in (names or HOST)]
    names = [attention_path(sc, grp) if n in ("efficiency." + ATTENTION, *ATTENTION_PATHS) else n for n in names]
    unknown = [n for n in names if n not in HOST and n not in ATTENTION_PATHS]
    if unknown:
        raise SpecError(f"unknown constant {unknown[0]!r}; from-steps fits {', '.join(HOST)} and {ATTENTION!r} "
                        "(the prefill attention kernel's rate)", field="--param")
    names = list(dict.fromkeys(names))
    traces = [read_trace(p) for p in paths]
    train = [t for t in traces if t.path not in holdout]
    if not train:
        raise SpecError("every trace is held out: nothing to fit on", field="--holdout")
    before = {n: value_of(sc, n, grp) for n in names}
    after, rel_se = fit_steps(sc, train, names, grp)
    cost_b, cost_a = step_cost_of(sc, before, grp), step_cost_of(sc, after, grp)
    rows = []
    for t in traces:
        rb, ra = t.took / prices(cost_b, t), t.took / prices(cost_a, t)
        role = "held-out" if t.path in holdout else "fit"
        for kind, m in _kinds(t):
            rows.append(Row(t.name, role, kind, int(m.sum()), float(np.median(t.took[m])) * 1e3,
                            float(np.median(rb[m])), float(np.median(ra[m]))))
    return StepsResult(names, before, after, rows, [t.path for t in train],
                       [t.path for t in traces if t.path in holdout], {t.name: t.idle_steps for t in traces if t.idle_steps},
                       grp, rel_se)


def table_text(res: StepsResult) -> str:
    w = min(48, max([26] + [len(r.trace) + 2 for r in res.rows]))  # a vLLM trace's name carries its load
    lines = [f"  {'trace':<{w}}{'role':<10}{'steps':<14}{'n':>6}{'real ms':>9}{'before':>8}{'after':>8}",
             "  (median real step time over its price; 1.00 = priced right)"]
    for r in res.rows:
        lines.append(f"  {r.trace[-(w - 2):]:<{w}}{r.role:<10}{r.kind:<14}{r.steps:>6}{r.real_ms:>9.1f}"
                     f"{r.before:>8.2f}{r.after:>8.2f}")
    for name, n in res.idle.items():
        lines.append(f"  {name}: {n} step(s) carried no token (the scheduler ran with nothing to run): not priced")
    for role in dict.fromkeys(r.role for r in res.rows):
        alls = [r for r in res.rows if r.role == role and r.kind == "all"]
        lines.append(f"  {role} traces, mean over traces of |1 - median real/price|: before "
                     f"{np.mean([abs(1 - r.before) for r in alls]):.1%}, after {np.mean([abs(1 - r.after) for r in alls]):.1%}")
    se = [f"{n.rsplit('.', 1)[-1] if n in HOST else 'attention'} ±{res.rel_se[n]:.0%}" for n in res.params
          if n in res.rel_se and math.isfinite(res.rel_se[n])]
    tail = [f"  relative standard errors (the spread the fitted steps leave each constant): {', '.join(se)}"] if se else []
    return "\n".join(lines + constants_lines(res.params, res.before, res.after, KNOWN) + tail)


def set_field(res: StepsResult, sc) -> str:
    """The scenario field the overlay goes in: ``hardware`` for a colocated engine on the
    scenario's profile, else the group's own (``cluster.ROLE.INDEX.hardware``: P and D fitted apart)."""
    role, index = res.group
    if res.group == COLOCATED and res.group not in sc.group_hardware:
        return "hardware"
    return f"cluster.{role}.{index}.hardware"


def overlay_text(res: StepsResult, sc, hardware_ref: str, out: Path) -> str:
    from .fitted_overlay import overlay_yaml

    held = [r for r in res.rows if r.role == "held-out" and r.kind == "all"]
    check = (f"held-out traces' mean |1 - median real/price| {np.mean([abs(1 - r.after) for r in held]):.1%} "
             f"(before {np.mean([abs(1 - r.before) for r in held]):.1%})" if held else "no trace held out")
    fitted_on = ", ".join(Path(p).name for p in res.fitted_on)
    head = ["Profile overlay written by `pdsim calibrate from-steps` (pdsim/calibrate/from_steps.py).",
            f"Fitted on the step traces: {fitted_on}"
            + (f"; held out: {', '.join(Path(p).name for p in res.heldout)}" if res.heldout else ""),
            f"Check: {check}", f"Use: pdsim run SCENARIO --set {set_field(res, sc)}={out}"]
    eff = {n.split(".", 1)[1]: v for n, v in res.after.items() if math.isfinite(v) and n.startswith("efficiency.")}
    cal = {n.split(".", 1)[1]: v for n, v in res.after.items() if math.isfinite(v) and n.startswith("calibration.")}
    err = float(np.mean([abs(1 - r.after) for r in held])) if held else None
    return overlay_yaml(sc, hardware_ref, out, eff, f"pdsim calibrate from-steps ({{date}}) on {fitted_on}; {check}",
                        head, err, cal)
