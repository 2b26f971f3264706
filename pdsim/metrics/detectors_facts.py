"""Facts about what a scenario exists to show, stated even when nothing limits the run
(severity ``info``, listed after the bottleneck or ``healthy`` verdict):

- ``absorbed_failures``: instances failed (or requests were retried) and the SLO held: how
  many failures, retries and drops, and how long capacity was reduced;
- ``expert_imbalance``: a skewed expert popularity on an EP group: how much more than the mean
  the busiest EP rank gets per step (costs/moe_load.py, at the run's own mean batch), what
  uniform routing and more redundant experts (EPLB) would give, with both checked by
  re-simulation (the suggestions);
- ``offload_tiers``: KV offload: the share of prompt tokens served from each tier (and from
  the HBM prefix cache), KV written against each tier's capacity (evicted or not), the load
  time in TTFT, and a re-simulated run without the tiers to say whether they mattered;
- ``scaling``: what an autoscaler did (instances added and drained, GPU-hours serving against
  allocated).

Each takes (Results, RunFacts, the verdicts found so far) and returns a Verdict or None.
"""
from __future__ import annotations

import numpy as np

from .detect_util import set_override
from .run_facts import RunFacts
from .verdicts import Suggestion, Verdict


def absorbed_failures(res, f: RunFacts, found: list[Verdict]) -> Verdict | None:
    """Failures the SLO absorbed (no ``failures`` verdict): say they happened and what they cost."""
    if any(v.kind == "failures" for v in found):
        return None
    st = res.record.stats
    events = st.get("events", ())
    failed = [e for e in events if e.get("kind") == "failed"]
    df = res.requests
    retries = int(df["retries"].sum()) if "retries" in df else 0
    if not failed and not retries:
        return None
    drops = df.loc[~df["finished"], "drop_reason"].astype(str)
    fail_drops = int(drops.str.contains("fail").sum())
    evidence = []
    if failed:
        names = list(dict.fromkeys(str(e.get("what", "?")) for e in failed))
        evidence.append(f"{len(failed)} failure(s) of {', '.join(names[:6])}" + (" ..." if len(names) > 6 else "")
                        + f", first at {failed[0].get('time_s', 0):,.0f} s")
    faults = res.scenario.scenario.faults if res.scenario is not None else None
    if faults is not None and len(faults.events) > len(failed):
        evidence.append(f"the scenario injects {len(faults.events)} fault event(s); {len(faults.events) - len(failed)} "
                        "hit an instance that was already down or restarting")
    cap = st.get("capacity_gpus") or []
    down_s = 0.0
    if cap:
        times = np.array([c[0] for c in cap] + [max(res.record.end_s, cap[-1][0])], dtype=float)
        gpus = np.array([c[1] for c in cap], dtype=float)
        down_s = float(np.diff(times)[gpus < gpus.max()].sum())
        evidence.append(f"serving capacity {int(gpus.max()):,} GPUs, as low as {int(gpus.min()):,}; below full for "
                        f"{down_s:,.0f} s ({down_s / max(res.record.end_s, 1e-9):.0%} of the run)")
    causes = st.get("retries_by_cause") or {}
    evidence.append(f"{retries:,} retries" + (f" ({', '.join(f'{k} {v:,}' for k, v in causes.items())})"
                                              if causes else "") + f"; {fail_drops:,} requests dropped after failures")
    goodput = float(df["meets_slo"].mean()) if len(df) else 0.0
    retried = df[df["retries"] > 0] if "retries" in df else df.iloc[:0]
    if len(retried):
        evidence.append(f"{float(retried['meets_slo'].mean()):.0%} of the retried requests still met the SLO "
                        f"({goodput:.1%} of all requests do)")
    return Verdict("absorbed_failures", "info",
                   f"failures absorbed: {len(failed)} failure(s), {retries:,} retries, {fail_drops:,} dropped; "
                   f"{goodput:.1%} of requests still meet the SLO",
                   tuple(evidence), {"failures": len(failed), "retries": retries, "failure_drops": fail_drops,
                                     "reduced_s": down_s})


