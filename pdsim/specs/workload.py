"""Workload specs: where requests come from (generator or trace) and how they arrive.

Pure data; ``pdsim.workload.materialize`` turns a spec into a columnar request table.
Lengths are tokens, rates requests/second, times seconds unless the name says otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ._convert import check


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (genai-bench notation in brackets).

    - ``fixed``: always ``value`` [D(value)]
    - ``uniform``: integers in [min, max] [U(min,max)]
    - ``normal``: N(mean, std) rounded, truncated to [min, max] [N(mean,std)]
    - ``lognormal``: mean/std of the lengths themselves (not of the log), truncated to [min, max]
    - ``random_ratio``: bench_serving's random dataset, uniform in [value*range_ratio, value]
    """

    dist: Literal["fixed", "uniform", "normal", "lognormal", "random_ratio"] = "fixed"
    value: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: int = 1
    max: int = 1_000_000
    range_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.dist in ("fixed", "random_ratio"):
            check(self.value >= 1, f"dist {self.dist} needs value >= 1, got {self.value}", "value")
        if self.dist in ("normal", "lognormal"):
            check(self.mean > 0, f"dist {self.dist} needs mean > 0", "mean")
            check(self.std >= 0, "must be >= 0", "std")
        check(self.min >= 1, "must be >= 1 (a request has at least one token)", "min")
        check(self.max >= self.min, f"must be >= min ({self.min})", "max")
        check(0.0 <= self.range_ratio <= 1.0, "must be in [0, 1]", "range_ratio")


_SCEN = re.compile(r"^\s*([DNU])\(\s*([\d.]+)\s*,\s*([\d.]+)\s*\)(?:\s*/\s*\(\s*([\d.]+)\s*,\s*([\d.]+)\s*\))?\s*$")


def parse_genai_scenario(text: str) -> tuple[LengthDist, LengthDist]:
    """genai-bench traffic scenario -> (input, output) distributions.

    ``D(in,out)`` deterministic; ``N(mi,si)/(mo,so)`` normal; ``U(lo_i,hi_i)/(lo_o,hi_o)`` uniform.
    """
    m = _SCEN.match(text)
    if not m:
        raise ValueError(f"expected D(in,out), N(mean,std)/(mean,std) or U(min,max)/(min,max), got {text!r}")
    kind, a, b, c, d = m.groups()
    a, b = float(a), float(b)
    if kind == "D":
        if c is not None:
            raise ValueError(f"D takes two numbers: D(in,out), got {text!r}")
        return LengthDist("fixed", value=int(a)), LengthDist("fixed", value=int(b))
    if c is None:
        raise ValueError(f"{kind} needs input and output parts: {kind}(a,b)/(c,d), got {text!r}")
    c, d = float(c), float(d)
    if kind == "N":
        return (LengthDist("normal", mean=a, std=b, min=1, max=max(2, int(a + 6 * b))),
                LengthDist("normal", mean=c, std=d, min=1, max=max(2, int(c + 6 * d))))
    if a > b or c > d:
        raise ValueError(f"U needs min <= max, got {text!r}")
    return LengthDist("uniform", min=int(a), max=int(b)), LengthDist("uniform", min=int(c), max=int(d))


@dataclass(frozen=True)
class TraceSpec:
    """A recorded arrival trace replayed with a time scale (smaller = heavier load)."""

    path: str
    format: Literal["auto", "mooncake", "azure", "burstgpt", "jsonl"] = "auto"
    time_scale: float = 1.0  # inter-arrival times are multiplied by this
    limit: int | None = None  # first N requests
    start_s: float = 0.0  # skip requests before this trace time
    skip_bad_rows: bool = False

    def __post_init__(self) -> None:
        check(self.time_scale > 0, f"must be > 0, got {self.time_scale}", "time_scale")
        check(self.limit is None or self.limit >= 1, "must be >= 1", "limit")


