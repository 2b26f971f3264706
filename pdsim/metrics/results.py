"""Results of one run (simulated or real): tables built lazily from its RunRecord, and the summary."""
from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from ..sim.record import RunRecord
from .summary import meets_slo, summarize
from ..sim.columns import column_rows
from ..sim.record import GapHistogram
from .tables import itl_histogram, request_frame, timeline_frame


class SLO:
    """The SLO bounds of a run in milliseconds (None = not checked), read from the record."""

    def __init__(self, bounds: dict[str, float | None]):
        self.ttft_ms = bounds.get("ttft_ms")
        self.itl_ms = bounds.get("itl_ms")
        self.tpot_ms = bounds.get("tpot_ms")
        self.e2e_ms = bounds.get("e2e_ms")
        self.max_itl_ms = bounds.get("max_itl_ms")


class Results:
    """``record``: the run's plain arrays; ``scenario``: the ResolvedScenario it ran (None for a
    real run replayed against a server)."""

    def __init__(self, record: RunRecord, scenario: Any = None):
        self.record = record
        self.scenario = scenario

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def slo(self) -> SLO:
        return SLO(self.record.slo)

    @cached_property
    def _itl(self) -> tuple[GapHistogram, np.ndarray]:
        return itl_histogram(self.record)

    @property
    def itl_hist(self) -> GapHistogram:
        """Every inter-token latency of every finished request (s), as value/count pairs."""
        return self._itl[0]

    @property
    def itls(self) -> np.ndarray:
        """Every inter-token latency of every finished request, seconds, one float per gap
        (sorted; a large run's gaps take 8 bytes per token: prefer ``itl_hist``)."""
        return self._itl[0].expand()

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request: its life's timestamps (s), assignments, derived latencies."""
        itl_max = self._itl[1]  # first: its working arrays are freed before the frame exists
        df = request_frame(self.record)
        df["itl_max_s"] = itl_max
        df["meets_slo"] = meets_slo(df, self._itl[1], self.slo)
        return df

    @cached_property
    def timeline(self) -> pd.DataFrame:
        return timeline_frame(self.record)

    @property
    def gpus(self) -> int:
        return self.record.gpus

    @property
    def nodes(self) -> float:
        return self.record.nodes

    def summary(self) -> dict:
        rec = self.record
        df = self.requests
        out = summarize(df, self.itl_hist, df["meets_slo"].to_numpy(), self.nodes, self.gpus)
        out["scenario"] = rec.name
        out["gpus"] = self.gpus
        out["nodes"] = self.nodes
        out["sim_events"] = rec.events
        out["wall_s"] = rec.wall_s
        out["sim_time_s"] = rec.end_s
        out["slo"] = dict(rec.slo)
        span = max(rec.end_s, 1e-9)
        out["instances"] = [{"name": i.name, "role": i.role, "gpus": i.gpus, "busy_frac": i.busy_s / span,
                             "steps": column_rows(s), "tokens_out": i.tokens_out,
                             "retractions": i.retractions, "kv_peak_frac": i.kv_peak_pages / max(i.kv_capacity_pages, 1)}
                            for i, s in zip(rec.instances, rec.steps or [{}] * len(rec.instances))]
        st = rec.stats
        if st.get("tiers"):
            out["tiers"] = [dict(t, hit_rate=self._tier_hit_rate(t)) for t in st["tiers"]]
        if st.get("buffers"):
            out["receive_buffers"] = st["buffers"]
        if st.get("caches"):
            out["prefix_caches"] = st["caches"]
        return out

    def _tier_hit_rate(self, tier: dict) -> float:
        """Share of looked-up prompt tokens served from this tier."""
        caches = self.record.stats.get("caches", {})
        looked = sum(c["lookup_tokens"] for c in caches.values())
        block = self.record.stats.get("block_tokens", 0)
        return float(tier["hit_blocks"] * block / looked) if looked else 0.0
