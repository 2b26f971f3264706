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
from .errors import SpecError
from .limits import check_range, max_gpus

# Documented bounds (docs/faults.md). They keep a run's work finite: every periodic process
# (heartbeats, autoscaler ticks, random failures, retries) costs events per simulated second.
MIN_MTBF_H = 1e-3  # 3.6 s per component: far beyond any real cluster (GPU MTBF: ~10^4-10^5 h)
MAX_TIME_S = 1e7  # ~116 days: any time, delay or repair in a fault model
MIN_HEARTBEAT_S = 1e-3  # 1 ms heartbeats (real monitors beat every 0.1-10 s)
MAX_MISSES = 1000
MAX_RETRIES = 100
MIN_REQUEST_TIMEOUT_S = 1e-3
MIN_AUTOSCALER_INTERVAL_S = 0.1  # real autoscalers act on metrics scraped over seconds (HPA: 15 s)
MIN_WEIGHT_LOAD_GBPS, MAX_WEIGHT_LOAD_GBPS = 0.01, 1e4  # GB/s per GPU: 10 MB/s (a slow disk) .. 10 TB/s

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
        check_range(self.at_s, 0, MAX_TIME_S, "at_s", "s")
        check_range(self.recover_after_s, 0, MAX_TIME_S, "recover_after_s", "s or null", allow_none=True)
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
        check_range(self.mtbf_h, MIN_MTBF_H, 1e9, "mtbf_h", "hours per component",
                    why="a failure every 3.6 s per component at the least")
        check_range(self.mttr_s, 0, MAX_TIME_S, "mttr_s", "s")


@dataclass(frozen=True)
class DetectionSpec:
    """Failure detection by heartbeats: every instance heartbeats each ``heartbeat_s`` seconds
    and the monitor (vLLM's xPyD proxy, SGLang router's health checks, an expert service's
    central monitor) declares it dead at the ``misses``-th missed beat. Until then the router
    keeps sending it requests, which are lost with it."""

    heartbeat_s: float = 1.0
    misses: int = 3

    def __post_init__(self) -> None:
        check_range(self.heartbeat_s, MIN_HEARTBEAT_S, 3600.0, "heartbeat_s", "s")
        check_range(self.misses, 1, MAX_MISSES, "misses")


@dataclass(frozen=True)
class RetrySpec:
    """What happens to a request its instance lost: ``restart`` (the client sends it again
    after ``backoff_s``, from scratch; its latencies still count from its first arrival) up to
    ``max_retries`` times, or ``drop`` (it fails with a reason)."""

    policy: Literal["restart", "drop"] = "restart"
    max_retries: int = 2
    backoff_s: float = 0.0

    def __post_init__(self) -> None:
        check_range(self.max_retries, 0, MAX_RETRIES, "max_retries", why="each retry is a whole new attempt")
        check_range(self.backoff_s, 0, MAX_TIME_S, "backoff_s", "s")


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
        for f in ("process_s", "comm_init_s", "graph_capture_s"):
            check_range(getattr(self, f), 0, MAX_TIME_S, f, "s or null", allow_none=True)
        check_range(self.weight_load_gbps, MIN_WEIGHT_LOAD_GBPS, MAX_WEIGHT_LOAD_GBPS, "weight_load_gbps",
                    "GB/s per GPU or null", allow_none=True)


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
        check_range(self.request_timeout_s, MIN_REQUEST_TIMEOUT_S, MAX_TIME_S, "request_timeout_s", "s or null",
                    allow_none=True)


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
        check_range(self.interval_s, MIN_AUTOSCALER_INTERVAL_S, 86400.0, "interval_s", "s",
                    why="an autoscaler acts on metrics gathered over seconds")


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
        if self.servers > max_gpus():  # one GPU each; the cluster-wide count is checked with the groups
            raise SpecError(f"{self.servers:,} expert servers (one GPU each); pdsim simulates at most "
                            f"{max_gpus():,} GPUs (set PDSIM_MAX_GPUS to raise the limit)", field="servers")
        check(1 <= self.replicas <= self.servers, f"must be in [1, servers={self.servers}]", "replicas")
        check_range(self.poll_timeout_s, 0, 3600.0, "poll_timeout_s", "s")
        check_range(self.p2p_latency_us, 0, 1e6, "p2p_latency_us", "us")
