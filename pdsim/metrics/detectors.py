"""Bottleneck detectors for the front of a request's life: arrivals beyond capacity, prefill
compute, uneven routing. Each takes (Results, RunFacts) and returns a Verdict or None; the
thresholds are named constants with the reason for their value.

The back of the life (decode steps, KV memory, the P->D transfer, offload tiers) is in
detectors_decode_kv.py; ``all_detectors()`` lists them all in the order they are tried; shared
thresholds and helpers are in detect_util.py.
"""
from __future__ import annotations

import math

import numpy as np

from .detect_util import (HIGH_SHARE, IMBALANCE_UTIL_SPREAD, IMBALANCE_WAIT_RATIO, LOAD_BLIND_ROUTERS, MISS_SHARE,
                          QUEUE_SHARE, SATURATED_UTIL, STEP_EFFICIENCY, TARGET_UTIL, busiest_group, group, misses, pct,
                          set_override, ttft_matters)
from .run_facts import TTFT_PARTS
from .run_facts import RunFacts, queue_trend, run_facts
from .verdicts import HEALTHY_GOODPUT, SEVERITY_ORDER, Suggestion, Verdict

LONG_PROMPT_RATIO = 1.5  # missing requests' median prompt over all requests' median: "long prompts" from here


def _load_suggestion(res, f: RunFacts, ratio: float) -> Suggestion | None:
    """Offer less load: the rate (or trace time scale) that puts the bottleneck at TARGET_UTIL."""
    wl = res.scenario.scenario.workload
    factor = ratio / TARGET_UTIL
    if wl.kind == "trace" and wl.trace is not None and wl.rate is None:
        ts = wl.trace.time_scale * factor
        return Suggestion(f"offer less load: replay the trace with time_scale {ts:.2g} (now {wl.trace.time_scale:g})",
                          (f"workload.trace.time_scale={ts:.3g}",),
                          f"puts the measured load at {TARGET_UTIL:.0%} of capacity")
    if wl.rate is not None:
        rate = wl.rate / factor
        return Suggestion(f"offer less load: rate {rate:.3g} req/s (now {wl.rate:g})", (f"workload.rate={rate:.4g}",),
                          f"puts the measured load at {TARGET_UTIL:.0%} of capacity")
    return None


def _dp_attention_suggestion(res, role: str, gi: int) -> Suggestion | None:
    g = group(res, role, gi)
    if not g.enable_dp_attention:
        return None
    return Suggestion(f"TP attention on the {role} instances (enable_dp_attention false, dp 1)",
                      (set_override(role, gi, "enable_dp_attention", False), set_override(role, gi, "dp", 1)),
                      "a prompt's attention then spreads over every GPU of the instance instead of one DP rank, "
                      "and a long prompt no longer stalls the other ranks")


def _wider_instance(res, role: str, gi: int) -> Suggestion | None:
    """Twice the GPUs per instance (tensor parallel) for a plain TP group within one node."""
    g = group(res, role, gi)
    gpn = res.scenario.hardware.gpus_per_node
    if g.gpus is None or g.gpus * 2 > gpn or g.dp > 1 or g.ep > 1:
        return None
    over = [set_override(role, gi, "gpus", g.gpus * 2)]
    if g.tp is not None:
        over.append(set_override(role, gi, "tp", g.tp * 2))
    return Suggestion(f"twice the GPUs per {role} instance: {g.gpus} -> {g.gpus * 2} (TP {g.world(gpn)} -> "
                      f"{g.world(gpn) * 2}, +{g.gpus * g.count} GPUs)", tuple(over),
                      "a lone prompt's prefill spreads over twice the GPUs")


