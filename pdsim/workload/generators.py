"""Request generators that mirror the tools users run against real servers.

- ``sglang.bench_one_batch_server``: a fixed batch of ISL/OSL at t=0.
- ``sglang.bench_serving`` / ``vllm bench serve`` random dataset: lengths uniform in
  [L x range_ratio, L], gamma inter-arrivals of shape ``burstiness`` at ``rate`` (1 = Poisson),
  ``--max-concurrency`` as a closed-loop cap.
- genai-bench traffic scenarios D/N/U (``parse_genai_scenario``).
- Presets from published statistics (no download):
  * ``sharegpt``: mean input 161 and mean output 338 tokens (ShareGPT as used in the vLLM
    paper, Kwon et al., SOSP'23: prompts 8.4x and outputs 5.8x Alpaca's 19.3 / 58.5). The
    spread is not published there; we assume a lognormal with CV 1 (heavy-tailed, as chat
    lengths are), truncated to [4, 4096] / [4, 2048].
  * ``sonnet``: vLLM's sonnet benchmark defaults, 550 input / 150 output tokens.
- Conversations (multi-turn chat, tool-using agents) that resend a growing prefix, with
  prefix-chained block ids so prefix caches see the reuse.
"""
from __future__ import annotations

import numpy as np

from ..specs.workload import ConversationSpec, LengthDist, WorkloadSpec, parse_genai_scenario
from .table import RequestTable

PRESETS = {
    "sharegpt": (LengthDist("lognormal", mean=161, std=161, min=4, max=4096),
                 LengthDist("lognormal", mean=338, std=338, min=4, max=2048)),
    "sonnet": (LengthDist("fixed", value=550), LengthDist("fixed", value=150)),
}

TOOL_AGENT = ConversationSpec(sessions=50, session_rate=0.5, turns=LengthDist("uniform", min=3, max=12),
                              system_prompt_tokens=2048,
                              user=LengthDist("lognormal", mean=800, std=600, min=16, max=16384),
                              think_time_s=0.8, decode_s_per_token=0.03)
AGENT_OUTPUT = LengthDist("normal", mean=120, std=60, min=8, max=1024)


def sample_lengths(d: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` integer lengths from ``d`` (always within [d.min, d.max] for random kinds)."""
    if d.dist == "fixed":
        return np.full(n, d.value, dtype=np.int64)
    if d.dist == "uniform":
        return rng.integers(d.min, d.max + 1, size=n).astype(np.int64)
    if d.dist == "random_ratio":
        lo = max(1, int(d.value * d.range_ratio))
        return rng.integers(lo, d.value + 1, size=n).astype(np.int64)
    if d.dist == "normal":
        x = rng.normal(d.mean, d.std, size=n)
    else:  # lognormal given the mean and std of the lengths themselves
        sigma2 = np.log1p((d.std / d.mean) ** 2)
        x = rng.lognormal(np.log(d.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
    return np.clip(np.rint(x), d.min, d.max).astype(np.int64)


def arrivals(n: int, rate: float | None, burstiness: float, rng: np.random.Generator,
             process: str = "gamma") -> np.ndarray:
    """Arrival times (s): all at 0 without a rate; else gamma gaps of shape ``burstiness`` and
    mean 1/rate (CV^2 = 1/burstiness), or constant gaps."""
    if rate is None or n == 0:
        return np.zeros(n)
    if process == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def lengths_for(spec: WorkloadSpec) -> tuple[LengthDist, LengthDist]:
    if spec.scenario:
        return parse_genai_scenario(spec.scenario)
    if spec.preset:
        return PRESETS[spec.preset]
    return spec.input, spec.output


def conversations(conv: ConversationSpec, output: LengthDist, rng: np.random.Generator,
                  block_size: int = 512) -> RequestTable:
    """Sessions whose turns resend the growing context; block ids are prefix-chained."""
    starts = arrivals(conv.sessions, conv.session_rate, 1.0, rng)
    turns = sample_lengths(conv.turns, conv.sessions, rng)
    sys_blocks = conv.system_prompt_tokens // block_size
    next_id = sys_blocks  # ids 0..sys_blocks-1: the shared system prompt
    rows = []
    for s in range(conv.sessions):
        t = starts[s]
        ctx = conv.system_prompt_tokens
        session_ids: list[int] = list(range(sys_blocks))
        for _k in range(int(turns[s])):
            user = int(sample_lengths(conv.user, 1, rng)[0])
            out = int(sample_lengths(output, 1, rng)[0])
            prompt = ctx + user
            full = prompt // block_size + (1 if prompt % block_size else 0)
            while len(session_ids) < full:
                session_ids.append(next_id)
                next_id += 1
            rows.append((t, prompt, out, np.asarray(session_ids[:full], dtype=np.int64)))
            ctx = prompt + out
            # the next turn is sent after this answer streams and the user (or tool) thinks
            t = t + out * conv.decode_s_per_token + rng.exponential(conv.think_time_s) if conv.think_time_s else \
                t + out * conv.decode_s_per_token
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    return RequestTable(np.array([r[0] - t0 for r in rows]), np.array([r[1] for r in rows]),
                        np.array([r[2] for r in rows]), hash_ids=[r[3] for r in rows], block_size=block_size,
                        source="conversations")
