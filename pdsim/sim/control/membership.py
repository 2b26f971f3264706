"""Membership: the instances the router may use, per role, as read-only views.

An instance registers when it comes up and is removed when the control plane learns it is
gone (at once for a planned removal; after failure detection for a crash). Routers never get
the instances themselves: an ``InstanceView`` exposes the load signals a real router or proxy
can observe (queue depth, outstanding tokens, KV use, prefix-cache contents, recent step
times), so a policy cannot change the world by accident.
"""
from __future__ import annotations


class InstanceView:
    """Read-only window on one instance (see the module docstring)."""

    __slots__ = ("_i",)

    def __init__(self, inst):
        self._i = inst

    @property
    def iid(self) -> int:
        return self._i.iid

    @property
    def name(self) -> str:
        return self._i.name

    @property
    def role(self) -> str:
        return self._i.role

    @property
    def gpus(self) -> int:
        return self._i.gpus

    @property
    def state(self) -> str:
        return self._i.state

    @property
    def outstanding_tokens(self) -> int:
        """Prompt tokens queued for prefill plus context tokens decoding or waiting to."""
        return self._i.outstanding_tokens

    @property
    def queue_len(self) -> int:
        """Requests waiting for prefill, for KV pre-allocation or for decode admission."""
        return self._i.queue_len

    @property
    def running(self) -> int:
        """Requests in the running decode batch."""
        return self._i.batch.n

    @property
    def kv_used_frac(self) -> float:
        pool = self._i.pool
        return pool.used / pool.capacity if pool.capacity else 1.0

    @property
    def kv_free_pages(self) -> int:
        return self._i.pool.free

    @property
    def has_prefix_cache(self) -> bool:
        return self._i.cache is not None

    def prefix_match(self, hash_ids, limit: int | None = None) -> int:
        """Leading prompt blocks of ``hash_ids`` resident in this instance's HBM prefix cache."""
        cache = self._i.cache
        if cache is None or hash_ids is None:
            return 0
        return cache.match(hash_ids, len(hash_ids) if limit is None else limit)

    def offload_match(self, hash_ids) -> int:
        """Leading prompt blocks of ``hash_ids`` this instance could reuse without computing
        them: resident in HBM, then found in its KV offload tiers (host DRAM, SSD, remote
        store) — what a router fed by cache events from every tier sees. Loading the tier
        blocks still costs time (kv/tiers.py); this only counts them."""
        cache = self._i.cache
        if cache is None or hash_ids is None:
            return 0
        n = len(hash_ids)
        m = cache.match(hash_ids, n)
        if cache.tiers is not None and m < n:
            m += len(cache.tiers.lookup(hash_ids, m, n))
        return m

    @property
    def block_tokens(self) -> int:
        cache = self._i.cache
        return cache.block_tokens if cache is not None else 0

    @property
    def recent_step_s(self) -> float:
        """Duration of the last engine step, seconds (0 before the first)."""
        return self._i.steps.last(1)

    @property
    def in_flight_sends(self) -> int:
        """KV transfers this instance is pushing now (P2P NCCL put modes)."""
        return self._i.sending

    # ---- what a predictor needs (control/predict.py): queued work and the group's prices ----
    @property
    def queued_prefill_tokens(self) -> int:
        """Prompt tokens waiting for prefill or in progress (cached tokens leave it when a
        prompt is admitted and its cache hit is known)."""
        return self._i.pq_tokens

    @property
    def queued_prompts(self) -> int:
        """Requests in the prefill queues (waiting or being prefilled, recomputes included)."""
        return self._i.pq_count

    @property
    def decode_queued(self) -> int:
        """Requests waiting on this instance for KV pre-allocation or for decode admission."""
        i = self._i
        return len(i.prealloc_q) + len(i.ready_q)

    @property
    def decode_ctx_tokens(self) -> int:
        """Context tokens of the running decode batch."""
        return self._i.batch.sum_ctx

    @property
    def decode_remaining_tokens(self) -> int:
        """Tokens the running decode batch still owes its requests (sum of remaining outputs)."""
        return self._i.batch.rem_out

    @property
    def kv_reserved_pages(self) -> int:
        """Free pages a decode-capable instance keeps for its running requests' next tokens
        (SGLang's new-token-ratio reserve); admission needs free minus these."""
        return self._i._reserve_pages()

    def decode_release_schedule(self) -> list[tuple[int, int]]:
        """For every running decode request, soonest first: (decode steps from now until its
        last token, KV tokens it frees then). From the engine's own bookkeeping of each
        request's remaining ``max_new_tokens`` (SGLang's scheduler knows them too); exact here,
        where a request's output length is its max_new_tokens."""
        b = self._i.batch
        running = b.running
        now = b.step
        out = [(fstep - now + 1, req.ctx0 + fstep - req.admit_step + 1)
               for fstep, rid, req in b.heap if req.finish_step == fstep and rid in running]
        out.sort()
        return out

    @property
    def prealloc_tokens(self) -> int:
        """Prompt tokens of the requests waiting for KV pre-allocation (first in, first served)."""
        return sum(r.input_len for r in self._i.prealloc_q)

    @property
    def dp(self) -> int:
        """Attention data-parallel ranks of the instance."""
        return self._i.dp

    @property
    def rank_prefill_tokens(self) -> int:
        """Tokens one DP rank prefills per step (its share of ``chunked_prefill_size``)."""
        return self._i.rank_budget

    @property
    def max_running(self) -> int:
        """The cap on requests decoding at once (``max_running_requests``; huge when unset)."""
        return self._i.max_running

    @property
    def page_size(self) -> int:
        return self._i.page

    @property
    def kv_capacity_tokens(self) -> int:
        pool = self._i.pool
        return pool.capacity * pool.page_size

    @property
    def step_cost(self):
        """The group's step-cost model (pdsim.costs.StepCost). Its methods are pure prices of
        a batch shape: calling them changes nothing in the world."""
        return self._i.plan.cost

    @property
    def model(self):
        """The served model (frozen ModelSpec)."""
        return self._i.plan.model

    @property
    def hardware(self):
        """The group's hardware profile (frozen HardwareProfile)."""
        return self._i.plan.hw

    @property
    def attn_tp(self) -> int:
        return self._i.plan.attn_tp

    @property
    def kv_cache_dtype(self) -> str:
        return self._i.plan.kv_cache_dtype

    @property
    def calibrated(self) -> bool:
        """Whether fitted transfer constants apply (they follow the step-cost choice)."""
        return self._i.plan.calibrated

    def __repr__(self) -> str:  # pragma: no cover
        return f"InstanceView({self.name})"


class Membership:
    """Registered instances per role, in registration order."""

    ROLES = ("prefill", "decode", "colocated")

    def __init__(self) -> None:
        self._views: dict[str, list[InstanceView]] = {r: [] for r in self.ROLES}
        self._by_iid: dict[int, InstanceView] = {}

    def register(self, inst) -> InstanceView:
        v = InstanceView(inst)
        self._views[inst.role].append(v)
        self._by_iid[inst.iid] = v
        return v

    def deregister(self, inst) -> None:
        v = self._by_iid.pop(inst.iid, None)
        if v is not None:
            self._views[inst.role].remove(v)

    def views(self, role: str) -> list[InstanceView]:
        return self._views[role]

    def is_registered(self, iid: int) -> bool:
        return iid in self._by_iid
