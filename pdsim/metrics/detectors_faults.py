"""Failures as a bottleneck: instances that failed during the run (the world's fault events),
the capacity they took with them and the requests that missed the SLO because of it."""
from __future__ import annotations

import numpy as np

from .detect_util import HIGH_SHARE, MINOR_MISS, group, pct, set_override
from .run_facts import RunFacts
from .verdicts import Suggestion, Verdict


def _reduced(capacity: list, t: np.ndarray) -> np.ndarray:
    """Whether capacity (a step function [(time, GPUs)]) was below its maximum at times ``t``."""
    times = np.array([c[0] for c in capacity], dtype=float)
    gpus = np.array([c[1] for c in capacity], dtype=float)
    idx = np.searchsorted(times, t, side="right") - 1
    return gpus[np.clip(idx, 0, len(gpus) - 1)] < gpus.max()


def _renamed_faults(res, name: str, count: int) -> tuple[str, ...]:
    """Overrides that keep fault events on their instance when a group of one instance gets a
    second: its instances are then named ``<name>.0``, ``<name>.1``."""
    faults = res.scenario.scenario.faults
    if count != 1 or faults is None:
        return ()
    return tuple(f"faults.events[{i}].instance={name}.0" for i, e in enumerate(faults.events)
                 if getattr(e, "instance", None) == name)


def failures(res, f: RunFacts) -> Verdict | None:
    """Instances failed and the SLO misses follow the capacity they took (arrivals while
    capacity was reduced, retried or dropped requests)."""
    st = res.record.stats
    failed = [e for e in st.get("events", ()) if e.get("kind") == "failed"]
    if not failed:
        return None
    df = res.requests
    miss = ~df["meets_slo"].to_numpy()
    if miss.mean() < MINOR_MISS:
        return None  # the SLO absorbed the failures
    cap = st.get("capacity_gpus") or []
    arrival = df["arrival_s"].to_numpy(dtype=float)
    reduced = _reduced(cap, arrival) if cap else np.zeros(len(df), dtype=bool)
    retried = df["retries"].to_numpy() > 0 if "retries" in df else np.zeros(len(df), dtype=bool)
    hit = reduced | retried
    explains = float((miss & hit).sum() / len(df)) if len(df) else 0.0
    if explains < MINOR_MISS:
        return None
    span = max(res.record.end_s, 1e-9)
    if cap:
        times = np.array([c[0] for c in cap] + [span])
        gpus = np.array([c[1] for c in cap], dtype=float)
        down_s = float(np.diff(times)[gpus < gpus.max()].sum())
        low = int(gpus.min())
        top = int(gpus.max())
    else:
        down_s, low, top = 0.0, 0, 0
    names = [e.get("what", "?") for e in failed]
    evidence = [f"{len(failed)} failure(s): " + ", ".join(f"{e.get('what')} at {e.get('time_s', 0):,.0f} s "
                                                           f"({e.get('detail', '')})" for e in failed[:4])
                + (" ..." if len(failed) > 4 else "")]
    faults = res.scenario.scenario.faults if res.scenario is not None else None
    if faults is not None and len(faults.events) > len(failed):
        evidence.append(f"{len(faults.events) - len(failed)} of the scenario's {len(faults.events)} fault events hit "
                        "an instance that was already down or restarting")
    if cap:
        evidence.append(f"serving capacity fell from {top:,} to as low as {low:,} GPUs; below full for "
                        f"{down_s:,.0f} s ({down_s / span:.0%} of the run)")
    miss_in = float(miss[hit].mean()) if hit.any() else 0.0
    miss_out = float(miss[~hit].mean()) if (~hit).any() else 0.0
    evidence.append(f"{pct(miss_in)} of the {int(hit.sum()):,} requests that arrived while capacity was reduced or "
                    f"were retried miss the SLO, against {pct(miss_out)} of the others")
    causes = st.get("retries_by_cause") or {}
    if causes:
        evidence.append("retries by cause: " + ", ".join(f"{k} {v:,}" for k, v in causes.items()))
    drops = {k: v for k, v in df.loc[~df["finished"], "drop_reason"].value_counts().items() if "fail" in str(k)}
    if drops:
        evidence.append("dropped after failures: " + ", ".join(f"{k} {v:,}" for k, v in drops.items()))
    suggestions = []
    by_name = {i.name: i for i in f.instances}
    inst = next((by_name[n] for n in names if n in by_name), None)
    if inst is not None and res.scenario is not None:
        role, gi = inst.group
        g = group(res, role, gi)
        suggestions.append(Suggestion(
            f"a spare {role} instance: count {g.count} -> {g.count + 1} (+{inst.gpus} GPUs)",
            (set_override(role, gi, "count", g.count + 1), *_renamed_faults(res, inst.name, g.count)),
            "the remaining instances carry the load while a failed one restarts"))
    return Verdict("failures", "high" if explains >= HIGH_SHARE else "medium",
                   f"failures cost the SLO: {pct(explains)} of requests miss it while capacity was reduced or after "
                   f"retries ({len(failed)} failure(s), {', '.join(dict.fromkeys(names))})",
                   tuple(evidence), {"failures": len(failed), "reduced_s": down_s, "miss_share_affected": miss_in,
                                     "miss_share_unaffected": miss_out, "explains": explains},
                   "p90_ttft_ms", tuple(suggestions))
