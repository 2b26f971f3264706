"""Request generators that mirror the tools users run against real servers.

- ``sglang.bench_one_batch_server``: a fixed batch of ISL/OSL at t=0 (``fixed_batch``).
- ``sglang.bench_serving`` / ``vllm bench serve`` random dataset: lengths uniform in
  [L x range_ratio, L] (SGLang, ``random_ratio``) or [L(1 - r), L(1 + r)] (vLLM >= 0.9,
  ``random_range``), gamma inter-arrivals of shape ``burstiness`` at ``rate`` (1 = Poisson),
  ``--max-concurrency`` as a closed-loop cap, and vLLM's ``--random-prefix-len`` / SGLang's
  generated-shared-prefix dataset as ``shared_prefix_tokens`` x ``prefix_groups``
  (``synthetic``).
- genai-bench traffic scenarios D/N/U/P (``pdsim.specs.workload.genai_scenario``).
- Length presets from published statistics (no download), see ``PRESETS``.

Multi-turn conversations and the tool-agent pattern live in ``sessions.py``. Every generator
takes a ``numpy.random.Generator`` and draws in a fixed order: same seed, same table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs.workload import LengthDist, WorkloadSpec, genai_scenario, random_range_bounds
from .shaping import arrivals
from .table import RequestTable


@dataclass(frozen=True)
class Preset:
    """Length statistics of a public dataset: prompt tokens after the shared prefix, output
    tokens, the shared prefix (tokens) and where the numbers come from."""

    input: LengthDist
    output: LengthDist
    prefix_tokens: int
    source: str


PRESETS: dict[str, Preset] = {
    # Kwon et al., "Efficient Memory Management for Large Language Model Serving with
    # PagedAttention" (vLLM), SOSP 2023, Sec. 6.1 / Fig. 11: ShareGPT prompts average 161.31 and
    # outputs 337.99 tokens (8.4x and 5.8x Alpaca's). The spread is not published there; we
    # assume a lognormal with CV 1 (heavy-tailed, as chat lengths are) and the bounds the
    # benchmark tools' ShareGPT sampler applies (prompts and outputs of fewer than 4 tokens are
    # dropped, prompts beyond 1024 and totals beyond 2048 tokens too), here as truncation.
    "sharegpt": Preset(LengthDist("lognormal", mean=161, std=161, min=4, max=1024),
                       LengthDist("lognormal", mean=338, std=338, min=4, max=2048), 0,
                       "ShareGPT, vLLM paper (SOSP'23) means, CV 1 assumed"),
    # vLLM's sonnet benchmark defaults (benchmark_serving.py / vllm bench serve:
    # --sonnet-input-len 550, --sonnet-output-len 150, --sonnet-prefix-len 200): every prompt
    # starts with the same 200 tokens of poem lines, 550 tokens in all, 150 tokens out.
    "sonnet": Preset(LengthDist("fixed", value=350), LengthDist("fixed", value=150), 200,
                     "vLLM sonnet benchmark defaults"),
}


def sample_lengths(d: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` integer lengths (tokens) from ``d``, always within [d.min, d.max] for the
    continuous kinds (clipped) and within the tool's range for the random-dataset kinds."""
    if d.dist == "fixed":
        return np.full(n, d.value, dtype=np.int64)
    if d.dist == "uniform":
        return rng.integers(d.min, d.max + 1, size=n).astype(np.int64)
    if d.dist == "random_ratio":
        lo = max(1, int(d.value * d.range_ratio))
        return rng.integers(lo, d.value + 1, size=n).astype(np.int64)
    if d.dist == "random_range":
        lo, hi = random_range_bounds(d.value, d.range_ratio)
        return rng.integers(lo, hi + 1, size=n).astype(np.int64)
    if d.dist == "normal":
        x = rng.normal(d.mean, d.std, size=n)
    else:  # lognormal given the mean and std of the lengths themselves
        sigma2 = np.log1p((d.std / d.mean) ** 2)
        x = rng.lognormal(np.log(d.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
    return np.clip(np.rint(x), d.min, d.max).astype(np.int64)


def resolve_lengths(spec: WorkloadSpec) -> tuple[LengthDist, LengthDist, int]:
    """(input after the prefix, output, shared prefix tokens) of a spec: its genai-bench
    scenario, else its preset, else its own ``input``/``output``."""
    if spec.scenario:
        s = genai_scenario(spec.scenario)
        return s.input, s.output, s.prefix_tokens or spec.shared_prefix_tokens
    if spec.preset:
        p = PRESETS[spec.preset]
        return p.input, p.output, spec.shared_prefix_tokens or p.prefix_tokens
    return spec.input, spec.output, spec.shared_prefix_tokens


def lengths_for(spec: WorkloadSpec) -> tuple[LengthDist, LengthDist]:
    """(input, output) distributions of a spec (without its shared prefix)."""
    i, o, _ = resolve_lengths(spec)
    return i, o


def shared_prefix_ids(input_len: np.ndarray, group: np.ndarray, prefix_tokens: int, groups: int,
                      block_size: int) -> list[np.ndarray]:
    """Prefix-chained block ids of prompts that start with their group's shared prefix.

    Group g's whole prefix blocks get ids g*pb .. g*pb+pb-1 (pb = prefix_tokens // block_size);
    every later block, including the one where the prefix ends mid-block, is unique to its
    request (its content differs), so a prefix cache hits exactly the shared whole blocks.
    """
    pb = prefix_tokens // block_size
    nblocks = -(-input_len // block_size)
    own = nblocks - pb  # >= 1: a prompt is longer than its prefix
    start = groups * pb + np.concatenate(([0], np.cumsum(own)[:-1]))
    shared: dict[int, np.ndarray] = {}  # only the groups drawn (there may be more groups than requests)
    out = []
    for g, s, k in zip(group.tolist(), start.tolist(), own.tolist()):
        ids = shared.get(g)
        if ids is None:
            ids = shared[g] = np.arange(g * pb, g * pb + pb, dtype=np.int64)
        out.append(np.concatenate((ids, np.arange(s, s + k, dtype=np.int64))))
    return out


def fixed_batch(spec: WorkloadSpec, rng: np.random.Generator) -> RequestTable:
    """``sglang.bench_one_batch_server``: ``batch_size`` requests, all at t=0."""
    return _requests(spec, spec.batch_size, np.zeros(spec.batch_size), rng, "fixed_batch")


def synthetic(spec: WorkloadSpec, rng: np.random.Generator) -> RequestTable:
    """bench_serving / vllm bench serve: ``num_requests`` at ``rate`` with ``burstiness``."""
    n = spec.num_requests
    inp_d, out_d, _ = resolve_lengths(spec)
    # draw order (input, output, arrivals, groups) is part of the seed contract: keep it
    inp = sample_lengths(inp_d, n, rng)
    out = sample_lengths(out_d, n, rng)
    t = arrivals(n, spec.rate, spec.burstiness, rng, spec.arrival)
    return _finish(spec, inp, out, t, rng, _label(spec))


def _requests(spec: WorkloadSpec, n: int, t: np.ndarray, rng: np.random.Generator, label: str) -> RequestTable:
    inp_d, out_d, _ = resolve_lengths(spec)
    inp = sample_lengths(inp_d, n, rng)
    out = sample_lengths(out_d, n, rng)
    return _finish(spec, inp, out, t, rng, label)


def _finish(spec: WorkloadSpec, inp: np.ndarray, out: np.ndarray, t: np.ndarray, rng: np.random.Generator,
            label: str) -> RequestTable:
    _, _, prefix = resolve_lengths(spec)
    hids = None
    if prefix:
        inp = inp + prefix
        group = rng.integers(0, spec.prefix_groups, size=len(inp))
        hids = shared_prefix_ids(inp, group, prefix, spec.prefix_groups, spec.block_size)
    return RequestTable(t, inp, out, hash_ids=hids, block_size=spec.block_size,
                        max_concurrency=spec.max_concurrency, source=label)


def _label(spec: WorkloadSpec) -> str:
    what = spec.scenario or spec.preset or f"{spec.input.dist}/{spec.output.dist}"
    process = "poisson" if spec.arrival == "gamma" and spec.burstiness == 1 else spec.arrival
    load = f"{spec.rate:g} req/s {process}" if spec.rate else "all at t=0"
    if spec.rate and process == "gamma":
        load += f" (burstiness {spec.burstiness:g})"
    return f"synthetic {what}, {load}"
