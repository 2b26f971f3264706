"""Streaming trace readers, with errors naming the file and line.

Formats (``fmt``):
- ``mooncake``: JSONL, ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
  (one id per 512-token block, prefix-chained). Mooncake FAST'25 traces. ``jsonl`` = mooncake.
  An optional integer ``priority`` per row gives the request's priority class (pdsim's
  extension; rows without one are class 0).
- ``azure``: CSV ``TIMESTAMP`` (``YYYY-mm-dd HH:MM:SS.fffffff``), ``ContextTokens``,
  ``GeneratedTokens``. Azure LLM inference traces 2023/2024.
- ``burstgpt``: CSV ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type`` (extra columns are ignored). BurstGPT.
- ``bench``: a SGLang ``bench_serving`` / ``vllm bench serve`` result (JSON or JSONL) with
  per-request ``input_lens`` and ``output_lens`` (see bench.py).
- ``auto``: from the file name and its first line.

Any of them may be compressed (gzip, bzip2, xz, zstd): recognised from the first bytes, not
the name (textio.py). Rows are read one line at a time into typed arrays, so a 1 GB trace never
sits in memory as text or Python objects, and no line longer than ``textio.MAX_LINE_CHARS`` is
held. Checks: lengths are integers in [1, MAX_TOKENS] (an output of 0, the way traces log
failed requests, is rejected: it is not a servable request); timestamps are finite numbers
>= 0, non-decreasing (unless ``sort``) and at most ``MAX_SPAN_S`` (10 years) after the first
row; ``hash_ids`` hold ceil(input / block_size) integers; text is UTF-8. A bad row raises
``SpecError`` "<file>: line N: <field>: expected ..., got <short excerpt>", or with
``skip_bad_rows`` is skipped and counted in ``RequestTable.skipped_rows``. At most
``max_requests()`` rows are kept (specs/workload.py; ``PDSIM_MAX_REQUESTS`` raises it), and a
``time_scale`` that stretches the replay past MAX_SPAN_S is refused.
"""
from __future__ import annotations

from array import array
from pathlib import Path
import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import MAX_SPAN_S, check_span, max_requests
from .bench import bench_rows, bench_run, looks_like_bench
from .table import RequestTable
from .textio import bad_utf8, read_errors
from .trace_rows import BadRow, azure_rows, burstgpt_rows, mooncake_rows, open_text

FORMATS = ("mooncake", "azure", "burstgpt", "bench")
_FIRST_LINE_CHARS = 1 << 20  # format detection looks at no more than this of line 1


def _first_line(path: Path) -> str:
    try:
        with open_text(path) as f:
            for _ in range(1000):  # skip leading blank lines, not a whole file of them
                line = f.readline(_FIRST_LINE_CHARS)
                if not line:
                    break
                if line.strip():
                    return line
    except SpecError:
        raise
    except read_errors():
        pass
    return ""


# File formats whose content only a higher layer understands (real benchmark results and server
# logs, read by pdsim.ingest): it registers a detector and a table reader here, so reading a
# trace never imports upward. pdsim.api imports pdsim.ingest, so every public entry has them.
_FILE_FORMATS: dict = {"detect": [], "read": {}}


def register_file_format(names, detect, read_table) -> None:
    """Let ``read_trace`` recognise (``detect(path) -> name | None``) and read
    (``read_table(path, fmt, time_scale, limit, start_s, duration_s) -> RequestTable``) more formats."""
    if detect not in _FILE_FORMATS["detect"]:
        _FILE_FORMATS["detect"].append(detect)
    for n in names:
        _FILE_FORMATS["read"][n] = read_table


def detect_format(path: str | Path) -> str:
    """The trace format of a file, from its name (``.jsonl``, ``.json``, ``.csv``, each
    optionally ``.gz``) and its first line (compressed files are read compressed whatever
    their name)."""
    p = Path(path)
    for detect_real in _FILE_FORMATS["detect"]:  # formats a higher layer reads (pdsim.ingest registers them)
        found = detect_real(p)
        if found is not None:
            return "bench" if found in ("sglang-bench-serving", "vllm-bench-serve", "pdsim-replay") else found
    name = p.name.lower().removesuffix(".gz")
    first = _first_line(p)
    problem = bad_utf8(first) or ("not a text file (it holds NUL bytes)" if "\x00" in first else None)
    if problem:
        raise SpecError(f"line 1: {problem}", source=str(path))
    if name.endswith(".json") or (first.lstrip().startswith("{") and looks_like_bench(first)):
        return "bench"
    if name.endswith(".jsonl") or first.lstrip().startswith("{"):
        return "mooncake"
    if "ContextTokens" in first or "TIMESTAMP" in first:
        return "azure"
    if "Request tokens" in first:
        return "burstgpt"
    raise SpecError("cannot tell the trace format from the name or first line; set format: mooncake, azure, "
                    "burstgpt or bench", source=str(path))


