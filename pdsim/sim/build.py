"""Build: the only place where specs become world entities.

Per group, the constants every instance of it shares are computed once (``GroupPlan``: GPUs,
attention TP, KV pool size and bytes per token, the per-rank prefill budget, the step-cost
model); per (prefill group, decode group) pair, the constants of its KV transfers
(``PairPlan``). Instances, their KV managers (pool, prefix cache, offload tiers), the
topology and the transport are then assembled from those plans. Nothing downstream
recomputes a spec-derived constant.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from ..costs import build_step_cost
from ..costs.measured import host_copy_bps
from ..costs.offload import tier_link_scale
from ..costs.pipeline import PipelineRound, PipelineStepCost
from ..costs.host_load import StretchedStepCost, stretched
from ..costs.registry import resolve_cost_kind
from ..costs.speculative import SpeculativeStepCost, mtp_draft_model
from ..costs.transfer import TransferPricer, flow_cap, instance_nic_capacity, kv_bytes_moved
from ..specs.catalog import load_model_ref, load_storage
from ..specs.errors import SpecError
from ..specs.hardware import GIB, HardwareProfile
from ..specs.memory import InstanceMemory, group_memory, kv_dtype
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec, ResolvedScenario
from .engine.dispersion import StepDispersion
from .engine.executor import LocalExecutor
from .experts import RemoteExpertExecutor
from .host_cores import HostCores
from .engine.instance import Instance
from .engine.scheduler import SCHEDULERS
from .kv.manager import KVManager
from .kv.pool import KVPool
from .kv.prefix_cache import PrefixCache
from .kv.tiers import EVICTION, Tier, TierStack
from .net.topology import Topology


@dataclass
class GroupPlan:
    """Build-time constants of one group of identical instances."""

    role: str
    index: int  # position among the groups of its role
    group: GroupSpec
    hw: HardwareProfile
    model: ModelSpec
    mem: InstanceMemory
    cost: object  # the step-cost model shared by the group's instances
    kv_tokens: int  # KV pool of one instance, tokens (after any transport carve-out)
    calibrated: bool  # fitted transfer constants follow the step-cost choice

    @cached_property
    def gpus(self) -> int:
        return self.group.gpus_per_instance(self.hw.gpus_per_node)

    @cached_property
    def world(self) -> int:
        return self.group.world(self.hw.gpus_per_node)

    @cached_property
    def dp(self) -> int:
        return self.group.dp

    @cached_property
    def attn_tp(self) -> int:
        return self.world // self.group.dp

    @cached_property
    def rank_budget(self) -> int:
        return self.group.engine.prefill_budget(self.group.dp)

    @cached_property
    def kv_cache_dtype(self) -> str:
        return self.group.engine.kv_cache_dtype

    @cached_property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token(kv_dtype(self.model, self.kv_cache_dtype))

    @property
    def field(self) -> str:
        return f"cluster.{self.role}[{self.index}]"


@dataclass
class PairPlan:
    """Constants of the KV transfers from one prefill instance's group to one decode
    instance's group, for a given placement (same node or not)."""

    model: ModelSpec
    hw: HardwareProfile  # P's
    d_hw: HardwareProfile
    p_attn_tp: int
    d_attn_tp: int
    page: int  # P's page size (the unit its KV leaves in)
    kv_cache_dtype: str
    calibrated: bool
    p_gpus: int
    d_gpus: int
    nic_gbit: float | None
    backend: str
    link: str  # 'rdma' or 'nvlink'
    _caps: dict = field(default_factory=dict)
    _pricer: tuple | None = field(default=None, init=False, repr=False, compare=False)  # (spec, its TransferPricer)

    def flow_cap(self, senders: int) -> float:
        """Bytes/s one request's transfer may reach with ``senders`` GPUs sending."""
        cap = self._caps.get(senders)
        if cap is None:
            other = self.d_hw if self.d_hw is not self.hw else None
            cap = self._caps[senders] = flow_cap(self.hw, senders, min(self.p_gpus, self.d_gpus), self.nic_gbit,
                                                 self.backend, self.calibrated, link=self.link, dst_hw=other,
                                                 dst_gpus=self.d_gpus)
        return cap

    def plan(self, spec, tokens: int, runs: int | None = None):
        """Bytes, senders, chunks and fixed seconds of ``tokens`` of KV (costs/transfer.py);
        ``runs``: its contiguous page runs (kv/pool.py), None for every page its own run."""
        pricer = self._pricer
        if pricer is None or pricer[0] is not spec:  # the transport's spec: one per world
            pricer = self._pricer = (spec, TransferPricer(self.model, self.hw, spec, self.p_attn_tp, self.page,
                                                          self.kv_cache_dtype, self.calibrated, link=self.link,
                                                          dst_attn_tp=self.d_attn_tp))
        return pricer[1].plan(tokens, runs=runs)


