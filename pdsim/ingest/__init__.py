"""Real runs read from the files real tools write, as ground truth and as workload.

``read_run(path)`` -> ``Ingested(format, record, table, notes)``: the run as a RunRecord of kind
``real`` (what ``pdsim validate`` compares against) and the requests it sent as a RequestTable
(what the simulator replays). ``read_workload(path)`` gives the table alone (also for
workload-only formats such as Mooncake session traces). The format is detected from the
content (detect.py) and reported; ``fmt`` forces one.
"""
from __future__ import annotations

from pathlib import Path

from ..specs.errors import SpecError
from .common import Ingested
from .detect import detect

RUN_FORMATS = ("pdsim-replay", "sglang-bench-serving", "vllm-bench-serve", "aiperf-profile-export", "genai-bench",
               "sglang-log-requests", "vllm-request-log")
WORKLOAD_FORMATS = ("mooncake-sessions",)
FORMATS = RUN_FORMATS + WORKLOAD_FORMATS


def _resolve(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if p.is_dir() and (p / "bench.json").is_file():  # a `pdsim replay --out` folder
        return p / "bench.json"
    if not p.exists():
        raise SpecError("file not found", source=str(path))
    return p


def _format(p: Path, fmt: str) -> str:
    if fmt != "auto":
        if fmt not in FORMATS:
            raise SpecError(f"unknown real-run format {fmt!r}; expected auto or one of {', '.join(FORMATS)}",
                            source=str(p), field="format")
        return fmt
    found = detect(p)
    if found is None:
        raise SpecError("not a real-run file pdsim reads (benchmark results of SGLang bench_serving, vLLM bench "
                        "serve, genai-bench, AIPerf profile_export.jsonl, SGLang/vLLM request logs, or a "
                        "`pdsim replay` output)", source=str(p))
    return found


def read_run(path: str | Path, fmt: str = "auto", record: int | None = None) -> Ingested:
    """A real run (ground truth + workload) from a file or folder; see the module docstring."""
    p = _resolve(path)
    fmt = _format(p, fmt)
    if fmt in ("pdsim-replay", "sglang-bench-serving", "vllm-bench-serve"):
        from .bench_results import read_bench_result
        out = read_bench_result(p, record)
    elif fmt == "aiperf-profile-export":
        from .aiperf import read_aiperf
        out = read_aiperf(p)
    elif fmt == "genai-bench":
        from .genai_bench import read_genai_bench
        out = read_genai_bench(p)
    elif fmt == "sglang-log-requests":
        from .server_logs import read_sglang_log
        out = read_sglang_log(p)
    elif fmt == "vllm-request-log":
        from .server_logs import read_vllm_log
        out = read_vllm_log(p)
    else:
        raise SpecError(f"{fmt} is a workload format (requests, no measured latencies); read it with read_workload",
                        source=str(p))
    out.record.meta.setdefault("format", out.format)
    return out


def read_workload(path: str | Path, fmt: str = "auto"):
    """The requests of a real run or session trace as a RequestTable."""
    p = _resolve(path)
    fmt = _format(p, fmt)
    if fmt == "mooncake-sessions":
        from .sessions import read_sessions
        return read_sessions(p)
    return read_run(p, fmt).table


def _register() -> None:
    from ..workload.traces import register_file_format
    from .workload import ingested_table

    register_file_format(FORMATS, detect, ingested_table)


_register()

__all__ = ["Ingested", "detect", "read_run", "read_workload", "FORMATS", "RUN_FORMATS", "WORKLOAD_FORMATS"]
