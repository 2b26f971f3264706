"""An engine's own step trace, and how a scenario prices its steps.

A step trace is the engine's own log of its steps: when each started and ended and what it
carried (decodes and their context, prefill chunks and their tokens). ``read_trace`` reads the
two formats below; ``prices`` gives each step's price by a step cost of the scenario (the same
step-cost code the simulator steps with); ``priced_note`` is the line a validation case shows
(case.yaml ``steps:``); ``pdsim calibrate from-steps`` fits constants to them (calibrate/from_steps.py).

Formats:

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
  token (the scheduler ran with nothing to run) are not priced; they are counted.

The engine is one group of the scenario (``ROLE[.INDEX]``: ``parse_group``), its colocated group by
default; a P/D deployment's P and D each have their own trace.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError

COLUMNS = ("start_s", "end_s", "decodes", "prefills", "prefill_tokens", "decode_context", "prefill_context")


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
    named = "@" in Path(path).name and not Path(path).exists()  # a file whose name has an @ is that file
    base, _, load = path.rpartition("@") if named else (path, "", "")
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


def priced_note(sc, path: str, group: str | None = None) -> str:
    """One line on how the scenario prices an engine's own steps (a case's ``steps:``, validate/case.py):
    the median real step time over its price, over all steps, the pure-decode ones and those with
    a prefill chunk. Near 1.00 with a latency metric off: the error lies outside the engine's steps."""
    grp = parse_group(sc, group)
    t = read_trace(path)
    r = t.took / prices(step_cost_of(sc, {}, grp), t)
    parts = [f"all {np.median(r):.2f}"]
    pure = t.prefills == 0
    if pure.any() and not pure.all():
        parts.append(f"pure decode {np.median(r[pure]):.2f}")
    if (~pure).any() and not (~pure).all():
        parts.append(f"with a prefill chunk {np.median(r[~pure]):.2f}")
    role, index = grp
    who = "" if grp == COLOCATED else f" ({role}.{index})"
    return (f"the engine's own steps{who}, {Path(path).name}, {len(t.took):,} steps: median real time over the "
            f"step price {', '.join(parts)} (1.00: priced right)")