class _Columns:
    """Typed, growable columns of the kept rows (no per-row Python objects survive)."""

    def __init__(self) -> None:
        self.t, self.inp, self.out = array("d"), array("q"), array("q")
        self.hflat, self.hlen = array("q"), array("q")
        self.prio = array("q")
        self.line = array("q")  # where each row came from, for errors found after sorting
        self.any_hash = False
        self.any_prio = False

    def __len__(self) -> int:
        return len(self.t)

    def add(self, t: float, i: int, o: int, h: list[int] | None, prio: int | None = None, line: int = 0) -> None:
        if h is not None:
            self.hflat.extend(array("q", h))  # all or nothing; OverflowError beyond int64
            self.any_hash = True
        if prio is not None:
            self.any_prio = True
        self.prio.append(prio or 0)  # a row without one is class 0
        self.hlen.append(len(h) if h is not None else 0)
        self.line.append(line)
        self.t.append(t)
        self.inp.append(i)
        self.out.append(o)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray] | None]:
        t = np.frombuffer(self.t, dtype=np.float64).copy()
        i = np.frombuffer(self.inp, dtype=np.int64).copy()
        o = np.frombuffer(self.out, dtype=np.int64).copy()
        hids = None
        if self.any_hash:
            flat = np.frombuffer(self.hflat, dtype=np.int64).copy()
            hids = np.split(flat, np.cumsum(np.frombuffer(self.hlen, dtype=np.int64))[:-1])
        return t, i, o, hids

    def priorities(self) -> np.ndarray | None:
        """Each row's priority class, or None when no row gave one."""
        return np.frombuffer(self.prio, dtype=np.int64).copy() if self.any_prio else None


def read_trace(path: str | Path, fmt: str = "auto", time_scale: float = 1.0, limit: int | None = None,
               start_s: float = 0.0, skip_bad_rows: bool = False, *, duration_s: float | None = None,
               block_size: int = 512, sort: bool = False, record: int | None = None) -> RequestTable:
    """Read a trace into a RequestTable.

    Arrival times are seconds from the first kept request, inter-arrival times multiplied by
    ``time_scale`` (smaller = heavier load). ``start_s``/``duration_s`` keep a window of trace
    time (s from the trace's first request), ``limit`` the first N requests of it.
    ``sort``: sort rows by time instead of rejecting a timestamp that goes back.
    ``record``: the run (line) of a multi-run benchmark JSONL file.
    """
    p = Path(path)
    if p.is_dir() and fmt in ("auto", "genai-bench"):  # a genai-bench result folder
        fmt = detect_format(p)
    elif p.is_dir():
        raise SpecError("is a directory; expected a trace file", source=str(path))
    elif not p.is_file():
        raise SpecError("trace file not found", source=str(path))
    if not time_scale > 0:
        raise SpecError(f"must be > 0, got {time_scale}", source=str(path), field="time_scale")
    if fmt == "jsonl":
        fmt = "mooncake"
    elif fmt == "auto":
        fmt = detect_format(p)
    if fmt in _FILE_FORMATS["read"]:  # real runs and session traces (pdsim.ingest): requests in send order
        return _FILE_FORMATS["read"][fmt](p, fmt, time_scale, limit, start_s, duration_s)
    if fmt not in FORMATS:
        raise SpecError(f"unknown trace format {fmt!r}; expected one of auto, {', '.join(FORMATS)}",
                        source=str(path), field="format")
    meta: dict = {"format": fmt}
    try:
        if fmt == "bench":
            where, run, load = bench_run(p, record)
            meta.update(load)
            # send times of concurrent clients need not be in request order: always sort them
            cols, skipped = _collect(p, bench_rows(run), lambda k: where, True, skip_bad_rows, None, 0.0, None)
            sort = True
        else:
            with open_text(p) as f:
                if fmt == "mooncake":
                    rows = mooncake_rows(f, block_size)
                elif fmt == "azure":
                    rows = azure_rows(f, str(p))
                else:
                    rows = burstgpt_rows(f, str(p))
                cols, skipped = _collect(p, rows, lambda ln: f"line {ln}: ", sort, skip_bad_rows,
                                         limit, start_s, duration_s)
    except read_errors() as err:  # e.g. a truncated or corrupt .gz
        raise SpecError(f"cannot read: {_reason(err)}", source=str(p)) from None
    t, i, o, hids = cols.arrays()
    prio = cols.priorities()
    if sort and len(t):
        order = np.argsort(t, kind="stable")
        t, i, o = t[order], i[order], o[order]
        prio = prio[order] if prio is not None else None
        lines = np.frombuffer(cols.line, dtype=np.int64)[order]
        hids = [hids[k] for k in order] if hids is not None else None
        far = np.flatnonzero(t - t[0] > MAX_SPAN_S)
        if len(far):  # sorted: the rows past the bound are the last ones
            if not skip_bad_rows:
                k = int(far[0])
                where = f"line {lines[k]}: " if fmt != "bench" else f"start_times[{lines[k]}]: "
                raise SpecError(f"{where}timestamp: {_span_text(t[k] - t[0])} after the first request; "
                                f"a trace spans at most {_years(MAX_SPAN_S)}", source=str(p))
            skipped += len(far)
            t, i, o = t[: far[0]], i[: far[0]], o[: far[0]]
            hids = hids[: far[0]] if hids is not None else None
            prio = prio[: far[0]] if prio is not None else None
        keep = _window(t - t[0], start_s, duration_s)
        if limit is not None:
            keep = keep[:limit]
        t, i, o = t[keep], i[keep], o[keep]
        hids = [hids[k] for k in keep] if hids is not None else None
        prio = prio[keep] if prio is not None else None
    if not len(t):
        window = f" in the window start_s={start_s}" + (f", duration_s={duration_s}" if duration_s else "") \
            if start_s or duration_s else ""
        raise SpecError("no requests" + window + (f" ({skipped} bad rows skipped)" if skipped else ""),
                        source=str(p))
    span = (t[-1] - t[0]) * time_scale
    if span > MAX_SPAN_S:
        try:
            check_span(span, "time_scale", f"time_scale {time_scale:g} on {_span_text(t[-1] - t[0])} of trace")
        except SpecError as err:
            raise err.at(source=str(p)) from None
    table = RequestTable((t - t[0]) * time_scale, i, o, hash_ids=hids, block_size=block_size, source=str(p),
                         skipped_rows=skipped, meta=meta, priority=prio)
    cc = meta.get("max_concurrency")
    if isinstance(cc, int) and not isinstance(cc, bool) and cc >= 1:
        table.max_concurrency = cc
    return table


