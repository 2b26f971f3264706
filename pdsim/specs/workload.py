"""Workload specs: where requests come from (generator or trace) and how they arrive.

Pure data; ``pdsim.workload.materialize`` turns a spec into a columnar request table.
Lengths are tokens, rates requests/second, times seconds unless the name says otherwise.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Literal

from ._convert import check
from .errors import SpecError
from .features import ExpertLoadSpec

# ---- size limits, checked before anything is generated or read -------------------------------
# One prompt or output: 100x the longest context of any bundled model (1M tokens would already
# be refused by the model's context check; this bounds what a spec can make pdsim allocate).
MAX_TOKENS = 100_000_000
# Arrivals span at most 10 years of simulated time (a trace row at t = 1e300, a rate of 1e-9
# req/s or a time_scale of 1e6 on an hour-long trace are mistakes, not workloads).
MAX_SPAN_S = 10 * 365 * 86400.0
# Requests in one workload. The reliability review measured 2.6 GB peak memory for a 200k-request
# simulation (about 13 kB per request, mostly engine-step logs), so 2M requests need about 26 GB.
# Raise it with the environment variable PDSIM_MAX_REQUESTS on a machine that holds more.
DEFAULT_MAX_REQUESTS = 2_000_000
# Prompt block ids (hash_ids) a generated workload may hold in all: 8 bytes each, so 1.6 GB.
MAX_BLOCK_IDS = 200_000_000


def max_requests() -> int:
    """The request limit: ``PDSIM_MAX_REQUESTS`` if set (an integer >= 1), else the default."""
    text = os.environ.get("PDSIM_MAX_REQUESTS", "").strip()
    if not text:
        return DEFAULT_MAX_REQUESTS
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise SpecError(f"expected a positive integer, got {text[:40]!r}", source="environment",
                        field="PDSIM_MAX_REQUESTS")
    return value


def check_request_count(n: float, field: str, what: str = "requests") -> None:
    """Refuse a workload of more than ``max_requests()`` requests, saying how to raise the limit."""
    cap = max_requests()
    if n > cap:
        raise SpecError(f"{n:,.0f} {what} is more than the limit of {cap:,} requests per workload (about "
                        f"13 kB of memory each in a simulation); set the environment variable "
                        f"PDSIM_MAX_REQUESTS to raise it", field=field)


def check_span(span_s: float, field: str, how: str) -> None:
    """Refuse arrivals spread over more than MAX_SPAN_S (``how`` says what made them so)."""
    if not span_s <= MAX_SPAN_S:  # also NaN
        years = span_s / (365 * 86400.0)
        shown = f"{years:,.3g} years" if math.isfinite(years) else "forever"
        raise SpecError(f"arrivals over {shown} ({how}); pdsim simulates at most "
                        f"{MAX_SPAN_S / (365 * 86400.0):.0f} years of arrivals", field=field)


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (genai-bench notation in brackets).

    - ``fixed``: always ``value`` [D(value)]
    - ``uniform``: integers in [min, max] [U(min,max)]
    - ``normal``: N(mean, std) rounded, truncated to [min, max] [N(mean,std)]
    - ``lognormal``: mean/std of the lengths themselves (not of the log), truncated to [min, max]
    - ``random_ratio``: ``sglang.bench_serving`` random dataset, uniform integers in
      [value x range_ratio, value]
    - ``random_range``: ``vllm bench serve`` random dataset (vLLM >= 0.9), uniform integers in
      [value x (1 - range_ratio), value x (1 + range_ratio)], range_ratio in [0, 1)

    Truncation clips to the bounds (the mass beyond a bound lands on it), as the benchmark
    tools clamp; keep the bounds several standard deviations out to keep the moments.
    """

    dist: Literal["fixed", "uniform", "normal", "lognormal", "random_ratio", "random_range"] = "fixed"
    value: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: int = 1
    max: int = 1_000_000
    range_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.dist in ("fixed", "random_ratio", "random_range"):
            check(self.value >= 1, f"dist {self.dist} needs value >= 1, got {self.value}", "value")
        for name in ("value", "mean", "min", "max"):
            check(getattr(self, name) <= MAX_TOKENS, f"at most {MAX_TOKENS:,}, got {getattr(self, name):,}", name)
        if self.dist in ("normal", "lognormal"):
            check(self.mean > 0, f"dist {self.dist} needs mean > 0", "mean")
            check(self.std >= 0, "must be >= 0", "std")
        check(self.min >= 1, "must be >= 1 (a request has at least one token)", "min")
        check(self.max >= self.min, f"must be >= min ({self.min})", "max")
        check(self.std <= MAX_TOKENS, f"at most {MAX_TOKENS:,}, got {self.std:,}", "std")
        check(0.0 <= self.range_ratio <= 1.0, "must be in [0, 1]", "range_ratio")
        if self.dist == "random_range":
            check(self.range_ratio < 1.0, "must be in [0, 1) for random_range (vLLM's symmetric range)",
                  "range_ratio")

    @property
    def upper(self) -> int:
        """The largest length this distribution draws (tokens)."""
        if self.dist == "fixed":
            return self.value
        if self.dist == "random_ratio":
            return self.value
        if self.dist == "random_range":
            return random_range_bounds(self.value, self.range_ratio)[1]
        return self.max

    @property
    def expected_mean(self) -> float:
        """Mean of the untruncated distribution (tokens), for reports and tests."""
        if self.dist == "fixed":
            return float(self.value)
        if self.dist == "uniform":
            return (self.min + self.max) / 2
        if self.dist == "random_ratio":
            return (max(1, int(self.value * self.range_ratio)) + self.value) / 2
        if self.dist == "random_range":
            lo, hi = random_range_bounds(self.value, self.range_ratio)
            return (lo + hi) / 2
        return float(self.mean)


