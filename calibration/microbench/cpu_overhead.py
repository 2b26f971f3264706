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
LONG_PROMPT = 512  # the prefill check's prompt (tokens): one step at the engine's 512-token budget
MID_PROMPTS = (128, 256)  # idle prompts between the short and the long one (the per-prompt-token fit)


def _windows(rec) -> list:
    """Each request's token times (seconds) inside the stretch where all B requests decode: from
    the last first token (every prompt prefilled: no prefill chunk mixes into these steps) to the
    first finish. Empty when no request has more than 2 tokens."""
    t, off = rec.tokens.times, rec.tokens.offsets
    spans = [t[a:b] for a, b in zip(off[:-1], off[1:]) if b - a > 2]
    if not spans:
        return []
    w0, w1 = max(s[0] for s in spans), min(s[-1] for s in spans)
    return [s[(s >= w0) & (s <= w1)] for s in spans]


def shape_output(b: int, p: int, out_tokens: int, budget: int = 512) -> tuple[int, int]:
    """(output tokens per request, mean context in the timed stretch) for B requests of P prompt
    tokens: the B prompts take about B P / ``budget`` steps to prefill (the engine's step token
    budget, 512 in every validation run), and all B decode together only after the last one, so
    the output is lengthened to leave ``out_tokens``-worth of the stretch past them (32 x 2,048
    with 48 tokens left none: every repeat NaN, 2026-11-29). The stretch runs from the last
    prompt's first token to the first request's last: at its start the requests have generated 0
    (the last prefilled) to ~B P / budget (the first) tokens, mean half that, at its end ``out``
    minus that range, so the mean context over the stretch is P + out / 2 (from d3ae602 to
    2026-11-29 this said P + (B P / budget + out) / 2, 64 tokens too many at 32 x 2,048)."""
    steps = -(-b * p // budget)
    out = max(out_tokens, steps + 16)
    return out, p + out // 2


def _median_itl_us(rec) -> float:
    """One decode step of batch B, timed only inside ``_windows``: per request the mean gap over its
    tokens there (robust to the server coalescing tokens into one read), the median over the
    requests (microseconds). NaN when the stretch holds fewer than 8 tokens for half of them."""
    import numpy as np

    inside = _windows(rec)
    per = [(w[-1] - w[0]) / (len(w) - 1) for w in inside if len(w) >= 8 and w[-1] > w[0]]
    return float(np.median(per) * 1e6) if inside and 2 * len(per) >= len(inside) else float("nan")


def _window_gaps(rec):
    """The inter-token gaps (seconds) of the first request inside ``_windows``: one step per gap,
    the same steps for every request. Empty when it holds fewer than 8 tokens."""
    import numpy as np

    inside = _windows(rec)
    return np.diff(inside[0]) if inside and len(inside[0]) >= 8 else np.zeros(0)


def dispersion(runs: dict[tuple[int, int], list]) -> dict:
    """How much decode steps of one shape vary around their mean (the step-time dispersion
    pdsim's ``efficiency.step_cv`` prices): ``runs`` maps (batch, prompt) to each repeat's window
    gaps (seconds). Within a run every gap is divided by that run's mean; between runs each run's
    mean by its shape's mean over the repeats. ``cv`` = sqrt(within^2 + between^2), the
    coefficient of variation of one step around its shape's mean; ``tau_ms`` = the within-run
    integrated autocorrelation time (mean gap x (1/2 + sum of the lag-k correlations while they
    stay positive)), how long a slow or fast phase lasts; ``zero_gap_share``: gaps of 0 s (the
    client read several steps at once), which make the figures the client's, not the engine's."""
    import numpy as np

    ratios, means, between, zeros, n = [], [], [], 0, 0
    series = []
    for shape, reps in sorted(runs.items()):
        m = [float(np.mean(g)) for g in reps if len(g) >= 8]
        if len(m) >= 2:
            between.append(float(np.std(m) / np.mean(m)))
        for g in reps:
            if len(g) < 8:
                continue
            zeros += int(np.sum(g <= 5e-5))
            n += len(g)
            r = g / np.mean(g)
            ratios.append(r)
            series.append(r - 1.0)
            means.append(float(np.mean(g)))
    if not ratios:
        return {}
    within = float(np.std(np.concatenate(ratios)))
    var = float(np.mean(np.concatenate(series) ** 2))
    rho = []
    for k in range(1, 16):
        num = [float(np.sum(x[:-k] * x[k:])) for x in series if len(x) > k]
        cnt = sum(len(x) - k for x in series if len(x) > k)
        if not cnt or var <= 0:
            break
        r = sum(num) / cnt / var
        if r <= 0:
            break
        rho.append(round(r, 3))
    tau_steps = 0.5 + sum(rho)
    btw = float(np.mean(between)) if between else 0.0
    return {"cv": round(float(np.hypot(within, btw)), 4), "cv_within": round(within, 4), "cv_between": round(btw, 4),
            "tau_ms": round(tau_steps * float(np.mean(means)) * 1e3, 2), "lag_correlations": rho,
            "step_ms": round(float(np.mean(means)) * 1e3, 3),
            "gaps": n, "zero_gap_share": round(zeros / n, 4) if n else None}


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
    gaps: dict[tuple[int, int], list] = {}
    rec, seed = None, 100
    batches, prompts = getattr(args, "batches", None) or BATCHES, getattr(args, "prompts", None) or PROMPTS
    out_tokens = getattr(args, "output_tokens", None) or OUTPUT_TOKENS
    fifo = getattr(args, "client_fifo", None)  # the client's token times are the engine's (replay/priority.py)
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
                table = RequestTable(np.zeros(n), np.full(n, p), np.full(n, shape_output(b, p, out_tokens)[0]),
                                     max_concurrency=b,
                                     source="overhead")
                rec = replay(table, ReplayConfig(args.endpoint, max_concurrency=b, seed=seed, fifo=fifo),
                             name=f"overhead-b{b}")
                samples.setdefault((b, p), []).append(_median_itl_us(rec))
                gaps.setdefault((b, p), []).append(_window_gaps(rec))
    # the timed stretch sits mid-decode, past every prompt's prefill (shape_output)
    rows = [{"batch": b, "prompt_tokens": p, "requests": b, "mean_context": ctx, "output_tokens": out,
             "median_itl_us": float(np.nanmedian(v)) if not np.isnan(v).all() else None,
             "repeats_us": [round(x, 1) for x in v]}
            for (b, p), v in sorted(samples.items()) for out, ctx in [shape_output(b, p, out_tokens)]]
    for r in rows:
        print(r)
    def idle_ttft_us(tokens: int, spacing_s: float, k: int) -> float:
        """Median TTFT (us) of 5 prompts of ``tokens`` sent alone, ``spacing_s`` apart: one engine
        step each, plus the request path outside the engine."""
        t = RequestTable(np.arange(5) * spacing_s, np.full(5, tokens), np.full(5, 2), max_concurrency=1,
                         source=f"idle-ttft-{tokens}")
        r = replay(t, ReplayConfig(args.endpoint, max_concurrency=1, seed=seed + 1 + k, fifo=fifo),
                   name=f"idle-ttft-{tokens}")
        return float(np.median((r.requests["first_token_s"] - r.requests["arrival_s"]) * 1e6))

    # a short prompt (the request path), a long one alone (the engine's own prefill step, which the
    # profile's kernels must price: cpu_profile_fit.prefill_check) and prompts between them (the
    # prefill's work per prompt token outside the timed kernels: cpu_profile_fit.prefill_token_fit)
    by_tokens = {n: idle_ttft_us(n, spacing, k) for k, (n, spacing) in
                 enumerate([(32, 0.5), (LONG_PROMPT, 1.5), *((n, 1.0) for n in MID_PROMPTS)])}
    info = {"endpoint": args.endpoint, "server_version": (rec.meta if rec else {}).get("server_version"),
            "output_tokens": out_tokens, "client_cpus": sorted(os.sched_getaffinity(0)), "itl_by_batch": rows,
            "repeats": getattr(args, "repeats", REPEATS),
            "idle_ttft_us": by_tokens[32], "idle_ttft_prompt_tokens": 32,
            "idle_ttft_long_us": by_tokens[LONG_PROMPT], "idle_ttft_long_tokens": LONG_PROMPT,
            "idle_ttft_by_tokens_us": {str(n): by_tokens[n] for n in sorted(by_tokens)},
            "dispersion": dispersion(gaps), "client_sched": f"SCHED_FIFO {fifo}" if fifo else "SCHED_OTHER",
            "date": dt.date.today().isoformat()}
    (out / "overhead.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))
