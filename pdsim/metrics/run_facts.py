"""Derived facts of one run, the evidence verdicts are built from (numbers, no judgement).

Everything is read from the Results (request table, the record's step logs, link usage and
stats); nothing touches simulation objects. Time windows: the *arrival window* runs from the
first to the last arrival (the span over which load was offered; the drain after the last
arrival is left out, so an instance that empties its queue after the arrivals stop is not
counted idle). Utilisation of an instance = seconds of engine steps started in the window
(clipped at its end) / window length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..sim.columns import SpilledColumns
from ..sim.record import PART_ROWS, GapHistogram

TTFT_PARTS = (("queue_s", "queueing for prefill"), ("prefill_s", "prefill compute"),
              ("kv_load_s", "KV load from offload tiers"), ("transfer_wait_s", "waiting for D's KV pages"),
              ("transfer_s", "KV transfer"), ("decode_wait_s", "D admission"))


@dataclass(frozen=True)
class InstanceFacts:
    """One instance over the arrival window; ``group`` is (role, index of its group in that role)."""

    index: int
    name: str
    role: str
    group: tuple[str, int]
    gpus: int
    util: float  # busy share of the arrival window
    busy_s: float  # busy seconds in the window
    prefill_tokens: int  # tokens prefilled in the window
    decode_tokens: int  # tokens decoded in the window
    mean_batch: float  # mean decode batch over steps that decoded
    mean_queue: float  # time-weighted queue depth in the window
    kv_p95: float  # 95th percentile of the KV pool's used share over steps
    kv_peak: float
    retractions: int
    mean_step_s: float
    steps: int


@dataclass(frozen=True)
class LinkFacts:
    name: str
    capacity: float  # bytes/s
    mean_util: float  # time-weighted over the arrival window
    busy_util: float  # mean utilisation while any flow is active
    active_share: float  # share of the window with a flow active
    mean_flows: float  # mean concurrent flows while active


@dataclass(frozen=True)
class RunFacts:
    n: int
    finished: int
    t0: float
    t1: float
    window_s: float
    offered_rate: float  # requests/s over the arrival window
    offered_prompt_tps: float  # uncached prompt tokens/s arriving over the window
    mean_prompt: float  # uncached prompt tokens per request (finished requests)
    mean_output: float
    eff_prompt: float  # token-weighted prompt length sum(L^2)/sum(L): attention pairs per token x 2
    slo: dict[str, float | None]
    slo_failures: dict[str, int]
    ttft_mean: dict[str, float]  # TTFT part -> mean seconds over finished requests
    ttft_mean_failing: dict[str, float]  # same, over requests missing the TTFT bound
    instances: list[InstanceFacts]
    links: list[LinkFacts] = field(default_factory=list)
    disaggregated: bool = False
    closed_loop: bool = False

    def role(self, role: str) -> list[InstanceFacts]:
        return [i for i in self.instances if i.role == role]

    @property
    def front_role(self) -> str:
        """The role that prefills arriving requests."""
        return "prefill" if self.disaggregated else "colocated"

    def share(self, part: str, failing: bool = False) -> float:
        """Share of mean TTFT spent in ``part`` (all finished requests, or those missing TTFT)."""
        means = self.ttft_mean_failing if failing else self.ttft_mean
        total = means.get("ttft_s", 0.0)
        return means.get(part, 0.0) / total if total > 0 else 0.0


def _nanmean(values) -> float:
    """Mean of the finite values (0 when there are none: a phase the run never had)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else 0.0


def _window(df: pd.DataFrame, end_s: float) -> tuple[float, float]:
    t0 = float(df["arrival_s"].min())
    t1 = float(df["arrival_s"].max())
    if t1 - t0 < 1e-3 * max(end_s - t0, 1e-9):  # all at once (a fixed batch): the whole run
        t1 = max(end_s, t0 + 1e-9)
    return t0, t1


