"""A serving instance (prefill, decode or colocated) running its engine loop.

One SimPy process per instance, one event per engine step: form a batch, ask the executor
for the step's price, ``yield env.timeout(step)``, advance requests. Decode progress is O(1)
per step (decode_batch.py).

Roles:
- ``prefill``: chunked prefill of routed requests; finished prompts go to the KV transport.
- ``decode``: pre-allocates KV for routed requests (SGLang's prealloc queue), admits requests
  whose KV has arrived, runs continuous-batching decode; a request retracted for lack of KV
  is recomputed here (its context re-prefilled in mixed steps).
- ``colocated``: both; prefill chunks ride in decode batches (``enable_mixed_chunk``) or
  alternate with them (prefill first, as SGLang's default scheduler).

Lifecycle: ``starting`` -> ``up`` -> (``draining`` ->) ``down`` (lifecycle.py). The class is
split along its seams: this module holds the state and the world's entry points; admission.py
the pages and admission, stepping.py the engine loop, failover.py failure and restart.
"""
from __future__ import annotations

from collections import deque

import simpy

from ..kv.manager import KVManager
from ..request import Request
from ...costs.speculative import tokens_per_step
from .decode_batch import DecodeBatch
from ..columns import step_log
from .admission import Admission
from .failover import Failover
from .lifecycle import DOWN, UP
from .stepping import Stepping