def _skew(res) -> tuple[float, object]:
    wl = res.scenario.scenario.workload
    spec = getattr(wl, "expert_load", None)
    return (float(spec.skew) if spec is not None else 0.0), spec


def expert_imbalance(res, f: RunFacts, found: list[Verdict]) -> Verdict | None:
    """A skewed expert popularity on EP groups: the busiest rank's load per step, what uniform
    routing and more redundant experts would give (checked by re-simulation)."""
    if res.scenario is None:
        return None
    moe = res.scenario.model.moe
    skew, spec = _skew(res)
    if moe is None or skew <= 0:
        return None
    from ..costs.moe_load import expert_load

    evidence, worst = [], (0.0, None)
    sc = res.scenario.scenario
    seed = spec.seed if spec is not None else 0
    eplb = spec.eplb if spec is not None else None
    for role, gi, g in sc.cluster.groups():
        if g.ep <= 1:
            continue
        insts = [i for i in f.instances if i.group == (role, gi)]
        batch = float(np.mean([i.mean_batch for i in insts])) if insts else 0.0
        if role == "prefill" or batch <= 0:  # tokens a prefill step carried on average
            steps = sum(i.steps for i in insts)
            tokens = sum(i.prefill_tokens for i in insts) / steps if steps else float(g.engine.prefill_budget(g.dp))
        else:
            tokens = batch
        assignments = max(tokens * moe.top_k, 1.0)
        red = g.engine.ep_num_redundant_experts
        now = expert_load(moe.num_experts, moe.top_k, g.ep, skew, red, eplb, seed=seed).imbalance(assignments)
        flat = expert_load(moe.num_experts, moe.top_k, g.ep, 0.0, red, eplb, seed=seed).imbalance(assignments)
        more_red = max(32, 2 * red)
        more = expert_load(moe.num_experts, moe.top_k, g.ep, skew, more_red, None, seed=seed).imbalance(assignments)
        placement = (f"EPLB with {red} redundant experts" if (red and eplb is not False)
                     else "no EPLB (experts placed by id)")
        evidence.append(f"{role}[{gi}] EP{g.ep}: at {tokens:,.0f} tokens per step the busiest rank gets {now:.2f}x "
                        f"the mean expert assignments ({placement}); uniform popularity: {flat:.2f}x; EPLB with "
                        f"{more_red} redundant experts: {more:.2f}x")
        if now / flat > worst[0]:
            worst = (now / flat, (role, gi, g, more_red))
    if worst[1] is None:
        return None
    role, gi, g, more_red = worst[1]
    evidence.insert(0, f"expert popularity is a Zipf law of exponent {skew:g} over {moe.num_experts} routed experts "
                       f"(top-{moe.top_k})")
    metric = "p90_tpot_ms" if role != "prefill" else "p90_ttft_ms"
    suggestions = (
        Suggestion(f"EPLB with more redundant experts on {role}[{gi}]: {g.engine.ep_num_redundant_experts} -> "
                   f"{more_red}", (set_override(role, gi, "engine.ep_num_redundant_experts", more_red),),
                   "replicas of the hottest experts spread their load over more ranks"),
        Suggestion("for comparison, not a knob: uniform expert popularity (what the skew costs)",
                   ("workload.expert_load.skew=0",), "the same run with balanced routing"),
    )
    return Verdict("expert_imbalance", "info",
                   f"expert load is skewed: the busiest EP rank of {role}[{gi}] gets {worst[0]:.2f}x what it "
                   f"would under uniform routing",
                   tuple(evidence), {"skew": skew, "imbalance_vs_uniform": worst[0]}, metric, suggestions)


