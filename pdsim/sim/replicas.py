"""Replicas: a deployment of ``replicas.count`` identical, independent copies of one cluster.

Replicas share nothing (router, instances, KV pools, network), so each is simulated as its own
world on its share of the requests, serially or on worker processes, and the runs are merged
into one :class:`~pdsim.sim.record.RunRecord` as if one world had run them all:

- requests keep their global ids and rows (arrival, lengths, every time stamp);
- instance ``i`` of replica ``k`` is named ``r{k}.<name>`` and numbered after the instances of
  replicas ``0..k-1`` (request columns, token-time segments, step logs, figures);
- links, tiers, caches, buffers and fault events are named ``r{k}.<name>``;
- GPU counts, GPU-hours and capacity logs add up; the run ends when the last replica ends.

What holds exactly: the merged record does not depend on the number of workers (each replica's
world is seeded from the scenario's seed and its index alone, ``SeedSequence([seed, k])``), and a
scenario with ``count: 1`` is the plain one-world run. What does not: the result differs from
one world with ``count`` times the instances behind one router, because the front end's split
does not look at load (see :class:`pdsim.specs.scenario.ReplicaSpec`).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from ..parallel import run_jobs
from ..specs.errors import SpecError
from ..specs.scenario import ReplicaSpec, ResolvedScenario
from ..workload.table import RequestTable
from .record import InstanceInfo, RunRecord, StepTokens

#: Fibonacci hashing multiplier: spreads block ids (often small, sequential integers) over replicas
_GOLDEN = 0x9E3779B97F4A7C15


def split(table: RequestTable, spec: ReplicaSpec, seed: int) -> list[np.ndarray]:
    """The global request ids each replica serves, in arrival order (see ReplicaSpec)."""
    n, c = len(table), spec.count
    if spec.split == "random":
        which = np.random.default_rng([seed, 0x5E1EC7]).integers(c, size=n)
    else:
        which = np.arange(n) % c
        if spec.split == "prefix" and table.hash_ids is not None:
            for i, h in enumerate(table.hash_ids):
                if len(h):
                    which[i] = (((int(h[0]) * _GOLDEN) & 0xFFFFFFFFFFFFFFFF) >> 32) % c
    # a replica may get none (few requests, one shared prefix): it runs idle, its GPUs counted
    return [np.flatnonzero(which == k) for k in range(c)]


def sub_table(table: RequestTable, idx: np.ndarray) -> RequestTable:
    """The requests ``idx`` of ``table`` (arrival order kept)."""
    return RequestTable(
        table.arrival_s[idx], table.input_len[idx], table.output_len[idx],
        hash_ids=[table.hash_ids[i] for i in idx.tolist()] if table.hash_ids is not None else None,
        block_size=table.block_size, source=table.source, meta=dict(table.meta),
        priority=table.priority[idx] if table.priority is not None else None)


def replica_scenario(resolved: ResolvedScenario, k: int) -> ResolvedScenario:
    """Replica ``k``'s own scenario: one copy of the cluster, its seed drawn from (seed, k)."""
    sc = resolved.scenario
    seed = int(np.random.SeedSequence([sc.seed, k]).generate_state(1, np.uint32)[0])
    return dataclasses.replace(resolved, scenario=dataclasses.replace(sc, seed=seed, replicas=None))


def run_replica(resolved: ResolvedScenario, table: RequestTable, k: int) -> dict:
    """One replica's world (module level: a worker process runs it)."""
    from .world import World  # here, not at import: world imports nothing of this module

    return {"status": "ok", "replica": k, "record": World(replica_scenario(resolved, k), table).run()}


def simulate(resolved: ResolvedScenario, table: RequestTable, workers: int | None = 1,
             progress: Callable[[float, float, int, int], None] | None = None) -> RunRecord:
    """Every replica's world on ``workers`` processes (1: this process), merged (module doc)."""
    sc = resolved.scenario
    spec = sc.replicas or ReplicaSpec()
    if table.max_concurrency is not None:
        raise SpecError("a closed-loop workload (max_concurrency) has one pool of clients; replicas need open-loop "
                        "arrivals (or replicas.count 1)", field="replicas.count")
    parts = split(table, spec, sc.seed)
    records: list[RunRecord | None] = [None] * spec.count
    t0, done = time.perf_counter(), [0]

    def on_done(k: int, row: dict) -> None:
        records[k] = row["record"]
        done[0] += len(parts[k])
        if progress is not None:
            progress(max(r.end_s for r in records if r is not None), time.perf_counter() - t0, done[0], len(table))

    jobs = [(k, resolved, sub_table(table, parts[k]), k) for k in range(spec.count)]
    run_jobs(jobs, on_done, run_replica, workers=workers or 1, progress=False, desc="replicas", unit="replica")
    return merge([r for r in records if r is not None], parts, len(table), time.perf_counter() - t0,
                 {"replicas": spec.count, "split": spec.split, "workers": workers or 1, "seed": sc.seed})