@dataclass(frozen=True)
class ConversationSpec:
    """Sessions of several turns that each resend the growing context (multi-turn chat or a
    tool-using agent). Turn k's prompt = system prompt + all earlier user messages and
    answers + the new user message (or tool output); turn k arrives ``think_time_s``
    (exponential mean) after turn k-1's arrival plus its expected decode time. Sessions start
    as a Poisson process at ``session_rate``/s."""

    sessions: int = 100
    session_rate: float = 1.0
    turns: LengthDist = field(default_factory=lambda: LengthDist("uniform", min=2, max=8))
    system_prompt_tokens: int = 0  # shared by every session (a common prefix)
    user: LengthDist = field(default_factory=lambda: LengthDist("lognormal", mean=200, std=150, min=4, max=4096))
    think_time_s: float = 10.0
    decode_s_per_token: float = 0.03  # expected ITL used to space a session's turns

    def __post_init__(self) -> None:
        check(self.sessions >= 1, "must be >= 1", "sessions")
        check(self.session_rate > 0, "must be > 0", "session_rate")
        check(self.system_prompt_tokens >= 0, "must be >= 0", "system_prompt_tokens")
        check(self.think_time_s >= 0, "must be >= 0", "think_time_s")
        check(self.decode_s_per_token >= 0, "must be >= 0", "decode_s_per_token")


@dataclass(frozen=True)
class WorkloadSpec:
    """Request stream of a scenario.

    ``kind``:
    - ``fixed_batch``: ``batch_size`` requests of ``input``/``output`` all at t=0
      (sglang.bench_one_batch_server).
    - ``synthetic``: ``num_requests`` with lengths from ``input``/``output``, open loop at
      ``rate`` req/s (gamma inter-arrivals of shape ``burstiness``; 1 = Poisson, as
      bench_serving), or all at once when ``rate`` is null; ``max_concurrency`` caps requests
      in flight (closed loop when every request is ready at t=0).
    - ``trace``: replay ``trace``.
    - ``multi_turn`` / ``tool_agent``: sessions from ``conversation`` (defaults differ: an
      agent resends tool outputs quickly with short answers).

    ``scenario``: a genai-bench traffic scenario string that sets both lengths:
    ``D(in,out)``, ``N(mean_in,std_in)/(mean_out,std_out)``, ``U(min_in,max_in)/(min_out,max_out)``.
    ``preset``: published length statistics: ``sharegpt`` or ``sonnet`` (see generators.py).
    """

    kind: Literal["fixed_batch", "synthetic", "trace", "multi_turn", "tool_agent"] = "synthetic"
    num_requests: int = 1000
    batch_size: int = 1
    rate: float | None = None
    burstiness: float = 1.0
    arrival: Literal["gamma", "constant"] = "gamma"
    max_concurrency: int | None = None
    input: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=1024))
    output: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=256))
    trace: TraceSpec | None = None
    scenario: str | None = None
    preset: Literal["sharegpt", "sonnet"] | None = None
    conversation: ConversationSpec | None = None

    def __post_init__(self) -> None:
        check(not (self.scenario and self.preset), "give scenario or preset, not both", "preset")
        if self.scenario is not None:
            try:
                parse_genai_scenario(self.scenario)
            except ValueError as err:
                check(False, str(err), "scenario")
        check(self.num_requests >= 1, "must be >= 1", "num_requests")
        check(self.batch_size >= 1, "must be >= 1", "batch_size")
        check(self.rate is None or self.rate > 0, f"must be > 0 (or null for all at t=0), got {self.rate}", "rate")
        check(self.burstiness > 0, "must be > 0 (1 = Poisson)", "burstiness")
        check(self.max_concurrency is None or self.max_concurrency >= 1, "must be >= 1", "max_concurrency")
        if self.kind == "trace":
            check(self.trace is not None, "kind: trace needs a trace: block with a path", "trace")