def random_range_bounds(value: int, ratio: float) -> tuple[int, int]:
    """vLLM's symmetric random range [floor(v(1-r)), ceil(v(1+r))], at least 1 token."""
    return max(1, math.floor(value * (1 - ratio))), max(1, math.ceil(value * (1 + ratio)))


_NUM = r"\s*(\d+(?:\.\d+)?)\s*"
_PAIR = rf"\({_NUM},{_NUM}\)"
_SCEN = re.compile(rf"^\s*([DNU]){_PAIR}(?:\s*/\s*{_PAIR})?\s*$")
_PREFIX = re.compile(rf"^\s*P{_PAIR}\s*/\s*\(?{_NUM}\)?\s*$")


@dataclass(frozen=True)
class GenaiScenario:
    """A parsed genai-bench traffic scenario: lengths after the shared prefix, and its size."""

    input: LengthDist
    output: LengthDist
    prefix_tokens: int = 0


def genai_scenario(text: str) -> GenaiScenario:
    """genai-bench ``--traffic-scenario`` string -> distributions (raises ValueError).

    - ``D(in,out)``: deterministic
    - ``N(mean_in,std_in)/(mean_out,std_out)``: normal, truncated to [1, mean + 6 std]
    - ``U(min_in,max_in)/(min_out,max_out)``: uniform; ``U(max_in,max_out)`` means min 1
      (genai-bench's short form)
    - ``P(prefix,suffix)/out``: every prompt is one shared ``prefix`` plus a unique
      ``suffix``; fixed output (genai-bench's prefix-repetition scenario for KV-cache tests)
    """
    m = _PREFIX.match(text)
    if m:
        if any(float(x) > MAX_TOKENS for x in m.groups()):
            raise ValueError(f"lengths are at most {MAX_TOKENS:,} tokens, got {text[:80]!r}")
        pre, suf, out = (int(float(x)) for x in m.groups())
        if suf < 1 or out < 1:
            raise ValueError(f"P(prefix,suffix)/out needs suffix >= 1 and out >= 1, got {text!r}")
        return GenaiScenario(LengthDist("fixed", value=suf), LengthDist("fixed", value=out), pre)
    m = _SCEN.match(text)
    if not m:
        raise ValueError("expected D(in,out), N(mean,std)/(mean,std), U(min,max)/(min,max), U(max_in,max_out) "
                         f"or P(prefix,suffix)/out, got {text!r}")
    kind, a, b, c, d = m.groups()
    big = [x for x in (a, b, c, d) if x is not None and float(x) > MAX_TOKENS]
    if big:
        raise ValueError(f"lengths are at most {MAX_TOKENS:,} tokens, got {big[0][:20]} in {text[:80]!r}")
    a, b = float(a), float(b)
    if kind == "D":
        if c is not None:
            raise ValueError(f"D takes two numbers: D(in,out), got {text!r}")
        if a < 1 or b < 1:
            raise ValueError(f"D(in,out) needs lengths >= 1, got {text!r}")
        return GenaiScenario(LengthDist("fixed", value=int(a)), LengthDist("fixed", value=int(b)))
    if kind == "U" and c is None:
        if a < 1 or b < 1:
            raise ValueError(f"U(max_in,max_out) needs maxima >= 1, got {text!r}")
        return GenaiScenario(LengthDist("uniform", min=1, max=int(a)), LengthDist("uniform", min=1, max=int(b)))
    if c is None:
        raise ValueError(f"{kind} needs input and output parts: {kind}(a,b)/(c,d), got {text!r}")
    c, d = float(c), float(d)
    if kind == "N":
        if a <= 0 or c <= 0:
            raise ValueError(f"N needs means > 0, got {text!r}")
        return GenaiScenario(LengthDist("normal", mean=a, std=b, min=1, max=max(2, int(a + 6 * b))),
                             LengthDist("normal", mean=c, std=d, min=1, max=max(2, int(c + 6 * d))))
    if a > b or c > d or a < 1 or c < 1:
        raise ValueError(f"U needs 1 <= min <= max, got {text!r}")
    return GenaiScenario(LengthDist("uniform", min=int(a), max=int(b)), LengthDist("uniform", min=int(c), max=int(d)))