def _reason(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if len(text) <= 120 else text[:119] + "…"


def _years(s: float) -> str:
    return f"{s / (365 * 86400.0):.0f} years"


def _span_text(s: float) -> str:
    if s >= 365 * 86400.0:
        return f"{s / (365 * 86400.0):,.3g} years"
    if s >= 86400:
        return f"{s / 86400:,.3g} days"
    return f"{s:,.6g} s"


def _window(rel: np.ndarray, start_s: float, duration_s: float | None) -> np.ndarray:
    ok = rel >= start_s
    if duration_s is not None:
        ok &= rel < start_s + duration_s
    return np.flatnonzero(ok)


def _collect(p: Path, rows, where, sort: bool, skip: bool, limit: int | None, start_s: float,
             duration_s: float | None) -> tuple[_Columns, int]:
    """Check and keep rows; windowing, the monotone check and the span bound happen here unless
    ``sort`` (then after sorting, in read_trace). At most ``max_requests()`` rows are kept."""
    cols = _Columns()
    skipped = 0
    last_t = -1.0
    t_first = None
    end = None if duration_s is None else start_s + duration_s
    cap = max_requests()
    for pos, row in rows:
        if not isinstance(row, BadRow) and not sort:
            t = row[0]
            if t < last_t:
                row = BadRow(f"timestamp goes back in time ({t:.3f} s after {last_t:.3f} s on the trace clock); "
                             "traces must be sorted by arrival (or set sort: true)")
            elif t_first is not None and t - t_first > MAX_SPAN_S:
                row = BadRow(f"timestamp: {_span_text(t - t_first)} after the first request; a trace spans at "
                             f"most {_years(MAX_SPAN_S)}")
        if isinstance(row, BadRow):
            if skip:
                skipped += 1
                continue
            raise SpecError(f"{where(pos)}{row}", source=str(p))
        t = row[0]
        if not sort:
            last_t = t
            if t_first is None:
                t_first = t
            if t - t_first < start_s:
                continue  # before the window the scenario replays
            if end is not None and t - t_first >= end:
                break
        if len(cols) >= cap:
            raise SpecError(f"more than {cap:,} requests (the limit per workload); replay a part with limit: or "
                            "duration_s:, or set the environment variable PDSIM_MAX_REQUESTS to raise it",
                            source=str(p))
        try:
            cols.add(*row, line=pos)
        except OverflowError:
            if skip:
                skipped += 1
                continue
            raise SpecError(f"{where(pos)}hash_ids: ids must fit in signed 64-bit integers", source=str(p)) from None
        if not sort and limit is not None and len(cols) >= limit:
            break
    return cols, skipped
