"""``pdsim workload stats FILE_OR_SPEC``: statistics of a trace or a workload spec, printed as a
table and optionally drawn into a standalone HTML figure.

``target`` may be a trace file (any format ``read_trace`` reads), a YAML workload spec (a file
whose top level is a workload mapping), a scenario YAML (its ``workload:`` key is used, its
``seed`` too, and relative trace paths resolve from its folder), or the name of a bundled trace
(``workloads/traces/``) or bundled workload spec (``workloads/specs/<name>.yaml``).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..specs._convert import build, read_yaml
from ..specs.errors import SpecError
from ..specs.workload import WorkloadSpec
from ..specs.yamlio import excerpt
from ..workload.materialize import materialize
from ..workload.stats import workload_stats
from ..workload.table import RequestTable
from ..workload.traces import read_trace
from .. import ingest  # noqa: F401 - real-run formats for read_trace


def resolve_target(target: str) -> Path:
    """A path as given, else a bundled trace file, else a bundled workload spec key."""
    from ..specs.catalog import traces_dir, workloads_dir
    from ..specs.yamlio import excerpt

    if len(target) > 4096 or "\x00" in target:
        raise SpecError("not a file name (too long or with a NUL character)", source=excerpt(target, 60))
    p = Path(target).expanduser()
    if p.is_dir():
        raise SpecError("a folder; expected a trace file or a workload/scenario YAML", source=target)
    if p.exists():
        return p
    for cand in (traces_dir() / target, workloads_dir() / "specs" / f"{target}.yaml",
                 workloads_dir() / "specs" / target):
        try:
            if cand.is_file():
                return cand
        except OSError:  # a name the file system refuses (too long a component)
            break
    raise SpecError("no such file (nor a bundled trace or workload spec of that name)", source=target)


def load_target(target: str, skip_bad_rows: bool = False, fmt: str = "auto", seed: int | None = None
                ) -> RequestTable:
    """The RequestTable of a trace file or a workload/scenario YAML (see the module doc).
    ``skip_bad_rows`` also applies to a spec's trace; ``fmt`` only to a trace file."""
    p = resolve_target(target)
    if p.suffix.lower() not in (".yaml", ".yml"):
        return read_trace(p, fmt, skip_bad_rows=skip_bad_rows)
    data = read_yaml(p)
    prefix = None
    if isinstance(data, dict) and "workload" in data:  # a scenario: only its workload matters here
        if seed is None and "seed" in data:
            seed = data["seed"]
            if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
                raise SpecError(f"expected an integer >= 0, got {excerpt(seed)}", source=str(p), field="seed")
        data, prefix = data["workload"], "workload"
    if data is None:
        raise SpecError("empty file: expected a workload mapping (kind: ...)", source=str(p))
    try:
        spec = build(WorkloadSpec, data, prefix or "")
    except SpecError as err:
        raise err.at(source=str(p)) from None
    if skip_bad_rows and spec.trace is not None:
        spec = dataclasses.replace(spec, trace=dataclasses.replace(spec.trace, skip_bad_rows=True))
    try:
        return materialize(spec, seed=seed or 0, base_dir=p.parent)
    except SpecError as err:
        raise (err if err.source else err.at(source=str(p))) from None


def workload_for_engine(ap, target: str, seed: int, max_model_len: int) -> RequestTable:
    """``load_target``'s requests of ``target`` for a recording harness (validation/cpu-vllm/here.py,
    validation/cpu-vllm-pd/run_case.py ``--workload``) whose server takes at most ``max_model_len``
    tokens a request: a bad file, or a request past that (the server would refuse it), ends the
    script through ``ap.error`` (exit 2, naming the file and the first such request) before any
    server starts."""
    try:
        table = load_target(target, seed=seed)
        over = (table.input_len + table.output_len > max_model_len).nonzero()[0]
        if len(over):
            i = int(over[0])
            raise SpecError(f"request {i} has {int(table.input_len[i])} prompt + {int(table.output_len[i])} output "
                            f"tokens, past the engine's --max-model-len {max_model_len} ({len(over)} such "
                            "request(s))", source=target)
    except SpecError as err:
        ap.error(f"--workload: {err}")
    return table


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:,.1f}"


def _tokens(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def format_stats(st: dict) -> str:
    """The statistics as a readable plain-text table."""
    rate = st["mean_rate"]
    lines = [f"workload: {st['source']}",
             f"  requests       {st['requests']:,} over {st['duration_s']:,.1f} s"]
    if math.isfinite(rate):
        cv = st["interarrival_cv"]
        burst = f" (gamma shape {st['burstiness']:.2f})" if cv > 0 else ""
        lines.append(f"  arrival rate   {rate:.3f} req/s mean, {st['peak_rate']:.3f} req/s peak "
                     f"({st['rate_bin_s']:g} s bins); inter-arrival CV {cv:.2f}{burst}")
    else:
        lines.append("  arrival rate   all requests at t=0")
    if st.get("max_concurrency"):
        lines.append(f"  concurrency    at most {st['max_concurrency']} in flight (closed loop)")
    cols = ("mean", "std", "min", "p50", "p90", "p95", "p99", "max")
    lines.append("  " + " " * 13 + "".join(f"{c:>10}" for c in cols))
    for key, label in (("input_len", "input (ISL)"), ("output_len", "output (OSL)")):
        d = st[key]
        lines.append(f"  {label:<13}" + "".join(f"{_n(d[c]):>10}" for c in cols))
    tin, tout = st["total_input_tokens"], st["total_output_tokens"]
    per_s = (f" ({st['input_tokens_per_s']:,.0f} / {st['output_tokens_per_s']:,.0f} tok/s)"
             if math.isfinite(st["input_tokens_per_s"]) else "")
    lines.append(f"  tokens         {_tokens(tin)} in, {_tokens(tout)} out{per_s}")
    if st.get("has_hash_ids"):
        lines.append(f"  prefix reuse   {st['prefix_reuse_ratio']:.2%} of prompt tokens (infinite cache, "
                     f"{st['block_size']}-token blocks); {st['prefix_block_reuse_ratio']:.2%} of blocks; "
                     f"{st['unique_blocks']:,} unique of {st['total_blocks']:,} blocks")
    else:
        lines.append("  prefix reuse   unknown (no hash_ids)")
    if st.get("skipped_rows"):
        lines.append(f"  skipped rows   {st['skipped_rows']:,} bad rows skipped")
    return "\n".join(lines)


def stats_command(target: str, out_html: str | None = None, skip_bad_rows: bool = False, fmt: str = "auto",
                  seed: int | None = None) -> int:
    """Print a trace's or spec's statistics and write the figure to ``out_html`` (standalone
    HTML) when given. Returns 0; bad input raises SpecError (the CLI prints it, exit 2)."""
    table = load_target(target, skip_bad_rows, fmt, seed)
    st = workload_stats(table)
    print(format_stats(st))
    if out_html:
        from ..report.workload_figures import write_workload_html

        path = write_workload_html(out_html, stats=st)
        print(f"  wrote {path}")
    return 0
