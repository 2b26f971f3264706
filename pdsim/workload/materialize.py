"""Turn a WorkloadSpec into a RequestTable (deterministic by seed)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..specs.errors import SpecError
from ..specs.workload import ConversationSpec, TraceSpec, WorkloadSpec, check_request_count, check_span
from .bench import recorded_rate
from .generators import fixed_batch, resolve_lengths, synthetic
from .sessions import AGENT_OUTPUT, TOOL_AGENT, conversations
from .shaping import arrivals, rate_sweep, scale_sweep, scale_time, with_arrivals
from .table import RequestTable
from .traces import read_trace

# rate_sweep, scale_sweep and scale_time stay importable from here (older callers)
__all__ = ["materialize", "resolve_trace_path", "rate_sweep", "scale_sweep", "scale_time"]


def materialize(spec: WorkloadSpec, seed: int = 0, base_dir: Path | None = None) -> RequestTable:
    """The requests of ``spec``: same spec and seed, same table (bit for bit).

    ``base_dir``: where a relative trace path is looked up first (the scenario's folder).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise SpecError(f"expected an integer >= 0, got {seed!r:.40}", field="seed")
    table = _checked(_build(spec, int(seed), base_dir), spec)
    return with_priority_classes(table, spec, int(seed))


# the priority classes draw from a stream of their own (SeedSequence([seed, PRIORITY_STREAM])),
# so adding classes to a workload changes none of its lengths or arrival times
PRIORITY_STREAM = 0x5052494F  # "PRIO"


def with_priority_classes(table: RequestTable, spec: WorkloadSpec, seed: int) -> RequestTable:
    """``table`` with each request's priority class drawn from ``spec.priority_classes``
    (unchanged when the spec has none). A table that already carries priorities (a trace with
    a ``priority`` field) is an error: say one or the other."""
    classes = spec.priority_classes
    if not classes:
        return table
    if table.priority is not None:
        raise SpecError("the trace's rows carry their own priority; remove priority_classes or the trace's "
                        "priority field", field="workload.priority_classes")
    rng = np.random.default_rng(np.random.SeedSequence([seed, PRIORITY_STREAM]))
    shares = np.array([c.share for c in classes], dtype=np.float64)
    pick = rng.choice(len(classes), size=len(table), p=shares / shares.sum())
    table.priority = np.array([c.priority for c in classes], dtype=np.int64)[pick]
    return table


def _build(spec: WorkloadSpec, seed: int, base_dir: Path | None) -> RequestTable:
    rng = np.random.default_rng(seed)
    if spec.kind == "fixed_batch":
        return fixed_batch(spec, rng)
    if spec.kind == "synthetic":
        return synthetic(spec, rng)
    if spec.kind in ("multi_turn", "tool_agent"):
        agent = spec.kind == "tool_agent"
        conv = spec.conversation or (TOOL_AGENT if agent else ConversationSpec())
        _, out_d, _ = resolve_lengths(spec)
        out = AGENT_OUTPUT if agent and spec.conversation is None else out_d
        t = conversations(conv, out, rng, spec.block_size, spec.kind)
        t.max_concurrency = spec.max_concurrency
        return t
    return _trace(spec, rng, base_dir)


def _checked(table: RequestTable, spec: WorkloadSpec) -> RequestTable:
    """The bounds every workload keeps, whatever made it: finite arrival times spread over at
    most MAX_SPAN_S, at most max_requests() requests (specs are checked up front; this catches
    what only the draw shows, e.g. a burstiness so small that the gaps overflow)."""
    check_request_count(len(table), "workload")
    a = table.arrival_s
    if len(a) and not np.isfinite(a).all():
        raise SpecError("the arrival times are not finite numbers (a burstiness, rate or think time too extreme?)",
                        field="workload")
    if len(a):
        how = {"synthetic": "the arrival process", "trace": "the trace's arrival times",
               "multi_turn": "the sessions", "tool_agent": "the sessions"}.get(spec.kind, "the workload")
        check_span(float(a[-1] - a[0]), "workload", how)
    return table


def _folder_hint(path: Path) -> str:
    """What to name instead of a folder that holds a run (a `pdsim replay --out` folder)."""
    return f" (this folder holds a run: name its {path / 'bench.json'})" if (path / "bench.json").is_file() else ""


def resolve_trace_path(tr: TraceSpec, base_dir: Path | None = None) -> Path:
    """A trace spec's file: relative paths are looked up in ``base_dir`` first, then the
    working directory; a missing file is an error at ``workload.trace.path``."""
    path = Path(tr.path).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = Path(os.path.normpath(base_dir / path))  # "specs/../traces/x" -> "traces/x" in messages
    if path.is_dir():
        raise SpecError(f"{tr.path} is a directory; expected a trace file{_folder_hint(path)}",
                        field="workload.trace.path")
    if not path.is_file():
        where = f" (looked in {base_dir} and the working directory)" if base_dir is not None and \
            not Path(tr.path).is_absolute() else ""
        raise SpecError(f"trace file not found: {tr.path}{where}", field="workload.trace.path")
    return path


def _trace(spec: WorkloadSpec, rng: np.random.Generator, base_dir: Path | None) -> RequestTable:
    tr = spec.trace
    try:
        table = read_trace(resolve_trace_path(tr, base_dir), tr.format, tr.time_scale, tr.limit, tr.start_s,
                           tr.skip_bad_rows, duration_s=tr.duration_s, block_size=tr.block_size, sort=tr.sort)
    except SpecError as err:
        if err.field in ("time_scale", "format"):  # a trace-spec field: name it as the scenario does
            raise SpecError(err.message, source=err.source, field=f"workload.trace.{err.field}") from None
        raise
    rate, burst, process = spec.rate, spec.burstiness, spec.arrival
    if rate is None and table.meta.get("format") == "bench" and not table.duration_s:
        # a benchmark result without send times: replay the load the benchmark offered
        rate = recorded_rate(table.meta)
        if rate is not None:
            b = table.meta.get("burstiness", 1.0)
            burst, process = (float(b), "gamma") if isinstance(b, (int, float)) and b > 0 else (1.0, "gamma")
    if rate is not None:
        a = arrivals(len(table), rate, burst, rng, process)
        table = with_arrivals(table, a)
        table.source += f" (lengths; arrivals {rate:g} req/s {process})"
    if spec.max_concurrency is not None:
        table.max_concurrency = spec.max_concurrency
    return table
