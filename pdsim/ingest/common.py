"""Shared pieces of the real-run readers: a RunRecord from per-request token times, and the
arrival times a benchmark tool would have drawn when a file does not keep send times.

A reader returns an ``Ingested``: the run as ground truth (``record``, a RunRecord of kind
``real``) and as a workload (``table``, the requests it sent), plus the detected format and
notes saying what had to be reconstructed.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..sim.record import ExplicitTokens, InstanceInfo, RunRecord, empty_requests
from ..specs.errors import SpecError
from ..workload.table import RequestTable
from ..workload.textio import open_text

NO_SLO = {"ttft_ms": None, "itl_ms": None, "tpot_ms": None, "e2e_ms": None}


@dataclass
class Ingested:
    """A real run read from a file: ground truth and workload."""

    format: str  # e.g. sglang-bench-serving, vllm-bench-serve, aiperf-profile-export
    record: RunRecord
    table: RequestTable
    notes: list[str] = field(default_factory=list)  # what was reconstructed, and how


def tool_arrivals(n: int, rate, burstiness, seed: int) -> tuple[np.ndarray, str]:
    """Send times as ``bench_serving`` / ``vllm bench serve`` draw them: gaps from
    ``np.random.gamma(shape=burstiness, scale=1 / (rate * burstiness))`` under the run's
    seed (rate inf or absent: all at t=0). The tools seed numpy's global RNG once and draw
    the dataset from it first, so these are draws of the same process, not the same draws."""
    try:
        r = float(rate)
    except (TypeError, ValueError):
        r = math.inf
    if not (0 < r < math.inf):
        return np.zeros(n), "all requests at t=0 (request rate inf or not recorded)"
    b = float(burstiness) if isinstance(burstiness, (int, float)) and burstiness > 0 else 1.0
    rng = np.random.RandomState(seed)
    gaps = rng.gamma(shape=b, scale=1.0 / (r * b), size=n)
    t = np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)
    return t, (f"send times regenerated: gamma(burstiness {b:g}) gaps at {r:g} req/s, seed {seed} (the tool's "
               "process; the exact draws are not recoverable because the tool drew its dataset from the same RNG)")


def real_record(name: str, *, arrival_s, input_len, output_len, token_times: list[list[float]],
                drop_reason: list[str | None], meta: dict, extra: dict | None = None,
                first_token_s=None, finish_s=None, gpus: int = 1) -> RunRecord:
    """A real RunRecord. ``token_times``: every token's time (s, run clock) per request, or an
    empty list where the source keeps only first/last token times (then give ``first_token_s``
    and ``finish_s``; the run has no ITL samples for that request)."""
    n = len(arrival_s)
    cols = empty_requests(n)
    cols["arrival_s"] = np.asarray(arrival_s, dtype=np.float64)
    cols["input_len"] = np.asarray(input_len, dtype=np.int64)
    cols["output_len"] = np.asarray(output_len, dtype=np.int64)
    ft = np.array([t[0] if t else np.nan for t in token_times])
    fin = np.array([t[-1] if t else np.nan for t in token_times])
    if first_token_s is not None:
        ft = np.where(np.isnan(ft), np.asarray(first_token_s, dtype=np.float64), ft)
    if finish_s is not None:
        fin = np.where(np.isnan(fin), np.asarray(finish_s, dtype=np.float64), fin)
    drops = np.array(drop_reason, dtype=object)
    fin = np.where(np.array([d is None for d in drops], dtype=bool), fin, np.nan)
    cols["first_token_s"], cols["finish_s"], cols["drop_reason"] = ft, fin, drops
    cols["prefill_instance"] = np.zeros(n, dtype=np.int64)
    cols["decode_instance"] = np.zeros(n, dtype=np.int64)
    for k, v in (extra or {}).items():
        cols[k] = np.asarray(v)
    ends = np.concatenate([fin[~np.isnan(fin)], ft[~np.isnan(ft)]])
    end = float(ends.max()) if ends.size else 0.0
    inst = [InstanceInfo("server", "server", gpus, tokens_out=int(sum(len(t) for t in token_times)))]
    m = {"kind": "real", **meta}
    return RunRecord(name, "real", cols, ExplicitTokens.from_lists(token_times), inst, gpus, 1.0, dict(NO_SLO),
                     end, wall_s=end, meta=m, steps=[{}])


def tokens_from_gaps(start: float, ttft, itls) -> list[float]:
    """Token times from a send time, the TTFT and the inter-token gaps (seconds)."""
    if ttft is None or (isinstance(ttft, float) and math.isnan(ttft)):
        return []
    t = start + float(ttft)
    out = [t]
    for g in itls or []:
        t += float(g)
        out.append(t)
    return out


def table_of(record: RunRecord, *, max_concurrency: int | None = None, source: str = "",
             meta: dict | None = None) -> RequestTable:
    """The requests a real run sent, in send order, as a workload (times from the first send)."""
    req = record.requests
    a = np.asarray(req["arrival_s"], dtype=np.float64)
    order = np.argsort(np.where(np.isnan(a), np.inf, a), kind="stable")
    a = a[order]
    a = a - (a[0] if len(a) and not np.isnan(a[0]) else 0.0)
    return RequestTable(np.nan_to_num(a, nan=float(np.nanmax(a)) if np.isfinite(a).any() else 0.0),
                        np.asarray(req["input_len"])[order], np.maximum(np.asarray(req["output_len"])[order], 1),
                        max_concurrency=max_concurrency, source=source, meta=dict(meta or {}))


def json_objects(path):
    """``(line number, object)`` for every non-blank line of a JSON-lines file (compressed files
    read by their magic bytes); a line that is not JSON or not an object fails naming its line."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as err:
                raise SpecError(f"line {lineno}: invalid JSON ({err.msg})", source=str(path)) from None
            except RecursionError:
                raise SpecError(f"line {lineno}: invalid JSON (nested too deeply)", source=str(path)) from None
            if not isinstance(d, dict):
                raise SpecError(f"line {lineno}: expected a JSON object", source=str(path))
            yield lineno, d
