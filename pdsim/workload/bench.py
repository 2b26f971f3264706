"""Benchmark result files as traces: the requests a benchmark run actually sent.

``sglang.bench_serving --output-file F --output-details`` appends one JSON object per run to F
(JSONL); ``vllm bench serve --save-result --save-detailed`` writes one JSON object. Both carry
per-request ``input_lens`` and ``output_lens`` (tokens) and ``errors`` (empty string when the
request succeeded), and the run's ``request_rate``, ``burstiness`` and ``max_concurrency``;
some vLLM versions add per-request ``start_times`` (s, send time on the client's clock).

A result file is one JSON document per run, so a run is parsed whole (these files hold a
benchmark's requests, thousands, not a production trace). In a JSONL file of several runs
the last run is read (the latest appended) unless ``record`` picks another (1-based line).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterator

from ..specs.errors import SpecError
from ..specs.yamlio import excerpt
from .textio import bad_utf8
from .trace_rows import BadRow, Row, length, number, open_text

DETAIL_HINT = ("run sglang.bench_serving with --output-details, or vllm bench serve with --save-result "
               "--save-detailed")
# A result file is parsed whole (one JSON document per run). With --output-details a run holds
# every request's generated text and ITLs: ~10 kB per request, so 256 Mi characters hold runs
# of ~25k requests; parsing takes several times the text in memory (a few GB at the limit).
MAX_BENCH_CHARS = 256 * 2**20


def _loads(text: str, p: Path, where: str):
    try:
        return json.loads(text)
    except RecursionError:
        raise SpecError(f"{where}invalid JSON (nested too deeply)", source=str(p)) from None


def _records(p: Path, text: str) -> list[tuple[int | None, dict]]:
    """(line or None for a single document, object) of every JSON object in the file."""
    try:
        doc = _loads(text, p, "")
        return [(None, doc)] if isinstance(doc, dict) else []
    except json.JSONDecodeError as err:
        if err.msg != "Extra data":  # not several objects one per line: a broken file
            raise SpecError(f"line {err.lineno}: invalid JSON ({err.msg} at column {err.colno})",
                            source=str(p)) from None
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = _loads(line, p, f"line {lineno}: ")
        except json.JSONDecodeError as err:
            raise SpecError(f"line {lineno}: invalid JSON ({err.msg} at column {err.colno})",
                            source=str(p)) from None
        if isinstance(doc, dict):
            out.append((lineno, doc))
    return out


def looks_like_bench(first_line: str) -> bool:
    """Whether a JSON(L) file's first line is a benchmark result rather than a trace row."""
    return '"input_lens"' in first_line or '"output_lens"' in first_line or '"request_throughput"' in first_line


def bench_run(p: Path, record: int | None = None) -> tuple[str, dict, dict]:
    """(where, run object, recorded load) of the chosen run of a result file; ``where`` is the
    error prefix (``line N: `` in a JSONL file, else empty)."""
    with open_text(p) as f:
        text = f.read(MAX_BENCH_CHARS + 1)
    if len(text) > MAX_BENCH_CHARS:
        raise SpecError(f"a benchmark result of more than {MAX_BENCH_CHARS // 2**20} Mi characters; it is parsed "
                        "whole, so split its runs into several files (one JSON object per line each)",
                        source=str(p))
    problem = bad_utf8(text)
    if problem:
        line = text.count("\n", 0, text.index(next(c for c in text if "\udc80" <= c <= "\udcff"))) + 1
        raise SpecError(f"line {line}: {problem.replace('at column', 'at character')}", source=str(p))
    runs = [(ln, d) for ln, d in _records(p, text) if "input_lens" in d or "output_lens" in d]
    if not runs:
        raise SpecError(f"no per-request input_lens/output_lens in this benchmark result ({DETAIL_HINT})",
                        source=str(p))
    if record is not None:
        chosen = [r for r in runs if r[0] == record]
        if not chosen and runs[0][0] is None:
            raise SpecError(f"line {record}: this file is one JSON document holding one run; a line number "
                            "picks a run of a multi-run JSONL file only (leave it out)", source=str(p), field="record")
        if not chosen:
            raise SpecError(f"no run with per-request lengths on line {record} (runs on lines "
                            f"{', '.join(str(r[0]) for r in runs)})", source=str(p), field="record")
        ln, run = chosen[0]
    else:
        ln, run = runs[-1]
    where = f"line {ln}: " if ln is not None else ""
    for key in ("input_lens", "output_lens"):
        if not isinstance(run.get(key), list):
            raise SpecError(f"{where}{key}: expected a list of per-request token counts, got "
                            f"{excerpt(run.get(key))} ({DETAIL_HINT})", source=str(p))
    if not run["input_lens"] and not run["output_lens"]:
        raise SpecError(f"{where}input_lens, output_lens: empty lists: the run recorded no requests", source=str(p))
    for key in ("errors", "start_times"):
        if run.get(key) is not None and not isinstance(run[key], list):
            raise SpecError(f"{where}{key}: expected a list with one entry per request, got {excerpt(run[key])}",
                            source=str(p))
    r = run.get("request_rate")
    if r is not None and not (isinstance(r, str) and r.strip().lower() in ("inf", "infinity")) and (
            isinstance(r, bool) or not isinstance(r, (int, float)) or not r > 0):  # also NaN
        raise SpecError(f"{where}request_rate: expected a rate > 0 in requests/s or inf, got {excerpt(r)}",
                        source=str(p))
    load = {k: run[k] for k in ("request_rate", "burstiness", "max_concurrency") if k in run}
    load["runs_in_file"] = len(runs)
    return where, run, load


def bench_rows(run: dict) -> Iterator[tuple[int, Row | BadRow]]:
    """Rows of one run, numbered from 0 (the request index). Without ``start_times`` every
    request is at t=0 (the load is the benchmark's rate, see ``recorded_rate``)."""
    ins, outs = run["input_lens"], run["output_lens"]
    errors = run.get("errors") or [""] * len(ins)
    starts = run.get("start_times")
    n = len(ins)
    for k in range(n):
        try:
            if k >= len(outs):
                raise BadRow(f"output_lens[{k}]: missing (input_lens has {n} entries, output_lens {len(outs)})")
            err = errors[k] if k < len(errors) else ""
            if err and outs[k] in (0, None):
                raise BadRow(f"output_lens[{k}]: request failed in the benchmark ({excerpt(str(err), 80)})")
            t = number(starts[k], f"start_times[{k}]") if isinstance(starts, list) and k < len(starts) else 0.0
            yield k, (t, length(ins[k], f"input_lens[{k}]"), length(outs[k], f"output_lens[{k}]"), None)
        except BadRow as e:
            yield k, e
    for k in range(n, len(outs)):
        yield k, BadRow(f"input_lens[{k}]: missing (input_lens has {n} entries, output_lens {len(outs)})")


def recorded_rate(load: dict) -> float | None:
    """The run's request rate (req/s), or None for ``inf`` (all sent at once) or unknown."""
    r = load.get("request_rate")
    try:
        r = float(r)
    except (TypeError, ValueError):
        return None
    return r if 0 < r < math.inf else None