def parse_genai_scenario(text: str) -> tuple[LengthDist, LengthDist]:
    """genai-bench traffic scenario -> (input, output) distributions (see ``genai_scenario``;
    a ``P`` scenario's input here is the suffix only)."""
    s = genai_scenario(text)
    return s.input, s.output


@dataclass(frozen=True)
class TraceSpec:
    """A recorded arrival trace replayed with a time scale (smaller = heavier load).

    ``format``: ``mooncake`` (JSONL, ms timestamps, hash_ids), ``azure`` (CSV), ``burstgpt``
    (CSV), ``bench`` (SGLang/vLLM benchmark result JSON/JSONL with per-request lengths),
    ``jsonl`` (= mooncake), a real run's file read by pdsim.ingest (``pdsim-replay``,
    ``sglang-bench-serving``, ``vllm-bench-serve``, ``aiperf-profile-export``, ``genai-bench``,
    ``sglang-log-requests``, ``vllm-request-log``, ``mooncake-sessions``: its requests in send order)
    or ``auto`` (from the content; the name and first line for the trace formats).
    ``start_s`` / ``duration_s``: replay only this window of trace time (seconds from the
    first request); ``limit``: at most this many requests. ``block_size``: tokens per
    ``hash_ids`` entry (Mooncake: 512). ``sort``: sort rows by timestamp instead of rejecting
    a trace whose timestamps go back. ``skip_bad_rows``: skip (and count) malformed rows
    instead of stopping at the first one.
    """

    path: str
    format: Literal["auto", "mooncake", "azure", "burstgpt", "bench", "jsonl", "pdsim-replay", "sglang-bench-serving",
                    "vllm-bench-serve", "aiperf-profile-export", "genai-bench", "sglang-log-requests",
                    "vllm-request-log", "mooncake-sessions"] = "auto"
    time_scale: float = 1.0  # inter-arrival times are multiplied by this
    limit: int | None = None  # first N requests
    start_s: float = 0.0  # skip requests before this trace time
    duration_s: float | None = None  # and stop after this much trace time
    skip_bad_rows: bool = False
    block_size: int = 512
    sort: bool = False

    def __post_init__(self) -> None:
        check(self.time_scale > 0, f"must be > 0, got {self.time_scale}", "time_scale")
        check(self.limit is None or self.limit >= 1, "must be >= 1", "limit")
        check(self.start_s >= 0, "must be >= 0", "start_s")
        check(self.duration_s is None or self.duration_s > 0, "must be > 0", "duration_s")
        check(self.block_size >= 1, "must be >= 1", "block_size")


