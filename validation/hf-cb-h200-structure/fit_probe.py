"""transformers' continuous batching on the H200: its host work from the structure probe alone.

The probe (calibration/sessions/h200-2026-11-28-structure, runs 2 and 3: gpu_hf_structure.py) ran
the engine idle at 2, 16 and 32 layers of Llama-3.1-8B's dimensions with 1, 8, 32 and 64 requests
decoding; the profile (run 4: gpu_hf_profile.py) counted its kernel launches at 2 and 6 layers.
Without CUDA graphs the host issues every kernel from Python, and in these steps it issues them
slower than the GPU runs them, so pdsim's eager step (costs/step.py)

    step = GPU work + max(graph replay, layers x kernels x issue - GPU work) + host
    host = step_overhead + seq_overhead x decodes

is, where the issue exceeds the GPU work, linear: layers x kernels x issue + step_overhead +
seq_overhead x decodes. ``kernels`` is the profile's count of launches per layer (transformers'
unfused layer: RMSNorm as pow/mean/add/rsqrt/mul, rotary as slices/neg/cat, the paged cache's
index_copy, a cuDNN attention, seven GEMMs), so the fit has three unknowns: the issue time of one
kernel, the per-step and the per-sequence host work, least squares on the median step of each
(layers, batch) point of the 8B-dimension probes. Qwen2.5-14B's probe (48 layers, other
dimensions) and every serving run are held out.

It then checks (a) that pdsim's own step price, with these constants, gives back the probe
points it was fitted to, (b) the held-out Qwen2.5-14B probe, (c) the host-bound condition (the
issue exceeds the GPU work at every point), (d) the probe's prefill steps, held out, priced with
the small kernels fused and unfused (``engine.elementwise``), and writes ``probe.yaml`` (a hardware overlay:
the H200 with this engine's host work) and ``probe.txt``.

    PYTHONPATH=. python validation/hf-cb-h200-structure/fit_probe.py
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from pdsim import api  # noqa: E402
from pdsim.validate.traced_steps import COLOCATED, prices, read_trace, step_cost_of  # noqa: E402

SESSION = REPO / "calibration/sessions/h200-2026-11-28-structure"
PROBES = [SESSION / "run2/structure.json", SESSION / "run3/structure.json"]
PROFILE = SESSION / "run4/profile.json"
SCENARIO = REPO / "workloads/scenarios/hf-cb-h200-qwen14b.yaml"
SCENARIO_8B = REPO / "workloads/scenarios/hf-cb-h200-llama8b.yaml"
BURST = REPO / "calibration/sessions/h200-2026-11-28/run1/burst.steps.json"
WARMUP_RUN2 = REPO / "calibration/sessions/h200-2026-11-28/run2/warmup.steps.json"
WARMUP_RUN5 = REPO / "calibration/sessions/h200-2026-11-28-structure/run5/warmup.steps.json"
MODELS = {"llama-3.1-8b": "llama-3.1-8b", "qwen2.5-14b": "qwen2.5-14b"}


def kernels_per_layer() -> float:
    """Kernel launches one decoder layer adds per step: the profile's two layer counts."""
    doc = json.loads(PROFILE.read_text())
    (l0, r0), (l1, r1) = sorted((int(k), v) for k, v in doc["runs"].items())
    assert r0["steps"] == r1["steps"], "both profiled runs decode the same steps"
    return round((r1["kernel_launches"] - r0["kernel_launches"]) / (l1 - l0) / r0["steps"], 1)  # as the scenario states it


