"""Specs of serving features the prices model beyond the plain engine step: expert load skew,
speculative decoding (MTP / EAGLE), pipeline parallelism, weight quantisation, P/D fixed costs
and heterogeneous clusters.

Each is a frozen dataclass built strictly from YAML (``pdsim.specs._convert.build``), with
SGLang's flag names where SGLang has one. The prices that read them live in pdsim/costs
(speculative.py, pipeline.py, quant.py, pd_overheads.py, moe_load.py, transfer.py); the report
of issue 12 says which scenario field holds each and what the world passes per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._convert import check

# DeepSeek MTP acceptance, per draft position given the previous one accepted: from the accept
# lengths SGLang measured on H20 with DeepSeek-R1 (LMSYS blog 2025-09-26): steps 1 -> 1.8-1.9,
# steps 2 -> 2.4-2.7, steps 3 -> 2.9-3.3 (mid-points 1.85, 2.55, 3.1), i.e.
# a1 = 0.85, a1 a2 = 0.70, a1 a2 a3 = 0.55. The DeepSeek-V3 report (arXiv:2412.19437 s5.4.3)
# gives 85-90% for the second token.
DEEPSEEK_MTP_ACCEPT = (0.85, 0.82, 0.79)

# Expert popularity of real DeepSeek traffic (costs/moe_load.py). No per-expert counts are
# public; LMSYS's large-scale EP blog (2025-05-05) publishes three effects of them on H100
# (DeepSeek-V3, EP32 prefill 16K tokens/GPU, EP72 decode 256 sequences/GPU): EPLB speeds prefill
# up 1.49x and decode 2.54x, and SGLang with EPLB on its default (real) expert distribution is
# 1.18x slower than with uniform random routing (50,302 vs 59,337 tok/s per node), and one
# measurement of the imbalance itself (below). A batch's per-expert loads stray from the long-run
# statistics EPLB placed the experts by (``drift``), and a decode batch strays far less than a
# prefill batch: it holds one token from each of its thousands of sequences, each an independent
# draw of the traffic mix, while a prefill batch holds a few long prompts whose tokens route alike
# (LMSYS: "larger batches reduce random fluctuations in expert usage"); what stays in decode is
# EPLB's statistics ageing against the live decode mix.
# DEFAULT_DECODE_DRIFT is measured: LMSYS's "EPLB Case Study: Throughput vs Balancedness" figure
# (H100 decode, 256 sequences per GPU, 1800-token inputs, EPLB; balancedness = mean / max tokens
# per GPU of a MoE layer, SGLang's compute_utilization_rate) reads 0.78-0.91 over decode steps
# 13-88, mean of 1 / balancedness 1.1445 (steps 25-88 alone: 1.13); it is the drift with which
# the expected-maximum statistic gives 1.1445 at that shape (EP72, 32 redundant experts, the whole
# step's assignments); the figure's range 1.10-1.28 is drift 0.06-0.20.
# DEFAULT_SKEW and DEFAULT_DRIFT (the prefill batch's) are then one least-squares fit (in log,
# Nelder-Mead) of the calibrated step model to the three EPLB figures, repeated with the decode
# drift re-derived at each skew until both stop moving (calibration/fit_expert_load.py
# reproduces all three constants; tests/mechanisms/test_expert_load.py shows the figures):
# 1.57x / 2.45x / 1.19x. Refitted 2026-11-26 when the decode drift was split off (before: one
# drift 0.28 for both, skew 0.565; 1.69 / 2.41 / 1.15 under today's TBO model, and the EP72
# decode imbalance 1.38 against the measured 1.14). ``pdsim sensitivity`` perturbs all three.
DEFAULT_SKEW = 0.531  # Zipf exponent over the 256 routed experts
DEFAULT_DRIFT = 0.365  # a prefill batch's per-expert load deviation from EPLB's statistics (relative s.d.)
DEFAULT_DECODE_DRIFT = 0.100  # the same in a decode batch (measured, see above)


@dataclass(frozen=True)
class ExpertLoadSpec:
    """Expert popularity of a workload (costs/moe_load.py): a Zipf law of exponent ``skew``
    over the routed experts (0 = uniform routing, the "simulated perfect EPLB" of LMSYS's
    profile table; None = ``DEFAULT_SKEW``, the fitted default). ``drift``: how far one batch's
    expert loads stray from the long-run statistics EPLB placed the experts by (relative
    standard deviation per expert; None = ``DEFAULT_DRIFT`` for skewed traffic, 0 for uniform
    routing) in a prefill batch, ``decode_drift`` the same in a decode batch (None =
    ``DEFAULT_DECODE_DRIFT`` for skewed traffic, 0 for uniform routing). ``eplb``: EPLB
    rebalancing of the expert placement, None = on when the engine has
    redundant experts (SGLang ``--ep-num-redundant-experts`` with ``--enable-eplb``). ``seed``
    fixes the random placement used without EPLB."""

    skew: float | None = None
    eplb: bool | None = None
    seed: int = 0
    drift: float | None = None
    decode_drift: float | None = None

    def __post_init__(self) -> None:
        check(self.skew is None or 0.0 <= self.skew <= 3.0, f"must be in [0, 3] (a Zipf exponent), got {self.skew}",
              "skew")
        check(self.drift is None or 0.0 <= self.drift <= 3.0,
              f"must be in [0, 3] (a relative standard deviation), got {self.drift}", "drift")
        check(self.decode_drift is None or 0.0 <= self.decode_drift <= 3.0,
              f"must be in [0, 3] (a relative standard deviation), got {self.decode_drift}", "decode_drift")

    @property
    def zipf(self) -> float:
        return DEFAULT_SKEW if self.skew is None else float(self.skew)

    @property
    def batch_drift(self) -> float:
        if self.drift is not None:
            return float(self.drift)
        return DEFAULT_DRIFT if self.zipf > 0 else 0.0

    @property
    def decode_batch_drift(self) -> float:
        if self.decode_drift is not None:
            return float(self.decode_drift)
        return DEFAULT_DECODE_DRIFT if self.zipf > 0 else 0.0


@dataclass(frozen=True)
class SpeculativeSpec:
    """Speculative decoding (SGLang ``--speculative-algorithm`` NEXTN/EAGLE/EAGLE3).

    Per decode step a draft proposes ``num_steps`` tokens per sequence (``num_steps - 1`` draft
    forward passes of ``draft_layers`` layers, the first token coming from the draft-extend pass
    after the previous verification, costs/speculative.py: DeepSeek's MTP module is one decoder layer that
    shares the target's embedding and LM head; EAGLE drafts name a ``draft_model``), then the
    target verifies ``num_draft_tokens`` tokens per sequence in one forward pass. A sequence
    advances by 1 + the number of drafts accepted; ``accept_rates[i]`` is the probability that
    draft position i+1 is accepted given positions 1..i were (chain drafts, ``topk`` 1; for
    trees, the accepted-path probabilities). None = DeepSeek MTP's measured rates
    (``DEEPSEEK_MTP_ACCEPT``, up to 3 steps)."""

    method: Literal["mtp", "eagle", "eagle3"] = "mtp"
    num_steps: int = 1
    topk: int = 1
    num_draft_tokens: int = 2
    accept_rates: tuple[float, ...] | None = None
    draft_model: str | None = None
    draft_layers: int = 1

    def __post_init__(self) -> None:
        check(self.num_steps >= 1, "must be >= 1", "num_steps")
        check(self.topk >= 1, "must be >= 1", "topk")
        check(self.draft_layers >= 1, "must be >= 1", "draft_layers")
        if self.topk == 1:
            check(self.num_draft_tokens == self.num_steps + 1,
                  f"a chain draft (topk 1) verifies num_steps + 1 = {self.num_steps + 1} tokens, got "
                  f"{self.num_draft_tokens}", "num_draft_tokens")
        else:
            check(self.num_draft_tokens >= self.num_steps + 1, f"must be >= num_steps + 1 = {self.num_steps + 1}",
                  "num_draft_tokens")
        if self.accept_rates is None:
            check(self.num_steps <= len(DEEPSEEK_MTP_ACCEPT),
                  f"the measured default covers {len(DEEPSEEK_MTP_ACCEPT)} draft steps; give accept_rates for "
                  f"{self.num_steps}", "accept_rates")
        else:
            check(len(self.accept_rates) == self.num_steps,
                  f"needs one rate per draft step ({self.num_steps}), got {len(self.accept_rates)}", "accept_rates")
            check(all(0.0 <= a <= 1.0 for a in self.accept_rates), "each rate must be in [0, 1]", "accept_rates")
        check(self.method != "mtp" or self.draft_model is None, "MTP drafts with the model's own MTP layer; "
              "draft_model is for eagle/eagle3", "draft_model")

    @property
    def rates(self) -> tuple[float, ...]:
        return self.accept_rates if self.accept_rates is not None else DEEPSEEK_MTP_ACCEPT[: self.num_steps]


@dataclass(frozen=True)
class PipelineSpec:
    """Pipeline parallelism (SGLang ``--pp-size``): the layers split into ``pp_size`` stages,
    each on its own GPUs (an instance then spans pp_size x its TP world). ``microbatches``
    batches are in flight (default pp_size, SGLang's ``--pp-max-micro-batch-size`` aside)."""

    pp_size: int = 1
    microbatches: int | None = None

    def __post_init__(self) -> None:
        check(self.pp_size >= 1, "must be >= 1", "pp_size")
        check(self.microbatches is None or self.microbatches >= 1, "must be >= 1", "microbatches")

    @property
    def in_flight(self) -> int:
        return self.microbatches or self.pp_size


QuantMethod = Literal["none", "fp8", "fp8_block", "w8a8_int8", "w8a8_fp8", "gptq", "awq"]


@dataclass(frozen=True)
class QuantSpec:
    """Weight (and activation) quantisation of a checkpoint (HF ``quantization_config``).

    - ``fp8`` / ``w8a8_fp8``: FP8 weights and activations, per-tensor/channel scales;
      ``fp8_block``: DeepSeek's 128x128 block-scaled FP8 (DeepGEMM);
    - ``w8a8_int8``: INT8 weights and activations (INT8 tensor cores);
    - ``gptq`` / ``awq``: weight-only ``bits``-bit integers (W4A16), dequantised to BF16 inside
      the GEMM (Marlin-style kernels), one FP16 scale (and for AWQ a zero point) per
      ``group_size`` weights."""

    method: QuantMethod = "none"
    bits: int = 16
    group_size: int = 128

    def __post_init__(self) -> None:
        want = {"none": (16,), "fp8": (8,), "fp8_block": (8,), "w8a8_int8": (8,), "w8a8_fp8": (8,),
                "gptq": (4, 8), "awq": (4,)}[self.method]
        check(self.bits in want, f"{self.method} stores {' or '.join(map(str, want))}-bit weights, got {self.bits}",
              "bits")
        check(self.group_size >= 1, "must be >= 1", "group_size")

    @property
    def weight_only(self) -> bool:
        return self.method in ("gptq", "awq")

    @property
    def bytes_per_param(self) -> float:
        """Stored bytes per weight, scales included (FP16 scale per group; AWQ adds a packed
        zero point of ``bits`` per group; block FP8 one FP32 scale per 128 x 128 block)."""
        if self.method == "none":
            return 2.0
        if self.method == "fp8_block":
            return 1.0 + 4.0 / (128 * 128)
        if self.method in ("fp8", "w8a8_fp8", "w8a8_int8"):
            return 1.0  # per-channel scales: negligible per weight
        zero = self.bits / 8 if self.method == "awq" else 0.0
        return self.bits / 8 + (2.0 + zero) / self.group_size

    @property
    def gemm_dtype(self) -> str:
        """Tensor-core dtype the GEMMs run in ('bf16', 'fp8' or 'int8')."""
        if self.method in ("fp8", "fp8_block", "w8a8_fp8"):
            return "fp8"
        if self.method == "w8a8_int8":
            return "int8"
        return "bf16"


@dataclass(frozen=True)
class PDOverheadSpec:
    """Fixed costs of a P/D request outside the engines (costs/pd_overheads.py), milliseconds.

    ``router_ms``: the load balancer / HTTP proxy path, once on the way in (request to P and
    D) and added to the first token's trip out (the idle-host time; with a ``host.placement`` it
    is CPU work that shares the placed cores, sim/host_cores.py ``hop``, each hop queued at the
    path's one front process, ``SerialFront``; behind vLLM's proxy, a ``proxied`` transport such as
    ``shared_storage``, where the path is both servers' each way, half of it stays in and out and
    the rest is the proxy's P -> D hop, world.py ``handoff``); ``bootstrap_ms``: D's bootstrap handshake with
    P per request (room allocation, KV page indices sent to P); ``connect_ms``: the first
    handshake of a (P, D) pair (transfer-engine connection setup, RDMA queue pairs), once per
    pair. None = the defaults in pd_overheads.py, which are assumptions with stated
    uncertainty (no public measurement isolates them)."""

    router_ms: float | None = None
    bootstrap_ms: float | None = None
    connect_ms: float | None = None

    def __post_init__(self) -> None:
        from .limits import check_range

        for f in ("router_ms", "bootstrap_ms", "connect_ms"):  # a minute: far past any real request path
            check_range(getattr(self, f), 0, 60_000.0, f, "ms or null", allow_none=True)


@dataclass(frozen=True)
class GroupHardwareSpec:
    """Heterogeneous clusters: the hardware profile one instance group runs on (P on H800, D
    on H20: ``cluster.prefill[0].hardware: h800``). None = the scenario's ``hardware``."""

    hardware: str | None = None
