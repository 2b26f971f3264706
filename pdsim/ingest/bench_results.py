"""Benchmark result files with per-request arrays, as real runs.

- SGLang ``python -m sglang.bench_serving --output-file F.jsonl --output-details``: one JSON
  object per run appended to a JSONL file; per request ``input_lens``, ``output_lens``,
  ``ttfts`` (s), ``itls`` (s, every gap), ``errors``; run keys ``backend``, ``dataset_name``,
  ``request_rate``, ``max_concurrency``, ``duration``... (source read:
  sgl-project/sglang ``python/sglang/bench_serving.py``, ``benchmark()`` result dict).
- vLLM ``vllm bench serve --save-result [--save-detailed]`` (formerly
  ``benchmarks/benchmark_serving.py``): one JSON object, the same per-request arrays plus
  ``date``, ``model_id``, ``tokenizer_id``, ``num_prompts``, ``burstiness``; recent versions add
  ``start_times`` (vllm-project/vllm ``vllm/benchmarks/serve.py``).
- pdsim's own ``bench.json`` (``pdsim replay``): the SGLang layout plus ``start_times``,
  ``requested_output_lens``, ``drop_reasons``, ``http_statuses`` and ``pdsim_meta``.

Every token's time is rebuilt as send + TTFT + the running sum of ITLs. Without
``start_times`` the send times are regenerated as the tool draws them (common.tool_arrivals)
and a note says so; TTFT, ITL, TPOT and E2E are exact either way (they are relative to the send).
Which run of a multi-run JSONL is read: the last, unless ``record`` names a line.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..workload.bench import bench_run
from ..specs.workload import check_span
from . import checks
from .bursts import burst_note
from .common import Ingested, real_record, table_of, tokens_from_gaps, tool_arrivals

# default --seed of each tool (used when the file does not record the run's seed)
TOOL_SEED = {"sglang-bench-serving": 1, "vllm-bench-serve": 0, "pdsim-replay": 0}


def flavour(doc: dict, jsonl: bool) -> str:
    """Which tool wrote a result object."""
    if "pdsim_meta" in doc:
        return "pdsim-replay"
    if any(k in doc for k in ("model_id", "tokenizer_id", "num_prompts")) and not jsonl:
        return "vllm-bench-serve"
    return "sglang-bench-serving"


def _is_missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def read_bench_result(path: str | Path, record: int | None = None) -> Ingested:
    p = Path(path)
    where, run, load = bench_run(p, record)
    jsonl = where.startswith("line")
    fmt = flavour(run, jsonl)
    ins, outs = run["input_lens"], run["output_lens"]
    n = len(ins)
    ttfts = run.get("ttfts")
    itls = run.get("itls")
    if not isinstance(ttfts, list) or len(ttfts) != n:
        raise SpecError(f"{where}ttfts: expected {n} per-request times to first token (s) (run the benchmark with "
                        "--output-details / --save-detailed)", source=str(p))
    if not isinstance(itls, list) or len(itls) != n:
        raise SpecError(f"{where}itls: expected {n} per-request lists of inter-token gaps (s)", source=str(p))
    if len(outs) != n:
        raise SpecError(f"{where}output_lens: expected {n} entries like input_lens, got {len(outs)}", source=str(p))
    errors = run.get("errors") or [""] * n
    drops_in = run.get("drop_reasons")
    notes = []
    starts = run.get("start_times")
    rate = checks.rate(run.get("request_rate"), p, where)
    burst = checks.positive(run.get("burstiness"), p, where, "burstiness")
    if isinstance(starts, list) and len(starts) == n and not any(_is_missing(s) for s in starts):
        arrival = np.asarray([checks.seconds(s, p, where, f"start_times[{k}]", signed=True)
                              for k, s in enumerate(starts)], dtype=np.float64)
        arrival = arrival - arrival.min()
        try:
            check_span(float(arrival.max()), "start_times", "the file's send times")
        except SpecError as err:
            raise SpecError(f"{where}{err.field}: {err.message}", source=str(p)) from None
        notes.append("send times from start_times")
    else:
        seed = checks.seed(run.get("seed", TOOL_SEED[fmt]), p, where)
        arrival, how = tool_arrivals(n, rate, burst or 1.0, seed)
        notes.append(how)
    times, drops, out_len = [], [], []
    req_out = run.get("requested_output_lens")
    for k in range(n):
        err = errors[k] if k < len(errors) else ""
        d = drops_in[k] if isinstance(drops_in, list) and k < len(drops_in) else None
        failed = bool(err) or d is not None or _is_missing(ttfts[k])
        if failed:
            drops.append(d or "error")
        else:
            drops.append(None)
        gaps = [] if itls[k] is None else checks.seconds_list(itls[k], p, where, f"itls[{k}]")
        ttft = None if _is_missing(ttfts[k]) else checks.seconds(ttfts[k], p, where, f"ttfts[{k}]")
        times.append(tokens_from_gaps(float(arrival[k]), ttft, gaps))
        field = "requested_output_lens" if isinstance(req_out, list) and k < len(req_out) else "output_lens"
        o = req_out[k] if field == "requested_output_lens" else outs[k]
        # a failed request may record no output (0 or null): its length is what it streamed
        o = None if o is None else checks.tokens(o, p, where, f"{field}[{k}]", zero_ok=True)
        out_len.append(o if o else max(len(gaps) + 1, 1))
    inputs = [checks.tokens(v, p, where, f"input_lens[{k}]") for k, v in enumerate(ins)]
    if any(len(g) + 1 != o for g, o, d in zip(itls, out_len, drops) if d is None and isinstance(g, list) and g):
        notes.append("some requests have fewer ITL entries than output tokens - 1 (the server streamed several "
                     "tokens per chunk)")
    bursts = burst_note(np.diff(t) for t, d in zip(times, drops) if d is None and len(t) > 1)
    if bursts:
        notes.append(bursts)
    cc = run.get("max_concurrency")
    cc = cc if isinstance(cc, int) and not isinstance(cc, bool) and cc >= 1 else None
    pm = run.get("pdsim_meta") or {}
    meta = {k: v for k, v in pm.items()}
    for k in ("prompt_hash_ids", "prompt_hash_block_size"):  # prefix structure another writer put on top
        if k in run and k not in meta:
            meta[k] = run[k]
    meta.update({"format": fmt, "source": str(p), "request_rate": run.get("request_rate"), "max_concurrency": cc,
                 "model": pm.get("model") or run.get("model_id") or run.get("backend"),
                 "description": pm.get("description") or f"{fmt} result {p.name}", "notes": notes,
                 "runs_in_file": load.get("runs_in_file", 1)})
    if "date" in run:
        meta.setdefault("date", run["date"])
    extra = {"output_tokens": [len(t) for t in times],
             "error": [str(e) if e else "" for e in (errors + [""] * (n - len(errors)))[:n]]}
    rec = real_record(run.get("pdsim_meta", {}).get("name") or p.stem, arrival_s=arrival, input_len=inputs,
                      output_len=out_len, token_times=times, drop_reason=drops, meta=meta, extra=extra)
    table = table_of(rec, max_concurrency=cc, source=str(p), meta={"format": fmt, "request_rate": run.get("request_rate"),
                                                                   "max_concurrency": cc})
    return Ingested(fmt, rec, table, notes)