def overload(res, f: RunFacts) -> Verdict | None:
    """Queueing from an arrival rate above the front role's capacity (open-loop arrivals only:
    a closed loop cannot offer more than it is served)."""
    role = f.front_role
    insts = f.role(role)
    if f.closed_loop or not insts or res.scenario is None:
        return None
    util = float(np.mean([i.util for i in insts]))
    q_share = f.share("queue_s")
    busy = sum(i.busy_s for i in insts)
    served = sum(i.prefill_tokens for i in insts)
    if util < SATURATED_UTIL or q_share < QUEUE_SHARE or busy <= 0 or served <= 0 or not ttft_matters(f, q_share):
        return None
    cap_tps = served / busy * len(insts)  # prompt tokens/s with every instance busy all the time
    ratio = f.offered_prompt_tps / cap_tps
    trend = queue_trend(res.requests)
    growing = trend[2] > 1.5 * trend[0] and trend[2] > 0.5
    if ratio < 0.95 and not growing:
        return None
    cap_req = cap_tps / max(f.mean_prompt, 1.0)
    gi, ginsts = busiest_group(f, role)
    g = group(res, role, gi)
    mean_ttft = f.ttft_mean.get("ttft_s", 0.0)
    evidence = [
        f"{role} instances busy {util:.1%} of the arrival window ({f.t0:,.0f}-{f.t1:,.0f} s)",
        f"offered {f.offered_rate:.3g} req/s = {f.offered_prompt_tps / 1e3:,.1f}k uncached prompt tokens/s; the "
        f"{len(insts)} {role} instance(s) served {cap_tps / 1e3:,.1f}k tokens/s while busy, so the offered load is "
        f"{ratio:.0%} of their capacity (about {cap_req:.3g} req/s at this prompt mix)",
        f"queueing is {q_share:.0%} of mean TTFT ({f.ttft_mean.get('queue_s', 0):,.2f} of {mean_ttft:,.2f} s); "
        f"mean queue wait by thirds of the arrivals: {', '.join(f'{x:,.2f}' for x in trend)} s",
    ]
    metrics = {"utilisation": util, "offered_rate": f.offered_rate, "capacity_rate": cap_req,
               "offered_prompt_tps": f.offered_prompt_tps, "capacity_prompt_tps": cap_tps, "load_ratio": ratio,
               "queue_share_of_ttft": q_share}
    suggestions = []
    from .step_physics import prefill_capacity

    pc = prefill_capacity(res.scenario, role, gi, f.mean_prompt, f.eff_prompt)
    per_inst = cap_tps / len(insts)
    eff = per_inst / pc.tokens_per_s if pc.tokens_per_s > 0 else 1.0
    metrics.update(full_step_prompt_tps=pc.tokens_per_s, step_efficiency=eff)
    evidence.append(f"at full prefill steps ({pc.batch_tokens:,} tokens) the step prices give "
                    f"{pc.tokens_per_s / 1e3:,.1f}k prompt tokens/s per instance; steps here reached {eff:.0%} of that"
                    + (" (under DP attention the busiest rank sets each step, and long prompts leave the other "
                       "ranks idle)" if g.enable_dp_attention and eff < STEP_EFFICIENCY else ""))
    need = max(g.count + 1, math.ceil(len(ginsts) * ratio / TARGET_UTIL) + (g.count - len(ginsts)))
    gpus = sum(i.gpus for i in ginsts) // max(len(ginsts), 1)
    suggestions.append(Suggestion(
        f"add {role} instances: {g.count} -> {need} (+{(need - g.count) * gpus} GPUs)",
        (set_override(role, gi, "count", need),),
        f"at the measured {per_inst / 1e3:,.1f}k tokens/s per instance, {need} instances run the offered load at "
        f"about {TARGET_UTIL:.0%} busy"))
    if eff < STEP_EFFICIENCY and (s := _dp_attention_suggestion(res, role, gi)) is not None:
        suggestions.insert(0, s)
    if (s := _load_suggestion(res, f, ratio)) is not None:
        suggestions.append(s)
    return Verdict("overload", "high",
                   f"arrivals exceed {role} capacity: offered {f.offered_rate:.3g} req/s is {ratio:.0%} of the "
                   f"~{cap_req:.3g} req/s the {role} instances serve; requests queue",
                   tuple(evidence), {**metrics, "explains": misses(f, "ttft")[1]}, "p90_ttft_ms", tuple(suggestions))


