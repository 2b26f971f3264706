"""A run as a ``bench_serving``-compatible result (SGLang ``--output-file --output-details``).

The summary keys are those of ``Results.summary()`` (already bench_serving names); the
per-request arrays are bench_serving's: ``input_lens``, ``output_lens`` (tokens received),
``ttfts`` (s), ``itls`` (per request, every gap in s), ``generated_texts`` (not kept: empty),
``errors`` (empty string on success); plus ``start_times`` (send time, s from the run's start,
as recent ``vllm bench serve --save-detailed`` writes them) so a reader recovers every token's
time, and ``requested_output_lens`` / ``drop_reasons`` / ``http_statuses``. pdsim's ingest reads
this file back as a real run (``pdsim validate`` takes it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..metrics.results import Results

SUMMARY_KEYS = (
    "duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "input_throughput", "output_throughput", "total_throughput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2e_latency") for s in ("mean", "median", "std", "p90", "p99")),
)


def _num(v):
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def bench_result(res: Results) -> dict:
    """The bench_serving-style dict of a run (real or simulated)."""
    rec = res.record
    s = res.summary()
    req = rec.requests
    n = len(rec)
    offs = getattr(rec.tokens, "offsets", None)
    times = getattr(rec.tokens, "times", None)
    itls, outs = [], []
    for i in range(n):
        if offs is not None:
            t = times[offs[i]:offs[i + 1]]
            itls.append(np.round(np.diff(t), 7).tolist())  # 0.1 us resolution keeps files small
            outs.append(int(len(t)))
        else:  # a simulated run: the token count is what was asked for
            itls.append([])
            outs.append(int(req["output_len"][i]) if req["drop_reason"][i] is None else 0)
    ttft = req["first_token_s"] - req["arrival_s"]
    meta = rec.meta
    out = {
        "backend": meta.get("api", "pdsim"), "dataset_name": meta.get("workload_source", ""),
        "request_rate": meta.get("request_rate"), "max_concurrency": meta.get("max_concurrency"),
        "model_id": meta.get("served_model") or meta.get("model"), "date": meta.get("date"),
    }
    out.update({k: s.get(k) for k in SUMMARY_KEYS})
    errors = req.get("error")
    drops = req["drop_reason"]
    out.update({
        "input_lens": [int(x) for x in req["input_len"]],
        "output_lens": outs,
        "requested_output_lens": [int(x) for x in req["output_len"]],
        "ttfts": [_num(x) if d is None or not math.isnan(x) else None for x, d in zip(ttft, drops)],
        "itls": itls,
        "start_times": [_num(x) for x in req["arrival_s"]],
        "generated_texts": [""] * n,
        "errors": [("" if d is None else (str(errors[i]) if errors is not None and errors[i] else str(d)))
                   for i, d in enumerate(drops)],
        "drop_reasons": [None if d is None else str(d) for d in drops],
        "http_statuses": [int(x) for x in req["http_status"]] if "http_status" in req else None,
        "pdsim_meta": {k: v for k, v in meta.items() if _jsonable(v)},
    })
    return out


def write_bench_json(res: Results, path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w") as f:
        json.dump(bench_result(res), f, default=float)
        f.write("\n")
    return path
