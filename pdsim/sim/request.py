"""A request's live state in the world (the run record holds what it leaves behind).

Timestamps are simulated seconds, NaN until the event happens; they are copied into the
RunRecord (record.py) when the run ends. The other fields are grouped by their owner:
the engine's prefill scheduler, the decode batch, the KV manager, the transport.

Decode tokens are not stored one by one: ``segments`` holds (instance id, first step index,
last step index) of the decode steps that produced tokens 2..N on each decode instance the
request ran on, so every ITL is recovered from that instance's step log.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kv.prefix_cache import Hold

NAN = math.nan


class Request:
    __slots__ = (
        # identity and workload
        "rid", "arrival", "input_len", "output_len", "hash_ids", "priority",
        # the record's timestamps and counters
        "routed", "prefill_start", "prefill_end", "transfer_start", "transfer_end",
        "d_alloc", "decode_admit", "first_token", "finish", "drop_reason",
        "p_inst", "d_inst", "segments", "cached_tokens", "preemptions",
        "recomputes", "recompute_tokens", "kv_load_s", "transfer_bytes", "d_load_s", "loaded_tokens", "retries",
        # prefill scheduler: tokens of the prompt done, its DP rank, whether it holds KV
        "prefilled", "dp_rank", "pf_admitted",
        # decode batch: context at admission, admission step, step of its last token, tokens it
        # still owed at admission, tokens produced by decode steps so far
        "ctx0", "admit_step", "finish_step", "remaining", "decoded",
        # KV manager: pages owned on P and on D, cached blocks referenced and their pages
        "p_pages", "d_pages", "cache_keys", "shared_pages",
        # contiguous page runs of its prompt KV on P and on D (kv/pool.py; the transfer's work requests)
        "p_runs", "d_runs",
        # transport: handshake flags and where a pushed KV waits on D ('gpu' / 'host')
        "prefill_ready", "d_ready", "buffer_where",
    )

    def __init__(self, rid: int, arrival: float, input_len: int, output_len: int, hash_ids=None):
        self.rid = rid
        self.arrival = arrival
        self.input_len = input_len
        self.output_len = output_len
        self.hash_ids = hash_ids
        self.priority = 0  # the workload's priority class (batch schedulers ``priority*``)
        self.routed = self.prefill_start = self.prefill_end = NAN
        self.transfer_start = self.transfer_end = self.d_alloc = NAN
        self.decode_admit = self.first_token = self.finish = NAN
        self.drop_reason: str | None = None
        self.p_inst = self.d_inst = -1
        self.segments: list[tuple[int, int, int]] = []
        self.cached_tokens = 0  # prompt tokens served from a prefix cache
        self.preemptions = 0
        self.recomputes = 0  # prefills redone because KV was lost
        self.recompute_tokens = 0
        self.kv_load_s = 0.0
        self.transfer_bytes = 0.0
        self.d_load_s = 0.0  # D-side KV read from the host pool at admission
        self.loaded_tokens = 0  # prompt tokens loaded from offload tiers
        self.retries = 0  # times the client sent it again after an instance lost it
        self.prefilled = 0  # prompt tokens prefilled so far (cached tokens count as done)
        self.dp_rank = 0
        self.pf_admitted = False  # its prompt holds KV on the instance prefilling it
        self.ctx0 = 0
        self.admit_step = -1
        self.finish_step = -1
        self.remaining = 0
        self.decoded = 0
        self.p_pages = 0
        self.d_pages = 0
        self.cache_keys: list | Hold = []  # [] until it references cached blocks: then its prefix_cache.Hold
        self.shared_pages = 0
        self.p_runs = self.d_runs = 0
        self.prefill_ready = False
        self.d_ready = False
        self.buffer_where: str | None = None

    def reset_for_retry(self) -> None:
        """The client sends it again from scratch (its arrival stays: latencies count from the
        first send). Tokens streamed before the failure are discarded."""
        self.routed = self.prefill_start = self.prefill_end = NAN
        self.transfer_start = self.transfer_end = self.d_alloc = NAN
        self.decode_admit = self.first_token = self.finish = NAN
        self.p_inst = self.d_inst = -1
        self.segments = []
        self.cached_tokens = 0
        self.kv_load_s = self.d_load_s = 0.0
        self.transfer_bytes = 0.0
        self.loaded_tokens = 0
        self.prefilled = 0
        self.pf_admitted = False
        self.ctx0 = 0
        self.admit_step = self.finish_step = -1
        self.remaining = self.decoded = 0
        self.p_pages = self.d_pages = self.shared_pages = 0
        self.cache_keys = []
        self.prefill_ready = self.d_ready = False
        self.buffer_where = None
        self.retries += 1

    @property
    def done(self) -> bool:
        return not math.isnan(self.finish) or self.drop_reason is not None

    def tokens_out(self) -> int:
        """Tokens produced so far: the first one, then every decode step it took part in."""
        return (1 if not math.isnan(self.first_token) else 0) + self.decoded

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Request({self.rid}, in={self.input_len}, out={self.output_len}, finish={self.finish})"