@dataclass(frozen=True)
class ConversationSpec:
    """Sessions of several turns that each resend the growing context (multi-turn chat or a
    tool-using agent). Turn k's prompt = system prompt + all earlier user messages and
    answers + the new user message (or tool output); turn k arrives ``think_time_s``
    (exponential mean) after turn k-1's arrival plus its expected decode time
    (``decode_s_per_token`` x its output tokens). Sessions start as a Poisson process at
    ``session_rate``/s. The system prompt is shared by every session (tool definitions for
    an agent), so a prefix cache also sees reuse across sessions."""

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
        check(self.system_prompt_tokens <= MAX_TOKENS, f"at most {MAX_TOKENS:,} tokens", "system_prompt_tokens")
        check_request_count(self.sessions, "sessions", "sessions")
        check_request_count(self.sessions * self.turns.expected_mean, "turns",
                            f"requests ({self.sessions:,} sessions x {self.turns.expected_mean:g} turns on average)")
        check_span((self.sessions - 1) / self.session_rate, "session_rate",
                   f"{self.sessions:,} sessions at {self.session_rate:g} sessions/s")
        check_span(self.think_time_s, "think_time_s", f"a mean think time of {self.think_time_s:g} s")

    def expected_block_ids(self, output_mean: float, block_size: int) -> float:
        """About how many prompt block ids the sessions hold in all: turn k resends the context
        of the k-1 turns before it, so a session of T turns holds ~ T*system + T(T+1)/2 turns."""
        t = self.turns.expected_mean
        per_turn = self.user.expected_mean + output_mean
        return self.sessions * (t * self.system_prompt_tokens + per_turn * t * (t + 1) / 2) / block_size


@dataclass(frozen=True)
class PriorityClass:
    """One priority class of a workload: requests get ``priority`` with probability ``share``
    (a batch scheduler ``priority`` / ``priority-low-first`` orders by it)."""

    priority: int
    share: float

    def __post_init__(self) -> None:
        check(-2**31 <= self.priority < 2**31, "must fit in 32 bits", "priority")
        check(0 < self.share <= 1, f"must be in (0, 1], got {self.share}", "share")


