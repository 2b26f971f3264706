"""Step 2 of ``cpu_profile.py``: the host overheads of the real engine, measured with pdsim's replay
client against a running server (``python calibration/microbench/cpu_profile.py overhead ...``):
dedicated runs of B requests at a time, timed only while all B decode, and the idle TTFT of a
short prompt (see cpu_profile.py's docstring for what is fitted from them).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout


BATCHES = (1, 8, 32)  # vLLM --max-num-seqs 32 in the validation engine
PROMPTS = (32, 512, 1024)  # prompt tokens: the decode context grows from ~100 to ~1,100 tokens
OUTPUT_TOKENS = 192
REPEATS = 5


def _median_itl_us(rec) -> float:
    """One decode step of batch B: the B requests start together, and only the stretch where all
    of them decode is timed, from the last first token (every prompt prefilled: no prefill
    chunk mixes into these steps) to the first finish; per request the mean gap over its tokens
    in that stretch (robust to the server coalescing tokens into one read), the median over the
    requests (microseconds). NaN when the stretch holds fewer than 8 tokens for half of them."""
    import numpy as np

    t, off = rec.tokens.times, rec.tokens.offsets
    spans = [t[a:b] for a, b in zip(off[:-1], off[1:]) if b - a > 2]
    if not spans:
        return float("nan")
    w0, w1 = max(s[0] for s in spans), min(s[-1] for s in spans)
    per = []
    for s in spans:
        inside = s[(s >= w0) & (s <= w1)]
        if len(inside) >= 8 and inside[-1] > inside[0]:
            per.append((inside[-1] - inside[0]) / (len(inside) - 1))
    return float(np.median(per) * 1e6) if 2 * len(per) >= len(spans) else float("nan")


def overhead(args) -> None:
    """Host overheads from dedicated runs (see the module doc): the decode ITL at each
    concurrency B in BATCHES and prompt length in PROMPTS (B requests started together,
    OUTPUT_TOKENS each, timed while all B decode: _median_itl_us),
    REPEATS times interleaved (the median is kept), and the idle TTFT of a 32-token prompt. Run
    it pinned as the validation runs are (pin_frontend: the worker alone on its core)."""
    import numpy as np

    from pdsim.replay import ReplayConfig, replay
    from pdsim.workload.table import RequestTable

    out = Path(args.out)
    samples: dict[tuple[int, int], list[float]] = {}
    rec, seed = None, 100
    batches, prompts = getattr(args, "batches", None) or BATCHES, getattr(args, "prompts", None) or PROMPTS
    out_tokens = getattr(args, "output_tokens", None) or OUTPUT_TOKENS
    # one untimed pass over the shapes first: a fresh server's first steps of a new shape run
    # slower (measured 2026-11-26: the first of two repeats was 1.2-6.8x the second at every B)
    for b in batches:
        for p in prompts:
            seed += 1
            replay(RequestTable(np.zeros(b), np.full(b, p), np.full(b, 16), max_concurrency=b, source="warm-up"),
                   ReplayConfig(args.endpoint, max_concurrency=b, seed=seed), name="overhead-warm-up")
    for _ in range(getattr(args, "repeats", REPEATS)):
        for b in batches:
            for p in prompts:
                n, seed = b, seed + 1  # a new prompt seed: no prefix-cache hit across runs
                table = RequestTable(np.zeros(n), np.full(n, p), np.full(n, out_tokens), max_concurrency=b,
                                     source="overhead")
                rec = replay(table, ReplayConfig(args.endpoint, max_concurrency=b, seed=seed), name=f"overhead-b{b}")
                samples.setdefault((b, p), []).append(_median_itl_us(rec))
    # the timed stretch sits mid-decode: mean context = prompt + half the output
    rows = [{"batch": b, "prompt_tokens": p, "requests": b, "mean_context": p + out_tokens // 2,
             "median_itl_us": float(np.nanmedian(v)) if not np.isnan(v).all() else None,
             "repeats_us": [round(x, 1) for x in v]}
            for (b, p), v in sorted(samples.items())]
    for r in rows:
        print(r)
    idle = RequestTable(np.arange(5) * 0.5, np.full(5, 32), np.full(5, 2), max_concurrency=1, source="idle-ttft")
    r = replay(idle, ReplayConfig(args.endpoint, max_concurrency=1), name="idle-ttft")
    ttft = (r.requests["first_token_s"] - r.requests["arrival_s"]) * 1e6
    info = {"endpoint": args.endpoint, "server_version": (rec.meta if rec else {}).get("server_version"),
            "output_tokens": out_tokens, "client_cpus": sorted(os.sched_getaffinity(0)), "itl_by_batch": rows,
            "repeats": getattr(args, "repeats", REPEATS),
            "idle_ttft_us": float(np.median(ttft)), "idle_ttft_prompt_tokens": 32,
            "date": dt.date.today().isoformat()}
    (out / "overhead.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