def _named(k: int, name: str) -> str:
    return f"r{k}.{name}"


def _sum_steps(logs: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The sum of step functions given as (time, value) change lists."""
    times = np.unique(np.concatenate([np.asarray([t for t, _ in log], dtype=float) for log in logs]))
    total = np.zeros(len(times))
    for log in logs:
        t = np.asarray([x for x, _ in log], dtype=float)
        v = np.asarray([y for _, y in log], dtype=float)
        j = np.searchsorted(t, times, side="right") - 1
        total += np.where(j >= 0, v[np.maximum(j, 0)], 0.0)
    return [(float(a), float(b)) for a, b in zip(times, total)]


def merge(records: list[RunRecord], parts: list[np.ndarray], n: int, wall_s: float, info: dict) -> RunRecord:
    """One record of the replicas' records (``records[k]`` served the global ids ``parts[k]``)."""
    first = records[0]
    inst_off = np.cumsum([0] + [len(r.instances) for r in records])
    link_off = np.cumsum([0] + [len(r.link_names) for r in records])
    cols: dict[str, np.ndarray] = {}
    for c, v in first.requests.items():
        cols[c] = np.empty(n, dtype=v.dtype)
    seg = {"r": [], "i": [], "a": [], "b": []}
    shift = None  # the replicas' per-request stream shifts (record.StepTokens.first_shift), if any
    instances: list[InstanceInfo] = []
    steps, tier_usage, step_end = [], [], []
    link_cols: dict[str, list[np.ndarray]] = {}
    link_names, link_cap = [], {}
    stats: dict = {"tiers": [], "caches": {}, "buffers": {}, "block_tokens": first.stats.get("block_tokens", 0),
                   "events": [], "retries_by_cause": {}}
    for k, (r, idx) in enumerate(zip(records, parts)):
        for c, v in r.requests.items():
            if c in ("prefill_instance", "decode_instance"):
                v = np.where(v >= 0, v + inst_off[k], v)
            elif c == "request_id":
                v = idx
            cols[c][idx] = v
        tok = r.tokens
        if not isinstance(tok, StepTokens):  # pragma: no cover - worlds always write step tokens
            raise TypeError("replicas merge simulated records only")
        if tok.first_shift is not None:
            if shift is None:
                shift = np.zeros(n)
            shift[idx] = tok.first_shift
        seg["r"].append(idx[tok.seg_request])
        seg["i"].append(tok.seg_instance + inst_off[k])
        seg["a"].append(tok.seg_first)
        seg["b"].append(tok.seg_last)
        step_end.extend(tok.step_end)
        instances += [dataclasses.replace(i, name=_named(k, i.name)) for i in r.instances]
        steps += r.steps
        tier_usage += [(_named(k, name), cap, t, u) for name, cap, t, u in r.tier_usage]
        for c, v in r.link_usage.items():
            link_cols.setdefault(c, []).append(v + link_off[k] if c == "link" else v)
        link_names += [_named(k, x) for x in r.link_names]
        link_cap.update({_named(k, x): v for x, v in r.link_capacity.items()})
        st = r.stats
        stats["tiers"] += [{**t, "tier": _named(k, t["tier"])} for t in st.get("tiers", [])]
        stats["caches"].update({_named(k, x): v for x, v in st.get("caches", {}).items()})
        stats["buffers"].update({_named(k, x): v for x, v in st.get("buffers", {}).items()})
        stats["events"] += [{**e, "what": _named(k, str(e["what"]))} for e in st.get("events", [])]
        for cause, c in st.get("retries_by_cause", {}).items():
            stats["retries_by_cause"][cause] = stats["retries_by_cause"].get(cause, 0) + c
    stats["events"].sort(key=lambda e: e["time_s"])
    for key in ("capacity_gpus", "allocated_gpus"):
        stats[key] = _sum_steps([r.stats[key] for r in records])
    for key in ("gpu_hours", "allocated_gpu_hours"):
        stats[key] = sum(r.stats[key] for r in records)
    # segments grouped by request, in each request's order (StepTokens reads them so)
    r_all = np.concatenate(seg["r"])
    order = np.argsort(r_all, kind="stable")
    tokens = StepTokens(r_all[order], np.concatenate(seg["i"])[order], np.concatenate(seg["a"])[order],
                        np.concatenate(seg["b"])[order], step_end, first_shift=shift)
    link_usage = {c: np.concatenate(v) for c, v in link_cols.items()}
    if "time_s" in link_usage and len(link_usage["time_s"]):
        o = np.argsort(link_usage["time_s"], kind="stable")
        link_usage = {c: v[o] for c, v in link_usage.items()}
    meta = {**first.meta, **info}
    return RunRecord(first.name, first.kind, cols, tokens, instances, sum(r.gpus for r in records),
                     sum(r.nodes for r in records), first.slo, max(r.end_s for r in records), wall_s,
                     sum(r.events for r in records), first.disaggregated, steps, tier_usage, link_usage,
                     link_names, link_cap, stats, meta)
