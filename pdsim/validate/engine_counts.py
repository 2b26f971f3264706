"""The real engine's own count of the prompt tokens it computed, against the simulated run's.

``pdsim replay`` keeps the deltas of vLLM's Prometheus counters over a run
(``engine_counters``: pdsim/replay/session.py). Each engine step schedules its prefill chunks'
tokens plus one token per decoding request, and a request's first output token comes from its
prefill, so over a run

    prompt tokens computed = iteration_tokens_total_sum - (generation_tokens_total - requests)

(recomputed prompts after a preemption included). Prompt tokens the engine found in its prefix
cache are not computed. A simulated run that computes more than the engine did missed cache hits
the engine had: most often a server that had served the same prefixes before the run (its cache
still warm from an earlier recording; pdsim starts every run with an empty cache), or prompts
that share more than their recorded block hashes say. One that computes fewer found hits the
engine did not have (an evicted block, a smaller KV pool).
"""
from __future__ import annotations

import math

import numpy as np

# a difference under this share of the engine's count is rounding (a full-prompt hit still computes
# its last token, chunk boundaries), not a different cache
TOLERANCE = 0.05


def engine_prompt_tokens(counters: dict | None, requests: int) -> float | None:
    """Prompt tokens the engine computed over the run by its counters (None when they are absent,
    e.g. a run through a proxy that serves no /metrics, or inconsistent)."""
    if not counters or requests < 0:
        return None
    try:
        steps_tokens = float(counters["iteration_tokens_total_sum"])
        generated = float(counters["generation_tokens_total"])
    except (KeyError, TypeError, ValueError):
        return None
    computed = steps_tokens - (generated - requests)
    if not math.isfinite(computed) or computed < 0:
        return None
    return computed


def simulated_prompt_tokens(requests) -> float:
    """Prompt tokens the simulated engine computed: each prompt less its cache hit, plus the
    tokens recomputed after a preemption or a lost KV (a requests table of ``Results``)."""
    done = requests[requests["finished"]]
    computed = (done["input_len"].to_numpy(float) - done["cached_tokens"].to_numpy(float)).clip(min=0.0).sum()
    if "recompute_tokens" in done:
        computed += np.nansum(done["recompute_tokens"].to_numpy(float))
    return float(computed)


def one_engine(cluster) -> bool:
    """Whether one engine served every token (one colocated instance): only then are the counters
    read at the run's endpoint the whole run's. Behind a P/D proxy they are one server's (the proxy
    forwards /metrics to D, which computes only the tails it recomputes), behind a router one
    replica's."""
    return not cluster.prefill and not cluster.decode and sum(g.count for g in cluster.colocated) == 1


def cache_note(real_meta: dict, sim_requests, real_requests: int, whole_run: bool = True) -> str:
    """One line for the validation notes: the engine's computed prompt tokens against pdsim's,
    with what a difference past ``TOLERANCE`` means; "" when the run carries no counters or they
    are not the whole run's (``whole_run``: ``one_engine`` of the simulated deployment)."""
    engine = engine_prompt_tokens(real_meta.get("engine_counters"), real_requests) if whole_run else None
    if engine is None:
        return ""
    sim = simulated_prompt_tokens(sim_requests)
    prompt = float(real_meta.get("engine_counters", {}).get("prompt_tokens_total") or 0.0)

    def share(x: float) -> str:  # a count at or past the prompts' (a full hit's last token) is no cache
        if prompt <= 0:
            return ""
        return f" ({1.0 - x / prompt:.0%} of the prompt tokens from cache)" if x < prompt else " (none from cache)"

    line = (f"prompt tokens computed: engine {engine:,.0f}{share(engine)} by its counters, pdsim {sim:,.0f}"
            f"{share(sim)}")
    if engine > 0 and (sim - engine) / engine > TOLERANCE:
        return (line + f": pdsim computed {sim / engine - 1:.0%} more. The engine found prefixes in its cache that "
                "the simulated run, which starts with an empty cache, did not: a server that served the same "
                "prefixes before this run (start a fresh server for each recording), or prompts sharing more "
                "than their recorded block hashes")
    if engine > 0 and (engine - sim) / engine > TOLERANCE:
        return (line + f": the engine computed {engine / max(sim, 1.0) - 1:.0%} more (preemptions, evicted "
                "prefixes or a smaller KV pool than the scenario's)")
    return line
