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

Trace formats:

- JSON ``{"columns": [...], "rows": [[...], ...]}`` with the columns ``start_s``, ``end_s``
  (seconds), ``decodes``, ``prefills`` (prefill chunks), ``prefill_tokens``, ``decode_context``
  (the decodes' context tokens, summed), ``prefill_context`` (tokens computed before each chunk,
  summed) and optionally ``prefill_attn`` (sum over chunks of tokens x (computed + tokens / 2):
  where absent, chunks of one step are taken as equal). calibration/microbench/gpu_hf_serving.py
  writes it.
- vLLM's own steps, recorded in a running vLLM V1 server by
  calibration/microbench/vllm_step_trace.py (``<path>.<pid>[.gz]`` JSONL files; name the base
  path or one process's file; pdsim/ingest/vllm_steps.py reads them): a step lasts from its
  schedule's start to the end of ``update_from_output`` (``t_schedule`` -> ``t_end``), and carries
  its decodes, their context and each prefill chunk with the tokens computed before it.
  ``PATH@LOAD`` keeps the steps that started within one load's span of the recording
  (``<path>.loads.json``, as ``validation/cpu-vllm/here.py --trace-steps`` writes it), so one
  recording of several loads is fitted on one and checked on the others. Steps that carried no
  token (the scheduler ran with nothing to run) are not priced; the table counts them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from .from_runs import PARAMS, Param, constants_lines

HOST = ("efficiency.step_overhead_us", "efficiency.seq_overhead_us", "efficiency.ctx_overhead_ns")
ATTENTION = "attention"  # --param attention: the prefill attention kernel's rate (module doc)
_ATTN_WHAT = "prefill attention kernel's fraction of peak FLOP/s"
ATTENTION_PATHS = ("efficiency.attention", "calibration.attention_prefill.eff")
KNOWN = {**PARAMS, **{path: Param(path, "hardware", 0.1, "", _ATTN_WHAT) for path in ATTENTION_PATHS}}
COLUMNS = ("start_s", "end_s", "decodes", "prefills", "prefill_tokens", "decode_context", "prefill_context")
BATCH_BINS = ((1, 3), (4, 15), (16, 31), (32, 63), (64, 10**9))


@dataclass(frozen=True)
class Trace:
    """One engine's steps: took (s) and what each carried."""

    name: str
    path: str
    took: np.ndarray
    decodes: np.ndarray
    prefills: np.ndarray
    prefill_tokens: np.ndarray
    prefill_attn: np.ndarray
    decode_context: np.ndarray
    idle_steps: int = 0  # steps that carried no token (vLLM traces): not priced


def read_trace(path: str) -> Trace:
    """A step trace in either format (module doc); ``PATH@LOAD`` for one load of a vLLM recording."""
    base, _, load = path.partition("@") if "@" in Path(path).name else (path, "", "")
    if not load and Path(base).suffix == ".json":
        return _read_columns(path)
    return _read_vllm(path, base, load)


def _read_vllm(path: str, base: str, load: str) -> Trace:
    from ..ingest.vllm_steps import read_spans, read_step_trace

    try:
        steps, _calls = read_step_trace(base)
        spans = read_spans(base)
    except (OSError, ValueError) as err:
        raise SpecError(f"cannot read a step trace: {err}", source=base) from None
    if load:
        if load not in spans:
            raise SpecError(f"no load {load!r} in the recording; it has {', '.join(spans) or 'no loads file'}",
                            source=base, field="@LOAD")
        lo, hi = spans[load]
        steps = [r for r in steps if lo <= r["t_schedule"] <= hi]
    work = [r for r in steps if r["decodes"] or r["prefill_tokens"]]
    if not work:
        raise SpecError("no step that carried a token" + (f" within the load {load!r}" if load else ""), source=base)
    chunks = [r["prefill_chunks"] for r in work]
    took = np.array([r["t_end"] - r["t_schedule"] for r in work], float)
    bad = np.flatnonzero(~(took > 0))
    if len(bad):
        raise SpecError(f"a step (its t_schedule {work[int(bad[0])]['t_schedule']}) ends before it starts", source=base)
    name = Path(base).name + (f"@{load}" if load else "")
    return Trace(name, path, took, np.array([r["decodes"] for r in work], float),
                 np.array([len(c) for c in chunks], float), np.array([r["prefill_tokens"] for r in work], float),
                 np.array([sum(c["tokens"] * (c["computed"] + c["tokens"] / 2.0) for c in cs) for cs in chunks], float),
                 np.array([r["decode_ctx"] for r in work], float), len(steps) - len(work))


def _read_columns(path: str) -> Trace:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as err:
        raise SpecError(f"cannot read a step trace: {err}", source=str(p)) from None
    cols, rows = (doc.get("columns"), doc.get("rows")) if isinstance(doc, dict) else (None, None)
    if not isinstance(cols, list) or not isinstance(rows, list):
        raise SpecError("expected a JSON object with 'columns' (names) and 'rows' (lists of numbers)", source=str(p))
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise SpecError(f"missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}", source=str(p),
                        field="columns")
    try:
        a = np.asarray(rows, dtype=float)
    except ValueError:
        raise SpecError("every row must be a list of numbers, one per column", source=str(p), field="rows") from None
    if a.ndim != 2 or a.shape[1] != len(cols) or not len(a):
        raise SpecError(f"expected rows of {len(cols)} numbers, got shape {a.shape}", source=str(p), field="rows")
    bad = np.flatnonzero(~np.isfinite(a).all(axis=1))
    if len(bad):
        raise SpecError(f"row {bad[0]} is not finite", source=str(p), field="rows")
    c = {name: a[:, i] for i, name in enumerate(cols)}
    took = c["end_s"] - c["start_s"]
    if (took <= 0).any():
        raise SpecError(f"row {int(np.flatnonzero(took <= 0)[0])}: end_s must be after start_s", source=str(p),
                        field="rows")
    if (a[:, [cols.index(k) for k in COLUMNS[2:]]] < 0).any():
        raise SpecError("decodes, prefills, tokens and contexts must be >= 0", source=str(p), field="rows")
    empty = np.flatnonzero((c["decodes"] == 0) & (c["prefill_tokens"] == 0))
    if len(empty):
        raise SpecError(f"row {int(empty[0])} carries no work (no decodes, no prefill tokens): a step trace "
                        "has one row per step the engine ran", source=str(p), field="rows")
    pt, n = c["prefill_tokens"], np.maximum(c["prefills"], 1.0)
    attn = c["prefill_attn"] if "prefill_attn" in c else pt * (c["prefill_context"] / n + pt / n / 2.0)
    return Trace(p.stem, str(p), took, c["decodes"], c["prefills"], pt, attn, c["decode_context"])


COLOCATED = ("colocated", 0)
ROLES = ("colocated", "prefill", "decode")


def parse_group(sc, text: str | None) -> tuple[str, int]:
    """``ROLE[.INDEX]`` (``--group``): the scenario's group whose engine a trace was recorded on;
    None: its colocated group, the one a scenario without P/D groups has."""
    if text is None:
        if not sc.scenario.cluster.colocated:
            raise SpecError("the scenario has no colocated group: name the group whose engine the traces come from "
                            "(--group prefill or --group decode, ROLE.INDEX for another than the first)",
                            field="--group")
        return COLOCATED
    role, _, idx = text.partition(".")
    if role not in ROLES or (idx and not idx.isdigit()):
        raise SpecError(f"expected ROLE or ROLE.INDEX with ROLE one of {', '.join(ROLES)}, got {text!r}",
                        field="--group")
    groups = getattr(sc.scenario.cluster, role)
    index = int(idx or 0)
    if index >= len(groups):
        raise SpecError(f"the scenario has {len(groups)} {role} group(s); no {role}.{index}", field="--group")
    return role, index


def step_cost_of(sc, values: dict[str, float], group: tuple[str, int] = COLOCATED):
    """The step cost of the scenario's engine of ``group`` (role, index) with these constants
    (``efficiency.*`` and ``calibration.MODEL.FIELD`` paths)."""
    from ..metrics.step_physics import step_cost

    if group == COLOCATED and not sc.scenario.cluster.colocated:
        parse_group(sc, None)  # the one-line error: name the group
    hw = sc.hardware_of(*group)
    eff = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("efficiency.")}
    cal = dict(hw.calibration)
    for k, v in values.items():
        if k.startswith("calibration."):
            _, model, name = k.split(".")
            cal[model] = {**cal[model], name: v}
    return step_cost(sc, *group, dataclasses.replace(
        hw, efficiency=dataclasses.replace(hw.efficiency, **eff), calibration=cal))


