"""A request's life in the world: the timestamps a serving engineer measures (seconds)."""
from __future__ import annotations

import math

NAN = math.nan


class Request:
    """One request. Timestamps are simulated seconds; NaN until the event happens.

    Decode tokens are not stored one by one: ``segments`` holds (instance id, first step
    index, last step index) of the decode steps that produced tokens 2..N on each decode
    instance the request ran on, so every ITL is recovered from that instance's step log.
    """

    __slots__ = (
        "rid", "arrival", "input_len", "output_len", "hash_ids",
        "routed", "prefill_start", "prefill_end", "transfer_start", "transfer_end",
        "d_alloc", "decode_admit", "first_token", "finish", "drop_reason",
        "p_inst", "d_inst", "segments", "prefilled", "cached_tokens", "preemptions",
        "recomputes", "kv_bytes", "ctx0", "admit_step", "finish_step", "dp_rank",
        "p_pages", "d_pages", "recompute_tokens", "kv_load_s",
        "prefill_ready", "d_ready", "transfer_bytes", "cache_keys", "shared_pages",
        "buffer_where", "d_load_s", "loaded_tokens", "pf_admitted",
    )

    def __init__(self, rid: int, arrival: float, input_len: int, output_len: int, hash_ids=None):
        self.rid = rid
        self.arrival = arrival
        self.input_len = input_len
        self.output_len = output_len
        self.hash_ids = hash_ids
        self.routed = self.prefill_start = self.prefill_end = NAN
        self.transfer_start = self.transfer_end = self.d_alloc = NAN
        self.decode_admit = self.first_token = self.finish = NAN
        self.drop_reason: str | None = None
        self.p_inst = self.d_inst = -1
        self.segments: list[tuple[int, int, int]] = []
        self.prefilled = 0  # prompt tokens prefilled so far (cached tokens count as done)
        self.cached_tokens = 0  # prompt tokens served from a prefix cache
        self.preemptions = 0
        self.recomputes = 0  # prefills redone because KV was lost
        self.recompute_tokens = 0
        self.kv_bytes = 0.0
        self.ctx0 = 0  # context length when admitted to the current decode segment
        self.admit_step = -1
        self.finish_step = -1
        self.dp_rank = 0
        self.p_pages = 0
        self.d_pages = 0
        self.kv_load_s = 0.0
        self.prefill_ready = False
        self.d_ready = False
        self.transfer_bytes = 0.0
        self.cache_keys: list = []  # prefix-cache blocks this request references
        self.shared_pages = 0  # pages of those blocks (not the request's own)
        self.buffer_where: str | None = None  # nccl put modes: 'gpu' / 'host' receive buffer
        self.d_load_s = 0.0  # D-side KV read from the host pool at admission
        self.loaded_tokens = 0  # prompt tokens loaded from offload tiers
        self.pf_admitted = False  # its prompt holds KV on the instance prefilling it

    @property
    def done(self) -> bool:
        return not math.isnan(self.finish) or self.drop_reason is not None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Request({self.rid}, in={self.input_len}, out={self.output_len}, finish={self.finish})"
