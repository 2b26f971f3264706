"""How the real engine's decode steps of one shape spread, and what the client saw of them
(issue 24; validation/README.md, "Step dispersion" and "The client's timestamps").

    PYTHONPATH=. python validation/cpu-vllm/dispersion_trace.py \
        --trace validation/cpu-vllm-calibration/fifo/step-traces/fifo-steps.jsonl --span cpu-vllm-fifo-light \
        [--bench validation/cpu-vllm-fifo-light/real/bench.json] [--json OUT]

From a ``vllm_step_trace`` recording (``here.py --trace-steps``: the engine core's rows in
``TRACE.<pid>[.gz]``, each recording's ``time.monotonic()`` span in ``TRACE.loads.json[.gz]``),
pure decode steps that follow a pure decode step, each as its cycle (this step's end - the
previous step's end: what a decoding request waits between two tokens):

- ``cycle_ms_by_batch``: quantiles per decode batch size;
- ``batch1``: the batch-1 cycles' linear trend in the batch's context tokens (a + b ctx), the
  coefficient of variation of cycle / trend, and its autocorrelation at lags of 1, 10 and 50 steps
  (a slow phase of the host lasts many steps);
- with ``--bench`` (the recording's bench.json): the client's share of 0 s inter-token gaps (tokens
  read together) and its ITL quantiles.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "calibration" / "microbench"))  # vllm_step_trace


def _open(path: str):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def _load(trace: str, span_name: str) -> tuple[list[dict], list[float]]:
    """The trace's step rows (``vllm_step_trace.read_trace``: every process's file, validated) and
    the recording's span from ``TRACE.loads.json[.gz]``."""
    from vllm_step_trace import read_trace

    loads = next((p for p in (trace + ".loads.json", trace + ".loads.json.gz") if Path(p).is_file()), None)
    if loads is None:
        raise SystemExit(f"{trace}.loads.json[.gz]: not found (here.py --trace-steps writes it)")
    with _open(loads) as f:
        spans = json.load(f)
    if span_name not in spans:
        raise SystemExit(f"{loads}: no span {span_name!r}; it has {', '.join(k for k in spans if '.' not in k)}")
    try:
        steps, _calls = read_trace(trace)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(str(err)) from None
    return steps, spans[span_name]


def _q(x) -> dict:
    x = np.asarray(x, float)
    return {"n": int(len(x)), "mean": round(float(x.mean()), 3),
            **{f"p{q}": round(float(np.percentile(x, q)), 3) for q in (10, 50, 90)}}


def summary(steps: list[dict], span: list[float]) -> dict:
    by = collections.defaultdict(list)
    one = []
    for a, b in zip(steps, steps[1:]):
        if not span[0] <= b["t_schedule"] <= span[1] or a["prefill_tokens"] or b["prefill_tokens"] or not b["decodes"]:
            continue
        cycle = (b["t_end"] - a["t_end"]) * 1e3
        by[b["decodes"]].append(cycle)
        if b["decodes"] == 1:
            one.append((cycle, b["decode_ctx"]))
    out = {"cycle_ms_by_batch": {str(k): _q(v) for k, v in sorted(by.items())}}
    if len(one) >= 60:
        y, x = np.array(one).T
        a, b = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)[0]
        r = y / (a + b * x)
        out["batch1"] = {"trend_ms": round(float(a), 3), "per_ctx_token_us": round(float(b) * 1e3, 3),
                         "cv_around_trend": round(float(r.std()), 3),
                         "lag_correlation": {str(k): round(float(np.corrcoef(r[:-k], r[k:])[0, 1]), 3)
                                             for k in (1, 10, 50) if len(r) > k + 10}}
    return out


def client(bench: str) -> dict:
    with _open(bench) as f:
        d = json.load(f)
    g = np.concatenate([np.asarray(x, float) for x in d["itls"] if len(x)]) * 1e3
    return {"gaps": int(len(g)), "zero_gap_share": round(float(np.mean(g <= 0.05)), 4), "itl_ms": _q(g)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="the FILE given to here.py --trace-steps")
    ap.add_argument("--span", required=True, help="the recording's name in FILE.loads.json")
    ap.add_argument("--bench", help="the recording's bench.json[.gz]: the client's side")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    out = summary(*_load(args.trace, args.span))
    if args.bench:
        out["client"] = client(args.bench)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
