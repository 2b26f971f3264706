"""Engine releases ``pdsim launch --engine-version`` writes for: one flag table per version range.

A range's table is what that range's releases accept, read from each release's sources:

- SGLang 0.4.7-0.4.9 (checked against 0.4.8, the version the large-scale P/D recipes ran):
  ``python/sglang/srt/server_args.py`` at v0.4.8 has ``--enable-deepep-moe`` (a switch) and no
  ``--moe-a2a-backend``; ``--moe-dense-tp-size``, ``--enable-dp-lm-head``,
  ``--enable-two-batch-overlap``, ``--ep-num-redundant-experts``, ``--enable-eplb``,
  ``--eplb-algorithm``, ``--ep-dispatch-algorithm``, ``--eplb-rebalance-num-iterations``,
  ``--init-expert-location``, ``--disaggregation-ib-device`` are there (they are the flags of
  the SGLang team's recipe, sgl-project/sglang issue #6017, and of the LMSYS blog
  https://lmsys.org/blog/2025-05-05-large-scale-ep/; the same flags fail as "unrecognized
  arguments" on released 0.4.6, as reported in #6017, hence the range starts at 0.4.7). No
  priority scheduling flags (``--enable-priority-scheduling`` came with 0.5). Router:
  ``python -m sglang.srt.disaggregation.mini_lb --prefill URL... --decode URL...
  --prefill-bootstrap-ports PORT... --host --port`` (``mini_lb.py`` argparse at 0.4.8; it picks a
  P and a D at random).
- SGLang 0.5.0-0.5.3 (checked against 0.5.3, flags.py): ``--moe-a2a-backend deepep`` replaces
  ``--enable-deepep-moe`` (kept there as a deprecated alias: "NOTE: --enable-deepep-moe is
  deprecated. Please set `--moe-a2a-backend` to 'deepep' instead.", server_args.py; THUDM/slime
  PR #1344 documents the migration); the router is sglang-router's ``launch_router
  --pd-disaggregation``.
- vLLM 0.11.0 (flags.py, ``vllm/engine/arg_utils.py``): ``--eplb-config``, ``--enable-dbo``,
  ``--kv-cache-memory-bytes``.
- vLLM 0.10.0-0.10.2 (checked against 0.10.1 ``arg_utils.py``): redundant experts are
  ``--num-redundant-experts N`` (0.11.0 deprecates it for ``--eplb-config``); ``--enable-dbo``
  and ``--kv-cache-memory-bytes`` are not written for this range (not in 0.10.1), so those knobs
  are listed as having no launch form there. The P2P NCCL connector and its proxy are as in 0.11.

Versions outside every range are refused with the ranges this module knows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import flags as F


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.4.8"`` / ``"v0.4.8.post1"`` / ``"0.5.3rc0"`` -> (major, minor, patch); ValueError else."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?(?:post|rc|dev|a|b)\w*)?$", text.strip())
    if not m:
        raise ValueError(text)
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class Release:
    """One version range of an engine and the flags its releases accept."""

    engine: str  # sglang | vllm
    lo: tuple[int, int, int]  # first release of the range
    hi: tuple[int, int, int]  # last release of the range (inclusive)
    checked: str  # the release whose sources the table was checked against
    server: dict  # flag -> (kind, choices)
    router: dict | None  # the router's flags (SGLang); None: vLLM's example proxy
    router_form: str  # "sglang_router" | "mini_lb" | "vllm_proxy"
    router_version: str
    env: tuple[str, ...]

    @property
    def label(self) -> str:
        lo, hi = ".".join(map(str, self.lo)), ".".join(map(str, self.hi))
        name = "SGLang" if self.engine == "sglang" else "vLLM"
        return f"{name} {lo}-{hi}" if lo != hi else f"{name} {lo}"

    def accepts(self, flag: str) -> bool:
        return flag in self.server

    def covers(self, v: tuple[int, ...]) -> bool:
        return self.lo <= v <= self.hi


def _without(table: dict, *names: str) -> dict:
    return {k: v for k, v in table.items() if k not in names}


_SGLANG_05 = {**F.SGLANG_SERVER, **F.SGLANG_KERNEL_FLAGS, **F.SGLANG_ATTENTION_FLAGS}
_SGLANG_04 = {**_without(F.SGLANG_SERVER, "--moe-a2a-backend", "--enable-priority-scheduling",
                         "--schedule-low-priority-values-first"),
              "--enable-deepep-moe": ("bool", None),
              "--speculative-algorithm": ("str", ("EAGLE", "EAGLE3", "NEXTN")),
              **_without(F.SGLANG_KERNEL_FLAGS, "--moe-runner-backend"), **F.SGLANG_ATTENTION_FLAGS}
MINI_LB: dict[str, tuple[str, tuple | None]] = {
    "--prefill": ("urls", None),
    "--decode": ("urls", None),
    "--prefill-bootstrap-ports": ("ints", None),
    "--host": ("str", None),
    "--port": ("int", None),
}
_VLLM_011 = {**F.VLLM_SERVE, **F.VLLM_KERNEL_FLAGS}
_VLLM_010 = {**_without(F.VLLM_SERVE, "--eplb-config", "--enable-dbo", "--kv-cache-memory-bytes"),
             "--num-redundant-experts": ("int", None), **F.VLLM_KERNEL_FLAGS}

RELEASES: tuple[Release, ...] = (
    Release("sglang", (0, 4, 7), (0, 4, 9), "0.4.8", _SGLANG_04, MINI_LB, "mini_lb", "mini_lb of SGLang 0.4.8",
            F.SGLANG_ENV),
    Release("sglang", (0, 5, 0), (0, 5, 3), "0.5.3", _SGLANG_05, F.SGLANG_ROUTER, "sglang_router",
            f"sglang-router {F.SGLANG_ROUTER_VERSION}", F.SGLANG_ENV),
    Release("vllm", (0, 10, 0), (0, 10, 2), "0.10.1", _VLLM_010, None, "vllm_proxy", "vLLM's xPyD example proxy",
            F.VLLM_ENV),
    Release("vllm", (0, 11, 0), (0, 11, 0), "0.11.0", _VLLM_011, None, "vllm_proxy", "vLLM's xPyD example proxy",
            F.VLLM_ENV),
)
DEFAULT = {"sglang": F.SGLANG_VERSION, "vllm": F.VLLM_VERSION}


def release(engine: str, version: str | None = None) -> Release:
    """The Release of ``engine`` covering ``version`` (default: the newest checked one).
    SpecError names the known ranges when none covers it."""
    from ..specs.errors import SpecError

    text = version or DEFAULT[engine]
    ranges = [r for r in RELEASES if r.engine == engine]
    known = ", ".join(r.label for r in ranges)
    try:
        v = parse_version(text)
    except ValueError:
        raise SpecError(f"{text!r} is not a version (e.g. 0.4.8); {engine} tables: {known}",
                        field="--engine-version") from None
    for r in ranges:
        if r.covers(v):
            return r
    raise SpecError(f"no flag table for {engine} {text}; pdsim launch knows {known}", field="--engine-version")
