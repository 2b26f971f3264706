"""Family ``overlap`` of gpu_session.py (issue 23 item 2): the parts of two-batch overlap that one
GPU can measure, so the TBO price (pdsim/costs/sm_partition.py, ``sm_stretch``) rests on them.

SGLang's prefill TBO runs DeepEP's normal kernels on 24 SMs beside the compute and limits
DeepGEMM to the other SMs (``deep_gemm_num_sms = total - DeepEPConfig.num_sms``). Two things set
what that costs the compute, and both are measured here:

1. **carve-out**: a GEMM told to use all SMs but ``held_sms`` (torch's
   ``_set_sm_carveout_experimental``: cuBLAS ``cublasSetSmCountTarget`` / cuBLASLt
   ``SM_COUNT_TARGET``), alone on the GPU: BF16 ``F.linear`` and FP8 ``torch._scaled_mm`` on
   DeepSeek-V3's prefill shapes at M 1024..16384, and the grouped MoE GEMM (``torch._grouped_mm``),
   held in {0, 24}; one shape swept over held {0, 8, 16, 24, 32, 48, 66}. pdsim's price is
   ``1 / (1 - held / SMs)``; wave quantisation can make it more or less.
2. **beside**: a kernel timed alone and while a *proxy* of a communication kernel runs on 24 SMs
   on another stream (one CTA per SM, launched first, as DeepEP's kernels hold their SMs):
   ``spin`` holds the SMs with register arithmetic and no memory traffic; ``copy`` streams HBM
   (read + write) from its 24 SMs at full speed; ``copy_t<k>`` does the same with ``k`` spin
   iterations between blocks, so it moves fewer bytes a second (each row gives the proxy's HBM
   rate alone, ``proxy_gbps``). A DeepEP normal kernel moves a few hundred GB/s through HBM
   (pdsim: ``COPY_HBM_PASSES`` x its link bandwidth), between ``spin`` and ``copy``.
   Kernels: the FP8 GEMM with carve-out 24 (SGLang's setting), FlashAttention prefill (SDPA) and a
   memory-bound RMSNorm-shaped kernel, neither of which a carve-out limits. The proxy's own
   slowdown beside each kernel is the other half (``kernel = proxy_*``, ``beside`` = the kernel).

Rows go to overlap.csv. On a CPU (``--dry-run``) the proxies are plain torch ops on tiny shapes:
the rows check the harness only and say so.
"""
from __future__ import annotations

import math

from gpu_kernels import gemm_shapes

PROXY_SMS = 24  # DeepEP normal's SMs in its benchmarks and SGLang's default DeepEPConfig.num_sms
HELD_SWEEP = (0, 8, 16, 24, 32, 48, 66)
# copy_t<k>: k spin iterations (~36 ns each on an H100 SM) between copied 32 KB blocks; the first
# (run 5, 2026-11-26) measured copy_t16, copy_t64 and copy_t256 with 8 warps a CTA
COPY_BLOCK = 8192  # int32 elements per program per iteration (32 KB)

_KERNELS: dict = {}


