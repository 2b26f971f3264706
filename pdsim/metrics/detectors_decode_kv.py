"""Bottleneck detectors for the back of a request's life: decode steps, KV memory, the P->D
transfer and offload tiers. Same contract as detectors.py: (Results, RunFacts) -> Verdict or
None, thresholds named with their reason."""
from __future__ import annotations

import numpy as np

from .detect_util import HIGH_SHARE, MISS_SHARE, busiest_group, group, misses, pct, set_override, ttft_matters
from ..sim.columns import SpilledColumns
from ..sim.record import PART_ROWS
from .run_facts import RunFacts
from .verdicts import Suggestion, Verdict

# Colocated decode steps that carry a prefill chunk and take this much longer than pure decode
# steps make the chunks the cause of slow tokens (mixed-chunk interference).
MIXED_SLOWDOWN = 1.5
MIXED_SHARE = 0.1  # ... when at least this share of decode steps carries a chunk
PREEMPTED_SHARE = 0.01  # requests retracted at least once: KV ran out under them
WAIT_SHARE = 0.2  # KV admission / pre-allocation waits as a share of TTFT
KV_FULL = 0.9  # KV pool use (p95 over steps) that leaves no room to admit
TRANSFER_SHARE = 0.2  # KV transfer time as a share of TTFT
LOAD_SHARE = 0.2  # KV loads from offload tiers as a share of TTFT
MIN_PART_S = 0.01  # a TTFT part shorter than this on average is never a bottleneck
FASTER_DEVICE = {"remote-nvmeof-400g": "remote-nvmeof-800g", "local-nvme-gen4": "local-nvme-gen5",
                 "host-dram-pcie4": "host-dram-pcie5"}


def _back_role(f: RunFacts) -> str:
    return "decode" if f.disaggregated else "colocated"


def _add_instance(res, f: RunFacts, role: str, why: str) -> Suggestion:
    gi, insts = busiest_group(f, role)
    g = group(res, role, gi)
    gpus = insts[0].gpus if insts else 0
    return Suggestion(f"add a {role} instance: {g.count} -> {g.count + 1} (+{gpus} GPUs)",
                      (set_override(role, gi, "count", g.count + 1),), why)


def _fp8_kv(res, role: str, gi: int, why: str) -> Suggestion | None:
    g = group(res, role, gi)
    model = res.scenario.model
    if g.engine.kv_cache_dtype == "fp8" or (g.engine.kv_cache_dtype == "auto" and model.kv_dtype == "fp8"):
        return None
    return Suggestion("store the KV cache in FP8 (kv_cache_dtype fp8)",
                      (set_override(role, gi, "engine.kv_cache_dtype", "fp8"),), why)


def _mixed_steps(res, inst_index: int, t0: float, t1: float) -> tuple[float, float, float]:
    """(share of decode steps carrying a prefill chunk, mean ms of those, mean ms of pure decode)."""
    st = res.record.steps[inst_index]
    if isinstance(st, SpilledColumns):
        return _mixed_steps_spilled(st, t0, t1)
    t, d = st["time_s"], st["step_s"]
    m = (t >= t0) & (t < t1) & (st["running_batch"] > 0)
    mixed = m & (st["prefill_tokens"] > 0)
    pure = m & (st["prefill_tokens"] == 0)
    share = float(mixed.sum() / m.sum()) if m.any() else 0.0
    return share, float(d[mixed].mean() * 1e3) if mixed.any() else 0.0, float(d[pure].mean() * 1e3) if pure.any() else 0.0


def _mixed_steps_spilled(st, t0: float, t1: float) -> tuple[float, float, float]:
    """_mixed_steps of a log kept on disk, a part at a time (means equal up to summation order)."""
    n = n_mixed = n_pure = 0
    s_mixed = s_pure = 0.0
    for lo in range(0, st.rows, PART_ROWS):
        hi = lo + PART_ROWS
        t = st.part("time_s", lo, hi)
        m = (t >= t0) & (t < t1) & (st.part("running_batch", lo, hi) > 0)
        pf = st.part("prefill_tokens", lo, hi)
        d = st.part("step_s", lo, hi)
        mixed, pure = m & (pf > 0), m & (pf == 0)
        n += int(m.sum())
        n_mixed += int(mixed.sum())
        n_pure += int(pure.sum())
        s_mixed += float(d[mixed].sum())
        s_pure += float(d[pure].sum())
    share = n_mixed / n if n else 0.0
    return share, s_mixed / n_mixed * 1e3 if n_mixed else 0.0, s_pure / n_pure * 1e3 if n_pure else 0.0