def _instance_facts(res, t0: float, t1: float) -> list[InstanceFacts]:
    rec = res.record
    sc = res.scenario.scenario if res.scenario is not None else None
    groups = []
    if sc is not None:
        for role, gi, g in sc.cluster.groups():
            groups += [(role, gi)] * g.count
    out = []
    W = t1 - t0
    for i, (inst, steps) in enumerate(zip(rec.instances, rec.steps or [{}] * len(rec.instances))):
        if isinstance(steps, SpilledColumns):
            out.append(_spilled_instance_facts(i, inst, steps, groups, t0, t1))
            continue
        t = np.asarray(steps.get("time_s", ()), dtype=float)
        d = np.asarray(steps.get("step_s", ()), dtype=float)
        m = (t >= t0) & (t < t1)
        busy = float((np.minimum(t[m] + d[m], t1) - t[m]).sum()) if m.any() else 0.0
        pf = np.asarray(steps.get("prefill_tokens", ()), dtype=float)
        dec = np.asarray(steps.get("running_batch", ()), dtype=float)
        q = np.asarray(steps.get("queue_depth", ()), dtype=float)
        kv = np.asarray(steps.get("kv_used", ()), dtype=float) / max(inst.kv_capacity_pages, 1)
        decoding = m & (dec > 0) if len(dec) else m
        out.append(InstanceFacts(
            index=i, name=inst.name, role=inst.role, group=groups[i] if i < len(groups) else (inst.role, 0),
            gpus=inst.gpus, util=busy / W if W > 0 else 0.0, busy_s=busy,
            prefill_tokens=int(pf[m].sum()) if len(pf) else 0, decode_tokens=int(dec[m].sum()) if len(dec) else 0,
            mean_batch=float(dec[decoding].mean()) if decoding.any() else 0.0,
            mean_queue=float(np.average(q[m], weights=d[m])) if m.any() and d[m].sum() > 0 else 0.0,
            kv_p95=float(np.percentile(kv[m], 95)) if m.any() else 0.0,
            kv_peak=inst.kv_peak_pages / max(inst.kv_capacity_pages, 1), retractions=inst.retractions,
            mean_step_s=float(d[m].mean()) if m.any() else 0.0, steps=int(m.sum())))
    return out


def _spilled_instance_facts(i: int, inst, steps: SpilledColumns, groups: list, t0: float, t1: float) -> InstanceFacts:
    """_instance_facts of a log kept on disk, read a part at a time: the same facts, its sums
    taken part by part (equal up to float summation order), the KV share's 95th percentile
    exact (from the count of steps at each page count)."""
    W = t1 - t0
    cap = max(inst.kv_capacity_pages, 1)
    busy = d_sum = q_w = 0.0
    pf_sum = dec_sum = dec_n = n = 0
    batch_sum = 0.0
    kv_counts = np.zeros(0, dtype=np.int64)
    for lo in range(0, steps.rows, PART_ROWS):
        hi = lo + PART_ROWS
        t = steps.part("time_s", lo, hi)
        m = (t >= t0) & (t < t1)
        if not m.any():
            continue
        t = t[m]
        d = steps.part("step_s", lo, hi)[m]
        busy += float((np.minimum(t + d, t1) - t).sum())
        d_sum += float(d.sum())
        n += int(m.sum())
        pf_sum += int(steps.part("prefill_tokens", lo, hi)[m].astype(np.int64).sum())
        dec = steps.part("running_batch", lo, hi)[m].astype(np.int64)
        dec_sum += int(dec.sum())
        dec_n += int((dec > 0).sum())
        batch_sum += float(dec[dec > 0].astype(float).sum())
        q_w += float((steps.part("queue_depth", lo, hi)[m].astype(float) * d).sum())
        c = np.bincount(steps.part("kv_used", lo, hi)[m])
        if len(c) > len(kv_counts):
            c[:len(kv_counts)] += kv_counts
            kv_counts = c
        else:
            kv_counts[:len(c)] += c
    pages = np.flatnonzero(kv_counts)
    kv_p95 = GapHistogram(pages.astype(float) / cap, kv_counts[pages]).percentile(95) if n else 0.0
    return InstanceFacts(
        index=i, name=inst.name, role=inst.role, group=groups[i] if i < len(groups) else (inst.role, 0),
        gpus=inst.gpus, util=busy / W if W > 0 else 0.0, busy_s=busy, prefill_tokens=pf_sum, decode_tokens=dec_sum,
        mean_batch=batch_sum / dec_n if dec_n else 0.0, mean_queue=q_w / d_sum if n and d_sum > 0 else 0.0,
        kv_p95=kv_p95, kv_peak=inst.kv_peak_pages / cap, retractions=inst.retractions,
        mean_step_s=d_sum / n if n else 0.0, steps=n)


