"""Time the real engine's mixed steps (prefill chunk + decodes) apart from the pure ones.

vLLM's V1 scheduler puts the running decodes and a waiting prompt's chunk into one step (chunked
prefill, one token budget). This harness makes such steps on purpose and times them from the
client, against the real server (``pdsim.replay``; 127.0.0.1, bounded):

- B decoders start together (``--decode-prompt`` tokens each, long outputs); once every one of
  them decodes, one prompt of C tokens (C + B <= the engine's 512-token budget: one chunk, one
  step) is sent alone, three times a run, ``--gap`` seconds apart. The step that carries its
  chunk ends when its first token comes out, and the decoders' tokens of that step come out at
  the same moment: per decoder, the gap that ends at the token nearest the injected first token
  is the **mixed step** (B decodes + a C-token chunk); the median over decoders is kept.
- The decoders' gaps in the window before each injection (no chunk in flight: every prompt was
  prefilled) are **pure decode** steps of the same batch at the same context.
- **Pure prefill**: the same C-token prompt sent alone to the idle server; its TTFT minus the
  request path outside the engine (``request_path_ms`` of ``cpu_profile.py profile``'s
  host_overheads.json, measured on the same server) is one prefill step.

Every (B, C) is repeated ``--repeats`` times, interleaved; rows keep the median and the spread
(min-max over repeats) with provenance (CPU, vLLM version, date, which core ran what).
``pdsim calibrate report --section mixed`` prices each row with the step contract the simulator
uses (``StepCost.step_time(prefill_tokens, prefill_attn, prefill_seqs, decode_batch,
decode_ctx)``) and prints measured against priced.

    PYTHONPATH=. python calibration/microbench/cpu_mixed_steps.py --endpoint http://127.0.0.1:8000 \
        --profile validation/cpu-vllm-calibration/<date>/cpu-epyc-2c.yaml --out calibration/data/cpu_mixed_steps.csv
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DECODE_CTX_FIELDS = ["hardware", "kind", "batch", "context", "chunk_tokens", "measured_ms", "spread_lo_ms",
                     "spread_hi_ms", "samples", "request_path_ms", "cpu", "engine", "date", "pinning", "source"]


def _priced(profile: str, model: str):
    """The step contract of the simulator for this profile (colocated, eager: CPU)."""
    from pdsim.costs.registry import build_step_cost
    from pdsim.specs.catalog import load_hardware_ref, load_model_ref
    from pdsim.specs.scenario import EngineSpec, GroupSpec

    hw = load_hardware_ref(profile)
    m = load_model_ref(model)
    return build_step_cost("auto", hw, m, GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0)), "colocated")


def mixed_run(endpoint: str, b: int, chunk: int, decode_prompt: int, cost, seed: int, gap_s: float):
    """One run: B decoders + three injected C-token prompts; returns (mixed gaps, pure gaps,
    mean decoder context at the injections) in seconds / tokens."""
    import numpy as np

    from pdsim.replay import ReplayConfig, replay
    from pdsim.workload.table import RequestTable

    # when to inject: after the priced prefill of every decoder's prompt (x2 + 0.5 s: a margin
    # for host work the price leaves out), then every gap_s; decoders outlast the last one by 1 s
    step_pf = cost.step_time(min(512, b * decode_prompt), decode_prompt ** 2 / 2.0, 1, 0, 0.0)
    t0 = 2.0 * step_pf * -(-b * decode_prompt // 512) + 0.5
    inject = [t0 + k * gap_s for k in range(3)]
    itl = max(cost.step_time(0, 0.0, 0, b, float(b * decode_prompt)), 1e-4)
    out = int((inject[-1] + 1.0 + 3 * 2 * step_pf) / itl) + 20
    arr = np.array([0.0] * b + inject)
    table = RequestTable(arr, np.array([decode_prompt] * b + [chunk] * 3), np.array([out] * b + [2] * 3),
                         source="mixed-steps")
    rec = replay(table, ReplayConfig(endpoint, seed=seed, timeout_s=300), name=f"mixed-b{b}-c{chunk}")
    t, off = rec.tokens.times, rec.tokens.offsets
    toks = [np.asarray(t[off[i]:off[i + 1]]) for i in range(len(off) - 1)]
    dec, inj = toks[:b], toks[b:]
    mixed, pure, ctx = [], [], []
    for j, tj in enumerate(inj):
        if len(tj) == 0:
            continue
        f = tj[0]
        per_m, per_p = [], []
        for k, s in enumerate(dec):
            if len(s) < 12:
                continue
            i = int(np.argmin(np.abs(s - f)))
            if i == 0 or abs(s[i] - f) > 0.5 * (s[i] - s[i - 1]):
                continue  # this decoder's tokens are not aligned with the injected step
            per_m.append(s[i] - s[i - 1])
            w = s[max(0, i - 12):max(0, i - 2)]
            if len(w) >= 4 and w[0] > max(x[0] for x in dec if len(x)):  # every decoder decoding
                per_p.append(float(np.median(np.diff(w))))
            ctx.append(decode_prompt + i)
        if len(per_m) * 2 >= b:
            mixed.append(float(np.median(per_m)))
        if len(per_p) * 2 >= b:
            pure.append(float(np.median(per_p)))
    return mixed, pure, (float(np.mean(ctx)) if ctx else float("nan"))


def idle_prefill(endpoint: str, chunk: int, seed: int) -> list[float]:
    """TTFT (seconds) of a C-token prompt alone on the idle server, three times."""
    import numpy as np

    from pdsim.replay import ReplayConfig, replay
    from pdsim.workload.table import RequestTable

    table = RequestTable(np.arange(3) * 1.0, np.full(3, chunk), np.full(3, 1), max_concurrency=1, source="idle")
    r = replay(table, ReplayConfig(endpoint, seed=seed, max_concurrency=1), name=f"idle-{chunk}")
    return list(r.requests["first_token_s"] - r.requests["arrival_s"])


def measure_rows(endpoint: str, profile: str, model: str, batches, chunks, decode_prompt: int, repeats: int,
                 gap_s: float, request_path_ms: float, pinning: str, engine: str) -> list[dict]:
    """Every (B, C) ``repeats`` times, interleaved, then the idle prefills; the CSV rows."""
    import numpy as np

    from pdsim.specs.machine import cpu_model

    cost = _priced(profile, model)
    mixed: dict[tuple, list] = {}
    pure: dict[tuple, list] = {}
    ctxs: dict[tuple, list] = {}
    idle: dict[int, list] = {}
    seed = 5000
    for _ in range(repeats):  # interleaved: every shape once per round
        for b in batches:
            for c in chunks:
                if b + c > 512:
                    continue
                seed += 1
                m, p, x = mixed_run(endpoint, b, c, decode_prompt, cost, seed, gap_s)
                mixed.setdefault((b, c), []).extend(m)
                pure.setdefault((b, c), []).extend(p)
                ctxs.setdefault((b, c), []).append(x)
                print(f"B={b} C={c}: mixed {np.round(np.array(m) * 1e3, 2)} ms, pure decode "
                      f"{np.round(np.array(p) * 1e3, 2)} ms", flush=True)
        for c in chunks:
            seed += 1
            idle.setdefault(c, []).extend(idle_prefill(endpoint, c, seed))
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    base = {"hardware": profile, "cpu": cpu_model(), "engine": engine, "date": date, "pinning": pinning,
            "source": "measured: calibration/microbench/cpu_mixed_steps.py"}
    rows = []

    def row(kind, b, ctx, c, v, path=""):
        v = np.asarray(v) * 1e3
        return {**base, "kind": kind, "batch": b, "context": round(ctx), "chunk_tokens": c,
                "measured_ms": round(float(np.median(v)), 3), "spread_lo_ms": round(float(v.min()), 3),
                "spread_hi_ms": round(float(v.max()), 3), "samples": len(v), "request_path_ms": path}
    for (b, c), v in sorted(mixed.items()):
        ctx = float(np.nanmean(ctxs[(b, c)]))
        if v:
            rows.append(row("mixed", b, ctx, c, v))
        if pure[(b, c)]:
            rows.append(row("decode", b, ctx, 0, pure[(b, c)]))
    for c, v in sorted(idle.items()):
        rows.append(row("prefill", 0, 0, c, np.asarray(v) - request_path_ms / 1e3, request_path_ms))
    return rows


def write_rows(rows: list[dict], out: str | Path) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=DECODE_CTX_FIELDS)
        w.writeheader()
        w.writerows(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--profile", required=True, help="hardware profile (key or path) the rows are priced with")
    ap.add_argument("--model", default="workloads/models/tiny-llama.yaml")
    ap.add_argument("--out", required=True, help="CSV of measured rows")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--chunks", type=int, nargs="+", default=[128, 448])
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between injected prompts")
    ap.add_argument("--request-path-ms", type=float, required=True,
                    help="request path outside the engine (host_overheads.json request_path_ms, same server)")
    ap.add_argument("--pinning", default="", help="which core ran what (written into every row)")
    ap.add_argument("--engine", default="vLLM 0.32.0 CPU", help="engine and version (provenance)")
    a = ap.parse_args()
    rows = measure_rows(a.endpoint, a.profile, a.model, a.batches, a.chunks, a.decode_prompt, a.repeats, a.gap,
                        a.request_path_ms, a.pinning, a.engine)
    write_rows(rows, a.out)
    print(json.dumps(rows, indent=1))
    print(f"wrote {a.out} ({len(rows)} rows); client cpus {sorted(os.sched_getaffinity(0))}")


if __name__ == "__main__":
    main()
