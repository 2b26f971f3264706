"""``pdsim replay WORKLOAD --endpoint URL``: send a workload to a real server, record every token."""
from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    r = sub.add_parser(
        "replay", help="replay a workload against a real server (OpenAI-compatible or SGLang) and record it",
        description="Send a workload's requests to a real server at their timestamps (or at a fixed "
                    "concurrency), streaming, with exact input lengths and max_tokens = output length "
                    "(ignore_eos), and record every token's time. Writes the files `pdsim run --out` "
                    "writes plus bench.json (bench_serving-compatible; `pdsim validate` reads it).")
    r.add_argument("workload", help="a trace or benchmark result file (any format `pdsim workload stats` "
                                    "reads), a workload or scenario YAML, or a bundled trace/spec name")
    r.add_argument("--endpoint", required=True, metavar="URL", help="server base URL, e.g. http://127.0.0.1:8000")
    r.add_argument("--api", choices=["completions", "chat", "generate"], default="completions",
                   help="/v1/completions (default), /v1/chat/completions, or SGLang's /generate")
    r.add_argument("--model", help="served model name (default: the server's first model)")
    r.add_argument("--out", metavar="DIR", required=True, help="write summary, tables, report.html, bench.json here")
    r.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply inter-arrival times by this (smaller = heavier load; default 1)")
    r.add_argument("--rate", type=float, help="replace arrival times by a Poisson process at this rate (req/s)")
    r.add_argument("--max-concurrency", type=int,
                   help="at most this many requests in flight; the next is sent when one finishes "
                        "(with all arrivals at 0 this is a fixed-concurrency closed loop)")
    r.add_argument("--max-inflight", type=int, default=1024,
                   help="safety bound on requests in flight without --max-concurrency (default 1024; "
                        "waiting on it is reported)")
    r.add_argument("--limit", type=int, help="replay only the first N requests")
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    r.add_argument("--prompt", choices=["auto", "token_ids", "text"], default="auto",
                   help="token ids (exact; completions/generate) or text calibrated to the server's "
                        "tokenizer (chat); default auto")
    r.add_argument("--vocab-size", type=int, help="token-id range when the server has no /tokenize")
    r.add_argument("--follow-redirects", action="store_true",
                   help="follow HTTP redirects of the endpoint (default: a redirect fails the request and names "
                        "its target; a followed 307/308 re-sends the prompt to wherever it points)")
    r.add_argument("--skip-too-long", action="store_true",
                   help="leave out requests whose prompt + output exceed the server's max_model_len (counted in "
                        "the run's meta as skipped_too_long; default: refuse the run, naming the first)")
    r.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early (lengths then differ)")
    r.add_argument("--block-size", type=int, default=16,
                   help="the engine's KV block (page) size: prompts are recorded as chained hashes of blocks this "
                        "long, as vLLM's prefix cache keys them (default 16, vLLM's)")
    r.add_argument("--fifo", type=int, metavar="PRIO",
                   help="read the streams at SCHED_FIFO priority PRIO (root): on a host where the client shares a "
                        "core with the server, each token is stamped when it arrives, not at the client's next turn")
    r.add_argument("--seed", type=int, default=0, help="seed of prompts (and of --rate arrivals)")
    r.add_argument("--name", default="replay", help="run name in reports")
    r.add_argument("--description", default="", help="one line saying what was run (report header)")
    r.add_argument("--hardware", default="", help="what the server runs on (report header)")
    r.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="table format (default parquet)")
    r.add_argument("--no-report", action="store_true", help="skip report.html")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (shown on a terminal only)")
    r.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..metrics.results import Results
    from ..replay.client import ReplayConfig
    from ..report.outputs import write_run_outputs
    from ..replay.session import replay
    from ..specs.errors import SpecError
    from .workload_stats import load_target
    from ..workload.shaping import arrivals, with_arrivals

    from ..extras import require

    require("aiohttp", "pdsim replay", field="replay")  # the streaming client: one line naming the extra
    if not args.time_scale > 0:
        raise SpecError(f"must be > 0, got {args.time_scale}", field="--time-scale")
    for flag, v in (("--max-concurrency", args.max_concurrency), ("--limit", args.limit),
                    ("--max-inflight", args.max_inflight)):
        if v is not None and v < 1:
            raise SpecError(f"must be >= 1, got {v}", field=flag)
    if not args.timeout > 0:
        raise SpecError(f"must be > 0, got {args.timeout}", field="--timeout")
    table = load_target(args.workload, seed=args.seed)
    if args.limit is not None and args.limit < len(table):
        table = table.head(args.limit)
    if args.rate is not None:
        if not args.rate > 0:
            raise SpecError(f"must be > 0, got {args.rate}", field="--rate")
        table = with_arrivals(table, arrivals(len(table), args.rate, 1.0, np.random.default_rng(args.seed), "poisson"))
        table.meta["request_rate"] = args.rate
    if args.time_scale != 1.0:
        table = with_arrivals(table, table.arrival_s * args.time_scale)
    if args.block_size < 1:
        raise SpecError(f"expected a block size >= 1 token, got {args.block_size}", field="--block-size")
    try:
        cfg = ReplayConfig(args.endpoint, args.api, args.model, args.max_concurrency, args.max_inflight,
                           args.timeout, not args.no_ignore_eos, args.prompt, args.seed, args.vocab_size,
                           progress=not args.no_progress and sys.stderr.isatty(),
                           follow_redirects=args.follow_redirects, skip_too_long=args.skip_too_long,
                           fifo=args.fifo)
    except ValueError as err:
        field = "--fifo" if str(err).startswith("fifo:") else "--prompt" if "token ids" in str(err) else "--api"
        raise SpecError(str(err), field=field) from None
    print(f"pdsim replay: {len(table)} requests from {table.source} -> {args.endpoint} ({args.api})", file=sys.stderr)
    try:
        rec = replay(table, cfg, name=args.name, description=args.description, hardware=args.hardware,
                     workload_source=str(args.workload), hash_block=args.block_size)
    except PermissionError as err:  # --fifo without the right to it (priority.py)
        raise SpecError(str(err), field="--fifo") from None
    rec.meta["time_scale"] = args.time_scale
    res = Results(rec)
    s = res.summary()
    written = write_run_outputs(res, args.out, args.format, report=not args.no_report, bench_json=True)
    from ..report.figures import summary_rows

    print(f"pdsim replay: {rec.meta.get('served_model')} at {args.endpoint} ({rec.meta.get('server_version', '?')}); "
          f"prompts: {rec.meta.get('prompt_mode')}")
    width = max(len(a) for a, _ in summary_rows(s))
    for label, value in summary_rows(s):
        if "goodput" in label:
            continue  # a real run carries no SLO
        print(f"  {label:<{width}}  {value:>12}")
    from ..ingest.bursts import burst_note, record_gaps

    bursts = burst_note(record_gaps(rec))
    if bursts:
        print(f"  warning: {bursts}")
    if rec.meta.get("skipped_too_long"):
        print(f"  skipped: {rec.meta['skipped_too_long']} requests longer than the server's max_model_len "
              f"{rec.meta.get('max_model_len')} (--skip-too-long); {len(rec)} sent")
    if s["drop_reasons"]:
        print("  failed: " + ", ".join(f"{k}={v}" for k, v in s["drop_reasons"].items()))
    if rec.meta.get("waited_for_inflight_bound"):
        print(f"  warning: {rec.meta['waited_for_inflight_bound']} requests waited for the --max-inflight bound "
              f"({args.max_inflight}); the offered load was lower than the workload's")
    red = rec.meta.get("redirects") or {}
    if red.get("requests"):
        how = "followed" if red["followed"] else "not followed"
        print(f"  warning: {red['requests']} requests were redirected ({how}) to {', '.join(red['targets'])}")
    if rec.meta.get("interrupted"):
        print("  interrupted: unsent requests are marked not_sent, in-flight ones cancelled")
    print(f"  wrote {args.out}/: {', '.join(written)}")
    return 130 if rec.meta.get("interrupted") else 0