def step_cost(resolved: ResolvedScenario, hw: HardwareProfile, g: GroupSpec, role: str):
    """The step-cost model of one group (shared by its instances): the cost model of its own
    hardware, wrapped for pipeline parallelism or speculative decoding when the group uses them,
    every price times ``resolved.price_scale`` when that is not 1 (a sensitivity probe)."""
    cost = _group_step_cost(resolved, hw, g, role)
    s = resolved.price_scale
    return cost if s == 1.0 else StretchedStepCost(cost, s)


def _group_step_cost(resolved: ResolvedScenario, hw: HardwareProfile, g: GroupSpec, role: str):
    sc = resolved.scenario
    model = resolved.model
    feats = {"expert_load": sc.workload.expert_load}
    nic = sc.transfer.nic_gbit
    if g.pp > 1:
        return stretched(PipelineRound(PipelineStepCost(sc.cost_model, hw, model, g, role, g.pipeline, nic_gbit=nic,
                                                        **feats)), hw, sc)
    cost = build_step_cost(sc.cost_model, hw, model, g, role, nic_gbit=nic, **feats)
    spec = g.engine.speculative if role != "prefill" else None
    if spec is None:
        return stretched(cost, hw, sc)
    if spec.method == "mtp":
        draft_model = mtp_draft_model(model, spec)
    else:
        where = next((f"cluster.{r}[{i}]" for r, i, gg in sc.cluster.groups() if gg is g), f"cluster.{role}")
        draft_model = load_model_ref(spec.draft_model, resolved.base_dir, resolved.source, resolved.trust,
                                     f"{where}.engine.speculative.draft_model")
    draft = build_step_cost(sc.cost_model, hw, draft_model, g, role, nic_gbit=nic, with_overhead=False, **feats)
    return stretched(SpeculativeStepCost(cost, draft, spec), hw, sc)


def group_plans(resolved: ResolvedScenario, transport) -> list[GroupPlan]:
    sc = resolved.scenario
    model = resolved.model
    plans = []
    for role, gi, g in sc.cluster.groups():
        hw = resolved.hardware_of(role, gi)
        calibrated = resolve_cost_kind(sc.cost_model, hw) == "calibrated"
        mem = group_memory(hw, model, g, role)
        extra = transport.step_seq_us(role)  # the connector's per-request work in each step
        step_hw = hw if not extra else replace(hw, efficiency=replace(
            hw.efficiency, seq_overhead_us=hw.efficiency.seq_overhead_us + extra))
        plan = GroupPlan(role, gi, g, hw, model, mem, step_cost(resolved, step_hw, g, role), mem.kv_tokens,
                         calibrated)
        if role == "decode":
            plan.kv_tokens = transport.decode_kv_tokens(mem.kv_tokens, plan)
        plans.append(plan)
    return plans


def pair_plan(p, d, resolved: ResolvedScenario) -> PairPlan:
    """The transfer constants of prefill instance ``p`` to decode instance ``d``."""
    sc = resolved.scenario
    pp, dp_ = p.plan, d.plan
    shared = bool(set(p.nodes) & set(d.nodes))
    link = "nvlink" if (sc.transfer.link != "rdma" and shared) else "rdma"
    if sc.transfer.link == "nvlink" and not shared:
        raise SpecError(f"transfer.link nvlink, but {p.name} and {d.name} share no node (use auto)",
                        source=resolved.source, field="transfer.link")
    return PairPlan(pp.model, pp.hw, dp_.hw, pp.attn_tp, dp_.attn_tp, pp.group.engine.page_size, pp.kv_cache_dtype,
                    pp.calibrated, pp.gpus, dp_.gpus, sc.transfer.nic_gbit, sc.transfer.backend, link)


