"""One run of an experiment: simulate a scenario, keep its metrics and latency quantiles.

``evaluate_run`` is top level so process pools and Ray ship it by reference. Its row holds
the summary metrics (SGLang bench_serving names), pdsim's routing metrics and, for the
report's CDFs, the latency quantiles of the finished requests at ``QUANTILES`` levels (the
run's distribution in 101 numbers, however many requests it had).

Routing metrics:
- ``prefill_tokens``: prompt tokens the engines computed (the sum of every engine step's
  prefill tokens, recomputes included): the prefill work a cache-aware router saves;
- ``prefill_tokens_per_request``: the same per arriving request;
- ``rejected`` / ``rejected_share``: requests a router refused (drop reasons ``rejected_*``);
- ``goodput_per_gpu``: requests meeting the SLO per second per GPU.
"""
from __future__ import annotations

import copy
import difflib
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from ..specs.errors import SpecError

QUANTILES = np.linspace(0.0, 1.0, 101)
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")  # per-request columns whose quantiles a row keeps
SUMMARY = (["completed", "dropped", "duration", "request_throughput", "output_throughput", "goodput_share",
            "request_goodput", "prefix_cache_hit_rate", "preemptions", "mean_queue_ms", "mean_prefill_ms",
            "mean_transfer_ms"]
           + [f"{s}_{m}_ms" for m in ("ttft", "itl", "tpot", "e2e_latency") for s in ("mean", "median", "p90", "p99")])
EXTRA = ("prefill_tokens", "prefill_tokens_per_request", "rejected", "rejected_share", "goodput_per_gpu", "gpus")
RUN_METRICS = tuple(SUMMARY) + EXTRA


def check_metrics(names) -> None:
    """Refuse a metric name no run produces (naming the closest one)."""
    for i, m in enumerate(names):
        if m not in RUN_METRICS:
            close = difflib.get_close_matches(str(m), RUN_METRICS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"unknown metric {str(m)[:60]!r}{hint}; expected one of {', '.join(RUN_METRICS)}",
                            field=f"metrics[{i}]")


def _quantiles(values: np.ndarray) -> list[float] | None:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return np.quantile(v, QUANTILES).tolist() if len(v) else None


def run_metrics(res) -> dict[str, Any]:
    """The row of one finished simulation (see the module docstring)."""
    s = res.summary()
    row: dict[str, Any] = {k: s.get(k) for k in SUMMARY}
    df = res.requests
    n = len(df)
    rec = res.record
    row["prefill_tokens"] = int(sum(int(np.asarray(st["prefill_tokens"]).sum()) for st in rec.steps))
    row["prefill_tokens_per_request"] = row["prefill_tokens"] / n if n else None
    reasons = s.get("drop_reasons", {})
    row["rejected"] = int(sum(v for k, v in reasons.items() if k.startswith("rejected_")))
    row["rejected_share"] = row["rejected"] / n if n else 0.0
    row["gpus"] = res.gpus
    row["goodput_per_gpu"] = s["request_goodput"] / res.gpus if res.gpus else None
    row["drop_reasons"] = dict(reasons)
    fin = df[df["finished"]]
    row["quantiles"] = {c: _quantiles(fin[c].to_numpy()) for c in LATENCIES}
    return row


def evaluate_run(data: dict, base_dir: str, trust=None) -> dict[str, Any]:
    """Simulate scenario ``data`` and return its row. A SpecError makes the row
    ``infeasible`` with its text; another exception is an ``error`` (not cached, retried on
    a rerun)."""
    from ..api import resolve_scenario, simulate

    t0 = time.perf_counter()
    try:
        res = simulate(resolve_scenario(copy.deepcopy(data), "<experiment>", Path(base_dir), trust))
        row = run_metrics(res)
        row["status"], row["reason"] = "ok", None
    except SpecError as err:
        row = {"status": "infeasible", "reason": str(err)}
    except Exception as err:  # noqa: BLE001 - one failing run must not sink the experiment
        row = {"status": "error", "reason": traceback.format_exception_only(type(err), err)[-1].strip()}
    row["eval_wall_s"] = time.perf_counter() - t0
    return row
