"""Elastic scaling: an autoscaler plug-in (``autoscaler:``) looks at the cluster every
``interval_s`` and asks for instances (or expert servers) to be added or removed.

The world carries the decisions out at the granularity the deployment allows: a group grows or
shrinks by whole instances (a monolithic EP group is one instance: it scales by whole groups),
an expert service by single GPUs. A new instance pays the priced start-up (costs/restart.py:
process, weights, communicators, CUDA graphs) before it joins the router; a removed one drains:
the router stops sending to it at once, and its GPUs are released when its queues, batch and
held KV are empty.

Built in (each a baseline from practice):
- ``schedule``: a timeline of target counts (Dynamo's planner fed a known load profile);
- ``queue``: Kubernetes-HPA-like on the waiting requests per instance of a group, with a
  tolerance band and a stabilisation window (HPA's scale-down stabilisation);
- ``slo``: on the share of recently finished requests that met the TTFT SLO (Dynamo's
  SLA planner idea): below ``target`` add prefill capacity, well above remove some.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...plugins import Plugin, Registry
from ...specs.errors import SpecError
from ...specs.faults import MAX_TIME_S
from ...specs.limits import check_range, max_gpus, max_instances

ROLES = ("prefill", "decode", "colocated")


def _check_role(role: str, field: str) -> None:
    if role not in ROLES:
        raise SpecError(f"expected one of {', '.join(ROLES)}, got {role!r}", field=field)


def _check_counts(min_count: int, max_count: int) -> None:
    check_range(min_count, 1, max_instances(), "min_count", "instances",
                why="a group keeps one serving instance; PDSIM_MAX_INSTANCES raises the top")
    check_range(max_count, min_count, max_instances(), "max_count", "instances",
                why="at least min_count; PDSIM_MAX_INSTANCES raises the top")


def _check_group(role: str, index: int, groups: dict, prefix: str = "") -> None:
    if (role, index) not in groups:
        have = ", ".join(f"{r}[{i}]" for r, i in sorted(groups)) or "none"
        field = "role" if all(r != role for r, _i in groups) else "index"
        raise SpecError(f"names group {role}[{index}], which the cluster does not have (groups: {have})",
                        field=prefix + field)


@dataclass(frozen=True)
class Scale:
    """Change the instance count of group ``index`` of ``role`` by ``delta``."""

    role: str
    index: int
    delta: int


@dataclass(frozen=True)
class ScaleExperts:
    """Change the expert service's server count by ``delta`` (GPUs)."""

    delta: int


@dataclass
class GroupState:
    role: str
    index: int
    up: int  # serving
    starting: int
    draining: int
    waiting: int  # requests queued on its serving instances
    busy_frac: float  # share of the last interval its serving instances were stepping


@dataclass
class ClusterState:
    """What an autoscaler sees at ``time_s``."""

    time_s: float
    groups: list[GroupState]
    experts_up: int | None
    experts_allocated: int | None  # expert servers held (serving or starting)
    recent_ttft_ok: float | None  # share of requests finished in the last interval that met the TTFT SLO
    recent_finished: int
    arrivals_per_s: float  # requests that arrived in the last interval, per second
    extra: dict = field(default_factory=dict)

    def group(self, role: str, index: int = 0) -> GroupState:
        for g in self.groups:
            if g.role == role and g.index == index:
                return g
        raise KeyError(f"no group {role}[{index}]")


class Autoscaler(Plugin):
    """Base class: ``decide(state)`` returns a list of Scale / ScaleExperts actions.

    ``check_cluster(params, groups, has_experts)``: called when the scenario loads with the
    cluster's groups ({(role, index): instance count}); raise SpecError for parameters naming
    what the cluster does not have. ``pending(time_s)``: whether the policy will act later on
    its own (a schedule with steps ahead), so the run waits for it when nothing else can
    progress; otherwise ticks alone never keep the clock running."""

    def decide(self, state: ClusterState) -> list:
        raise NotImplementedError

    @classmethod
    def check_cluster(cls, params, groups: dict, has_experts: bool) -> None:
        return None

    def pending(self, time_s: float) -> bool:
        return False


AUTOSCALERS: Registry[Autoscaler] = Registry("autoscaler", Autoscaler)


@dataclass(frozen=True)
class Step:
    at_s: float
    count: int
    role: str = "decode"
    index: int = 0

    def __post_init__(self) -> None:
        check_range(self.at_s, 0, MAX_TIME_S, "at_s", "s")
        check_range(self.count, 1, max_instances(), "count", "instances",
                    why="a group keeps one serving instance; PDSIM_MAX_INSTANCES raises the top")
        _check_role(self.role, "role")
        check_range(self.index, 0, 1000, "index")