def points() -> list[dict]:
    """Median pure-decode step per (shape, layers, batch) over the probe runs, with its context."""
    acc: dict[tuple, list] = {}
    for path in PROBES:
        doc = json.loads(path.read_text())
        c = doc["columns"]
        for p in doc["probes"]:
            r = np.asarray(p["rows"], float)
            b = p["batch"]
            r = r[(r[:, c.index("decodes")] == b) & (r[:, c.index("prefill_tokens")] == 0)]
            acc.setdefault((p["shape"], p["layers"], b), []).append(r)
    out = []
    for (shape, layers, b), rs in sorted(acc.items()):
        r = np.vstack(rs)
        took = r[:, 1] - r[:, 0]
        k = int(np.argsort(took)[len(took) // 2])  # the median step itself: its context goes with it
        out.append({"shape": shape, "layers": layers, "batch": b, "took_s": float(np.median(took)),
                    "context": float(r[k, 5]), "steps": len(took)})
    return out


def scenario(shape: str, layers: int, overlay: Path | None = None, elementwise: str | None = None):
    sets = [f"model={MODELS[shape]}"] + ([f"hardware={overlay}"] if overlay else []) + (
        [f"cluster.colocated.0.engine.elementwise={elementwise}"] if elementwise else [])
    sc = api.load_scenario(str(SCENARIO), sets)
    return dataclasses.replace(sc, model=dataclasses.replace(sc.model, num_layers=layers))


def price(sc, batch: int, context: float) -> float:
    return step_cost_of(sc, {}, COLOCATED).step_time(0, 0.0, 0, batch, context)


def gpu_work(sc, batch: int, context: float) -> float:
    """The step's price without host work and with launches free: the GPU's own time."""
    hw = sc.hardware_of(*COLOCATED)
    free = dataclasses.replace(hw, efficiency=dataclasses.replace(
        hw.efficiency, step_overhead_us=0.0, seq_overhead_us=0.0, ctx_overhead_ns=0.0, graph_launch_us=0.0),
        calibration={**hw.calibration, "host": {**hw.calibration.get("host", {}), "eager_us_per_kernel": 0.0}})
    from pdsim.metrics.step_physics import step_cost
    return step_cost(sc, *COLOCATED, free).step_time(0, 0.0, 0, batch, context)


def _log_rms(sc, t) -> tuple[float, float]:
    r = np.log(t.took / prices(step_cost_of(sc, {}, COLOCATED), t))
    return float(np.sqrt(np.mean(r * r))), float(np.exp(np.median(r)))


def packed_hbm_lines() -> list[str]:
    from pdsim.costs import attention_backends as ab
    share, rms = packed_hbm_fit()
    return ["", (f"the packed form's HBM share on {BURST.relative_to(REPO)}: {share:.3f} (log-RMS {rms:.3f}); "
                 f"costs/attention_backends.py SDPA_PACKED_HBM = {ab.SDPA_PACKED_HBM}")]


def packed_hbm_fit() -> tuple[float, float]:
    """SDPA_PACKED_HBM (costs/attention_backends.py) from the burst's step trace of 2026-11-28 (run1):
    the share minimising its steps' squared log error, the probe's host work in the price; (share,
    the log-RMS error there)."""
    from scipy.optimize import minimize_scalar

    from pdsim.costs import attention_backends as ab
    sc = api.load_scenario(str(SCENARIO_8B))
    t = read_trace(str(BURST))
    kept = ab.SDPA_PACKED_HBM
    try:
        def f(share: float) -> float:
            ab.SDPA_PACKED_HBM = share
            return _log_rms(sc, t)[0]
        best = minimize_scalar(f, bounds=(0.02, 1.0), method="bounded", options={"xatol": 1e-4})
    finally:
        ab.SDPA_PACKED_HBM = kept
    return float(best.x), float(best.fun)


def start_factor(probe: Path, overlay: dict, warmup: Path | None = None, scenario: Path | None = None) -> float:
    """A machine start's host speed from its own warm-up steps (recorded before its loads), as the
    factor on the probe's host work that prices them at 1 by median; by default the first
    session's second start (run2, Llama-3.1-8B)."""
    from scipy.optimize import brentq

    t = read_trace(str(warmup or WARMUP_RUN2))
    eff, host = overlay["efficiency"], overlay["calibration"]["host"]

    sc = api.load_scenario(str(scenario or SCENARIO_8B), [f"hardware={probe}"])
    hw = sc.hardware

    def ratio(f: float) -> float:
        scaled = dataclasses.replace(hw, efficiency=dataclasses.replace(
            hw.efficiency, step_overhead_us=eff["step_overhead_us"] * f, seq_overhead_us=eff["seq_overhead_us"] * f),
            calibration={**hw.calibration, "host": {**hw.calibration["host"],
                                                    "eager_us_per_kernel": host["eager_us_per_kernel"] * f}})
        from pdsim.metrics.step_physics import step_cost
        return float(np.median(t.took / prices(step_cost(sc, *COLOCATED, scaled), t))) - 1.0

    return float(brentq(ratio, 0.5, 2.0, xtol=1e-6))


STARTS = {  # overlay -> (the start's warm-up steps, the scenario they ran, what the start was)
    "run2-start.yaml": (WARMUP_RUN2, SCENARIO_8B, "the second H200 start of the first session (run2)"),
    "run5-start.yaml": (WARMUP_RUN5, SCENARIO, "the third H200 start of this session (run5: the "
                                                "running-requests what-if)"),
}


def start_lines(probe: Path, overlay: dict) -> list[str]:
    return [line for name in STARTS for line in start_overlay(probe, overlay, name)]


def start_overlay(probe: Path, overlay: dict, name: str) -> list[str]:
    """``name`` (base: probe.yaml): the probe's host work at one machine start's speed
    (start_factor), for the cases that start recorded."""
    warmup, scenario_path, what = STARTS[name]
    f = start_factor(probe, overlay, warmup, scenario_path)
    eff, host = overlay["efficiency"], overlay["calibration"]["host"]
    start = {"base": "probe.yaml", "name": f"h200-transformers-cb-{name.removesuffix('.yaml')}",
             "description": f"the probe's host work at the speed of {what}, measured by that start's warm-up "
                            "steps before its loads",
             "efficiency": {"step_overhead_us": round(eff["step_overhead_us"] * f, 1),
                            "seq_overhead_us": round(eff["seq_overhead_us"] * f, 2)},
             "calibration": {"host": {"eager_us_per_kernel": round(host["eager_us_per_kernel"] * f, 3)}},
             "sources": {k: f"measured: probe.yaml's value x {f:.4f}, the factor at which the start's warm-up steps "
                            f"({warmup.relative_to(REPO)}) price at 1 by median"
                         for k in ("efficiency.step_overhead_us", "efficiency.seq_overhead_us",
                                   "calibration.host.eager_us_per_kernel")}}
    (HERE / name).write_text("# Written by validation/hf-cb-h200-structure/fit_probe.py; do not edit "
                             "by hand.\n" + yaml.safe_dump(start, sort_keys=False, width=120))
    return ["", f"{what}: its warm-up steps price at 1 with the probe's host work x {f:.3f} ({name})"]


def prefill_ratios(overlay: Path) -> dict[tuple[str, int], dict[str, float]]:
    """The probe's prefill steps of 1,000 prompt tokens or more (each probe's first steps: its
    requests' prompts, 8 to 16 of them a step), held out of every fit: per (shape, layers), the
    median step time over its price with the small kernels fused and unfused (costs/elementwise.py).
    Each model build's first probe is left out: its first step also builds the engine's buffers."""
    out: dict[tuple[str, int], dict[str, list]] = {}
    for path in PROBES:
        doc = json.loads(path.read_text())
        c = doc["columns"]
        seen: set = set()
        for p in doc["probes"]:
            key = (p["shape"], p["layers"])
            first = key not in seen
            seen.add(key)
            rows = np.asarray(p["rows"], float)
            rows = rows[rows[:, c.index("prefill_tokens")] >= 1000]
            if first or not len(rows):
                continue
            for mode in ("fused", "unfused"):
                cost = step_cost_of(scenario(p["shape"], p["layers"], overlay, mode), {})
                r = out.setdefault(key, {}).setdefault(mode, [])
                for row in rows:
                    pt, pa, ch, d, ctx = (row[c.index(n)] for n in ("prefill_tokens", "prefill_attn", "prefills",
                                                                      "decodes", "decode_context"))
                    r.append((row[1] - row[0]) / cost.step_time(int(pt), float(pa), int(ch), int(d), float(ctx)))
    return {k: {m: float(np.median(v)) for m, v in d.items()} | {"steps": len(d["fused"])} for k, d in sorted(out.items())}


def prefill_lines(overlay: Path) -> list[str]:
    lines = ["", "the probe's prefill steps (>= 1,000 prompt tokens; held out): median real time over the price",
             "shape         layers  steps   small kernels fused   unfused (engine.elementwise)"]
    for (shape, layers), r in prefill_ratios(overlay).items():
        lines.append(f"{shape:12s}  {layers:6d}  {r['steps']:5d}   {r['fused']:19.3f}   {r['unfused']:7.3f}")
    return lines


def main() -> int:
    k = kernels_per_layer()
    pts = points()
    fit = [p for p in pts if p["shape"] == "llama-3.1-8b"]
    x = np.array([[1.0, p["batch"], p["layers"] * k] for p in fit])
    y = np.array([p["took_s"] for p in fit])
    (step, seq, issue), *_ = (float(v) for v in np.linalg.lstsq(x, y, rcond=None)[0]), None
    resid = y - x @ np.array([step, seq, issue])
    se = np.sqrt(np.diag(np.linalg.inv(x.T @ x)) * (resid @ resid) / (len(y) - 3))
    overlay = {
        "base": "h200",
        "name": "h200-transformers-cb",
        "description": "H200 with transformers 5.17 continuous batching's host work (eager, paged|sdpa), "
                       "fitted to an idle structure probe (2026-11-28)",
        "efficiency": {"step_overhead_us": round(step * 1e6, 1), "seq_overhead_us": round(seq * 1e6, 2),
                       "ctx_overhead_ns": 0.0},
        "calibration": {"host": {"eager_us_per_kernel": round(issue * 1e6, 3)}},
        "sources": {
            "efficiency.step_overhead_us": "fitted: validation/hf-cb-h200-structure/fit_probe.py on the idle probe "
                                           "(calibration/sessions/h200-2026-11-28-structure run2, run3; 8B dimensions "
                                           "at 2, 16, 32 layers): the step's own host work, most of it a cuDNN "
                                           "attention plan built for each step's new shape (run4/profile.json)",
            "efficiency.seq_overhead_us": "fitted: the same probe (batch 1 to 64)",
            "efficiency.ctx_overhead_ns": "assumption: 0; the probe's contexts are short (128-161 tokens)",
            "calibration.host.eager_us_per_kernel": f"fitted: the same probe, per kernel launched, with "
                                                    f"engine.eager_kernels_per_layer {k:.1f} counted by "
                                                    "gpu_hf_profile.py (run4)",
        },
    }
    path = HERE / "probe.yaml"
    path.write_text("# Written by validation/hf-cb-h200-structure/fit_probe.py; do not edit by hand.\n"
                    + yaml.safe_dump(overlay, sort_keys=False, width=120))
    lines = [f"kernels per layer (profile, run4): {k:.1f}",
             f"fit on {len(fit)} points (8B dimensions, 2/16/32 layers x batch 1/8/32/64):",
             f"  per step       {step * 1e3:7.2f} ms  (+- {se[0] * 1e3:.2f})",
             f"  per sequence   {seq * 1e6:7.1f} us  (+- {se[1] * 1e6:.1f})",
             f"  per kernel     {issue * 1e6:7.2f} us  (+- {se[2] * 1e6:.2f}); a layer {issue * k * 1e3:.3f} ms",
             "", "point                       real ms   pdsim ms   error   GPU work ms   issue ms"]
    worst = 0.0
    for p in pts:
        sc = scenario(p["shape"], p["layers"], path)
        got = price(sc, p["batch"], p["context"])
        gpu = gpu_work(sc, p["batch"], p["context"])
        err = got / p["took_s"] - 1
        held = p["shape"] != "llama-3.1-8b"
        worst = max(worst, abs(err)) if not held else worst
        lines.append(f"{p['shape']:12s} L={p['layers']:2d} b={p['batch']:2d}  {p['took_s'] * 1e3:8.2f}  "
                     f"{got * 1e3:9.2f}  {err:+6.1%}  {gpu * 1e3:11.2f}  {p['layers'] * k * issue * 1e3:9.2f}"
                     + ("   held out" if held else ""))
    lines.append(f"\nfitted points: worst |error| {worst:.1%}")
    lines += prefill_lines(path) + packed_hbm_lines() + start_lines(path, overlay)
    (HERE / "probe.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
