"""Which tool wrote a file, from its content (never its name).

``detect(path)`` returns a format key, or None when the file is none of the real-run formats
(then the trace readers of pdsim.workload take over). Keys:

- ``sglang-bench-serving`` / ``vllm-bench-serve`` / ``pdsim-replay``: benchmark results with
  per-request arrays (bench_results.py)
- ``aiperf-profile-export``: AIPerf ``profile_export.jsonl`` records (aiperf.py)
- ``genai-bench``: a genai-bench result folder or one of its run JSON files (genai_bench.py)
- ``sglang-log-requests``: an SGLang server log with ``--log-requests`` (server_logs.py)
- ``vllm-request-log``: a vLLM server log with request logging (server_logs.py)
- ``mooncake-sessions``: Mooncake-style JSONL with ``session_id`` and ``delay`` rows
  (AIPerf ``mooncake_trace`` / Dynamo multi-turn; sessions.py)
"""
from __future__ import annotations

import json
from pathlib import Path

READ_BYTES = 1 << 16


def _head(p: Path) -> str:
    """The first 64 KiB of a file as text, decompressed by its magic bytes (workload/textio.py);
    '' for unreadable, archived or binary files."""
    from ..specs.errors import SpecError
    from ..workload.textio import open_binary

    try:
        with open_binary(p) as f:
            raw = f.read(READ_BYTES)
    except (OSError, EOFError, SpecError):
        return ""
    if b"\x00" in raw:
        return ""
    return raw.decode("utf-8", errors="replace")


def _first_object(text: str) -> dict | None:
    """The first JSON object of a JSON or JSONL text (a whole document if it parses)."""
    s = text.lstrip()
    if not s.startswith("{"):
        return None
    line = s.split("\n", 1)[0]
    for cand in (line, s):
        try:
            d = json.loads(cand)
            return d if isinstance(d, dict) else None
        except (json.JSONDecodeError, RecursionError):
            continue
    # a large single document cut at 64 KiB: look at its keys only
    return {"__truncated__": True, **{k: None for k in ("input_lens", "output_lens", "ttfts", "itls",
                                                         "individual_request_metrics") if f'"{k}"' in s}}


def genai_bench_dir(p: Path) -> bool:
    return p.is_dir() and (any(p.glob("**/experiment_metadata.json")) or any(_genai_run_file(f)
                                                                              for f in p.glob("**/*.json")))


def _genai_run_file(p: Path) -> bool:
    head = _head(p)
    return '"individual_request_metrics"' in head and '"aggregated_metrics"' in head


def detect(path: str | Path) -> str | None:
    p = Path(path)
    if p.is_dir():
        return "genai-bench" if genai_bench_dir(p) else None
    head = _head(p)
    if not head:
        return None
    obj = _first_object(head)
    if obj is not None:
        if "pdsim_meta" in head[:READ_BYTES] and ('"input_lens"' in head or '"output_lens"' in head):
            return "pdsim-replay"
        if "input_lens" in obj or "output_lens" in obj:
            from .bench_results import flavour
            jsonl = "\n{" in head.strip()
            return flavour(obj, jsonl) if "__truncated__" not in obj else (
                "vllm-bench-serve" if '"model_id"' in head or '"num_prompts"' in head else "sglang-bench-serving")
        if "metadata" in obj and "metrics" in obj:
            return "aiperf-profile-export"
        if "individual_request_metrics" in obj:
            return "genai-bench"
        if "session_id" in obj and ("input_length" in obj or "text_input" in obj):
            return "mooncake-sessions"
        return None
    if "Receive: obj=GenerateReqInput" in head or "Finish: obj=GenerateReqInput" in head or \
            ("obj=GenerateReqInput" in head and "meta_info" in head):
        return "sglang-log-requests"
    if "Received request" in head and ("prompt_token_ids" in head or "params: SamplingParams" in head):
        return "vllm-request-log"
    return None
