"""Step 3 of ``cpu_profile.py``: fit the kernel forms of pdsim/costs/compute.py to the rows that
``measure`` wrote and the host overheads that ``overhead`` measured, and write the CPU hardware
profile YAML with its sources (``python calibration/microbench/cpu_profile.py profile ...``).

Runs with the system python (pandas, pdsim); ``measure`` runs in the engine venv and never needs
this module's dependencies.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pdsim from this checkout

#: 0 s gaps in the overhead runs above which their spread is the client's, not the engine's
MAX_ZERO_GAP_SHARE = 0.02
#: priced / engine prefill of a long idle prompt past which the profile is flagged (prefill_check)
PREFILL_CHECK_TOLERANCE = 0.10


#: vLLM CPU attention ISAs whose kernels multiply in FP32 vectors (BF16 loaded and widened)
FP32_ATTENTION_ISAS = ("vec", "vec16")


def attn_tflops(facts: dict) -> float:
    """The attention kernels' arithmetic peak (TFLOP/s) where it is the FP32 vector rate (vLLM's
    "vec" attention ISA), else 0 (the BF16 GEMM peak). Older machine.json without the FP32 peak: 0."""
    if facts.get("attention_isa") in FP32_ATTENTION_ISAS and facts.get("peak_fp32_flops"):
        return facts["peak_fp32_flops"] / 1e12
    return 0.0


def _hw(facts: dict, name: str):
    from pdsim.specs.hardware import Efficiency, GPUSpec, HardwareProfile, NodeSpec

    gpu = GPUSpec(name=facts["cpu"], bf16_tflops=facts["peak_bf16_flops"] / 1e12, fp8_tflops=0.0,
                  hbm_gib=round(facts["mem_gib"], 2), hbm_gbps=facts["copy_bytes_per_s"] / 1e9,
                  nvlink_gbps=facts["copy_bytes_per_s"] / 1e9, pcie_gen=4, pcie_gbps=facts["copy_bytes_per_s"] / 1e9,
                  attn_tflops=attn_tflops(facts), arch="cpu")  # priced as the profile it writes (arch: cpu)
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
    cal.update(fit_attention(a, {name: hw}, row_term="heldout"))  # CPU kernels: per-row work, where it predicts
    for k, v in cal.items():
        v["data"] = f"{out}/{'gemm' if k.startswith('gemm') else 'attention'}.csv"
    if (out / "kv_residency.csv").exists():  # the decode KV read rate by working set (kv_residency.py)
        from pdsim.calibrate.kv_residency import fit_kv_residency

        r = fit_kv_residency(pd.read_csv(out / "kv_residency.csv").to_dict("records"))
        if r:
            cal["kv_residency"] = {**r, "data": f"{out}/kv_residency.csv"}
    return cal


def dispersion_step_ms(disp: dict) -> float:
    """Mean length (ms) of the steps the dispersion was measured on: recorded as ``step_ms`` since
    2026-11-27 08:00; before, tau_ms over the integrated autocorrelation time in steps it came from."""
    if disp.get("step_ms"):
        return float(disp["step_ms"])
    return float(disp["tau_ms"]) / (0.5 + sum(disp.get("lag_correlations") or []))


def priced_prefill_us(cost, tokens: int, fixed_us: float) -> float:
    """One prompt of ``tokens`` alone, priced by the fitted kernels (microseconds) plus the fitted
    per-step work ``fixed_us`` (the profile's step and per-sequence overhead)."""
    parts = cost.breakdown(tokens, tokens * tokens / 2.0, 1, 0, 0.0)
    return (sum(parts.values()) - parts["overhead"]) * 1e6 + fixed_us


def prefill_token_fit(ov: dict, cost, fixed_us: float) -> dict | None:
    """The request path and the prefill's work per prompt token outside the timed kernels, from the
    idle TTFTs of single prompts of several lengths (overhead.json ``idle_ttft_by_tokens_us``, each
    one engine step): TTFT(L) - kernels(L) - ``fixed_us`` = path + t L by least squares, with each
    length's leave-one-out error (of its TTFT). A t the rows put below 0 is not host work: t is then
    0 and the path is the shortest prompt's alone, and the result says so. None where the overhead
    runs timed fewer than three lengths (older overhead.json)."""
    import numpy as np

    by = {int(k): v for k, v in (ov.get("idle_ttft_by_tokens_us") or {}).items() if v}
    if len(by) < 3:
        return None
    L = np.array(sorted(by), dtype=float)
    ttft = np.array([by[int(n)] for n in L])
    resid = ttft - np.array([priced_prefill_us(cost, int(n), fixed_us) for n in L])

    def solve(idx):
        a = np.vstack([np.ones(len(idx)), L[idx]]).T
        return np.linalg.lstsq(a, resid[idx], rcond=None)[0]

    path_us, t_us = solve(np.arange(len(L)))
    # the slope's relative uncertainty: two standard errors of the least-squares slope over it
    dof = len(L) - 2
    ssr = float(np.sum((resid - path_us - t_us * L) ** 2))
    se = (ssr / dof / float(np.sum((L - L.mean()) ** 2))) ** 0.5 if dof > 0 else 0.0
    rel = 2 * se / t_us if t_us > 0 else None
    note = "fitted"
    if t_us < 0:
        path_us, t_us, note = resid[0], 0.0, "the rows put it below 0: 0, the path from the shortest prompt"
    elif rel is not None and rel >= 1.0:
        note = (f"not resolved: two standard errors are {rel:.1f}x the slope {t_us * 1e3:.0f} ns; 0, the path from "
                "the shortest prompt")
        print(f"warning: the idle prompts do not resolve a prefill work per prompt token ({note}): "
              "efficiency.prefill_token_ns is 0. Run remeasure again.", file=sys.stderr)
        path_us, t_us = resid[0], 0.0
    loo = []
    for i in range(len(L)):
        p_i, t_i = solve(np.delete(np.arange(len(L)), i)) if note == "fitted" else (path_us, t_us)
        loo.append(round(float((p_i + max(t_i, 0.0) * L[i] - resid[i]) / ttft[i]), 4))
    return {"request_path_us": float(path_us), "prefill_token_ns": float(t_us * 1e3), "note": note,
            "rel_uncertainty": round(float(rel), 3) if note == "fitted" and rel is not None else None,
            "tokens": [int(n) for n in L], "idle_ttft_us": [round(float(x), 1) for x in ttft],
            "kernels_and_step_us": [round(float(x), 1) for x in ttft - resid], "leave_one_out_error": loo}


def prefill_check(ov: dict, cost, path_ms: float, fixed_us: float) -> dict | None:
    """The kernels' price of a long prompt against the engine's own: the idle TTFT of
    ``idle_ttft_long_tokens`` (overhead.json) less the request path is the engine's prefill step,
    priced the way the request path was (kernels + the fitted per-step work ``fixed_us``). A
    check, not a fit: the kernel timing can run in a slow or fast phase of the host (2026-11-27:
    one remeasure's GEMM rows at M >= 256 came out 1.0-1.36x another's three hours apart, the
    engine's own prefill steps within 4%), and every TTFT pdsim prices inherits it. None when the
    overhead runs did not time a long prompt (older overhead.json)."""
    n = ov.get("idle_ttft_long_tokens")
    if not n or not ov.get("idle_ttft_long_us"):
        return None
    priced = priced_prefill_us(cost, n, fixed_us)
    engine = ov["idle_ttft_long_us"] - path_ms * 1e3
    ratio = priced / engine if engine > 0 else None
    if ratio is None:  # the idle runs disagree with each other: nothing to compare the kernels with
        print(f"warning: the {n}-token prompt's idle TTFT ({ov['idle_ttft_long_us'] / 1e3:.1f} ms) is not longer "
              f"than the request path the {ov.get('idle_ttft_prompt_tokens', 32)}-token one gave ({path_ms:.1f} ms): "
              "the prefill check has no engine prefill to compare the kernels with. Run remeasure again.",
              file=sys.stderr)
    elif abs(ratio - 1.0) > PREFILL_CHECK_TOLERANCE:
        print(f"warning: the measured kernels price a {n}-token prefill {ratio:.2f}x the engine's own ({priced / 1e3:.0f} "
              f"against {engine / 1e3:.0f} ms): the kernel timing ran in a slower or faster phase of the host than "
              "the engine; every TTFT priced from this profile inherits it. Run remeasure again.", file=sys.stderr)
    return {"tokens": n, "engine_prefill_us": round(engine, 1), "priced_prefill_us": round(priced, 1),
            "priced_over_engine": round(ratio, 3) if ratio is not None else None}


def host_fit(rows: list[dict], cost):
    """Host overhead = measured ITL - priced compute (the fitted kernels) at each (B, context),
    fitted as a + b B + c B context by non-negative least squares (host work cannot be negative: a
    term the rows cannot support comes out 0, and the rows' fit errors say how well the rest holds).
    Returns (coefficients, design rows, sum of squared relative errors); sets each row's
    ``priced_compute_us`` and ``fit_error``."""
    import numpy as np
    from scipy.optimize import nnls

    xs, ys = [], []
    for r in rows:
        b, ctx = r["batch"], r["mean_context"]
        parts = cost.breakdown(0, 0.0, 0, b, float(b * ctx))
        compute_us = (sum(parts.values()) - parts["overhead"]) * 1e6
        xs.append([1.0, b, b * ctx])
        ys.append(r["median_itl_us"] - compute_us)
        r["priced_compute_us"] = round(compute_us, 1)
    xa, ya = np.asarray(xs), np.asarray(ys)
    scale = np.abs(xa).max(axis=0)
    coef = nnls(xa / scale, ya)[0] / scale
    sse = 0.0
    for r, x, y in zip(rows, xs, ys):
        err = float((np.dot(coef, x) - y) / r["median_itl_us"])
        r["fit_error"] = round(err, 4)
        sse += err * err
    return coef, xs, sse


#: spreads of the cliff tried (natural-log units of the cache size: 0 a hard cliff, 1.0 ~ a factor e)
CACHE_LOG_WIDTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def served_cache(rows: list[dict], res: dict, sse_at, cal: dict, model) -> tuple[dict, str]:
    """The ``kv_residency`` block with the cache size, and the spread of its cliff, that best explain
    the served runs ``rows`` (``sse_at(cal)``: the host fit's squared error with that block). A hard
    cliff (width 0) is tried at each geometric midpoint between two neighbouring runs' working sets
    (KV of the step plus the weights, as roofline.py counts it) and below / above them all; a spread
    one (``CACHE_LOG_WIDTHS``) on a geometric grid over the same span. Ties go to the narrower
    cliff, then to the size nearest the kernel's own (kept as ``cache_bytes_kernel``)."""
    import math

    kv_tok = model.kv_bytes_per_token(model.kv_dtype)  # bytes per context token, all layers
    ws = sorted({r["batch"] * r["mean_context"] * kv_tok + model.weight_bytes for r in rows})
    kernel = float(res.get("cache_bytes_kernel", res["cache_bytes"]))
    hard = [ws[0] / 2] + [math.sqrt(a * b) for a, b in zip(ws, ws[1:])] + [max(ws[-1] * 2, kernel)]
    lo_c, hi_c = ws[0] / 2, max(ws[-1] * 2, kernel)
    grid = [lo_c * (hi_c / lo_c) ** (i / 24) for i in range(25)]
    scored = []
    for width in CACHE_LOG_WIDTHS:
        for c in (hard if width == 0.0 else grid):
            block = {**res, "cache_bytes": float(round(c)), "cache_log_width": width}
            scored.append((round(sse_at({**cal, "kv_residency": block}), 6), width, abs(math.log(c / kernel)), c))
    sse, width, _, c = min(scored)
    lo = max((w for w in ws if w <= c), default=0.0)
    hi = min((w for w in ws if w > c), default=math.inf)
    block = {**{k: v for k, v in res.items() if k not in ("cache_bytes_lo", "cache_bytes_hi")},
             "cache_bytes": float(round(c)), "cache_log_width": width, "cache_bytes_kernel": kernel,
             "cache_bytes_lo": float(round(lo)), "cache_bytes_hi": float(round(hi)) if math.isfinite(hi) else 0.0,
             "cache_from": "the served runs' host fit (overhead.json): the size and the spread of the cliff "
                           "(cache_log_width, natural-log units; 0 a hard cliff) with the least squared error; "
                           "cache_bytes_lo / _hi: the runs' working sets either side (_hi 0: above them all); "
                           "cache_bytes_kernel: the kernel's own cliff (kv_residency.csv)"}
    return block, (f"{c / 2**20:.1f} MiB, spread {width:g} (runs either side {lo / 2**20:.1f} / {hi / 2**20:.1f} MiB; "
                   f"the kernel alone {kernel / 2**20:.1f} MiB; host fit squared error {sse:.4f})")


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
    group = GroupSpec(gpus=1, engine=EngineSpec(cuda_graph_max_bs=0))

    def cost_with(c: dict):
        return CalibratedStepCost(dataclasses.replace(_hw(facts, args.name), calibration=c), model, group, "colocated")

    rows = [r for r in ov["itl_by_batch"] if r["median_itl_us"] is not None]  # None: every repeat coalesced
    res = cal.get("kv_residency")
    if res and res.get("cache_bytes"):
        # the cache the served engine's decode KV had: the kernel's cliff (kv_residency.csv) is where
        # the kernel alone loses it; serving, the engine's other processes (and the host's other
        # tenants) share the last-level cache, so the size is the one that best explains these runs
        cal["kv_residency"], chosen = served_cache(rows, res, lambda c: host_fit(rows, cost_with(c))[2], cal, model)
        print(f"kv residency: the served engine's cache {chosen}", file=sys.stderr)
    cost = cost_with(cal)
    coef, xs, _ = host_fit(rows, cost)
    step_overhead_us, seq_overhead_us, ctx_overhead_ns = float(coef[0]), float(coef[1]), float(coef[2]) * 1e3
    # the request path outside the engine: idle TTFT minus one priced prefill step of the prompt;
    # with idle prompts of several lengths, jointly with the prefill's work per prompt token
    p = ov["idle_ttft_prompt_tokens"]
    prefill_us = priced_prefill_us(cost, p, step_overhead_us + seq_overhead_us)
    tok = prefill_token_fit(ov, cost, step_overhead_us + seq_overhead_us)
    prefill_token_ns = tok["prefill_token_ns"] if tok else 0.0
    path_ms = max(0.0, (tok["request_path_us"] if tok else ov["idle_ttft_us"] - prefill_us) / 1e3)
    n_long = ov.get("idle_ttft_long_tokens") or 0
    check = prefill_check(ov, cost, path_ms, step_overhead_us + seq_overhead_us + prefill_token_ns * n_long / 1e3)
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
                       "ctx_overhead_ns": round(ctx_overhead_ns, 2),
                       **({"prefill_token_ns": round(prefill_token_ns, 1)} if tok else {})},
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
            "efficiency.layer_launch_us": "derived: a CPU launches no kernels and replays no graphs: 0 (fixed costs "
                                          "are in step_overhead_us)",
            "efficiency.graph_launch_us": "derived: no CUDA graphs on CPU: 0",
            "efficiency.nic": "derived: node.nic_gbit is the measured loopback rate, already achieved: 1.0",
            "efficiency.gemm_m_tile": "measured: CPU GEMMs (oneDNN / torch) have no tensor-core row tile; the "
                                      "fitted GEMM form runs per row: 1",
            "efficiency.step_overhead_us": (
                f"measured: a of the non-negative least-squares fit ITL - priced compute = a + b B + c B context over "
                f"dedicated "
                f"runs against {ov.get('server_version')} at {ov['endpoint']} (the engine's processes, its HTTP "
                f"server and the client sharing the cores; "
                f"{fit_lines}; {ov['date']}); never fitted to the validation runs"),
            "efficiency.seq_overhead_us": (
                "measured: b of the same fit (per-sequence host work: input preparation, sampling, output "
                "processing and streaming)"),
            "efficiency.ctx_overhead_ns": (
                "measured: c of the same fit (per context token of the decode batch, per step: what the decode step "
                "grows by with the sequences' length beyond the priced attention"
                + (", whose KV reads are priced by working set, calibration.kv_residency)" if "kv_residency" in cal
                   else ", the kernel timed with its KV in the cache)")),
            **({"efficiency.prefill_token_ns": (
                f"measured: t of idle TTFT(L) - priced kernels and step work = request path + t L over single prompts "
                f"of {', '.join(map(str, tok['tokens']))} tokens against the same server ({tok['note']}; leave-one-out "
                f"TTFT errors {', '.join(f'{e:+.1%}' for e in tok['leave_one_out_error'])}): the prefill's work per "
                "prompt token outside the timed GEMM and attention kernels; never fitted to the validation runs")}
               if tok else {}),
            **{f"efficiency.{f}": "unused: no price of a single CPU device at tp=1 reads it (no tensor cores, "
                                  "FP8, MLA, NVLink, collectives or two-batch overlap); default kept"
               for f in ("gemm", "fp8_m_tile", "attention", "mla_decode", "mla_decode_hbm", "hbm", "nvlink", "pcie",
                         "mem_latency_us", "p2p_latency_us", "allreduce_base_us", "allreduce_hop_us",
                         "deepep_normal_sm_share")},
            "calibration": f"pdsim.calibrate.fit_compute on the rows in {out} (gemm.csv, attention.csv: "
                           + ("torch SDPA, SGLang's torch-native attention)" if "attention_isa" in facts
                              and facts["attention_isa"] is None else "vLLM's CPU attention kernel)"),
            "provenance": f"{facts['cpu']}; {facts['torch']}; Python {facts['python']}; {facts['date']}; "
                          f"command: {facts['command']}",
        },
    }
    if attn_tflops(facts):  # the attention kernels multiply in FP32 vectors here (FP32_ATTENTION_ISAS)
        doc["gpu"]["attn_tflops"] = round(attn_tflops(facts), 5)
        doc["sources"]["gpu.attn_tflops"] = (
            f"measured: {facts['peak_fp32_gemm']} ({facts['torch']}, {facts['threads']} thread): vLLM's CPU attention "
            f"(isa {facts['attention_isa']}) widens BF16 KV to FP32 vectors and multiplies there (csrc/cpu "
            "KernelVecType: FP32Vec16), so its bound is the FP32 FMA rate, not the BF16 linear's "
            f"{facts['peak_bf16_flops'] / 1e9:.1f} GFLOP/s")
    # the steps' spread around their price (sim/engine/dispersion.py), where the overhead client read
    # each token when it came: with 0 s gaps the spread is the client's turns on its core, not the engine's
    disp = ov.get("dispersion") or {}
    if disp.get("cv") and (disp.get("zero_gap_share") or 0.0) <= MAX_ZERO_GAP_SHARE:
        from pdsim.sim.engine.dispersion import instant_cv

        step_ms = dispersion_step_ms(disp)
        cv = instant_cv(disp["cv_within"], disp["cv_between"], step_ms * 1e-3, disp["tau_ms"] * 1e-3)
        doc["efficiency"]["step_cv"] = round(cv, 4)
        doc["efficiency"]["step_cv_tau_ms"] = disp["tau_ms"]
        doc["sources"]["efficiency.step_cv"] = (
            f"measured: coefficient of variation of the decode steps of one shape in the same dedicated runs "
            f"(client {ov.get('client_sched', 'SCHED_OTHER')}): within a run {disp['cv_within']}, between repeats "
            f"{disp['cv_between']}, over {disp['gaps']} gaps ({disp['zero_gap_share']:.1%} of them 0 s) of "
            f"{step_ms:.1f} ms mean; the within-run spread of such steps is the phase's average over each, "
            "converted to the instantaneous spread (sim/engine/dispersion.py instant_cv); never fitted "
            "to the validation runs")
        doc["sources"]["efficiency.step_cv_tau_ms"] = (
            f"measured: integrated autocorrelation time of those steps within a run (lag correlations "
            f"{disp['lag_correlations']}) x their mean gap; phases longer than one run are in cv, not here")
    elif disp:
        print(f"step dispersion not written: {disp.get('zero_gap_share', 0):.1%} of the overhead runs' gaps are 0 s "
              f"(more than {MAX_ZERO_GAP_SHARE:.0%}: the client's turns, not the engine's steps; remeasure with "
              "--client-fifo PRIO)")
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
    # the bounds this measurement ran with, so that the command measures the same rows again
    bounds = getattr(args, "bounds", "") or ""
    machine["remeasure"] = (f"PYTHONPATH=. python calibration/microbench/cpu_profile.py remeasure --out {out} "
                            f"--name {args.name} --yaml {args.yaml}{' ' + bounds if bounds else ''} (kernels, then a "
                            "server with the validation engine's arguments and its host overheads, then this "
                            "profile; a few minutes)")
    if getattr(args, "bounds", None) is None and Path(args.yaml).exists():
        # the fit alone run again over rows measured before (``profile``, not ``remeasure``): where and
        # how they were measured stays as that profile says, not this process's machine
        before = (yaml.safe_load(Path(args.yaml).read_text()) or {}).get("machine") or {}
        machine.update({k: before[k] for k in ("cores", "remeasure") if k in before})
    doc["machine"] = machine
    uncertainty = {"uncertainty": {"efficiency.step_overhead_us": 0.25, "efficiency.seq_overhead_us": 0.25,
                                   "efficiency.ctx_overhead_ns": 0.2}}
    if tok and tok["rel_uncertainty"] is not None:  # two standard errors of the slope, at least the decode's 0.25
        uncertainty["uncertainty"]["efficiency.prefill_token_ns"] = max(0.25, tok["rel_uncertainty"])
    if "step_cv" in doc["efficiency"]:
        # two runs of the same command on one host gave cv 0.14 / 0.16 and tau 33 / 28 ms (validation/
        # cpu-vllm-calibration/fifo, fifo2); the recordings' own steps spread more (0.18-0.24:
        # docs/mechanisms/step-dispersion.md)
        uncertainty["uncertainty"].update({"efficiency.step_cv": 0.5, "efficiency.step_cv_tau_ms": 1.0})
    (out / "host_overheads.json").write_text(json.dumps(
        {"step_overhead_us": step_overhead_us, "seq_overhead_us": seq_overhead_us, "ctx_overhead_ns": ctx_overhead_ns,
         "request_path_ms": path_ms, "prefill_check": check, "prefill_token_ns": prefill_token_ns,
         "prefill_token_fit": tok, "rows": rows, "idle_ttft_us": ov["idle_ttft_us"],
         "priced_idle_prefill_us": prefill_us},
        indent=2) + "\n")
    Path(args.yaml).write_text(f"# Hardware profile of this machine's CPU, written by calibration/microbench/"
                               f"cpu_profile.py ({dt.date.today().isoformat()}).\n# Units as in every profile: "
                               "*_tflops 1e12 FLOP/s, *_gbps 1e9 B/s, nic_gbit 1e9 bit/s, *_gib 2^30 B, *_us "
                               "microseconds.\n" + yaml.safe_dump(doc, sort_keys=False, width=110)
                               + calibration_yaml(cal) + yaml.safe_dump(uncertainty, sort_keys=False))
    load_hardware_ref(str(Path(args.yaml).resolve()))  # the written profile must load
    print(f"wrote {args.yaml}: step_overhead_us {step_overhead_us:.1f}, seq_overhead_us {seq_overhead_us:.1f}, "
          f"ctx_overhead_ns {ctx_overhead_ns:.1f}, "
          f"request path {path_ms:.2f} ms ({fit_lines})")
