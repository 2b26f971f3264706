"""One GPU session: every microbenchmark family pdsim's H100/H200 calibration needs, in one
process, within a time budget (issue 28). Families, in order, each in its own try/except (a
failure logs one line and the next family runs), each family's rows appended to its CSV in
``--out`` as soon as it finishes, so a timeout still leaves the finished families:

1. gemm      BF16 (F.linear) and FP8 per-tensor (torch._scaled_mm) GEMMs, M 1..16384, on
             DeepSeek-V3 MLA / dense MLP / expert, Llama-3.1-8B and Llama-3.1-70B TP8 shapes -> gemm.csv
2. moe       grouped MoE GEMM (DeepSeek-V3 experts at EP8: 32 local), balanced and Zipf tokens -> moe.csv
3. attention SDPA prefill (causal, with and without a cached prefix) and decode reads -> attention.csv
4. system    HBM and host<->device copies -> memcopy.csv; kernel launch, eager vs CUDA graph of one
             decoder layer and of a 32-layer decode step -> launch.csv
5. forward   whole Llama-3.1-8B-shaped forward steps (transformers, random weights) -> forward.csv
6. graphs_forward  the same steps in the repo's torch decoder, eager and as CUDA-graph replays
             (as serving engines run decode) -> forward.csv
7. overlap   two-batch overlap's parts: GEMMs with SMs carved out, kernels beside a communication
             proxy on 24 SMs, and the proxy's own slowdown (gpu_overlap.py) -> overlap.csv
8. mixed_forward  the torch decoder's mixed steps (a prefill chunk + a decode batch in one forward)
             beside the pure decode and pure prefill at the same shapes -> forward.csv

The budget (``--budget-s``) is shared out among the families still to run; a family past its
share skips its remaining (largest) points and says how many. Every row carries source
``measured`` (``dry-run (not a measurement)`` with ``--dry-run``), hardware, software (torch,
CUDA, driver, transformers, triton, device), date, and the command line in ``note``.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 calibration/microbench/gpu_session.py --out $OUT --budget-s 300
    PYTHONPATH=. python calibration/microbench/gpu_session.py --dry-run --out /tmp/gpu_dry   # CPU, tiny shapes
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import shlex
import subprocess
import sys
import time

from common import provenance, write_rows

# (family, share of the budget): the shares are rough cost estimates on an H100
FAMILIES = (("gemm", 0.20), ("moe", 0.08), ("attention", 0.12), ("system", 0.12), ("forward", 0.28),
            ("graphs_forward", 0.20), ("overlap", 0.15), ("mixed_forward", 0.15))


class Budget:
    """Wall-clock budget shared out among the (selected) families still to run."""

    def __init__(self, seconds: float, families: tuple[str, ...] = tuple(f for f, _ in FAMILIES)):
        self.end = time.monotonic() + seconds
        self.family_end = self.end
        self.families = [(f, sh) for f, sh in FAMILIES if f in families]

    def start(self, family: str) -> None:
        names = [f for f, _ in self.families]
        rest = self.families[names.index(family):]
        share = rest[0][1] / sum(s for _, s in rest)
        self.family_end = time.monotonic() + max(0.0, self.end - time.monotonic()) * share

    def ok(self) -> bool:
        """True while the current family is within its share."""
        return time.monotonic() < self.family_end


class Session:
    """What every family needs: device, timing, budget, provenance, the CSV writer."""

    def __init__(self, args, budget: Budget):
        import torch

        self.args, self.budget, self.torch = args, budget, torch
        self.dry = args.dry_run or not torch.cuda.is_available()
        self.dev = torch.device("cpu" if self.dry else "cuda")
        self.cmd = " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv])
        prov = provenance(args)
        prov["software"] = software(torch, self.dry)
        self.prov = prov
        self.skipped = 0

    def sync(self) -> None:
        if not self.dry:
            self.torch.cuda.synchronize()

    def time_us(self, fn, calls: int = 1, repeat: int | None = None, warmup: int = 1, between=None) -> float:
        """Median over ``repeat`` samples of the time per call of ``calls`` back-to-back calls of
        ``fn(i)`` (i = call index, to rotate operands), CUDA events on a GPU, wall clock on CPU.
        ``between()`` runs outside the timed window after each sample (e.g. to reset a cache)."""
        torch = self.torch
        repeat = repeat or (1 if self.dry else self.args.repeat)
        for i in range(warmup):
            fn(i)
            if between:
                between()
        self.sync()
        samples = []
        for _ in range(max(1, repeat)):
            if self.dry:
                t0 = time.perf_counter()
                for i in range(calls):
                    fn(i)
                samples.append((time.perf_counter() - t0) * 1e6 / calls)
            else:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for i in range(calls):
                    fn(i)
                b.record()
                torch.cuda.synchronize()
                samples.append(a.elapsed_time(b) * 1e3 / calls)
            if between:
                between()
                self.sync()
        samples.sort()
        return samples[len(samples) // 2]

    def time_kernel_us(self, fn, calls: int = 1) -> tuple[float, str]:
        """(us per call, how it was timed) of a kernel: with --graph-kernels on a GPU, ``calls``
        calls of ``fn(i)`` captured in one CUDA graph and replayed, so the host's launch cost
        (10.7 us per kernel on the first H100 host) never hides a shorter kernel; else
        back-to-back launches (time_us)."""
        if self.dry or not self.args.graph_kernels:
            return self.time_us(fn, calls=calls), f"{calls} back-to-back launches"
        from gpu_system import _graph

        try:
            g = _graph(self, lambda: [fn(i) for i in range(calls)])
        except RuntimeError as ex:  # capture refused: this point is timed as launched, and says so
            self.torch.cuda.synchronize()
            why = str(ex).splitlines()[0][:80] if str(ex) else type(ex).__name__
            return self.time_us(fn, calls=calls), f"{calls} back-to-back launches (graph capture failed: {why})"
        us = self.time_us(lambda _i: g.replay(), warmup=2) / calls
        del g
        return us, f"CUDA graph of {calls} calls (host launch excluded)"

    def ok(self) -> bool:
        """Within the family's budget share; counts a skipped point when not."""
        if self.budget.ok():
            return True
        self.skipped += 1
        return False

    def write(self, name: str, rows: list[dict]) -> None:
        for r in rows:
            r["note"] = f"{r.get('note', '')}; command: {self.cmd}"
        path = write_rows(self.args, name, rows, self.prov)
        log(f"  {len(rows)} rows -> {path}")

    def free(self) -> None:
        import gc

        gc.collect()
        if not self.dry:
            self.torch.cuda.empty_cache()