def _link_facts(rec, t0: float, t1: float) -> list[LinkFacts]:
    lu = rec.link_usage
    if not lu or not len(lu.get("time_s", ())):
        return []
    out = []
    times, codes = np.asarray(lu["time_s"]), np.asarray(lu["link"])
    rates, flows = np.asarray(lu["bytes_per_s"]), np.asarray(lu["flows"])
    W = t1 - t0
    for j, name in enumerate(rec.link_names):
        cap = float(rec.link_capacity.get(name, 0.0))
        m = codes == j
        if not m.any() or cap <= 0 or W <= 0:
            continue
        # a step function: each entry holds until the link's next change
        t = np.clip(times[m], t0, t1)
        dur = np.diff(np.append(t, t1))
        r, f = rates[m], flows[m]
        active = f > 0
        act_s = float(dur[active].sum())
        out.append(LinkFacts(
            name=name, capacity=cap, mean_util=float((r * dur).sum() / (cap * W)),
            busy_util=float((r[active] * dur[active]).sum() / (cap * act_s)) if act_s > 0 else 0.0,
            active_share=act_s / W, mean_flows=float((f[active] * dur[active]).sum() / act_s) if act_s > 0 else 0.0))
    return out


def run_facts(res) -> RunFacts:
    """The facts of a run (simulated; a real run has no step logs and gets what its table gives)."""
    df = res.requests
    rec = res.record
    t0, t1 = _window(df, rec.end_s)
    fin = df[df["finished"]]
    in_window = (df["arrival_s"] >= t0) & (df["arrival_s"] <= t1)
    arrived = int(in_window.sum())
    offered_tokens = float((df.loc[in_window, "input_len"] - df.loc[in_window, "cached_tokens"]).sum())
    W = t1 - t0
    prompt = (fin["input_len"] - fin["cached_tokens"]).to_numpy(dtype=float)
    ttft_mean = {c: _nanmean(fin[c]) for c, _ in TTFT_PARTS if c in fin}
    ttft_mean["ttft_s"] = float(fin["ttft_s"].mean()) if len(fin) else 0.0
    failing = fin[fin["slo_fail_ttft"]] if "slo_fail_ttft" in fin else fin.iloc[:0]
    ttft_fail = {c: _nanmean(failing[c]) for c, _ in TTFT_PARTS if c in failing}
    ttft_fail["ttft_s"] = float(failing["ttft_s"].mean()) if len(failing) else 0.0
    from .summary import slo_failures

    sc = res.scenario.scenario if res.scenario is not None else None
    return RunFacts(
        n=len(df), finished=len(fin), t0=t0, t1=t1, window_s=W, offered_rate=arrived / W if W > 0 else 0.0,
        offered_prompt_tps=offered_tokens / W if W > 0 else 0.0,
        mean_prompt=float(prompt.mean()) if len(prompt) else 0.0,
        mean_output=float(fin["output_len"].mean()) if len(fin) else 0.0,
        eff_prompt=float((prompt ** 2).sum() / prompt.sum()) if prompt.sum() > 0 else 0.0,
        slo=dict(rec.slo), slo_failures=slo_failures(df), ttft_mean=ttft_mean,
        ttft_mean_failing=ttft_fail if len(failing) else {},
        instances=_instance_facts(res, t0, t1), links=_link_facts(rec, t0, t1),
        disaggregated=bool(rec.disaggregated),
        closed_loop=bool(sc is not None and sc.workload.max_concurrency is not None))


def queue_trend(df: pd.DataFrame, column: str = "queue_s") -> list[float]:
    """Mean of ``column`` over the first, middle and last third of the arrivals (s): a queue that
    grows from third to third means the offered rate exceeds what the run serves."""
    v = df.sort_values("arrival_s", kind="stable")[column].to_numpy(dtype=float)
    return [float(np.nanmean(x)) if len(x) and np.isfinite(x).any() else 0.0 for x in np.array_split(v, 3)]
