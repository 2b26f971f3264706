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
from .common import Ingested, json_objects, real_record, table_of

UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0, "milliseconds": 1e-3}


def _seconds(metric, where: str, p: Path):
    if metric is None:
        return None
    v, unit = metric.get("value"), str(metric.get("unit", "ms")).lower()
    if unit not in UNIT_S:
        raise SpecError(f"{where}: unknown time unit {unit!r}", source=str(p))
    k = UNIT_S[unit]
    return [float(x) * k for x in v] if isinstance(v, list) else float(v) * k


def _count(metric):
    if metric is None:
        return None
    v = metric.get("value")
    return int(v) if isinstance(v, (int, float)) else None


def read_aiperf(path: str | Path) -> Ingested:
    p = Path(path)
    recs = []
    for lineno, d in json_objects(p):
        md = d.get("metadata")
        if not isinstance(md, dict) or "request_start_ns" not in md:
            raise SpecError(f"line {lineno}: metadata.request_start_ns: missing (not an AIPerf record)",
                            source=str(p))
        if str(md.get("benchmark_phase", "profiling")).lower() == "warmup":
            continue
        recs.append((lineno, d))
    if not recs:
        raise SpecError("no profiling records", source=str(p))
    t0 = min(d["metadata"]["request_start_ns"] for _, d in recs)
    arrival, ins, outs, times, drops, errors, notes = [], [], [], [], [], [], []
    spread = 0
    for lineno, d in recs:
        md, m = d["metadata"], d.get("metrics") or {}
        where = f"line {lineno}"
        start = (md["request_start_ns"] - t0) * 1e-9
        isl = _count(m.get("input_sequence_length"))
        osl = _count(m.get("output_sequence_length"))
        err = d.get("error")
        if isl is None or isl < 1:
            raise SpecError(f"{where}: metrics.input_sequence_length: expected a positive token count", source=str(p))
        ttft = _seconds(m.get("time_to_first_token"), where, p)
        icl = _seconds(m.get("inter_chunk_latency"), where, p)
        lat = _seconds(m.get("request_latency"), where, p)
        failed = err is not None or md.get("was_cancelled") or ttft is None
        tok: list[float] = []
        if ttft is not None:
            tok = [start + ttft]
            if isinstance(icl, list):
                per = 1
                if osl and len(icl) and osl - 1 > len(icl):
                    per = (osl - 1) / len(icl)
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
    first = [a + (_seconds(d.get("metrics", {}).get("time_to_first_token"), "", p) or np.nan)
             for a, (_, d) in zip(arrival, recs)]
    last = [a + (_seconds(d.get("metrics", {}).get("request_latency"), "", p) or np.nan)
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