def software(torch, dry: bool) -> str:
    """torch, CUDA, driver, transformers and triton versions and the device name."""
    parts = [f"torch {torch.__version__}", f"CUDA {torch.version.cuda or 'none'}"]
    if not dry:
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.split()
            parts.append(f"driver {drv[0] if drv else 'unknown'}")
        except (OSError, subprocess.SubprocessError):
            parts.append("driver unknown (no nvidia-smi)")
    for pkg in ("transformers", "triton"):
        if importlib.util.find_spec(pkg) is not None:
            try:
                from importlib.metadata import version

                parts.append(f"{pkg} {version(pkg)}")
            except Exception:  # a package without metadata: its name is enough to say it was there
                parts.append(f"{pkg} (version unknown)")
    parts.append(torch.cuda.get_device_name(0) if not dry else "cpu (dry run)")
    return ", ".join(parts)


def log(msg: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc).strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> None:
    from common import parser

    ap = parser(__doc__)
    ap.set_defaults(repeat=5)
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall-clock seconds for all families together")
    ap.add_argument("--only", help="comma-separated families to run (default: all)")
    ap.add_argument("--graph-kernels", action="store_true",
                    help="time GEMM and attention kernels as CUDA-graph replays (host launch cost excluded)")
    args = ap.parse_args()
    if not args.budget_s > 0:  # a budget of 0 (or NaN) would skip every point and write a session of no rows
        ap.error(f"--budget-s: expected seconds > 0, got {args.budget_s:g}")
    if args.repeat < 1:
        ap.error(f"--repeat: expected at least 1, got {args.repeat}")
    import gpu_forward
    import gpu_graph_forward
    import gpu_kernels
    import gpu_overlap
    import gpu_system

    run = {"gemm": gpu_kernels.gemm, "moe": gpu_kernels.moe, "attention": gpu_kernels.attention,
           "system": gpu_system.system, "forward": gpu_forward.forward,
           "graphs_forward": gpu_graph_forward.graphs_forward, "overlap": gpu_overlap.overlap,
           "mixed_forward": gpu_graph_forward.mixed_forward}
    only = set(args.only.split(",")) if args.only else set(run)
    unknown = only - set(run)
    if unknown:
        raise SystemExit(f"error: --only: unknown families {sorted(unknown)}; expected some of {list(run)}")
    budget = Budget(args.budget_s, tuple(only))
    s = Session(args, budget)
    log(f"session on {s.prov['hardware']} ({s.prov['software']}), budget {args.budget_s:.0f} s, out {args.out}")
    failed = []
    for family, _ in FAMILIES:
        if family not in only:
            continue
        budget.start(family)
        s.skipped = 0
        t0 = time.monotonic()
        log(f"{family}: start ({budget.family_end - time.monotonic():.0f} s share)")
        out: dict[str, list[dict]] = {}
        try:
            run[family](s, out)
            log(f"{family}: done in {time.monotonic() - t0:.1f} s, {s.skipped} points skipped for the budget")
        except Exception as e:  # one family's failure must not lose the others' rows (nor its own so far)
            failed.append(family)
            first = str(e).splitlines()[0][:300] if str(e) else ""
            log(f"{family}: FAILED after {time.monotonic() - t0:.1f} s: {type(e).__name__}: {first}")
        for name, rows in out.items():
            if rows:
                s.write(name, rows)
        s.free()
    log(f"session done; failed families: {failed or 'none'}")
    sys.exit(1 if failed and args.dry_run else 0)


if __name__ == "__main__":
    main()
