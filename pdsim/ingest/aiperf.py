"""AIPerf ``profile_export.jsonl``: one record per request, as a real run.

Each line is a ``MetricRecordInfo`` (ai-dynamo/aiperf ``src/aiperf/common/models/record_models.py``):
``metadata`` (``request_start_ns``, ``request_end_ns`` wall-clock ns, ``conversation_id``,
``turn_index``, ``benchmark_phase`` warmup|profiling, ``was_cancelled``...), ``metrics`` (tag ->
``{"value": v, "unit": u}`` in display units: ``time_to_first_token`` ms, ``request_latency`` ms,
``inter_chunk_latency`` a list of ms, ``input_sequence_length`` / ``output_sequence_length`` tokens)
and ``error`` (null, or ``{"code", "type", "message"}``). Warm-up records are left out.

Token times: send + TTFT, then the inter-chunk gaps; when a record's chunks are fewer than its
output tokens - 1 (several tokens per chunk), its tokens are spread evenly over each chunk gap
(bench_serving's convention, noted). Without ``inter_chunk_latency`` only the first and last
token times are known (no ITL samples for that request).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import check_span
from ..specs.yamlio import excerpt
from . import checks
from .common import Ingested, json_objects, real_record, table_of

UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0, "milliseconds": 1e-3}


def _metric(m: dict, tag: str, where: str, p: Path) -> dict | None:
    metric = m.get(tag)
    if metric is None:
        return None
    if not isinstance(metric, dict) or "value" not in metric:
        raise SpecError(f"{where}: metrics.{tag}: expected {{\"value\": ..., \"unit\": ...}}, got {excerpt(metric)}",
                        source=str(p))
    return metric


def _seconds(m: dict, tag: str, where: str, p: Path, series: bool = False):
    """A time metric in seconds (a list of them for ``series``); None when absent."""
    metric = _metric(m, tag, where, p)
    if metric is None or metric["value"] is None:
        return None
    v, unit = metric["value"], str(metric.get("unit", "ms")).lower()
    if unit not in UNIT_S:
        raise SpecError(f"{where}: metrics.{tag}.unit: unknown time unit {excerpt(unit)}", source=str(p))
    k = UNIT_S[unit]
    field = f"metrics.{tag}.value"
    if series:
        return [x * k for x in checks.seconds_list(v, p, f"{where}: ", field)]
    return checks.seconds(v, p, f"{where}: ", field) * k


def _count(m: dict, tag: str, where: str, p: Path, zero_ok: bool = False) -> int | None:
    """A token-count metric; None when absent."""
    metric = _metric(m, tag, where, p)
    if metric is None or metric["value"] is None:
        return None
    return checks.tokens(metric["value"], p, f"{where}: ", f"metrics.{tag}.value", zero_ok=zero_ok)


def read_aiperf(path: str | Path) -> Ingested:
    p = Path(path)
    recs = []
    for lineno, d in json_objects(p):
        md = d.get("metadata")
        if not isinstance(md, dict) or "request_start_ns" not in md:
            raise SpecError(f"line {lineno}: metadata.request_start_ns: missing (not an AIPerf record)",
                            source=str(p))
        ns = md["request_start_ns"]
        if type(ns) is not int or ns < 0:
            raise SpecError(f"line {lineno}: metadata.request_start_ns: expected an integer of nanoseconds >= 0, "
                            f"got {excerpt(ns)}", source=str(p))
        if not isinstance(d.get("metrics") or {}, dict):
            raise SpecError(f"line {lineno}: metrics: expected an object, got {excerpt(d['metrics'])}", source=str(p))
        if str(md.get("benchmark_phase", "profiling")).lower() == "warmup":
            continue
        recs.append((lineno, d))
    if not recs:
        raise SpecError("no profiling records", source=str(p))
    t0 = min(d["metadata"]["request_start_ns"] for _, d in recs)
    span = (max(d["metadata"]["request_start_ns"] for _, d in recs) - t0) * 1e-9
    try:
        check_span(span, "metadata.request_start_ns", "the records' send times")
    except SpecError as err:
        raise SpecError(f"{err.field}: {err.message}", source=str(p)) from None
    arrival, ins, outs, times, drops, errors, notes = [], [], [], [], [], [], []
    spread = 0
    for lineno, d in recs:
        md, m = d["metadata"], d.get("metrics") or {}
        where = f"line {lineno}"
        start = (md["request_start_ns"] - t0) * 1e-9
        isl = _count(m, "input_sequence_length", where, p)
        osl = _count(m, "output_sequence_length", where, p, zero_ok=True)
        err = d.get("error")
        if isl is None:
            raise SpecError(f"{where}: metrics.input_sequence_length: expected a positive token count", source=str(p))
        ttft = _seconds(m, "time_to_first_token", where, p)
        icl = _seconds(m, "inter_chunk_latency", where, p, series=True)
        lat = _seconds(m, "request_latency", where, p)
        failed = err is not None or md.get("was_cancelled") or ttft is None
        tok: list[float] = []
        if ttft is not None:
            tok = [start + ttft]
            if isinstance(icl, list):
                per = 1
                if osl and len(icl) and osl - 1 > len(icl):
                    per = (osl - 1) / len(icl)
                    if per > checks.MAX_TOKENS_PER_CHUNK:  # the count does not match the chunks
                        raise SpecError(f"{where}: metrics.output_sequence_length.value: {osl:,} tokens over "
                                        f"{len(icl) + 1} chunks is more than {checks.MAX_TOKENS_PER_CHUNK} tokens per "
                                        "chunk (inter_chunk_latency has one gap per chunk)", source=str(p))
                    spread += 1
                for g in icl:
                    if per == 1:
                        tok.append(tok[-1] + g)
                    else:  # several tokens per chunk: spread over the gap
                        k = int(round(per))
                        base = tok[-1]
                        tok.extend(base + g * (j + 1) / k for j in range(k))
            elif lat is not None and osl and osl > 1:
                tok.append(start + lat)  # last token only; ITLs unknown
        arrival.append(start)
        ins.append(isl)
        outs.append(max(osl or len(tok) or 1, 1))
        times.append(tok if (isinstance(icl, list) or not tok) else [])
        if not isinstance(icl, list) and tok:
            times[-1] = []  # first/last only: handed over as columns below
        drops.append(("cancelled" if md.get("was_cancelled") else f"error_{err.get('code', '')}".rstrip("_")
                      if isinstance(err, dict) else "error") if failed else None)
        errors.append(str(err.get("message", "")) if isinstance(err, dict) else "")
    first = [a + (_seconds(d.get("metrics") or {}, "time_to_first_token", "", p) or np.nan)
             for a, (_, d) in zip(arrival, recs)]
    last = [a + (_seconds(d.get("metrics") or {}, "request_latency", "", p) or np.nan)
            for a, (_, d) in zip(arrival, recs)]
    if spread:
        notes.append(f"{spread} requests streamed several tokens per chunk; their tokens are spread evenly over each "
                     "chunk gap")
    if any(not t for t, d in zip(times, drops) if d is None):
        notes.append("some records have no inter_chunk_latency: only first and last token times (no ITL samples)")
    notes.append("send times from metadata.request_start_ns")
    meta = {"format": "aiperf-profile-export", "source": str(p), "description": f"AIPerf profile export {p.name}",
            "notes": notes}
    from ..workload.prefix_hashes import DEFAULT_BLOCK, session_hashes

    meta.update(session_hashes([d["metadata"].get("conversation_id") for _, d in recs],  # multi-turn prefixes
                               [d["metadata"].get("turn_index") for _, d in recs], ins, outs, DEFAULT_BLOCK))
    rec = real_record(p.stem, arrival_s=arrival, input_len=ins, output_len=outs, token_times=times,
                      drop_reason=drops, meta=meta, extra={"error": errors}, first_token_s=first, finish_s=last)
    return Ingested("aiperf-profile-export", rec, table_of(rec, source=str(p), meta={"format": "aiperf-profile-export"}),
                    notes)
