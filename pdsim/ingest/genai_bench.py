"""genai-bench result folders (or one run file of one), as a real run.

A genai-bench experiment folder holds ``experiment_metadata.json`` and one JSON per
(scenario, concurrency) run, written by ``AggregatedMetricsCollector.save``
(sgl-project/genai-bench ``genai_bench/metrics/aggregated_metrics_collector.py``):
``{"aggregated_metrics": {..., "num_concurrency", "scenario", "run_duration", ...},
"individual_request_metrics": [RequestLevelMetrics...], "_time_unit": "s"}``; per request
``ttft``, ``tpot``, ``e2e_latency``, ``num_input_tokens``, ``num_output_tokens``,
``error_code``, ``error_message`` (``genai_bench/metrics/metrics.py``).

genai-bench keeps no send times and no per-token times: its users run a closed loop at
``num_concurrency``, so the run is read as a closed loop (send times reconstructed as
back-to-back requests per user slot, noted), with the first token at TTFT and the last at E2E
(no ITL samples; TPOT and E2E are exact). A folder with several runs: ``run`` picks one
(default: the first in name order; the notes list the others).
"""
from __future__ import annotations

import heapq
import json
from pathlib import Path

from ..specs.errors import SpecError
from ..specs.yamlio import excerpt
from . import checks
from .common import Ingested, real_record, table_of

UNIT_S = {"s": 1.0, "ms": 1e-3}


def run_files(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    out = []
    for f in sorted(p.glob("**/*.json")):
        if f.name == "experiment_metadata.json":
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        if '"aggregated_metrics"' in head or '"individual_request_metrics"' in head:
            out.append(f)
    return out


def read_genai_bench(path: str | Path, run: int = 0) -> Ingested:
    p = Path(path)
    files = run_files(p)
    if not files:
        raise SpecError("no genai-bench run files (JSON with individual_request_metrics) here", source=str(p))
    if not 0 <= run < len(files):
        raise SpecError(f"run {run}: the folder has {len(files)} runs", source=str(p), field="run")
    f = files[run]
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SpecError(f"line {err.lineno}: invalid JSON ({err.msg})", source=str(f)) from None
    except RecursionError:
        raise SpecError("invalid JSON (nested too deeply)", source=str(f)) from None
    except UnicodeDecodeError as err:
        raise SpecError(f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at {err.start})", source=str(f)) from None
    if not isinstance(doc, dict):
        raise SpecError("expected a JSON object (a genai-bench run file)", source=str(f))
    reqs = doc.get("individual_request_metrics")
    agg = doc.get("aggregated_metrics") or {}
    if not isinstance(agg, dict):
        raise SpecError(f"aggregated_metrics: expected an object, got {excerpt(agg)}", source=str(f))
    if not isinstance(reqs, list) or not reqs:
        raise SpecError("individual_request_metrics: expected a non-empty list", source=str(f))
    k = UNIT_S.get(str(doc.get("_time_unit", "s")), None)
    if k is None:
        raise SpecError(f"_time_unit: expected s or ms, got {doc.get('_time_unit')!r}", source=str(f))
    notes = [f"run file {f.name} ({len(files)} runs here)"]
    declared = checks.concurrency(agg.get("num_concurrency"), f, "", "aggregated_metrics.num_concurrency")
    cc = declared or 1
    if cc > len(reqs):  # more users than requests: every request is sent at once, as with len(reqs) users
        notes.append(f"num_concurrency {cc:,} is more than the run's {len(reqs)} requests: read as {len(reqs)} users")
        cc = len(reqs)
    # closed loop: each user slot sends its next request when the previous one ends
    slots = [(0.0, i) for i in range(cc)]
    heapq.heapify(slots)
    arrival, first, last, ins, outs, drops, errors = [], [], [], [], [], [], []
    for i, r in enumerate(reqs):
        if not isinstance(r, dict):
            raise SpecError(f"individual_request_metrics[{i}]: expected an object", source=str(f))
        t, s = heapq.heappop(slots)
        where = f"individual_request_metrics[{i}]."
        e2e, ttft = (None if r.get(key) is None else checks.seconds(r[key], f, where, key) * k
                     for key in ("e2e_latency", "ttft"))
        err = r.get("error_code")
        ok = err in (None, 200) and ttft is not None and e2e is not None
        arrival.append(t)
        first.append(t + ttft if ttft is not None else float("nan"))
        last.append(t + e2e if e2e is not None else float("nan"))
        heapq.heappush(slots, (t + (e2e if e2e is not None else 0.0), s))
        ins.append(checks.tokens(r.get("num_input_tokens"), f, where, "num_input_tokens"))
        n_out = r.get("num_output_tokens")  # a failed request may have none
        outs.append(1 if n_out is None else checks.tokens(n_out, f, where, "num_output_tokens", zero_ok=True) or 1)
        drops.append(None if ok else f"error_{err}" if err is not None else "error")
        errors.append(str(r.get("error_message") or ""))
    notes += [f"send times reconstructed: closed loop of {cc} users (genai-bench keeps no send times)",
              "only first and last token times are kept by genai-bench: no ITL samples"]
    meta = {"format": "genai-bench", "source": str(f), "max_concurrency": cc, "scenario": agg.get("scenario"),
            "description": f"genai-bench run {f.name}", "notes": notes}
    rec = real_record(f.stem, arrival_s=arrival, input_len=ins, output_len=outs, token_times=[[] for _ in reqs],
                      drop_reason=drops, meta=meta, extra={"error": errors}, first_token_s=first, finish_s=last)
    table = table_of(rec, max_concurrency=cc, source=str(f), meta={"format": "genai-bench", "max_concurrency": cc})
    return Ingested("genai-bench", rec, table, notes)