def offload_tiers(res, f: RunFacts, found: list[Verdict]) -> Verdict | None:
    """Where prompt tokens came from (offload tiers, HBM prefix cache, computed) and whether the
    tiers filled up; a run without them (re-simulated) says whether they mattered."""
    if res.scenario is None or res.scenario.scenario.kv_offload is None:
        return None
    st = res.record.stats
    tiers = st.get("tiers") or []
    block = int(st.get("block_tokens") or 0)
    df = res.requests
    prompt = float(df["input_len"].sum())
    if prompt <= 0:
        return None
    loaded = float(df["loaded_tokens"].sum()) if "loaded_tokens" in df else 0.0
    hbm = float(df["cached_tokens"].sum()) - loaded
    parts = [f"HBM prefix cache {hbm / prompt:.0%}"]
    by_device: dict[str, list[float]] = {}
    for t in tiers:
        d = by_device.setdefault(str(t.get("device") or t.get("tier")), [0.0, 0.0, 0.0, 0.0])
        d[0] += float(t.get("hit_blocks", 0)) * block
        d[1] += float(t.get("bytes_written", 0.0))
        d[2] += float(t.get("capacity_bytes") or 0.0)
        d[3] += float(t.get("bytes_evicted", 0.0))
    for dev, (tok, _w, _c, _e) in by_device.items():
        parts.append(f"{dev} {tok / prompt:.0%}")
    computed = max(prompt - hbm - loaded, 0.0)
    parts.append(f"computed {computed / prompt:.0%}")
    evidence = [f"prompt tokens by source: {', '.join(parts)} (of {prompt:,.0f})"]
    for dev, (_tok, written, capacity, evicted) in by_device.items():
        if capacity > 0 and written > 0:
            evidence.append(f"{dev}: {written / 1e9:,.1f} GB of KV written, {written / capacity:.0%} of its "
                            f"{capacity / 1e9:,.0f} GB" + (f"; {evicted / 1e9:,.1f} GB evicted" if evicted
                                                            else "; nothing evicted"))
    load_share = f.share("kv_load_s")
    evidence.append(f"loading KV is {load_share:.0%} of mean TTFT ({f.ttft_mean.get('kv_load_s', 0) * 1e3:,.1f} ms)")
    first = next(iter(by_device.items()), None)
    spilled = any(e > 0 for _t, _w, _c, e in by_device.values())
    title = (f"offload tiers served {loaded / prompt:.0%} of prompt tokens"
             + ("; the first tier spilled" if spilled else
                f"; nothing was evicted (the KV written fits the {first[0]} tier)" if first else ""))
    return Verdict("offload_tiers", "info", title, tuple(evidence),
                   {"tier_token_share": loaded / prompt, "hbm_cache_share": hbm / prompt, "kv_load_share": load_share},
                   "mean_ttft_ms",
                   (Suggestion("for comparison: the same run without offload tiers (does the tier matter?)",
                               ("kv_offload=null",), "prefixes that were loaded are recomputed or hit in HBM"),))


def scaling(res, f: RunFacts, found: list[Verdict]) -> Verdict | None:
    """What the autoscaler did: instances added and removed, how long a new one took to serve,
    GPU-hours serving against allocated (start-up and drain are paid for, not served)."""
    if res.scenario is None or res.scenario.scenario.autoscaler is None:
        return None
    st = res.record.stats
    events = st.get("events", ())
    started = [e for e in events if e.get("kind") == "starting"]
    up = [e for e in events if e.get("kind") == "up" and e.get("detail") == "added"]
    drained = [e for e in events if e.get("kind") in ("drained", "removed", "draining")]
    a = res.scenario.scenario.autoscaler
    evidence = [f"policy {a.policy!r} every {a.interval_s:g} s: {len(started)} instance(s) started, {len(up)} "
                f"serving, {len(drained)} drain/remove event(s)"]
    if started:
        evidence.append("first scale-up at " + f"{started[0].get('time_s', 0):,.0f} s ({started[0].get('what')}, "
                        f"{started[0].get('detail', '')})")
    served, held = st.get("gpu_hours"), st.get("allocated_gpu_hours")
    if served and held:
        evidence.append(f"{served:,.3g} GPU-hours serving of {held:,.3g} allocated ({served / held:.0%}; the rest is "
                        "start-up and drain)")
    return Verdict("scaling", "info", f"autoscaler ({a.policy}): {len(started)} instance(s) added during the run",
                   tuple(evidence), {"scaled_up": len(started), "scaled_down": len(drained)})


FACTS = (absorbed_failures, expert_imbalance, offload_tiers, scaling)