def decode_bound(res, f: RunFacts) -> Verdict | None:
    """Requests missing their TPOT / ITL bound: slow decode steps (big batches, HBM- or
    compute-bound steps, prefill chunks mixed into decode)."""
    if res.scenario is None:
        return None
    df = res.requests
    cols = [c for c in ("slo_fail_tpot", "slo_fail_itl", "slo_fail_max_itl") if c in df]
    if not cols:
        return None
    missing = df[cols].any(axis=1)
    n_miss, share = int(missing.sum()), float(missing.mean())
    if share < MISS_SHARE:
        return None
    role = _back_role(f)
    gi, insts = busiest_group(f, role)
    g = group(res, role, gi)
    top = max(insts, key=lambda i: i.mean_batch)
    fin = df[df["finished"]]
    mean_ctx = float((fin["input_len"] + fin["output_len"] / 2.0).mean())
    batch = max(1, round(top.mean_batch))
    from .step_physics import decode_bound as price_bound, max_batch_within

    sb = price_bound(res.scenario, role, gi, batch, mean_ctx)
    bound_ms = min(b for b in (f.slo.get("tpot_ms"), f.slo.get("itl_ms"), f.slo.get("max_itl_ms")) if b)
    fits = max_batch_within(res.scenario, role, gi, mean_ctx, bound_ms * 0.9 / 1e3, max(4 * batch, 4096))
    p90 = float(np.nanpercentile(fin["tpot_s"].to_numpy(dtype=float), 90) * 1e3) if len(fin) else 0.0
    parts = sorted(sb.parts.items(), key=lambda kv: -kv[1])[:3]
    kind_text = {"memory": "HBM-bandwidth-bound", "compute": "compute-bound", "mixed": "neither clearly HBM- nor "
                 "compute-bound (overheads and communication weigh in)"}[sb.kind]
    evidence = [
        f"{n_miss:,} requests ({pct(share)}) miss the per-token bound ({bound_ms:g} ms); p90 TPOT {p90:,.1f} ms",
        f"{top.name}: mean decode batch {top.mean_batch:,.1f}, mean step {top.mean_step_s * 1e3:,.1f} ms over the "
        f"arrival window",
        f"the step prices give {sb.step_s * 1e3:,.1f} ms for a pure decode step of {batch:,} sequences at "
        f"{mean_ctx:,.0f} tokens of context: {kind_text} (2x HBM bandwidth saves {sb.hbm_gain:.0%}, 2x FLOP/s "
        f"{sb.compute_gain:.0%}); largest parts: "
        + ", ".join(f"{k} {v / sb.step_s:.0%}" for k, v in parts),
        f"batches up to {fits:,} keep a pure decode step within 90% of {bound_ms:g} ms",
    ]
    metrics = {"missing_tpot": n_miss, "mean_batch": top.mean_batch, "step_ms": sb.step_s * 1e3,
               "hbm_gain": sb.hbm_gain, "compute_gain": sb.compute_gain, "batch_within_bound": fits,
               "explains": share}
    suggestions = []
    if role == "colocated":
        mshare, mixed_ms, pure_ms = _mixed_steps(res, top.index, f.t0, f.t1)
        metrics.update(mixed_step_share=mshare, mixed_step_ms=mixed_ms, pure_step_ms=pure_ms)
        evidence.append(f"{mshare:.0%} of decode steps carry a prefill chunk; they take {mixed_ms:,.1f} ms against "
                        f"{pure_ms:,.1f} ms without")
        chunk = g.engine.chunked_prefill_size
        if mshare >= MIXED_SHARE and pure_ms > 0 and mixed_ms >= MIXED_SLOWDOWN * pure_ms and chunk > 512:
            new = max(512, chunk // 4)
            suggestions.append(Suggestion(f"smaller prefill chunks in decode steps: chunked_prefill_size {chunk:,} -> "
                                          f"{new:,}", (set_override(role, gi, "engine.chunked_prefill_size", new),),
                                          "a mixed step's length is set by its chunk; smaller chunks interrupt "
                                          "decoding for less time (TTFT of long prompts grows)"))
    suggestions.append(_add_instance(res, f, role, "spreads the running requests over more instances: smaller "
                                                   "batches, shorter steps"))
    if top.mean_batch > fits >= 1:
        suggestions.append(Suggestion(f"cap the batch: max_running_requests {g.engine.max_running_requests or 'unset'} "
                                      f"-> {fits:,}", (set_override(role, gi, "engine.max_running_requests", fits),),
                                      "steps of at most this many sequences meet the bound; the rest wait (TTFT grows)"))
    if sb.kind == "memory" and parts and parts[0][0] == "attn_core" and \
            (s := _fp8_kv(res, role, gi, "decode attention reads the KV cache; FP8 halves the bytes read")) is not None:
        suggestions.append(s)
    return Verdict("decode_bound", "high" if share >= HIGH_SHARE else "medium",
                   f"decode steps are too slow: {n_miss:,} requests ({pct(share)}) miss the {bound_ms:g} ms per-token "
                   f"bound; the step is " + {"memory": "HBM-bandwidth-bound", "compute": "compute-bound",
                                             "mixed": "bound by neither HBM nor compute alone"}[sb.kind],
                   tuple(evidence), metrics, "p90_tpot_ms", tuple(suggestions))


def kv_capacity_bound(res, f: RunFacts) -> Verdict | None:
    """KV memory runs out: retractions (recompute), KV-capacity drops, requests waiting for
    pages (decode pre-allocation and admission)."""
    if res.scenario is None:
        return None
    df = res.requests
    role = _back_role(f)
    preempted = float((df["preemptions"] > 0).mean())
    kv_drops = {k: v for k, v in df.loc[~df["finished"], "drop_reason"].value_counts().items()
                if "kv" in str(k) or "retract" in str(k)}
    wait_parts = ("transfer_wait_s", "decode_wait_s") if f.disaggregated else ()
    wait = sum(f.ttft_mean.get(p, 0.0) for p in wait_parts)
    wait_share = wait / f.ttft_mean["ttft_s"] if f.ttft_mean.get("ttft_s", 0) > 0 else 0.0
    gi, insts = busiest_group(f, role)
    kv_p95 = max(i.kv_p95 for i in insts)
    waiting = wait_share >= WAIT_SHARE and wait >= MIN_PART_S and kv_p95 >= KV_FULL
    if not (preempted >= PREEMPTED_SHARE or kv_drops or waiting):
        return None
    if not kv_drops and not ttft_matters(f, wait_share) and misses(f, "tpot")[1] < MISS_SHARE:
        return None  # retractions the SLO absorbs: the healthy verdict counts them
    g = group(res, role, gi)
    retractions = sum(i.retractions for i in f.role(role))
    recompute = int(df["recompute_tokens"].sum())
    evidence = [f"{role} KV pool use: p95 {kv_p95:.0%}, peak {max(i.kv_peak for i in insts):.0%} of its pages"]
    if retractions:
        evidence.append(f"{retractions:,} retractions: {pct(preempted)} of requests lost their KV at least once and "
                        f"{recompute:,} tokens were prefilled again")
    if kv_drops:
        evidence.append("dropped for KV capacity: " + ", ".join(f"{k} {v:,}" for k, v in kv_drops.items()))
    if wait_parts:
        evidence.append(f"waiting for D's KV pages (pre-allocation) and admission is {wait_share:.0%} of mean TTFT "
                        f"({wait:,.3f} s)")
    fin = df[df["finished"]]
    full_ctx = float((fin["input_len"] + fin["output_len"]).mean()) if len(fin) else 0.0
    cap_tokens = res.record.instances[insts[0].index].kv_capacity_pages * g.engine.page_size
    suggestions = [_add_instance(res, f, role, "more KV pages in all: fewer retractions and waits")]
    if (s := _fp8_kv(res, role, gi, "halves the bytes per token: about twice the tokens fit")) is not None:
        suggestions.append(s)
    if retractions and full_ctx > 0 and cap_tokens:
        fit = max(1, int(cap_tokens * 0.9 // full_ctx))
        if g.engine.max_running_requests is None or fit < g.engine.max_running_requests:
            suggestions.append(Suggestion(
                f"cap the batch at what fits at full length: max_running_requests -> {fit:,}",
                (set_override(role, gi, "engine.max_running_requests", fit),),
                f"{fit:,} requests of {full_ctx:,.0f} tokens fill 90% of the {cap_tokens:,}-token pool: admitted "
                f"requests then finish instead of being retracted"))
    mfs = g.engine.mem_fraction_static
    if mfs < 0.95 and g.engine.max_total_tokens is None:  # a max_total_tokens cap would bind first
        new = round(min(0.95, mfs + 0.04), 3)
        suggestions.append(Suggestion(f"more memory for the KV pool: mem_fraction_static {mfs:g} -> {new:g}",
                                      (set_override(role, gi, "engine.mem_fraction_static", new),),
                                      "the memory check says whether activations still fit"))
    severity = "high" if preempted >= HIGH_SHARE or wait_share >= 0.5 or sum(kv_drops.values()) >= HIGH_SHARE * f.n \
        else "medium"
    return Verdict("kv_capacity_bound", severity,
                   f"KV memory on the {role} instances runs out: "
                   + ("; ".join(x for x in (f"{pct(preempted)} of requests retracted" if retractions else "",
                                           f"{sum(kv_drops.values()):,} dropped" if kv_drops else "",
                                           f"page waits {wait_share:.0%} of TTFT" if waiting else "") if x)),
                   tuple(evidence), {"preempted_share": preempted, "retractions": retractions,
                                     "kv_p95": kv_p95, "page_wait_share_of_ttft": wait_share, "explains": preempted},
                   "p90_ttft_ms", tuple(suggestions))


def transfer_bound(res, f: RunFacts) -> Verdict | None:
    """P->D KV transfers take a large share of TTFT (NIC bandwidth, flows queueing on links,
    per-page overheads of small pages)."""
    if res.scenario is None or not f.disaggregated:
        return None
    share = f.share("transfer_s")
    fail_share = f.share("transfer_s", failing=True) if f.ttft_mean_failing else 0.0
    mean_s = f.ttft_mean.get("transfer_s", 0.0)
    # with a TTFT bound, the part must weigh in the requests that miss it
    weight = fail_share if f.slo.get("ttft_ms") else share
    if mean_s < MIN_PART_S or weight < TRANSFER_SHARE or not ttft_matters(f, share):
        return None
    df = res.requests
    fin = df[df["finished"] & (df["transfer_s"] > 0)]
    gbps = float(fin["transfer_bytes"].sum() / fin["transfer_s"].sum() / 1e9) if len(fin) else 0.0
    sc = res.scenario.scenario
    gi, _ = busiest_group(f, "prefill")
    g = group(res, "prefill", gi)
    evidence = [f"KV transfer is {share:.0%} of mean TTFT ({mean_s * 1e3:,.1f} ms of "
                f"{f.ttft_mean['ttft_s'] * 1e3:,.1f} ms)"
                + (f", {fail_share:.0%} for the requests missing TTFT" if f.ttft_mean_failing else ""),
                f"a request's KV ({fin['transfer_bytes'].mean() / 1e6:,.1f} MB on average) moves at "
                f"{gbps:,.2f} GB/s end to end; backend {sc.transfer.backend}"
                + (", batched" if sc.transfer.batched else ", one transfer per page")
                + f", page_size {g.engine.page_size}"]
    links = sorted(f.links, key=lambda link: -link.busy_util)
    if links:
        top = links[0]
        evidence.append(f"busiest link {top.name}: {top.mean_util:.0%} of its {top.capacity * 8 / 1e9:,.0f} Gb/s over "
                        f"the arrival window, {top.busy_util:.0%} while carrying KV; {top.mean_flows:.1f} flows share "
                        f"it when active")
    suggestions = []
    if g.engine.page_size < 64:
        over = tuple(set_override(role, i, "engine.page_size", 64) for role in ("prefill", "decode")
                     for i in range(len(getattr(sc.cluster, role))))
        suggestions.append(Suggestion(f"larger KV pages: page_size {g.engine.page_size} -> 64", over,
                                      "a transfer costs a fixed amount per page chunk (Mooncake issue #522: small "
                                      "pages collapse transfer throughput)"))
    if sc.transfer.backend == "mooncake" and not sc.transfer.batched:
        suggestions.append(Suggestion("batch the transfer (Mooncake batch transfer, PR #499)",
                                      ("transfer.batched=true",), "one submission per request instead of per page"))
    nic = sc.transfer.nic_gbit or res.scenario.hardware.node.nic_gbit
    suggestions.append(Suggestion(f"faster fabric (hardware what-if): NIC {nic:g} -> {2 * nic:g} Gb/s",
                                  (f"transfer.nic_gbit={2 * nic:g}",), "twice the line rate per NIC"))
    n_fail, fshare = misses(f, "ttft")
    return Verdict("transfer_bound", "high" if fshare >= HIGH_SHARE and fail_share >= TRANSFER_SHARE else "medium",
                   f"KV transfer from P to D takes {share:.0%} of TTFT ({mean_s * 1e3:,.1f} ms per request)",
                   tuple(evidence), {"transfer_share_of_ttft": share, "transfer_ms": mean_s * 1e3,
                                     "transfer_gbytes_per_s": gbps, "explains": fshare if fail_share else 0.0},
                   "mean_transfer_ms", tuple(suggestions))


def offload_bound(res, f: RunFacts) -> Verdict | None:
    """KV loads from offload tiers (host DRAM, SSD, remote storage) take a large share of TTFT."""
    if res.scenario is None or res.scenario.scenario.kv_offload is None:
        return None
    share = f.share("kv_load_s")
    mean_s = f.ttft_mean.get("kv_load_s", 0.0)
    fail_share = f.share("kv_load_s", failing=True) if f.ttft_mean_failing else 0.0
    weight = fail_share if f.slo.get("ttft_ms") else share
    if mean_s < MIN_PART_S or weight < LOAD_SHARE or not ttft_matters(f, share):
        return None
    from ..specs.catalog import load_storage

    devices = load_storage().devices
    off = res.scenario.scenario.kv_offload
    df = res.requests
    evidence = [f"loading KV from the offload tiers is {share:.0%} of mean TTFT ({mean_s * 1e3:,.1f} ms of "
                f"{f.ttft_mean['ttft_s'] * 1e3:,.1f} ms); {int(df['loaded_tokens'].sum()):,} prompt tokens loaded "
                f"instead of recomputed (load_policy {off.load_policy})"]
    for t in res.record.stats.get("tiers", []):
        dev = devices.get(str(t.get("tier", "")).rsplit(".", 1)[-1])  # per-instance tiers: "<instance>.<device>"
        bw = f", reads at {dev.read_gbps:g} GB/s" if dev else ""
        evidence.append(f"tier {t.get('tier')}: {t.get('bytes_read', 0) / 1e9:,.1f} GB read, "
                        f"{t.get('hit_blocks', 0):,} block hits{bw}")
    suggestions = []
    for i, tier in enumerate(off.tiers):
        if tier.device in FASTER_DEVICE:
            new = FASTER_DEVICE[tier.device]
            suggestions.append(Suggestion(f"a faster tier: {tier.device} -> {new} ({devices[new].read_gbps:g} GB/s)",
                                          (f"kv_offload.tiers[{i}].device={new}",),
                                          f"{devices[new].read_gbps / devices[tier.device].read_gbps:.1f}x the read "
                                          f"bandwidth"))
    if off.load_policy == "load":
        suggestions.append(Suggestion("let the prices pick load or recompute per hit (load_policy cheaper)",
                                      ("kv_offload.load_policy=cheaper",),
                                      "recomputing a short prefix is faster than reading it from a slow tier"))
    _n, fshare = misses(f, "ttft")
    return Verdict("offload_bound", "high" if fshare >= HIGH_SHARE and fail_share >= LOAD_SHARE else "medium",
                   f"KV loads from offload tiers take {share:.0%} of TTFT ({mean_s * 1e3:,.1f} ms per request)",
                   tuple(evidence), {"load_share_of_ttft": share, "kv_load_ms": mean_s * 1e3,
                                     "explains": fshare if fail_share else 0.0}, "mean_kv_load_ms", tuple(suggestions))