def _bare_prefill_s(res, role: str, gi: int, prompt: int) -> float:
    """Seconds to prefill one prompt alone on an idle instance: its chunks at the per-rank
    budget, one step each (a lone prompt sits on one DP rank)."""
    from .step_physics import step_cost

    g = group(res, role, gi)
    budget = g.engine.prefill_budget(g.dp)
    cost = step_cost(res.scenario, role, gi)
    done, t = 0, 0.0
    while done < prompt:
        c = min(budget, prompt - done)
        # the busiest rank's pairs, passed as dp x that (pdsim.costs.base)
        t += cost.step_time(c, g.dp * c * (done + c / 2.0), 1, 0, 0, rank_tokens=c)
        done += c
    return t


def prefill_bound(res, f: RunFacts) -> Verdict | None:
    """TTFT misses whose time is prefill compute, not queueing (long prompts, slow prefill)."""
    n_miss, share = misses(f, "ttft")
    if res.scenario is None or share < MISS_SHARE or not f.ttft_mean_failing:
        return None
    pf_share = f.share("prefill_s", failing=True)
    if pf_share < 0.5:
        return None
    role = f.front_role
    df = res.requests
    miss = df[df.get("slo_fail_ttft", False) == True]  # noqa: E712 - a boolean column
    bound = f.slo.get("ttft_ms") or 0.0
    alone = miss[miss["prefill_s"] * 1e3 > bound]
    gi, _ = busiest_group(f, role)
    g = group(res, role, gi)
    p90_prompt = int(np.percentile(miss["input_len"], 90))
    bare = _bare_prefill_s(res, role, gi, p90_prompt)
    # "long prompts" only when the missing requests' prompts are longer than the rest's; else
    # their prefill time is steps shared with other prompts (load), not their own length
    long_prompts = float(miss["input_len"].median()) >= LONG_PROMPT_RATIO * float(df["input_len"].median())
    mean_pf = float(miss["prefill_s"].mean())
    bare_median = _bare_prefill_s(res, role, gi, int(miss["input_len"].median()))
    evidence = [
        f"{n_miss:,} requests ({pct(share)}) miss TTFT <= {bound:g} ms; for them prefill compute is "
        f"{pf_share:.0%} of TTFT (mean {f.ttft_mean_failing.get('prefill_s', 0):,.2f} s), queueing "
        f"{f.share('queue_s', failing=True):.0%}",
        f"their prompts: median {int(miss['input_len'].median()):,} tokens, against {int(df['input_len'].median()):,} "
        f"for all requests",
        f"{len(alone):,} requests spend longer than {bound:g} ms in prefill alone; on an idle instance a "
        f"{p90_prompt:,}-token prompt (the 90th percentile of the missing ones) takes {bare:,.2f} s in chunks of "
        f"{g.engine.prefill_budget(g.dp):,} tokens" + (" on one DP rank" if g.enable_dp_attention else ""),
    ]
    if not long_prompts:
        evidence.append(f"their prompts are not longer than the others': a median missing prompt prefills in "
                        f"{bare_median:,.2f} s alone, but they spend {mean_pf:,.2f} s in prefill on average "
                        f"({mean_pf / max(bare_median, 1e-9):,.1f}x): prefill steps are shared with other prompts")
    suggestions = []
    if (s := _dp_attention_suggestion(res, role, gi)) is not None:
        suggestions.append(s)
    budget = g.engine.prefill_budget(g.dp)
    if budget < p90_prompt and g.engine.chunked_prefill_size != -1:
        chunk = g.engine.chunked_prefill_size * 2
        over = [set_override(role, gi, "engine.chunked_prefill_size", chunk)]
        if g.engine.max_prefill_tokens < chunk // g.dp:
            over.append(set_override(role, gi, "engine.max_prefill_tokens", chunk // g.dp))
        suggestions.append(Suggestion(
            f"raise chunked_prefill_size {g.engine.chunked_prefill_size:,} -> {chunk:,}", tuple(over),
            "fewer, larger prefill steps per long prompt: less fixed cost per step"))
    if (s := _wider_instance(res, role, gi)) is not None:
        suggestions.append(s)
    return Verdict("prefill_bound", "high" if share >= HIGH_SHARE else "medium",
                   (f"TTFT misses come from prefill compute: {n_miss:,} requests ({pct(share)}) with long prompts "
                    f"take longer than {bound:g} ms to prefill" if long_prompts else
                    f"TTFT misses come from prefill time: {n_miss:,} requests ({pct(share)}) share prefill steps "
                    f"with other prompts and take longer than {bound:g} ms to prefill"),
                   tuple(evidence), {"missing_ttft": n_miss, "prefill_share_of_ttft": pf_share,
                                     "bare_prefill_s_p90_prompt": bare, "explains": share},
                   "p90_ttft_ms", tuple(suggestions))


def router_imbalance(res, f: RunFacts) -> Verdict | None:
    """Instances of one role loaded unevenly under a load-blind router (random, round robin)."""
    if res.scenario is None:
        return None
    policy = res.scenario.scenario.router.policy
    if policy not in LOAD_BLIND_ROUTERS:
        return None
    df = res.requests
    for role, col in ((f.front_role, "prefill_instance"),):
        insts = f.role(role)
        if len(insts) < 2:
            continue
        utils = np.array([i.util for i in insts])
        waits = df[df["finished"]].groupby(col)["queue_s"].mean()
        mean_wait = float(df.loc[df["finished"], "queue_s"].mean())
        spread = float(utils.max() - utils.min())
        ratio = float(waits.max() / mean_wait) if mean_wait > 0 and len(waits) else 1.0
        _n, share = misses(f, "ttft")
        if not (spread >= IMBALANCE_UTIL_SPREAD or ratio >= IMBALANCE_WAIT_RATIO):
            continue
        if not ttft_matters(f, f.share("queue_s")):
            continue  # uneven but harmless
        per = ", ".join(f"{i.name} {i.util:.0%} busy / {waits.get(i.name, 0.0):,.2f} s wait" for i in insts[:8])
        ev = (f"router policy {policy!r} places requests without looking at load",
              f"{role} instances: {per}" + (" ..." if len(insts) > 8 else ""),
              f"busy share spread {spread:.0%}; the most loaded instance's mean queue wait is {ratio:.1f}x the "
              f"role's mean ({mean_wait:,.2f} s)")
        return Verdict("router_imbalance", "high" if share >= HIGH_SHARE else "medium",
                       f"{role} load is uneven under the {policy} router: {spread:.0%} busy-share spread, "
                       f"{ratio:.1f}x the mean queue wait on the busiest instance",
                       ev, {"util_spread": spread, "wait_ratio": ratio, "explains": share}, "p90_ttft_ms",
                       (Suggestion("route by load: router policy least_loaded", ("router.policy=least_loaded",),
                                   "sends each request to the instance with the least queued work"),))
    return None


def healthy_or_misses(res, f: RunFacts) -> Verdict:
    """No bottleneck found: ``healthy`` when the SLO holds, with the headroom, else the SLO terms
    that fail (``slo_misses``)."""
    df = res.requests
    goodput = float(df["meets_slo"].mean()) if len(df) else 0.0
    terms = {k: v for k, v in f.slo_failures.items() if k != "dropped" and v}
    role = f.front_role
    insts = f.role(role)
    util = float(np.mean([i.util for i in insts])) if insts else 0.0
    evidence = [f"{goodput:.1%} of requests meet the SLO"
                + (f" ({', '.join(f'{k}: {v:,} miss' for k, v in terms.items())})" if terms else "")]
    fin = df[df["finished"]]
    for key, col, label in (("ttft_ms", "ttft_s", "TTFT"), ("tpot_ms", "tpot_s", "TPOT")):
        bound = f.slo.get(key)
        if bound and len(fin):
            p90 = float(np.nanpercentile(fin[col].to_numpy(dtype=float), 90)) * 1e3
            evidence.append(f"p90 {label} {p90:,.1f} ms against a bound of {bound:g} ms")
    parts = sorted(((f.share(c), c, label) for c, label in TTFT_PARTS if f.ttft_mean.get(c, 0) > 0), reverse=True)
    if parts:
        top_share, col, label = parts[0]
        evidence.append(f"largest part of TTFT: {label}, {top_share:.0%} ({f.ttft_mean[col] * 1e3:,.1f} ms of "
                        f"{f.ttft_mean['ttft_s'] * 1e3:,.1f} ms on average)")
    retracted = int((df["preemptions"] > 0).sum())
    if retracted:
        evidence.append(f"{retracted:,} requests were retracted (KV ran out) and recomputed; the SLO absorbed it")
    metrics = {"goodput_share": goodput, "front_utilisation": util}
    if res.scenario is not None and insts and f.mean_prompt > 0 and f.disaggregated:
        # colocated instances decode all the time, so neither their busy share nor a prefill-only
        # capacity says how much load they could take; disaggregated prefill's do
        from .step_physics import prefill_capacity

        gi, _ = busiest_group(f, role)
        pc = prefill_capacity(res.scenario, role, gi, f.mean_prompt, f.eff_prompt)
        cap_req = pc.tokens_per_s * len(insts) / f.mean_prompt
        head = cap_req / f.offered_rate if f.offered_rate > 0 else float("inf")
        served = sum(i.prefill_tokens for i in insts) / f.window_s if f.window_s > 0 else 0.0
        work = served / (pc.tokens_per_s * len(insts)) if pc.tokens_per_s > 0 else 0.0
        metrics.update(full_step_capacity_rate=cap_req, headroom=head, front_work_utilisation=work)
        evidence.append(f"{role} instances did {work:.0%} of the prefill work they could: {served / 1e3:,.1f}k of "
                        f"{pc.tokens_per_s * len(insts) / 1e3:,.1f}k prompt tokens/s at full steps, about "
                        f"{cap_req:,.3g} req/s of this prompt mix ({head:,.1f}x the offered {f.offered_rate:.3g} req/s)")
    if goodput >= HEALTHY_GOODPUT or not f.slo_failures:
        return Verdict("healthy", "info", f"{goodput:.1%} of requests meet the SLO; no bottleneck found",
                       tuple(evidence), metrics)
    if f.ttft_mean_failing:
        parts = ", ".join(f"{label} {f.share(c, failing=True):.0%}" for c, label in TTFT_PARTS
                          if f.share(c, failing=True) >= 0.05)
        evidence.append(f"TTFT of the requests that miss it: {f.ttft_mean_failing['ttft_s'] * 1e3:,.0f} ms on "
                        f"average ({parts})")
        miss = df[df["slo_fail_ttft"] == True] if "slo_fail_ttft" in df else df.iloc[:0]  # noqa: E712
        if len(miss):
            m_len, all_len = float(miss["input_len"].median()), float(df["input_len"].median())
            if m_len >= LONG_PROMPT_RATIO * all_len:
                evidence.append(f"the requests that miss TTFT have long prompts: median {m_len:,.0f} tokens against "
                                f"{all_len:,.0f} for all requests")
    return Verdict("slo_misses", "medium",
                   f"{1 - goodput:.1%} of requests miss the SLO and no single bottleneck explains it",
                   tuple(evidence), metrics)


def all_detectors() -> tuple:
    """Every detector, in the order they are tried."""
    from .detectors_decode_kv import decode_bound, kv_capacity_bound, offload_bound, transfer_bound
    from .detectors_faults import failures

    return (failures, overload, prefill_bound, decode_bound, kv_capacity_bound, transfer_bound, router_imbalance,
            offload_bound)


def diagnose(res) -> list[Verdict]:
    """The verdicts of a run, most severe first, from the run alone (pdsim.explore.what_if.diagnose
    also re-simulates their suggestions)."""
    facts = run_facts(res)
    found = [v for det in all_detectors() if (v := det(res, facts)) is not None]
    found.sort(key=lambda v: (SEVERITY_ORDER[v.severity], -v.metrics.get("explains", 0.0)))
    if not found:
        found = [healthy_or_misses(res, facts)]
    from .detectors_facts import FACTS

    return found + [v for fact in FACTS if (v := fact(res, facts, found)) is not None]