def attention_path(sc, group: tuple[str, int] = COLOCATED) -> str:
    """Where the group's engine reads its prefill attention kernel's rate: the profile's fitted
    ``attention_prefill`` under the calibrated cost model, else its prior."""
    hw = sc.hardware_of(*group)
    if step_cost_of(sc, {}, group).name == "calibrated" and "attention_prefill" in hw.calibration:
        return "calibration.attention_prefill.eff"
    return "efficiency.attention"


def value_of(sc, path: str, group: tuple[str, int] = COLOCATED) -> float:
    """A fittable constant's value in the group's profile."""
    hw = sc.hardware_of(*group)
    if path.startswith("calibration."):
        _, model, name = path.split(".")
        return float(hw.calibration[model][name])
    return float(getattr(hw.efficiency, path.split(".", 1)[1]))


def prices(cost, t: Trace) -> np.ndarray:
    """Every traced step's price (seconds) by ``cost``."""
    return np.array([cost.step_time(int(pt), float(pa), int(ch), int(d), float(ctx)) for pt, pa, ch, d, ctx in
                     zip(t.prefill_tokens, t.prefill_attn, t.prefills, t.decodes, t.decode_context)], float)


def design(sc, t: Trace, names: list[str], group: tuple[str, int] = COLOCATED) -> tuple[np.ndarray, np.ndarray]:
    """(the price with every fitted constant at zero, one column per constant: d price / d constant).
    For ``efficiency.attention`` the constant is the multiple of the attention seconds at the
    profile's value, and "at zero" means without them (module doc)."""
    host = [n for n in names if n in HOST]
    zero = {n: 0.0 for n in host}
    p0 = prices(step_cost_of(sc, zero, group), t)
    cols = {n: prices(step_cost_of(sc, {**zero, n: 1.0}, group), t) - p0 for n in host}
    for path in [n for n in names if n not in HOST]:  # the attention rate (module doc)
        a0 = value_of(sc, path, group)
        half = prices(step_cost_of(sc, {**zero, path: a0 / 2.0}, group), t)
        quarter = prices(step_cost_of(sc, {**zero, path: a0 / 4.0}, group), t)
        att = half - p0  # attention seconds at a0: K / a0, when the price is R + K / attention
        bent = np.flatnonzero(np.abs((quarter - half) - 2.0 * att) > 1e-9 * np.maximum(quarter, 1e-12))
        if len(bent):
            raise SpecError(f"step {int(bent[0])}: the price is not linear in 1 / {path} for this engine "
                            "(its decode attention is a roofline of HBM and FLOP time); from-steps fits the attention "
                            "rate only where one attention kernel prices every query (engine.attention_backend: "
                            "sdpa_packed)", source=t.path, field="--param")
        cols[path] = att
        p0 = p0 - att
    return p0, np.column_stack([cols[n] for n in names])