class Placement:
    """Which nodes each instance occupies: groups in declaration order, instances one after
    another on the nodes of their hardware kind; instances smaller than a node pack into one."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}  # hardware -> next free node index
        self._free: dict[str, int] = {}  # hardware -> free GPUs left in the current node

    def place(self, hw: HardwareProfile, gpus: int) -> tuple[str, ...]:
        gpn = hw.gpus_per_node
        key = hw.name
        if gpus >= gpn:
            if self._free.get(key):
                self._next[key] = self._next.get(key, 0) + 1  # leave the partly used node
                self._free[key] = 0
            start = self._next.get(key, 0)
            n = -(-gpus // gpn)
            self._next[key] = start + n
            return tuple(f"{key}/node{start + j}" for j in range(n))
        if self._free.get(key, 0) < gpus:
            if self._free.get(key):
                self._next[key] = self._next.get(key, 0) + 1
            self._free[key] = gpn
        node = self._next.get(key, 0)
        self._free[key] -= gpus
        if self._free[key] == 0:
            self._next[key] = node + 1
        return (f"{key}/node{node}",)


class Builder:
    """Assembles instances from group plans (called once by the world)."""

    def __init__(self, resolved: ResolvedScenario, env, ports, table, plugins: dict):
        self.resolved = resolved
        self.sc = resolved.scenario
        self.env = env
        self.ports = ports
        self.table = table
        self.plugins = plugins
        net = self.sc.network
        self.topology = Topology(net.topology, net.nodes_per_leaf, net.oversubscription)
        self.experts = None  # the expert service, when the scenario has one (sim/experts.py)
        self.host_cores = None  # the placed host cores, when the scenario places workers (sim/host_cores.py)
        self.shared_tiers: dict[str, Tier] = {}
        self.tier_stacks: list[TierStack] = []

    def instances(self, plans: list[GroupPlan], transport) -> list[Instance]:
        out: list[Instance] = []
        self.placement = Placement()
        self.transport = transport
        names = iter(self.sc.cluster.instance_names())
        cores = self.host_cores = HostCores.of(self.env, self.sc)
        for plan in plans:
            for _k in range(plan.group.count):
                out.append(self.instance(plan, len(out), next(names)[3]))
                if cores is not None:
                    out[-1].host_core = cores.core_of(plan.role, plan.index, _k)
                    out[-1].host_extra = cores.extra_of(plan.role, plan.index)
                    out[-1].host_pollers = cores.pollers_of(plan.role, plan.index)
                    out[-1].host_poll_away = cores.away_of(plan.role, plan.index)
                    out[-1].host_beside = cores.beside_of(plan.role, plan.index)
                    if out[-1].host_core is not None and plan.hw.gpu.arch != "cpu":
                        raise SpecError(f"{plan.role}[{plan.index}] runs on {plan.hw.gpu.name}, not the host's "
                                        "CPU: only CPU devices' workers share host cores",
                                        field="host.placement", source=self.resolved.source)
                    if out[-1].host_core is None and plan.hw.gpu.arch == "cpu":
                        # its kernels run on the host's cores too, but on none of the placed ones:
                        # it would step beside the placed workers without sharing a core with them
                        raise SpecError(f"{plan.role}[{plan.index}] runs on the host's CPU but has no core: place "
                                        "every CPU group once a placement is given", field="host.placement", source=self.resolved.source)
        return out

    def instance(self, plan: GroupPlan, iid: int, name: str) -> Instance:
        """One instance of ``plan``'s group (also called while the world runs: scaling up)."""
        sc = self.sc
        g, role = plan.group, plan.role
        node = f"inst{iid}"
        nodes = self.placement.place(plan.hw, plan.gpus)
        self.topology.attach(node, f"{name}.nic", instance_nic_capacity(plan.hw, plan.gpus, sc.transfer.nic_gbit,
                                                                            sc.transfer.backend, plan.calibrated),
                             nodes[0])
        kv = KVManager(KVPool(plan.kv_tokens, g.engine.page_size))
        scheduler = self.plugins["schedulers"][(role, plan.index)].create()
        executor = (RemoteExpertExecutor(plan.cost, self.experts, iid, plan) if g.expert_service
                    else LocalExecutor(plan.cost))
        inst = Instance(self.env, iid, name, role, plan, executor, kv, self.ports, node, scheduler)
        inst.dispersion = StepDispersion.of(plan.hw.efficiency, (getattr(sc, "seed", 0) or 0) * 1_000_003 + iid)
        inst.nodes = nodes
        nvlink = sc.cluster.disaggregated and sc.transfer.link != "rdma"
        if nvlink and len(nodes) == 1 and plan.gpus < plan.hw.gpus_per_node:
            inst.nvl_node = f"{node}.nvl"
            hw = plan.hw
            self.topology.attach_nvlink(inst.nvl_node, nodes[0], plan.gpus * hw.gpu.peer_bytes_per_s * hw.efficiency.nvlink)
        if role == "decode":
            self.transport.setup_decode(inst, plan)
        if role == "prefill":
            self.transport.setup_prefill(inst)
        self._attach_cache(inst, plan, kv)
        return inst

    # ---- KV memory hierarchy ---------------------------------------------------------------
    def _attach_cache(self, inst: Instance, plan: GroupPlan, kv: KVManager) -> None:
        """Prefix cache + offload tiers on prefill-capable instances."""
        sc = self.sc
        if plan.role == "decode" or plan.group.engine.disable_radix_cache or self.table.hash_ids is None:
            return
        off = sc.kv_offload
        block = (off.block_size if off is not None and off.block_size else None) or self.table.block_size
        if block % inst.page:
            raise SpecError(f"page_size {inst.page} must divide the prefix-cache block of {block} tokens "
                            "(or set disable_radix_cache: true)", source=self.resolved.source,
                            field=f"{plan.field}.engine.page_size")
        stack = None
        if off is not None:
            stack = self._tier_stack(inst, plan, off, block)
            kv.load_policy = off.load_policy
        kv.cache = inst.cache = PrefixCache(inst.pool, block, block // inst.page, stack,
                                            off.write_through if off is not None else False)

    def _tier_stack(self, inst: Instance, plan: GroupPlan, off, block: int) -> TierStack:
        """Tiers sized and paced for this instance: host DRAM and local SSD per node (share of a
        node for sub-node instances), PCIe per GPU; a shared remote pool is one object."""
        devices = load_storage().devices
        hw = plan.hw
        nodes = inst.gpus / hw.gpus_per_node
        policy = (self.plugins.get("eviction") or EVICTION.resolve(off.eviction, None, "kv_offload.eviction")).create
        # LMCache keeps one copy of each block: MLA latents are identical on every TP rank, so
        # one rank's PCIe link carries them; GQA shards travel over every rank's link at once
        block_bytes, links = kv_bytes_moved(plan.model, block, plan.attn_tp, plan.kv_cache_dtype)
        links = min(links, inst.gpus)
        pcie_bps = links * host_copy_bps(hw)  # measured pinned copies where the profile has them
        tiers = []
        for t in off.tiers:
            dev = devices[t.device]
            cap = (t.capacity_gib if t.capacity_gib is not None else dev.capacity_gib) * GIB
            if dev.shared:
                if t.device not in self.shared_tiers:
                    self.shared_tiers[t.device] = Tier(t.device, dev, cap, policy())
                    if dev.kind == "remote":  # a storage service on the fabric: its I/O shares NIC links
                        self.topology.attach_storage(f"storage.{t.device}", dev.read_gbps * 1e9)
                tiers.append(self.shared_tiers[t.device])
                continue
            # device figures are per node (DRAM bandwidth is per GPU's PCIe link); an explicit
            # capacity_gib in the scenario is per instance
            scale = tier_link_scale(dev.kind, links, nodes)
            tier = Tier(f"{inst.name}.{t.device}", dev, cap * nodes if t.capacity_gib is None else cap, policy())
            tier.read_bps *= scale
            tier.write_bps *= scale
            tiers.append(tier)
        for a, b in zip(tiers, tiers[1:]):
            a.next = b
        stack = TierStack(tiers, block_bytes, pcie_bps)
        stack.endpoint = inst.nic_node
        self.tier_stacks.append(stack)
        return stack