class Instance(Admission, Stepping, Failover):
    """``spec``: the build-time constants of its group (build.py GroupPlan); ``ports``: the
    world's callbacks (ports.py); ``executor``: prices a step (executor.py)."""

    def __init__(self, env: simpy.Environment, iid: int, name: str, role: str, plan, executor, kv: KVManager,
                 ports, nic_node: str, scheduler):
        self.env = env
        self.iid = iid
        self.name = name
        self.role = role
        self.plan = plan
        self.group = plan.group
        self.executor = executor
        self.ports = ports
        self.nic_node = nic_node  # endpoint in the fabric graph (its NICs)
        self.nvl_node: str | None = None  # its NVLink endpoint, when it shares a node with peers
        self.nodes: tuple[str, ...] = ()  # the nodes it occupies (build.Placement)
        self.scheduler = scheduler
        self._chunk_hook, self._retract_hook = scheduler.hooks() if hasattr(scheduler, "hooks") else (False, False)
        self.kv = kv
        self.pool = kv.pool
        self.cache = kv.cache
        eng = plan.group.engine
        self.dp = plan.dp
        self.gpus = plan.gpus
        self.page = eng.page_size
        # the most tokens of one request's KV the pool can ever hold: ``pages_for(t, page) >
        # capacity`` exactly when ``t > capacity * page`` (checked for every request routed here)
        self.max_kv_tokens = self.pool.capacity * self.page
        self.rank_budget = plan.rank_budget
        mrr = eng.max_running_requests
        self.max_running = mrr if mrr is not None else 1 << 60
        self.mixed = eng.enable_mixed_chunk
        # a chunked prompt's blocks lend themselves to other prompts when the step computing them is
        # scheduled (vLLM V1), else after it (SGLang); only where a prefix cache is (never on a D)
        self.share_at_schedule = eng.prefix_share == "at_schedule"
        # SGLang's torch_native attention (torch_native_backend.py, _run_sdpa_forward_extend) runs one
        # causal SDPA per sequence whose query spans the whole sequence, prefix included, and keeps
        # the new rows: a chunk after the first computes every earlier chunk's attention again
        self.whole_seq_attention = eng.attention_backend == "torch_native"
        self.max_retractions = eng.max_retractions_per_request
        # prefill side
        self.pq: list[deque[Request]] = [deque() for _ in range(self.dp)]
        self.pq_tokens = 0  # prompt tokens waiting or in progress (router load signal)
        self.pq_count = 0  # requests in the prefill queues
        self._rr = 0
        self.recompute_ctx: dict[int, int] = {}  # rid -> context to re-prefill after a retraction
        # decode side
        self.prealloc_q: deque[Request] = deque()
        self.ready_q: deque[Request] = deque()
        spec = eng.speculative if role != "prefill" else None
        # speculative decoding: every decode step advances a sequence by the expected accept length
        self.q = tokens_per_step(spec) if spec is not None else 1.0
        self.batch = DecodeBatch(self.page, self.q)
        self.rank_max = 0
        # SGLang multiplies schedule_conservativeness by 0.3 under DP attention (server_args.py,
        # 0.4.7-0.5.x), so the reserve its defaults give is 0.3x the knobs' values there
        dp_factor = 0.3 if plan.group.enable_dp_attention else 1.0
        self.ratio = eng.init_new_token_ratio * dp_factor
        self.ratio_min = eng.min_new_token_ratio * dp_factor
        self.ratio_decay = (self.ratio - self.ratio_min) / eng.new_token_ratio_decay_steps
        self.ratio_init = self.ratio
        # step log (the record's per-step columns)
        self.steps = step_log()
        # steps a failure cut short: logged with the part that ran, they produced no tokens (the
        # record's token times are the ends of the other decode steps)
        self.cut_steps: list[int] = []
        self.tier_log: list[tuple[float, tuple[float, ...]]] = []
        self.buffer = None  # ReceiveBuffer of the P2P NCCL put modes (decode role; transports/nccl_p2p.py)
        self.block_on_send = False  # P2P NCCL PUT: the loop waits until its KV is sent
        self.sending = 0
        self._sent = None
        self.load_until = 0.0  # KV loads (offload tiers, host pool) hold the engine until then
        # requests whose first token the step in flight computes (a D that computes the prompt's tail
        # on a placed CPU core, admission.py _admit_ready); they join the batch when it ends
        self.tail_joins: list[Request] = []
        # requests whose hand-off left D more to compute than one step's prefill budget: chunked
        # prefill here, first token at the last chunk (handoff_recompute.py)
        self.d_prefills: set[int] = set()
        self.read_on_core = False  # the KV load holding the next step is its worker's own CPU work
        self.remote_loads = 0  # loads from remote storage in flight (fabric flows)
        self._remote_start: dict[int, float] = {}
        self._remote_reqs: list = []
        self._loads_in = None
        self.tokens_out = 0
        self.retractions = 0
        self.busy_time = 0.0
        self.state = UP
        self.epoch = 0  # bumped at every failure: callbacks of an earlier life are ignored
        self.holding: dict[int, Request] = {}  # pages held here while the KV is elsewhere or on its way
        self.limbo: list[Request] = []  # requests lost in this instance's failure, until it is detected
        self.detected = False  # its failure is known to the world (set by the world, cleared on restart)
        self._up = env.event()  # triggered by restart()
        self._step_start = self._step_dur = -1.0  # the step in flight, if any (for a failure mid-step)
        self._dec_step = self._removed_in_step = 0  # its decode batch; requests taken off meanwhile
        self._wake = env.event()
        self._sleeping = False
        self.decode_first = False  # prefill role: only prompts whose decode KV is allocated (progress.py)
        self.proc = env.process(self._loop())

    # ---- load signals for routers (read through control.membership views) -----------------
    @property
    def n_run(self) -> int:
        return self.batch.n

    @property
    def outstanding_tokens(self) -> int:
        """Prompt tokens queued for prefill plus context tokens decoding or waiting to."""
        b = self.batch
        return self.pq_tokens + b.sum_ctx + b.rem_out + sum(r.input_len for r in self.prealloc_q)

    @property
    def queue_len(self) -> int:
        """Requests waiting: for prefill (or recompute), for KV pre-allocation, for admission."""
        return self.pq_count + len(self.prealloc_q) + len(self.ready_q)

    # ---- entry points --------------------------------------------------------------------
    def wake(self) -> None:
        if self._sleeping:
            self._sleeping = False
            self._wake.succeed()

    def cannot_hold(self, req: Request) -> str | None:
        """Why this instance can never serve ``req`` (None if it can): its prompt, or for a
        decode-capable instance its whole context (prompt + output), exceeds the KV pool. Such
        a request would be retracted and recomputed forever."""
        limit = self.max_kv_tokens
        if req.input_len > limit:
            return f"prompt_exceeds_{self.role}_kv_capacity"
        if self.role != "prefill" and req.input_len + req.output_len > limit:
            return f"context_exceeds_{self.role}_kv_capacity"
        return None

    def enqueue_prefill(self, req: Request, front: bool = False) -> None:
        if self.state == DOWN:  # a dead process takes the request with it until it is detected
            self._park(req)
            return
        plen = self.recompute_ctx.get(req.rid, req.input_len)  # _prompt_len
        if plen > self.max_kv_tokens:
            self.ports.dropped(req, f"prompt_exceeds_{self.role}_kv_capacity")
            return
        if self.dp == 1:
            rank = 0
        else:  # SGLang's DP controller: round robin over attention DP ranks
            rank = self._rr
            self._rr = (self._rr + 1) % self.dp
        req.dp_rank = rank
        q = self.pq[rank]
        if front:
            # first in line, but behind prompts already being prefilled: they hold KV pages,
            # and blocking them behind a request that waits for pages would deadlock
            k = 0
            for r in q:
                if not r.pf_admitted:
                    break
                k += 1
            q.insert(k, req)
        else:
            q.append(req)
        self.pq_count += 1
        self.pq_tokens += plen - req.prefilled
        if self._sleeping:  # wake(): most arrivals find the loop busy
            self.wake()

    def enqueue_prealloc(self, req: Request) -> None:
        if self.state == DOWN:
            self._park(req)
            return
        if req.input_len > self.max_kv_tokens:
            self.ports.dropped(req, "prompt_exceeds_decode_kv_capacity")
            return
        self.prealloc_q.append(req)
        if self._sleeping:  # wake(): most arrivals find the loop busy
            self.wake()

    def kv_arrived(self, req: Request) -> None:
        """The prompt's KV is here (in pre-allocated pages, or a receive buffer): admit it."""
        if self.state == DOWN:
            self._park(req)
            return
        self.holding.pop(req.rid, None)
        req.ctx0 = req.input_len
        self.ready_q.append(req)
        if self._sleeping:  # wake(): most arrivals find the loop busy
            self.wake()

    def release_prefill_kv(self, req: Request) -> None:
        """P frees a request's KV once it has left (transfer done); cached blocks stay."""
        if self.holding.pop(req.rid, None) is None:
            return  # not held here (this instance failed and restarted since)
        self.pool.release(req.p_pages)
        req.p_pages = 0
        self.kv.unref(req)
        if self._sleeping:  # wake(): most arrivals find the loop busy
            self.wake()

    def recompute_lost(self, req: Request) -> None:
        """The KV never arrived (no room in any receive buffer): prefill it again here."""
        if self.state == DOWN:
            self._park(req)
            return
        req.pf_admitted = False
        req.prefilled = 0
        req.recomputes += 1
        req.recompute_tokens += req.input_len
        self.recompute_ctx[req.rid] = req.input_len
        self.enqueue_prefill(req)

    def send_started(self) -> None:
        self.sending += 1

    def send_finished(self) -> None:
        self.sending -= 1
        if self.sending == 0 and self._sent is not None and not self._sent.triggered:
            self._sent.succeed()