def _triton_kernels():
    """The two proxy kernels, compiled on first use (Triton is imported only on a GPU)."""
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def spin(out_ptr, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        acc = offs.to(tl.float32) * 1e-3
        for _ in range(iters):
            acc = acc * 0.9990000128746033 + 0.0010000000474974513
        tl.store(out_ptr + pid * BLOCK + offs, acc)

    @triton.jit
    def copy(src, dst, n, reps, throttle, nprog, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs0 = tl.arange(0, BLOCK)
        acc = offs0.to(tl.float32)
        for _r in range(reps):
            for start in range(pid * BLOCK, n, nprog * BLOCK):
                offs = start + offs0
                m = offs < n
                tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)
                for _ in range(throttle):
                    acc = acc * 0.9990000128746033 + 0.0010000000474974513
        tl.store(dst + offs0, tl.load(dst + offs0) + (acc > 1e30).to(tl.int32))  # keeps the spin live

    _KERNELS.update(spin=spin, copy=copy)
    return _KERNELS


# (kind, warps per CTA): thin proxies (run 5) left room on their SMs for a GEMM CTA's registers only
# if the GEMM needed little; fat ones (32 warps = 1024 threads) take an SM as DeepEP's normal
# kernels do (768 threads and 192 KB of shared memory a CTA: kNumThreads, kNumTMABytesPerWarp x 24
# warps in DeepEP's csrc/kernels/intranode.cu)
PROXIES = (("spin", 32), ("copy_t64", 32), ("spin", 4), ("copy", 8), ("copy", 32))


class Proxy:
    """A communication kernel's stand-in on ``PROXY_SMS`` SMs, one CTA of ``warps`` warps on
    each: ``spin``, ``copy`` or ``copy_t<k>``; its label is ``<kind>_w<warps>``."""

    def __init__(self, s, kind: str, warps: int):
        self.s, self.kind, self.warps = s, kind, warps
        self.label = f"{kind}_w{warps}"
        torch = s.torch
        self.throttle = int(kind.split("_t")[1]) if kind.startswith("copy_t") else 0
        n = 2**14 if s.dry else 64 * 2**20  # int32 elements: 256 MB each way, beyond the 50 MB L2
        self.src = torch.zeros(n, device=s.dev, dtype=torch.int32)
        self.dst = torch.empty_like(self.src)
        self.out = torch.empty(PROXY_SMS * 1024, device=s.dev, dtype=torch.float32)
        # a unit: 1000 spin iterations, or one pass over the buffer; timed over enough units for
        # >= 2 ms, so the launch cost (~10 us) does not inflate it
        one = self._time(1)
        units = 1 if s.dry else max(1, math.ceil(2000.0 / max(one, 1.0)))
        self.unit_us = one if units == 1 else self._time(units) / units
        self.gbps = 0.0 if kind == "spin" else 2 * self.src.numel() * 4 / self.unit_us / 1e3

    def launch(self, units: int) -> None:
        s = self.s
        if s.dry:  # no Triton on a CPU: ops of the same kind, to check the harness
            for _ in range(units):
                if self.kind == "spin":
                    self.out.mul_(0.999).add_(0.001)
                else:
                    self.dst.copy_(self.src)
            return
        k = _triton_kernels()
        if self.kind == "spin":
            k["spin"][(PROXY_SMS,)](self.out, 1000 * units, BLOCK=1024, num_warps=self.warps)
        else:
            k["copy"][(PROXY_SMS,)](self.src, self.dst, self.src.numel(), units, self.throttle, PROXY_SMS,
                                    BLOCK=COPY_BLOCK, num_warps=self.warps)

    def _time(self, units: int) -> float:
        return self.s.time_us(lambda _i: self.launch(units), warmup=2)

    def units_for(self, us: float) -> int:
        """Units that run about ``us`` microseconds alone."""
        return max(1, math.ceil(us / max(self.unit_us, 1e-3)))


def _beside_us(s, first, second, second_timed: bool) -> float:
    """Median us of one launch group while the other runs on a second stream: ``first`` is
    launched on the side stream (it takes its SMs first), ``second`` on the timed stream after a
    short delay; the timed one is ``second`` if ``second_timed`` else ``first``."""
    torch = s.torch
    if s.dry:
        return s.time_us(lambda _i: (first(), second()))
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    samples = []
    for rep in range(2 + s.args.repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            if not second_timed:
                a.record(side)
            first()
            if not second_timed:
                b.record(side)
        torch.cuda._sleep(20000)  # ~10 us of one thread on the timed stream: the side kernel starts first
        if second_timed:
            a.record(main)
        second()
        if second_timed:
            b.record(main)
        main.wait_stream(side)
        torch.cuda.synchronize()
        if rep >= 2:
            samples.append(a.elapsed_time(b) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]


def _carveout(torch, held: int) -> None:
    torch._C._set_sm_carveout_experimental(held if held > 0 else None)


def overlap(s, out: dict) -> None:
    torch, dev = s.torch, s.dev
    rows = out.setdefault("overlap", [])
    sms = 8 if s.dry else torch.cuda.get_device_properties(0).multi_processor_count
    can_carve = hasattr(torch._C, "_set_sm_carveout_experimental")
    note0 = f"{sms} SMs; proxy on {PROXY_SMS} SMs (one CTA each, launched first on a side stream)"
    F = torch.nn.functional
    one = torch.ones((), device=dev, dtype=torch.float32)
    fp8 = hasattr(torch, "_scaled_mm") and (s.dry or torch.cuda.get_device_capability() >= (8, 9))
    # DeepSeek-V3 prefill GEMMs of the gemm family (gpu_kernels.gemm_shapes): expert up/gate and down,
    # MLA o_proj and q_b; the first is the one swept and set beside the proxies at every carve-out
    ds = {g: (k, n) for model, g, k, n in gemm_shapes() if model == "deepseek-v3"}
    shapes = tuple((g, *ds[g]) for g in ("expert_up_gate", "expert_down", "o_proj", "q_b_proj"))
    ms = (64, 128) if s.dry else (4096, 16384, 1024)

    def gemm_fn(dtype, m, k, n):
        if s.dry:
            k, n = min(k, 256), min(n, 256)
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        if dtype == "fp8":
            x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()
            return lambda _i=0: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return lambda _i=0: F.linear(x, w)

    # 1. carve-out
    if not can_carve:
        print("  overlap: torch has no _set_sm_carveout_experimental; carve-out rows skipped", flush=True)
    sweeps = [(dt, m, sh, (0, PROXY_SMS)) for m in ms for sh in shapes for dt in (("fp8", "bf16") if fp8 else ("bf16",))]
    sweeps += [(dt, m, shapes[0], HELD_SWEEP) for m in ms[:2] for dt in (("fp8", "bf16") if fp8 else ("bf16",))]
    for dt, m, (g, k, n), helds in sweeps if can_carve else []:
        if not s.ok():
            continue
        fn = gemm_fn(dt, m, k, n)
        for held in helds:
            if held >= sms:
                continue
            _carveout(torch, held)
            try:
                us = s.time_us(fn, calls=5, warmup=2)
            finally:
                _carveout(torch, 0)
            rows.append({"kernel": f"gemm_{dt}", "shape": f"m={m} k={k} n={n}", "held_sms": held, "beside": "none",
                         "proxy_gbps": 0.0, "us": us,
                         "note": f"deepseek-v3 {g}; SM carve-out {held} (cuBLAS SM count target {sms - held}); "
                                 f"{'_scaled_mm per-tensor e4m3' if dt == 'fp8' else 'F.linear'}, 5 back-to-back calls"})
        s.free()
    if can_carve and hasattr(torch, "_grouped_mm"):  # DeepSeek-V3 experts at EP8, balanced (gpu_kernels.moe)
        e, h, f = (32, 128, 64) if s.dry else (32, 7168, 2048)
        w1 = torch.randn(e, h, 2 * f, device=dev, dtype=torch.bfloat16) * 0.02
        w2 = torch.randn(e, f, h, device=dev, dtype=torch.bfloat16) * 0.02
        for t in ((256,) if s.dry else (8192, 32768)):
            if not s.ok():
                continue
            offs = torch.arange(1, e + 1, device=dev, dtype=torch.int32) * (t // e)
            x = torch.randn(t, h, device=dev, dtype=torch.bfloat16)

            def grouped(_i=0):
                a, b = torch._grouped_mm(x, w1, offs=offs).chunk(2, dim=-1)
                return torch._grouped_mm(F.silu(a) * b, w2, offs=offs)
            for held in (0, PROXY_SMS):
                _carveout(torch, held)
                try:
                    us = s.time_us(grouped, calls=2, warmup=2)
                finally:
                    _carveout(torch, 0)
                rows.append({"kernel": "grouped_mm_bf16", "shape": f"assignments={t} experts={e} hidden={h} inter={f}",
                             "held_sms": held, "beside": "none", "proxy_gbps": 0.0, "us": us,
                             "note": f"deepseek-v3 experts at EP8, balanced; up+gate, SiLU x gate, down "
                                     f"(torch._grouped_mm); SM carve-out {held}"})
        del w1, w2
        s.free()

    # 2. beside a proxy
    m = 64 if s.dry else 4096
    kernels = []
    if fp8:  # every carve-out shape at two M, at the carve-outs 0, 24 (SGLang's TBO) and 48
        for mm in ((64,) if s.dry else (4096, 16384)):
            for g, k, n in shapes:
                fn8 = gemm_fn("fp8", mm, k, n)
                for held in (PROXY_SMS, 0, 2 * PROXY_SMS):
                    kernels.append(("gemm_fp8", f"m={mm} k={k} n={n}", fn8, held,
                                    f"deepseek-v3 {g}, carve-out {held}" + (" (SGLang TBO)" if held == PROXY_SMS else "")))
    fn16 = gemm_fn("bf16", m, 7168, 4096)
    for held in (PROXY_SMS, 0):
        kernels.append(("gemm_bf16", f"m={m} k=7168 n=4096", fn16, held,
                        f"deepseek-v3 expert_up_gate, F.linear, carve-out {held}"))
    heads, kvh, d, n_tok = (4, 2, 32, 64) if s.dry else (32, 8, 128, 8192)
    q = torch.randn(1, heads, n_tok, d, device=dev, dtype=torch.bfloat16)
    kk = torch.randn(1, kvh, n_tok, d, device=dev, dtype=torch.bfloat16)
    vv = torch.randn_like(kk)
    kernels.append(("sdpa_prefill", f"tokens={n_tok} heads={heads} kv_heads={kvh} d={d}",
                    lambda _i=0: F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=True), 0,
                    "causal, SDPA (flash backend on a GPU)"))
    rt, rh = (64, 128) if s.dry else (16384, 7168)
    xr = torch.randn(rt, rh, device=dev, dtype=torch.bfloat16)
    wr = torch.ones(rh, device=dev, dtype=torch.bfloat16)

    def rmsnorm(_i=0):
        x32 = xr.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(xr.dtype) * wr
    kernels.append(("rmsnorm", f"tokens={rt} hidden={rh}", rmsnorm, 0, "memory-bound, unfused torch ops (6 kernels)"))
    for kind, warps in PROXIES:
        if not s.ok():
            continue
        px = Proxy(s, kind, warps)
        for name, shape, fn, held, what in kernels:
            if not s.ok():
                continue
            if can_carve:
                _carveout(torch, held)
            try:
                alone = s.time_us(fn, calls=5, warmup=2)
                cover = px.units_for(3 * 5 * alone + 50.0)  # a proxy that covers 5 calls thrice
                k_us = _beside_us(s, lambda: px.launch(cover), lambda: [fn() for _ in range(5)], True) / 5
                p_units = px.units_for(1000.0)  # ~1 ms of the proxy alone
                p_alone = s.time_us(lambda _i: px.launch(p_units), warmup=1)
                series = max(1, math.ceil(3 * p_alone / max(alone, 1.0)))  # calls that cover the proxy thrice
                p_us = _beside_us(s, lambda: px.launch(p_units), lambda: [fn() for _ in range(series)], False)
            finally:
                if can_carve:
                    _carveout(torch, 0)
            base = {"shape": shape, "held_sms": held, "proxy_gbps": px.gbps}
            rows.append({**base, "kernel": name, "beside": "none", "us": alone, "note": f"{what}; alone"})
            rows.append({**base, "kernel": name, "beside": f"proxy_{px.label}", "us": k_us,
                         "note": f"{what}; {note0}; 5 calls timed inside one proxy launch"})
            pshape = f"{PROXY_SMS} SMs, {p_units} units"
            rows.append({**base, "kernel": f"proxy_{px.label}", "shape": pshape, "beside": "none", "us": p_alone,
                         "note": f"{note0}; the proxy alone (before {name})"})
            rows.append({**base, "kernel": f"proxy_{px.label}", "shape": pshape, "beside": name, "us": p_us,
                         "note": f"{note0}; beside {name} {shape} ({what}), {series} calls covering it"})
        del px
        s.free()