def fit_steps(sc, traces: list[Trace], names: list[str], group: tuple[str, int] = COLOCATED) -> dict[str, float]:
    """Non-negative least squares of the host constants on the traces' steps (module doc)."""
    from scipy.optimize import nnls

    ys, xs = [], []
    for t in traces:
        p0, x = design(sc, t, names, group)
        w = 1.0 / t.took
        ys.append((t.took - p0) * w)
        xs.append(x * w[:, None])
    x = np.vstack(xs)
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)  # columns of like size: nnls is not scale-free
    theta, _ = nnls(x / scale, np.concatenate(ys))
    out = {n: float(v) for n, v in zip(names, theta / scale)}
    for path in [n for n in names if n not in HOST]:  # the attention column's multiple s: a0 / s
        a0 = value_of(sc, path, group)
        s = out[path]
        if not s > 0 or a0 / s > 1.0:
            what = "no time" if not s > 0 else f"{a0 / s:.3g} of peak FLOP/s (above 1)"
            raise SpecError(f"the fit gives the attention kernel {what}: these steps do not pin its rate down "
                            "(too little attention work beside the host's); fit the host constants alone",
                            field="--param")
        out[path] = a0 / s
    return out


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
    after = fit_steps(sc, train, names, grp)
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
                       grp)


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
    return "\n".join(lines + constants_lines(res.params, res.before, res.after, KNOWN))


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
