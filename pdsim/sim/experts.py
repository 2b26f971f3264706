"""Expert-as-a-service: stateless expert servers serving the MoE layers of attention clients
(specs ``experts:``; prices in costs/experts.py).

The service keeps which servers are up and which clients are stepping with how many tokens:
a client's MoE layer costs the round trip to its experts' servers plus one grouped GEMM on
the servers over the tokens all clients sent (the live servers act as one expert-parallel
group of their own). Expert e's replica j lives on server ``(e + j * (S // replicas)) % S``,
so the replicas of an expert are on distinct servers.

Failures: a dead server's clients notice when their poll times out (``poll_timeout_s``, paid
once per client per failure) and resend to a replica; the service runs on the servers left.
When some expert has no live replica, every client stalls until one comes back (``gate``).
Servers join and leave one GPU at a time, without restarting anything else.
"""
from __future__ import annotations

from ..costs import build_step_cost
from ..costs.experts import round_trip_s
from ..costs.restart import restart_s
from ..specs.memory import expert_server_bytes
from ..specs.scenario import EngineSpec, GroupSpec


class ExpertService:
    def __init__(self, world, spec, hw, model, cost_kind: str):
        self.world = world
        self.env = world.env
        self.spec = spec
        self.hw = hw
        self.model = model
        self.kind = cost_kind
        self.n_servers = spec.servers
        self.up = [True] * spec.servers
        self.load: dict[int, float] = {}  # client id -> tokens of its step in flight
        self.epoch = 0  # bumped at every server failure: each client pays one poll timeout
        self.gate = None  # an event while some expert has no live replica
        self._costs: dict[int, object] = {}
        self.stride = max(1, spec.servers // spec.replicas)
        self.retired: set[int] = set()  # servers removed on purpose (autoscaler)
        # the traffic's expert popularity sets the busiest server's share (costs/moe_load.py), as on an EP group
        resolved = getattr(world, "resolved", None)
        self.expert_load = resolved.scenario.workload.expert_load if resolved is not None else None

    @property
    def allocated(self) -> int:
        """Servers held: serving, starting or being repaired (not retired)."""
        return self.n_servers - len(self.retired)

    @property
    def servers_up(self) -> int:
        return sum(self.up)

    @property
    def gpus(self) -> int:
        return self.n_servers

    def covered(self) -> bool:
        """Every expert has a live replica."""
        S, up = self.n_servers, self.up
        for e in range(self.model.moe.num_experts):
            if not any(up[(e + j * self.stride) % S] for j in range(self.spec.replicas)):
                return False
        return True

    def layer_s(self, total_tokens: float) -> float:
        """Seconds of the servers' grouped GEMM for one MoE layer over ``total_tokens`` tokens."""
        if total_tokens <= 0:
            return 0.0
        n = self.servers_up
        cost = self._costs.get(n)
        if cost is None:
            m = self.model
            slots = m.moe.num_experts * self.spec.replicas
            g = GroupSpec(nodes=1, tp=n, dp=n, ep=n, enable_dp_attention=True,
                          engine=EngineSpec(ep_num_redundant_experts=slots - m.moe.num_experts, cuda_graph_max_bs=0,
                                            deepep_mode="low_latency"))
            cost = self._costs[n] = build_step_cost(self.kind, self.hw, m, g, "decode", expert_load=self.expert_load)
        return cost.breakdown(0, 0.0, 0, total_tokens, 0.0)["moe"] / self.model.n_moe_layers

    # ---- membership of servers --------------------------------------------------------------
    def fail_server(self, i: int, recover_after_s: float | None) -> None:
        if not 0 <= i < self.n_servers:
            raise KeyError(f"no expert server {i}; there are {self.n_servers}")
        if not self.up[i]:
            return
        self.up[i] = False
        self.epoch += 1
        self.world._capacity(-1)
        self.world.log_event("failed", f"expert{i}", f"{self.servers_up} of {self.n_servers} servers up")
        if self.gate is None and not self.covered():
            self.gate = self.env.event()
            self.world.log_event("stalled", "experts", "an expert has no live replica: clients wait")
        if recover_after_s is not None:
            back = recover_after_s + self.restart_time()
            self.env.timeout(back).callbacks.append(lambda _e: self.server_up(i))

    def server_up(self, i: int) -> None:
        if self.up[i]:
            return
        self.up[i] = True
        self.world._capacity(1)
        self.world.log_event("up", f"expert{i}", f"{self.servers_up} of {self.n_servers} servers up")
        if self.gate is not None and self.covered():
            gate, self.gate = self.gate, None
            gate.succeed()

    def add_server(self) -> int:
        """A new server joins (autoscaler): it serves after its start-up; returns its index."""
        self.up.append(False)
        self.n_servers += 1
        i = self.n_servers - 1
        self.env.timeout(self.restart_time()).callbacks.append(lambda _e: self.server_up(i))
        return i

    def remove_server(self) -> bool:
        """Retire the newest live server (planned: clients move its experts' traffic to the
        replicas without a poll timeout). False when that would leave an expert without one."""
        for i in range(self.n_servers - 1, -1, -1):
            if self.up[i]:
                self.up[i] = False
                if not self.covered():
                    self.up[i] = True
                    return False
                self.retired.add(i)
                self.world._capacity(-1)
                self.world.log_event("removed", f"expert{i}", f"{self.servers_up} of {self.n_servers} servers up")
                return True
        return False

    def restart_time(self) -> float:
        w = expert_server_bytes(self.model, max(self.n_servers, 1), self.spec.replicas)
        return restart_s(w, 1, False, None)


class RemoteExpertExecutor:
    """A client's step: its own attention and dense layers (the step model without its MoE part
    and MoE communication) plus, per MoE layer, the round trip to the servers and their GEMM."""

    def __init__(self, cost, service: ExpertService, inst_id: int, plan):
        self.cost = cost
        self.svc = service
        self.iid = inst_id
        m = plan.model
        hw = plan.hw
        self.hidden, self.k, self.L, self.n_moe = m.hidden, m.moe.top_k, m.num_layers, m.n_moe_layers
        self.dp = plan.dp
        self.tbo = plan.group.engine.enable_two_batch_overlap
        self.nic = hw.nic_bytes_per_gpu * hw.efficiency.nic
        self.lat = service.spec.p2p_latency_us * 1e-6
        self.seen = 0  # the service failure epoch this client has adapted to

    @property
    def gate(self):
        return self.svc.gate

    def idle(self) -> None:
        self.svc.load[self.iid] = 0.0

    def step_time(self, prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw) -> float:
        parts = self.cost.breakdown(prefill_tokens, prefill_attn, prefill_seqs, decode_batch, decode_ctx, **kw)
        local = sum(parts.values()) - parts["moe"] - parts["comm"]
        svc = self.svc
        tokens = prefill_tokens + decode_batch
        svc.load[self.iid] = tokens
        remote = round_trip_s(tokens / self.dp, self.hidden, self.k, max(svc.servers_up, 1), self.nic, self.lat)
        remote += svc.layer_s(sum(svc.load.values()))
        if self.tbo:  # the other micro-batch's attention runs meanwhile
            remote = max(0.0, remote - local / self.L)
        t = local + self.n_moe * remote
        if self.seen != svc.epoch:  # the first step after a server failure waits for the poll timeout
            self.seen = svc.epoch
            t += svc.spec.poll_timeout_s
        return t

    def breakdown(self, *args, **kw) -> dict[str, float]:
        return {"step": self.step_time(*args, **kw)}


def expert_service_check(model, spec, hw) -> str | None:
    """Why the servers cannot hold their experts (None if they can)."""
    need = expert_server_bytes(model, spec.servers, spec.replicas)
    have = 0.9 * hw.gpu.hbm_bytes
    if need > have:
        return (f"each of {spec.servers} expert servers would hold {need / 1e9:.1f} GB of experts "
                f"({spec.replicas} replicas) but {hw.name} has {have / 1e9:.1f} GB usable: add servers or fewer replicas")
    return None


