"""Results of one run: tables (lazily built) and the summary."""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from ..sim.cluster import RunLog
from ..specs.scenario import ResolvedScenario
from .summary import meets_slo, summarize
from .tables import itl_samples, request_frame, timeline_frame


class Results:
    def __init__(self, scenario: ResolvedScenario, log: RunLog):
        self.scenario = scenario
        self.log = log

    @cached_property
    def _itl(self) -> tuple[np.ndarray, np.ndarray]:
        return itl_samples(self.log)

    @property
    def itls(self) -> np.ndarray:
        """Every inter-token latency of every request, seconds."""
        return self._itl[0]

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request: its life's timestamps (s), assignments, derived latencies."""
        df = request_frame(self.log)
        df["itl_max_s"] = self._itl[1]
        df["meets_slo"] = meets_slo(df, self._itl[1], self.scenario.scenario.slo)
        return df

    @cached_property
    def timeline(self) -> pd.DataFrame:
        return timeline_frame(self.log)

    @property
    def gpus(self) -> int:
        return sum(i.gpus for i in self.log.instances)

    @property
    def nodes(self) -> float:
        return self.gpus / self.scenario.hardware.gpus_per_node

    def summary(self) -> dict:
        df = self.requests
        out = summarize(df, self.itls, df["meets_slo"].to_numpy(), self.nodes, self.gpus)
        out["scenario"] = self.scenario.name
        out["gpus"] = self.gpus
        out["nodes"] = self.nodes
        out["sim_events"] = self.log.events
        out["wall_s"] = self.log.wall_s
        out["sim_time_s"] = self.log.sim_end
        slo = self.scenario.scenario.slo
        out["slo"] = {k: getattr(slo, k) for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")}
        span = max(self.log.sim_end, 1e-9)
        out["instances"] = [{"name": i.name, "role": i.role, "gpus": i.gpus, "busy_frac": i.busy_time / span,
                             "steps": len(i.log_t), "tokens_out": i.tokens_out, "retractions": i.retractions,
                             "kv_peak_frac": i.pool.peak / max(i.pool.capacity, 1)} for i in self.log.instances]
        ex = self.log.extra
        if ex.get("tiers"):
            out["tiers"] = [dict(t, hit_rate=self._tier_hit_rate(t)) for t in ex["tiers"]]
        if ex.get("buffers"):
            out["receive_buffers"] = ex["buffers"]
        if ex.get("caches"):
            out["prefix_caches"] = ex["caches"]
        return out

    def _tier_hit_rate(self, tier: dict) -> float:
        """Share of looked-up prompt tokens served from this tier."""
        looked = sum(c["lookup_tokens"] for c in self.log.extra.get("caches", {}).values())
        block = self._block_tokens()
        return float(tier["hit_blocks"] * block / looked) if looked else 0.0

    def _block_tokens(self) -> int:
        for inst in self.log.instances:
            if inst.cache is not None:
                return inst.cache.block_tokens
        return 0