@AUTOSCALERS.register("schedule")
class Schedule(Autoscaler):
    @dataclass(frozen=True)
    class Params:
        steps: tuple[Step, ...] = ()
        expert_servers: tuple[tuple[float, int], ...] = ()  # (at_s, servers)

        def __post_init__(self) -> None:
            for j, (at, n) in enumerate(self.expert_servers):
                check_range(at, 0, MAX_TIME_S, f"expert_servers[{j}][0]", "s")
                check_range(n, 1, max_gpus(), f"expert_servers[{j}][1]", "servers")

    @classmethod
    def check_cluster(cls, params, groups, has_experts):
        for j, st in enumerate(params.steps):
            _check_group(st.role, st.index, groups, f"steps[{j}].")
        if params.expert_servers and not has_experts:
            raise SpecError("expert server steps need an expert service (experts:)", field="expert_servers")

    def pending(self, time_s):
        return any(st.at_s > time_s for st in self.params.steps) or \
            any(at > time_s for at, _n in self.params.expert_servers)

    def decide(self, state):
        out = []
        for g in state.groups:
            target = None
            for st in self.params.steps:
                if st.role == g.role and st.index == g.index and st.at_s <= state.time_s:
                    target = st.count
            if target is not None and target != g.up + g.starting:
                out.append(Scale(g.role, g.index, target - g.up - g.starting))
        if state.experts_up is not None:
            target = None
            for at, n in self.params.expert_servers:
                if at <= state.time_s:
                    target = n
            if target is not None and target != state.experts_allocated:
                out.append(ScaleExperts(target - state.experts_allocated))
        return out


@AUTOSCALERS.register("queue")
class QueueHPA(Autoscaler):
    @dataclass(frozen=True)
    class Params:
        role: str = "prefill"
        index: int = 0
        target_waiting: float = 4.0  # waiting requests per serving instance
        tolerance: float = 0.1  # HPA's default tolerance band
        min_count: int = 1
        max_count: int = 16
        down_stabilization: int = 3  # intervals in a row below target before removing one

        def __post_init__(self) -> None:
            _check_role(self.role, "role")
            check_range(self.index, 0, 1000, "index")
            check_range(self.target_waiting, 0.01, 1e6, "target_waiting", "requests per instance")
            check_range(self.tolerance, 0.0, 0.99, "tolerance")
            _check_counts(self.min_count, self.max_count)
            check_range(self.down_stabilization, 1, 1_000_000, "down_stabilization", "intervals")

    @classmethod
    def check_cluster(cls, params, groups, has_experts):
        _check_group(params.role, params.index, groups)

    def __init__(self, params=None, **context):
        super().__init__(params)
        self._low = 0

    def decide(self, state):
        p = self.params
        g = state.group(p.role, p.index)
        if g.up == 0:
            return []
        ratio = g.waiting / g.up / p.target_waiting
        have = g.up + g.starting
        if ratio > 1 + p.tolerance and have < p.max_count:
            want = min(p.max_count, max(have + 1, int(-(-g.up * ratio // 1))))
            self._low = 0
            return [Scale(p.role, p.index, want - have)]
        if ratio < 1 - p.tolerance and g.busy_frac < 0.5 and have > p.min_count:
            self._low += 1
            if self._low >= p.down_stabilization:
                self._low = 0
                return [Scale(p.role, p.index, -1)]
        else:
            self._low = 0
        return []


@AUTOSCALERS.register("slo")
class SLOPlanner(Autoscaler):
    @dataclass(frozen=True)
    class Params:
        role: str = "prefill"
        index: int = 0
        target: float = 0.9  # share of requests meeting the TTFT SLO
        slack: float = 0.99  # remove capacity only above this share
        min_count: int = 1
        max_count: int = 16

        def __post_init__(self) -> None:
            _check_role(self.role, "role")
            check_range(self.index, 0, 1000, "index")
            check_range(self.target, 0.0, 1.0, "target", "(a share of requests)")
            check_range(self.slack, self.target, 1.0, "slack", "(a share of requests, at least target)")
            _check_counts(self.min_count, self.max_count)

    @classmethod
    def check_cluster(cls, params, groups, has_experts):
        _check_group(params.role, params.index, groups)

    def decide(self, state):
        p = self.params
        if state.recent_ttft_ok is None or state.recent_finished < 5:
            return []
        g = state.group(p.role, p.index)
        have = g.up + g.starting
        if state.recent_ttft_ok < p.target and have < p.max_count and g.starting == 0:
            return [Scale(p.role, p.index, 1)]
        if state.recent_ttft_ok >= p.slack and g.busy_frac < 0.5 and have > p.min_count and g.starting == 0:
            return [Scale(p.role, p.index, -1)]
        return []


class AutoscaleController:
    """Runs the autoscaler every ``interval_s`` and hands its actions to the world."""

    def __init__(self, world, spec, policy: Autoscaler):
        self.world, self.spec, self.policy = world, spec, policy
        world.daemon(self._run())  # its ticks alone never keep a run going (sim/settle.py)

    def _run(self):
        env, world = self.world.env, self.world
        while True:
            yield env.timeout(self.spec.interval_s)
            state = world.cluster_state(self.spec.interval_s)
            for a in self.policy.decide(state) or ():
                if isinstance(a, Scale):
                    world.scale_group(a.role, a.index, a.delta)
                elif isinstance(a, ScaleExperts):
                    world.scale_experts(a.delta)
                else:
                    raise TypeError(f"autoscaler {type(self.policy).__name__} returned {a!r}, not Scale/ScaleExperts")
