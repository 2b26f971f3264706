"""Verdicts: what limits a run, with the evidence, and the knobs most likely to help.

``detectors.diagnose(res)`` reads a run's Results (request table, step logs, link usage; the step prices
of its scenario where a verdict needs them) and returns a list of Verdicts, most severe first:

- ``overload``: queueing from an arrival rate above the front role's capacity (the capacity is
  measured from the run: prompt tokens served per busy second; the verdict says by how much
  the offered load exceeds it);
- ``prefill_bound``: TTFT misses whose time goes to prefill compute itself, not queueing;
- ``decode_bound``: TPOT/ITL misses, with the decode step priced as compute- or HBM-bound;
- ``kv_capacity_bound``: retractions, KV-capacity drops, admission and pre-allocation waits;
- ``transfer_bound``: KV transfer time in TTFT, NIC utilisation and flows queueing on links;
- ``router_imbalance``: uneven load across instances of a role under a load-blind router;
- ``offload_bound``: KV loads from offload tiers in TTFT;
- ``failures``: instances failed and the misses follow the capacity they took;
- ``healthy``: none of the above and the SLO met (goodput >= 90 %), with the headroom;
- ``slo_misses``: the SLO is missed and no bottleneck above explains it (the terms that fail).

Each verdict carries suggestions as ``--set`` overrides; ``pdsim.explore.what_if.diagnose``
re-simulates them within a budget (it runs simulations, so it lives above the API) and records
the before/after of the metric the verdict is about and of goodput. Verdicts serialise to JSON (``to_dict``) for summary.json.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

SEVERITY_ORDER = {"high": 0, "medium": 1, "info": 2}
HEALTHY_GOODPUT = 0.9  # the share of requests meeting the SLO above which a run is called healthy


@dataclass(frozen=True)
class Check:
    """The re-simulated effect of a suggestion: ``metric`` and goodput before and after."""

    metric: str
    before: float | None
    after: float | None
    goodput_before: float
    goodput_after: float
    gpus_before: int
    gpus_after: int
    wall_s: float

    @property
    def helped(self) -> bool:
        """Goodput rose by at least half a point, or (goodput within half a point) the metric
        improved by at least 5 %: smaller changes are within what a seed change moves."""
        gain = self.goodput_after - self.goodput_before
        if gain >= 0.005:
            return True
        if abs(gain) < 0.005 and self.before and self.after is not None:
            return (self.before - self.after) / abs(self.before) >= 0.05
        return False


@dataclass(frozen=True)
class Suggestion:
    """A knob to turn: ``action`` in words, ``overrides`` as ``--set`` strings, ``why``.
    ``check``: its re-simulated effect, or None with ``note`` saying why it was not checked
    (or why it could not be applied)."""

    action: str
    overrides: tuple[str, ...]
    why: str
    check: Check | None = None
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """What limits the run: ``kind`` (see the module docstring), ``severity`` (high: explains
    at least 10 % of requests missing the SLO or an overload; medium; info), a one-line
    ``title``, ``evidence`` lines with numbers from the run, the ``metrics`` behind them, the
    summary ``metric`` the suggestions are checked on, and ``suggestions``."""

    kind: str
    severity: str
    title: str
    evidence: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    metric: str | None = None
    suggestions: tuple[Suggestion, ...] = ()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["evidence"] = list(self.evidence)
        for s in d["suggestions"]:
            s["overrides"] = list(s["overrides"])
        return d


def verdicts_json(verdicts: list[Verdict]) -> list[dict]:
    """The ``verdicts`` list of summary.json."""
    return [v.to_dict() for v in verdicts]


def _fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "n/a"
    if metric.endswith("_ms"):
        return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:,.1f} ms"
    if metric == "goodput_share":
        return f"{v:.1%}"
    return f"{v:,.3g}"


METRIC_LABELS = {"p90_ttft_ms": "p90 TTFT", "p90_tpot_ms": "p90 TPOT", "mean_transfer_ms": "mean KV transfer",
                 "mean_kv_load_ms": "mean KV load", "goodput_share": "goodput"}


def check_text(c: Check) -> str:
    gpus = "" if c.gpus_after == c.gpus_before else f", {c.gpus_after - c.gpus_before:+d} GPUs"
    label = METRIC_LABELS.get(c.metric, c.metric.replace("_ms", "").replace("_", " "))
    verdict = "" if c.helped else "; no gain"
    return (f"{label} {_fmt(c.before, c.metric)} -> {_fmt(c.after, c.metric)}, goodput "
            f"{c.goodput_before:.1%} -> {c.goodput_after:.1%}{gpus}{verdict} (re-simulated in {c.wall_s:.1f} s)")


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    """The verdicts as indented text lines for the CLI summary."""
    out = []
    for v in verdicts:
        out.append(f"verdict: {v.kind} ({v.severity}): {v.title}")
        out += [f"  - {e}" for e in v.evidence]
        for s in v.suggestions:
            out.append(f"  try: {s.action}  [--set {' --set '.join(s.overrides)}]" if s.overrides else f"  try: {s.action}")
            out.append(f"       why: {s.why}")
            if s.check is not None:
                out.append(f"       checked: {check_text(s.check)}")
            elif s.note:
                out.append(f"       {s.note}")
    return out


def slo_failure_lines(summary: dict) -> list[str]:
    """How many requests miss each SLO term, as one line for the CLI ('' without an SLO)."""
    fails = summary.get("slo_failures") or {}
    bounds = summary.get("slo") or {}
    n = (summary.get("completed") or 0) + (summary.get("dropped") or 0)
    labels = (("ttft", "ttft_ms", "TTFT"), ("tpot", "tpot_ms", "TPOT"), ("itl", "itl_ms", "mean ITL"),
              ("max_itl", "max_itl_ms", "worst ITL"), ("e2e", "e2e_ms", "E2E"))
    parts = []
    for key, bound_key, label in labels:
        if key in fails:
            b = bounds.get(bound_key)
            what = f"{label} > {b:g} ms" if b else label
            parts.append(f"{what}: {fails[key]:,}" + (f" ({fails[key] / n:.1%})" if n else ""))
    if not parts:
        return []
    if fails.get("dropped"):
        parts.append(f"dropped: {fails['dropped']:,}")
    return ["SLO misses by term: " + ", ".join(parts)]