@dataclass(frozen=True)
class WorkloadSpec:
    """Request stream of a scenario.

    ``kind``:
    - ``fixed_batch``: ``batch_size`` requests of ``input``/``output`` all at t=0
      (sglang.bench_one_batch_server).
    - ``synthetic``: ``num_requests`` with lengths from ``input``/``output``, open loop at
      ``rate`` req/s, or all at once when ``rate`` is null; ``max_concurrency`` caps requests
      in flight (closed loop when every request is ready at t=0). This is
      ``sglang.bench_serving`` / ``vllm bench serve`` with the random dataset.
    - ``trace``: replay ``trace``; with ``rate`` set, the trace's lengths are kept and its
      timestamps replaced by the ``arrival`` process (for benchmark results without send
      times, or to replay a trace's lengths at another load).
    - ``multi_turn`` / ``tool_agent``: sessions from ``conversation`` (defaults differ: an
      agent resends tool outputs quickly with short answers after long tool definitions).

    ``arrival``: ``gamma`` inter-arrival times of shape ``burstiness`` and mean 1/rate
    (bench_serving's ``--burstiness``: 1 = Poisson, < 1 burstier, > 1 smoother), ``poisson``
    (exponential gaps; burstiness must stay 1) or ``constant`` gaps of 1/rate.
    ``scenario``: a genai-bench traffic scenario string that sets both lengths:
    ``D(in,out)``, ``N(mean_in,std_in)/(mean_out,std_out)``, ``U(min_in,max_in)/(min_out,max_out)``,
    ``U(max_in,max_out)``, ``P(prefix,suffix)/out``.
    ``preset``: published length statistics: ``sharegpt`` or ``sonnet`` (see generators.py).
    ``shared_prefix_tokens`` / ``prefix_groups``: every prompt starts with one of
    ``prefix_groups`` shared prefixes of this many tokens, added to the sampled input length
    (vLLM ``--random-prefix-len``; SGLang's generated-shared-prefix dataset with groups);
    prompts then carry prefix-chained ``hash_ids`` of ``block_size``-token blocks so a prefix
    cache sees the reuse (only whole shared blocks can hit).
    ``priority_classes``: assign each request a priority class at random with the given shares
    (which sum to 1), from a random stream of its own, so the same seed gives the same lengths
    and arrivals with or without classes. A trace whose rows carry ``priority`` keeps its own.
    """

    kind: Literal["fixed_batch", "synthetic", "trace", "multi_turn", "tool_agent"] = "synthetic"
    num_requests: int = 1000
    batch_size: int = 1
    rate: float | None = None
    burstiness: float = 1.0
    arrival: Literal["gamma", "poisson", "constant"] = "gamma"
    max_concurrency: int | None = None
    input: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=1024))
    output: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=256))
    trace: TraceSpec | None = None
    scenario: str | None = None
    preset: Literal["sharegpt", "sonnet"] | None = None
    conversation: ConversationSpec | None = None
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    block_size: int = 512
    priority_classes: tuple[PriorityClass, ...] = ()

    expert_load: ExpertLoadSpec | None = None  # MoE expert popularity of this traffic (None = the default popularity, features.DEFAULT_SKEW)
    def __post_init__(self) -> None:
        check(not (self.scenario and self.preset), "give scenario or preset, not both", "preset")
        if self.scenario is not None:
            try:
                scen = genai_scenario(self.scenario)
            except ValueError as err:
                check(False, str(err), "scenario")
            check(not (scen.prefix_tokens and self.shared_prefix_tokens),
                  "a P(prefix,suffix)/out scenario sets the shared prefix; leave shared_prefix_tokens at 0",
                  "shared_prefix_tokens")
        check(self.num_requests >= 1, "must be >= 1", "num_requests")
        check(self.batch_size >= 1, "must be >= 1", "batch_size")
        check(self.rate is None or self.rate > 0, f"must be > 0 (or null for all at t=0), got {self.rate}", "rate")
        check(self.burstiness > 0, "must be > 0 (1 = Poisson)", "burstiness")
        check(self.arrival != "poisson" or self.burstiness == 1.0,
              f"arrival poisson has burstiness 1, got {self.burstiness} (use arrival: gamma)", "burstiness")
        check(self.max_concurrency is None or self.max_concurrency >= 1, "must be >= 1", "max_concurrency")
        check(self.shared_prefix_tokens >= 0, "must be >= 0", "shared_prefix_tokens")
        check(self.prefix_groups >= 1, "must be >= 1", "prefix_groups")
        check_request_count(self.prefix_groups, "prefix_groups", "prefix groups")
        check(self.block_size >= 1, "must be >= 1", "block_size")
        check(self.shared_prefix_tokens <= MAX_TOKENS, f"at most {MAX_TOKENS:,} tokens", "shared_prefix_tokens")
        if self.priority_classes:
            total = sum(c.share for c in self.priority_classes)
            check(abs(total - 1.0) <= 1e-9, f"shares must sum to 1, got {total:g}", "priority_classes")
            values = [c.priority for c in self.priority_classes]
            check(len(set(values)) == len(values), "each priority may appear once", "priority_classes")
        if self.kind == "trace":
            check(self.trace is not None, "kind: trace needs a trace: block with a path", "trace")
            check(self.rate is None or self.trace.time_scale == 1.0,
                  "give rate (new arrival times) or trace.time_scale (scaled trace times), not both", "rate")
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Refuse, before anything is generated, a workload the machine could not hold (see the
        limits at the top of this module)."""
        check_request_count(self.num_requests, "num_requests")
        check_request_count(self.batch_size, "batch_size")
        if self.kind == "synthetic" and self.rate is not None:
            check_span((self.num_requests - 1) / self.rate, "rate",
                       f"{self.num_requests:,} requests at {self.rate:g} req/s")
        if self.kind in ("multi_turn", "tool_agent") and self.conversation is not None:
            ids = self.conversation.expected_block_ids(self.output.expected_mean, self.block_size)
            where = "conversation"
        elif self.kind in ("synthetic", "fixed_batch"):
            n = self.num_requests if self.kind == "synthetic" else self.batch_size
            prefix = self.shared_prefix_tokens
            inp = self.input.expected_mean
            if self.scenario is not None:
                scen = genai_scenario(self.scenario)
                prefix, inp = prefix or scen.prefix_tokens, scen.input.expected_mean
            ids = n * math.ceil((inp + prefix) / self.block_size) if prefix else 0.0
            where = "shared_prefix_tokens"
        else:
            return
        if ids > MAX_BLOCK_IDS:
            raise SpecError(f"the prompts would carry about {ids:,.0f} block ids of {self.block_size} tokens "
                            f"(more than {MAX_BLOCK_IDS:,}, {MAX_BLOCK_IDS * 8 / 1e9:.1f} GB); use fewer or shorter "
                            "requests, or a larger block_size", field=where)
