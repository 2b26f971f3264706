"""Faults, detection, retries and restarts of a scenario (``faults:``), and the elastic-scaling
hook (``autoscaler:``). Times in seconds, rates in hours for MTBF.

What fails and what goes down with it (sim/control/faults.py):
- ``gpu`` of an instance: the instance is one failure domain — a monolithic expert-parallel
  group (DeepEP over one communicator) or a TP unit — so the whole instance goes down;
- ``node``: every instance with a GPU on that node;
- ``nic`` of an instance: its share of the node's NICs; it keeps serving on the others (KV
  transfers slow down), and goes down only when it has no NIC left;
- ``expert_server``: one GPU of an expert service (``experts:``): clients resend to replicas.
A component that fails comes back after ``recover_after_s`` (never, when omitted); an instance
restarts once its component is back and the failure has been detected, which takes the
priced ``restart`` time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._convert import check

Component = Literal["gpu", "node", "nic", "expert_server"]


@dataclass(frozen=True)
class FaultEvent:
    """One scheduled failure: at ``at_s`` kill ``kill`` (of ``instance`` by name, e.g. ``D0.1``;
    of ``node`` by index among the nodes of its hardware, in placement order; of expert server
    ``server``), recovering after ``recover_after_s``."""

    at_s: float
    kill: Component = "gpu"
    instance: str | None = None
    gpu: int = 0
    node: int | None = None
    hardware: str | None = None  # the node's hardware kind (heterogeneous clusters); default: the scenario's
    server: int | None = None
    recover_after_s: float | None = None

    def __post_init__(self) -> None:
        check(self.at_s >= 0, "must be >= 0", "at_s")
        check(self.recover_after_s is None or self.recover_after_s >= 0, "must be >= 0 or null", "recover_after_s")
        check(self.gpu >= 0, "must be >= 0", "gpu")
        if self.kill in ("gpu", "nic"):
            check(self.instance is not None, f"kill: {self.kill} needs instance: NAME", "instance")
        if self.kill == "node":
            check(self.node is not None and self.node >= 0, "kill: node needs node: INDEX (>= 0)", "node")
        if self.kill == "expert_server":
            check(self.server is not None and self.server >= 0, "kill: expert_server needs server: INDEX", "server")


@dataclass(frozen=True)
class RandomFaults:
    """Independent failures of every component of a kind: exponential times between failures
    with mean ``mtbf_h`` hours per component, each back after ``mttr_s`` seconds."""

    component: Component = "gpu"
    mtbf_h: float = 50_000.0
    mttr_s: float = 3600.0

    def __post_init__(self) -> None:
        check(self.mtbf_h > 0, "must be > 0", "mtbf_h")
        check(self.mttr_s >= 0, "must be >= 0", "mttr_s")


@dataclass(frozen=True)
class DetectionSpec:
    """Failure detection by heartbeats: every instance heartbeats each ``heartbeat_s`` seconds
    and the monitor (vLLM's xPyD proxy, SGLang router's health checks, an expert service's
    central monitor) declares it dead at the ``misses``-th missed beat. Until then the router
    keeps sending it requests, which are lost with it."""

    heartbeat_s: float = 1.0
    misses: int = 3

    def __post_init__(self) -> None:
        check(self.heartbeat_s > 0, "must be > 0", "heartbeat_s")
        check(self.misses >= 1, "must be >= 1", "misses")


@dataclass(frozen=True)
class RetrySpec:
    """What happens to a request its instance lost: ``restart`` (the client sends it again
    after ``backoff_s``, from scratch; its latencies still count from its first arrival) up to
    ``max_retries`` times, or ``drop`` (it fails with a reason)."""

    policy: Literal["restart", "drop"] = "restart"
    max_retries: int = 2
    backoff_s: float = 0.0

    def __post_init__(self) -> None:
        check(self.max_retries >= 0, "must be >= 0", "max_retries")
        check(self.backoff_s >= 0, "must be >= 0", "backoff_s")


@dataclass(frozen=True)
class RestartSpec:
    """The time an instance takes to come back (costs/restart.py): process start, weight load
    (the instance's weights per GPU over ``weight_load_gbps``), communicator initialisation
    (NCCL / DeepEP, growing with the world size) and CUDA-graph capture. None = the documented
    defaults in costs/restart.py."""

    process_s: float | None = None
    weight_load_gbps: float | None = None
    comm_init_s: float | None = None
    graph_capture_s: float | None = None

    def __post_init__(self) -> None:
        for f in ("process_s", "weight_load_gbps", "comm_init_s", "graph_capture_s"):
            v = getattr(self, f)
            check(v is None or v >= 0, "must be >= 0 or null", f)
        check(self.weight_load_gbps is None or self.weight_load_gbps > 0, "must be > 0", "weight_load_gbps")


@dataclass(frozen=True)
class FaultSpec:
    events: tuple[FaultEvent, ...] = ()
    random: tuple[RandomFaults, ...] = ()
    detection: DetectionSpec = field(default_factory=DetectionSpec)
    retry: RetrySpec = field(default_factory=RetrySpec)
    restart: RestartSpec = field(default_factory=RestartSpec)
    request_timeout_s: float | None = None  # the client gives up on (and retries) a request after this
    plugins: tuple["FaultPluginSpec", ...] = ()

    def __post_init__(self) -> None:
        check(self.request_timeout_s is None or self.request_timeout_s > 0, "must be > 0 or null",
              "request_timeout_s")


@dataclass(frozen=True)
class FaultPluginSpec:
    """A fault model plug-in (``policy``: registry key, installed entry point, or module:Class
    with --allow-plugin) with its typed ``params``."""

    policy: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AutoscalerSpec:
    """Elastic scaling: ``policy`` (``queue``, ``slo``, ``schedule`` or a plug-in) with its typed
    ``params``, evaluated every ``interval_s``; each new instance pays the priced start-up
    (weights, communicators, CUDA graphs) before it serves, each removed one drains first."""

    policy: str
    params: dict[str, Any] = field(default_factory=dict)
    interval_s: float = 10.0

    def __post_init__(self) -> None:
        check(self.interval_s > 0, "must be > 0", "interval_s")


@dataclass(frozen=True)
class ExpertServiceSpec:
    """Expert-as-a-service: MoE layers served by stateless expert servers, apart from the
    attention clients (groups with ``expert_service: true``), sim/experts.py.

    ``servers`` GPUs (one server each) on ``hardware`` (default: the scenario's) host the routed
    experts, every expert on ``replicas`` servers (spread so that a server's loss never takes
    all copies of an expert while ``replicas`` > 1). Per MoE layer a client sends its tokens'
    activations to the servers of their experts by one-sided P2P, each server runs one grouped
    GEMM over what all clients wrote, and writes the results back; a client hides the round trip
    behind the other micro-batch's attention when it runs two-batch overlap. A client that does
    not hear from a server within ``poll_timeout_s`` resends to a replica; servers can join and
    leave at any time (no group restart), one GPU at a time."""

    servers: int = 16
    hardware: str | None = None
    replicas: int = 2
    poll_timeout_s: float = 0.05
    p2p_latency_us: float = 8.0  # one-sided GPU-initiated RDMA write + poll, per direction (assumption)

    def __post_init__(self) -> None:
        check(self.servers >= 1, "must be >= 1", "servers")
        check(1 <= self.replicas <= self.servers, f"must be in [1, servers={self.servers}]", "replicas")
        check(self.poll_timeout_s >= 0, "must be >= 0", "poll_timeout_s")
        check(self.p2p_latency_us >= 0, "must be >= 0", "p2p_latency_us")
