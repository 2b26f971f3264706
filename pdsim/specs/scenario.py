"""Scenario spec: cluster layout, engine knobs, router, KV transfer, workload, SLO, seed.

Engine knobs are named after SGLang's server arguments so a deployment's launch command maps
one-to-one. Validation here is static (types, divisibility, memory fit); the world trusts it.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._convert import build, check, read_yaml, replace_path
from .attention_backend import check_backend
from .errors import SpecError
from .faults import AutoscalerSpec, ExpertServiceSpec, FaultSpec
from .features import PDOverheadSpec, PipelineSpec, SpeculativeSpec
from .host import HostSpec, check_placement
from .limits import check_range, check_at_most, max_gpus, max_instances
from .yamlio import excerpt, parse_yaml_text
from .hardware import HardwareProfile
from .model import ModelSpec
from .storage import OffloadSpec
from .workload import WorkloadSpec


@dataclass(frozen=True)
class EngineSpec:
    """Per-group engine knobs (SGLang server-argument names and defaults)."""

    chunked_prefill_size: int = 8192  # tokens per prefill step per instance (SGLang divides it by dp
    #   under DP attention); -1 disables chunking
    max_prefill_tokens: int = 16384  # tokens in one prefill batch of one DP rank
    max_running_requests: int | None = None  # per instance; None = bounded by KV memory
    max_total_tokens: int | None = None  # KV pool cap in tokens per instance
    page_size: int = 1  # tokens per KV page (also the unit of KV transfer)
    mem_fraction_static: float = 0.88  # share of HBM for weights + KV pool
    cuda_graph_max_bs: int = 160  # decode batches up to this size replay a CUDA graph
    enable_two_batch_overlap: bool = False
    ep_num_redundant_experts: int = 0
    deepep_mode: Literal["auto", "normal", "low_latency"] = "auto"
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = "auto"
    enable_mixed_chunk: bool = True  # colocated: prefill chunks ride in decode batches
    init_new_token_ratio: float = 0.7  # decode admission reserve for future tokens (SGLang; x0.3 under DP attention, as SGLang)
    min_new_token_ratio: float = 0.1
    new_token_ratio_decay_steps: int = 600
    min_kv_reserve_tokens: int = 4096  # the memory check's minimum KV pool per instance
    disable_radix_cache: bool = False  # prefix caching of prompt blocks (prefill/colocated)
    # when a prompt still being prefilled in chunks lends its full blocks to other prompts:
    # after_step (SGLang: the chunk's blocks enter the radix tree before the next prefill batch
    # forms, cache_unfinished_req) or at_schedule (vLLM V1: allocate_slots caches the blocks a step
    # will compute when it schedules it, so a prompt later in the same step already reads them)
    prefix_share: Literal["after_step", "at_schedule"] = "after_step"
    max_retractions_per_request: int = 32  # pdsim: drop a request retracted more often (KV thrashing)
    schedule_policy: str = "fcfs"  # prefill queue order: fcfs, lpm, dfs-weight, lof, spf, priority or a plug-in
    schedule_params: dict[str, Any] = field(default_factory=dict)  # the batch scheduler's typed parameters
    speculative: SpeculativeSpec | None = None  # MTP / EAGLE speculative decoding (decode-capable groups)
    moe_runner: Literal["deepgemm", "deepgemm_swapab", "triton"] = "deepgemm"  # routed-expert GEMM kernel (costs/calibrated.py)
    moe_a2a_backend: Literal["deepep", "none"] = "deepep"  # EP token exchange: DeepEP all-to-all, or none (all-reduce)
    # attention kernels (costs/attention_backends.py): auto = the engine's default for the GPU
    # (FA3 on Hopper, FlashInfer elsewhere); flashmla for MLA models' decode; sdpa_packed for
    # transformers' continuous batching (paged|sdpa: one masked attention over the packed batch)
    # (torch_native: SGLang's per-sequence SDPA on a CPU profile, each chunk's query spanning the whole sequence)
    attention_backend: Literal["auto", "flashmla", "flashinfer", "fa3", "triton", "sdpa_packed",
                               "torch_native"] = "auto"
    # kernels one decoder layer launches without CUDA graphs, as this engine writes the layer
    # (costs/host.py); 0 = pdsim's count of vLLM's / SGLang's fused layer. transformers' own
    # unfused layer (continuous batching): 50.7, counted on an H200 (gpu_hf_profile.py)
    eager_kernels_per_layer: float = 0.0
    # the small kernels between the GEMMs (costs/elementwise.py): fused (vLLM's and SGLang's
    # CUDA kernels: one pass each) or unfused (the layer as a model's PyTorch code writes it,
    # transformers' eager modeling code: an FP32 RMSNorm in six passes, rotary by slices and
    # cat, SiLU and the gate product apart); dense GQA/MHA models on GPU profiles
    elementwise: Literal["fused", "unfused"] = "fused"

    def __post_init__(self) -> None:
        check(self.chunked_prefill_size == -1 or self.chunked_prefill_size >= 1,
              "must be >= 1 or -1 (disabled)", "chunked_prefill_size")
        check(self.max_prefill_tokens >= 1, "must be >= 1", "max_prefill_tokens")
        check(self.max_running_requests is None or self.max_running_requests >= 1, "must be >= 1", "max_running_requests")
        check(self.max_total_tokens is None or self.max_total_tokens >= 1, "must be >= 1", "max_total_tokens")
        check(self.page_size >= 1, "must be >= 1", "page_size")
        check(0 < self.mem_fraction_static <= 1, "must be in (0, 1]", "mem_fraction_static")
        check(self.cuda_graph_max_bs >= 0, "must be >= 0", "cuda_graph_max_bs")
        check(self.ep_num_redundant_experts >= 0, "must be >= 0", "ep_num_redundant_experts")
        check(0 <= self.min_new_token_ratio <= self.init_new_token_ratio <= 1,
              "need 0 <= min_new_token_ratio <= init_new_token_ratio <= 1", "init_new_token_ratio")
        check(self.new_token_ratio_decay_steps >= 1, "must be >= 1", "new_token_ratio_decay_steps")
        check(self.min_kv_reserve_tokens >= 0, "must be >= 0", "min_kv_reserve_tokens")
        check(self.max_retractions_per_request >= 0, "must be >= 0", "max_retractions_per_request")
        check(self.eager_kernels_per_layer >= 0, "must be >= 0 (0: pdsim's count of the layer)",
              "eager_kernels_per_layer")

    def prefill_budget(self, dp: int = 1) -> int:
        """Tokens one of ``dp`` attention-DP ranks prefills per step: its share of the chunk
        size (SGLang: chunked_prefill_size // dp_size), or max_prefill_tokens unchunked."""
        if self.chunked_prefill_size == -1:
            return self.max_prefill_tokens
        return max(1, min(self.chunked_prefill_size // dp, self.max_prefill_tokens))


@dataclass(frozen=True)
class GroupSpec:
    """``count`` identical instances. An instance spans ``nodes`` whole nodes or ``gpus`` GPUs
    of one node. ``tp`` is the instance's world size as in SGLang (``--tp``), ``dp`` the
    attention data-parallel size (with ``enable_dp_attention``), ``ep`` the MoE expert-parallel
    size (1 = MoE weights tensor-parallel)."""

    count: int = 1
    nodes: int | None = None
    gpus: int | None = None
    tp: int | None = None
    dp: int = 1
    ep: int = 1
    enable_dp_attention: bool = False
    engine: EngineSpec = field(default_factory=EngineSpec)
    name: str | None = None
    hardware: str | None = None  # this group's hardware profile (heterogeneous clusters); None = the scenario's
    pipeline: PipelineSpec | None = None  # pipeline parallelism: nodes/gpus/tp describe one stage
    expert_service: bool = False  # MoE layers served by the scenario's expert service (experts:)

    def __post_init__(self) -> None:
        check(self.count >= 1, "must be >= 1", "count")
        check((self.nodes is None) != (self.gpus is None), "give exactly one of nodes or gpus", "nodes")
        check(self.nodes is None or self.nodes >= 1, "must be >= 1", "nodes")
        check(self.gpus is None or self.gpus >= 1, "must be >= 1", "gpus")
        check(self.dp >= 1, "must be >= 1", "dp")
        check(self.ep >= 1, "must be >= 1", "ep")
        check(self.dp == 1 or self.enable_dp_attention, "dp > 1 needs enable_dp_attention: true", "dp")

    @property
    def pp(self) -> int:
        return self.pipeline.pp_size if self.pipeline is not None else 1

    def stage_gpus(self, gpus_per_node: int) -> int:
        """GPUs of one pipeline stage (the whole instance without pipeline parallelism)."""
        return self.nodes * gpus_per_node if self.nodes is not None else self.gpus

    def gpus_per_instance(self, gpus_per_node: int) -> int:
        return self.stage_gpus(gpus_per_node) * self.pp

    def world(self, gpus_per_node: int) -> int:
        """The TP/EP world of one (pipeline stage of an) instance."""
        return self.tp if self.tp is not None else self.stage_gpus(gpus_per_node)

    def attn_tp(self, gpus_per_node: int) -> int:
        return self.world(gpus_per_node) // self.dp


@dataclass(frozen=True)
class ClusterSpec:
    """Disaggregated (``prefill`` + ``decode`` groups) or aggregated (``colocated`` groups)."""

    prefill: tuple[GroupSpec, ...] = ()
    decode: tuple[GroupSpec, ...] = ()
    colocated: tuple[GroupSpec, ...] = ()

    def __post_init__(self) -> None:
        disagg = bool(self.prefill) or bool(self.decode)
        check(disagg or bool(self.colocated), "needs prefill and decode groups, or colocated groups", "prefill")
        check(not (disagg and self.colocated), "mix of disaggregated and colocated groups is not supported", "colocated")
        if disagg:
            check(bool(self.prefill), "a disaggregated cluster needs at least one prefill group", "prefill")
            check(bool(self.decode), "a disaggregated cluster needs at least one decode group", "decode")

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill)

    def instance_names(self) -> list[tuple[str, int, int, str]]:
        """(role, group index, instance index, name) of every instance, in build order: a
        group's ``name`` or ``P0``/``D1``/``C0``, with ``.k`` when it has several instances."""
        out = []
        for role, gi, g in self.groups():
            label = g.name or f"{role[0].upper()}{gi}"
            many = g.count > 1 or len(getattr(self, role)) > 1
            for k in range(g.count):
                out.append((role, gi, k, f"{label}.{k}" if many else label))
        return out

    def groups(self) -> list[tuple[str, int, GroupSpec]]:
        """(role, index, group) for every group, in declaration order."""
        out = []
        for role in ("prefill", "decode", "colocated"):
            for i, g in enumerate(getattr(self, role)):
                out.append((role, i, g))
        return out


@dataclass(frozen=True)
class RouterSpec:
    """Request router. ``policy`` is a registry key (``round_robin``, ``random``,
    ``least_loaded``...) or ``package.module:ClassName``; ``params`` go to its constructor."""

    policy: str = "round_robin"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TransferSpec:
    """P->D KV transfer. Mooncake transfer engine (batched or per-page) or vLLM P2P NCCL."""

    backend: str = "mooncake"  # a KV transport plug-in: mooncake, nccl, or an installed one
    mode: Literal["put", "put_async", "get"] = "get"  # mooncake in SGLang: D pre-allocates, P writes
    batched: bool = True  # Mooncake batch transfer (PR #499); false = one transfer per page
    setup_ms: float | None = None  # per-transfer fixed cost; None = backend default
    per_page_us: float | None = None  # per-page submission cost; None = backend default
    nic_gbit: float | None = None  # override the profile's NIC line rate (what-if fabric)
    kv_buffer_fraction: float = 0.0  # nccl: share of D's HBM for the receive buffer
    host_pool_gib: float = 32.0  # nccl: D's host tensor memory pool when the GPU buffer is full
    link: Literal["auto", "rdma", "nvlink"] = "rdma"  # auto: NVLink when P and D share a node
    params: dict[str, Any] = field(default_factory=dict)  # a plug-in transport's typed parameters

    def __post_init__(self) -> None:
        check(self.backend == "nccl" or self.mode == "get",
              "mooncake (SGLang) pre-allocates KV on D and then P writes, which is mode 'get'; "
              "put and put_async are P2P NCCL modes (backend: nccl)", "mode")
        check(self.host_pool_gib >= 0, "must be >= 0", "host_pool_gib")
        check_range(self.setup_ms, 0, 60_000.0, "setup_ms", "ms or null", allow_none=True)
        check_range(self.per_page_us, 0, 1e6, "per_page_us", "us or null", allow_none=True)
        check_range(self.nic_gbit, 0.1, 1e5, "nic_gbit", "Gbit/s or null", allow_none=True)
        check(0 <= self.kv_buffer_fraction < 1, "must be in [0, 1)", "kv_buffer_fraction")


@dataclass(frozen=True)
class SLOSpec:
    """Per-request service-level objective, in milliseconds; null = not checked.

    A request meets the SLO (counts towards goodput) when it finished and every given bound
    holds, as with vLLM's ``--goodput ttft:<ms> tpot:<ms> e2el:<ms>``:

    - ``ttft_ms``: time to first token (arrival to first token).
    - ``tpot_ms``: time per output token after the first, (t_last - t_first) / (N - 1).
    - ``itl_ms``: the request's mean inter-token latency, the name bench_serving reports ITL
      under. A request's gaps average to exactly its TPOT, so this bounds the same quantity as
      ``tpot_ms`` (give either; with both, the smaller bound decides).
    - ``e2e_ms``: end-to-end latency (vLLM's ``e2el``).
    - ``max_itl_ms``: opt-in, the request's *worst* inter-token gap (a stall behind a long
      prefill chunk, a retraction or a KV load). vLLM's goodput has no such term and one slow
      step among hundreds fails the whole request, so it is checked only when given.

    Requests with a single output token have no inter-token gap and pass the TPOT/ITL terms.
    """

    ttft_ms: float | None = 2000.0
    itl_ms: float | None = None
    tpot_ms: float | None = 50.0
    e2e_ms: float | None = None
    max_itl_ms: float | None = None

    def __post_init__(self) -> None:
        for f in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "max_itl_ms"):
            v = getattr(self, f)
            check(v is None or v > 0, f"must be > 0 or null, got {v}", f)


@dataclass(frozen=True)
class NetworkSpec:
    """The fabric between instances (sim/net/topology.py).

    - ``single_switch``: every instance's NICs to one non-blocking switch (the default);
    - ``leaf_spine``: nodes under leaf switches of ``nodes_per_leaf`` nodes; a leaf's uplinks carry
      (its nodes' NIC bandwidth) / ``oversubscription``, so traffic between leaves shares them;
    - ``rail``: rail-optimised (NIC i of every node of a rail group on rail switch i, rail groups
      joined by a spine at ``oversubscription``): a P/D transfer stripes over all NICs, rail i to
      rail i, so at instance granularity it behaves as ``leaf_spine`` with rail groups as leaves.
    Remote storage (NVMe-oF offload tiers) hangs off the fabric too, so its reads and writes share
    the instances' NIC links with KV transfers."""

    topology: Literal["single_switch", "leaf_spine", "rail"] = "single_switch"
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        check(self.nodes_per_leaf >= 1, "must be >= 1", "nodes_per_leaf")
        check_range(self.oversubscription, 1.0, 1000.0, "oversubscription", why="1 = non-blocking")


@dataclass(frozen=True)
class ReplicaSpec:
    """The deployment is ``count`` identical copies of ``cluster`` (replicas: each its own
    router, instances, KV pools and network), behind a front end that sends each request to one
    replica by ``split``:

    - ``round_robin``: request i to replica i mod count (a plain L4/DNS balancer);
    - ``prefix``: by the request's first prompt block, so requests sharing a prefix meet the
      same replica's caches (round robin for requests without block ids);
    - ``random``: uniformly, from the scenario's seed.

    Replicas share nothing, so pdsim simulates each as its own world (seeded from the scenario's
    seed and the replica's index) on as many worker processes as it is given: the results do
    not depend on the number of workers. They are not those of one router over all instances
    (a fleet-wide router sees every replica's load; the front end does not). Random faults and
    an autoscaler act in every replica on their own; fault timeline ``events`` name instances
    of one cluster and are refused with replicas."""

    count: int = 1
    split: Literal["round_robin", "prefix", "random"] = "round_robin"

    def __post_init__(self) -> None:
        check(1 <= self.count <= 100_000, f"must be in [1, 100000], got {self.count}", "count")


@dataclass(frozen=True)
class Scenario:
    name: str
    hardware: str  # profile key (see `pdsim list`) or a YAML path
    model: str  # model key or a YAML path
    cluster: ClusterSpec
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    router: RouterSpec = field(default_factory=RouterSpec)
    transfer: TransferSpec = field(default_factory=TransferSpec)
    slo: SLOSpec = field(default_factory=SLOSpec)
    seed: int = 0
    kv_offload: OffloadSpec | None = None
    cost_model: str = "auto"  # "roofline", "calibrated", or "auto" (calibrated when the profile has constants)
    description: str = ""
    duration_limit_s: float | None = None  # stop simulated time here; unfinished requests get a drop reason
    overheads: PDOverheadSpec | None = None  # fixed costs outside the engines (router/HTTP path; P/D handshakes)
    faults: FaultSpec | None = None  # failures, detection, retries, restarts (specs/faults.py)
    autoscaler: AutoscalerSpec | None = None  # elastic scaling (specs/faults.py)
    experts: ExpertServiceSpec | None = None  # expert-as-a-service (specs/faults.py)
    network: NetworkSpec = field(default_factory=lambda: NetworkSpec())
    replicas: ReplicaSpec | None = None  # identical independent copies of the cluster behind a front end
    host: HostSpec | None = None  # other work sharing the engines' CPU cores during the run (specs/host.py)

    def __post_init__(self) -> None:
        check(self.seed >= 0, f"must be >= 0, got {self.seed}", "seed")
        if self.replicas is not None and self.replicas.count > 1 and self.faults is not None and self.faults.events:
            raise SpecError("fault timeline events name instances of one cluster; with replicas use random "
                            "faults (faults.random), which every replica draws on its own", field="faults.events")
        check(self.duration_limit_s is None or self.duration_limit_s > 0,
              f"must be > 0 seconds or null, got {self.duration_limit_s}", "duration_limit_s")
        check_placement(self.host, self.cluster)


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with its hardware profile and model loaded; what the world consumes."""

    scenario: Scenario
    hardware: HardwareProfile
    model: ModelSpec
    source: str  # file it came from (for error messages)
    base_dir: Path  # relative paths in the scenario (traces) resolve against this
    plugins: dict[str, Any] = field(default_factory=dict)  # kind -> PluginRef, resolved at load (pdsim/plugins.py)
    trust: Any = None  # the specs.trust.Trust the scenario was loaded under
    group_hardware: dict[tuple[str, int], HardwareProfile] = field(default_factory=dict)  # groups with their own
    # every engine step's price times this (1: as priced). Not a scenario field: a sensitivity probe
    # (pdsim validate --step-speed: how far a metric moves when every step is a few % off its price)
    price_scale: float = 1.0

    def hardware_of(self, role: str, index: int) -> HardwareProfile:
        """The profile group ``index`` of ``role`` runs on."""
        return self.group_hardware.get((role, index), self.hardware)

    @property
    def name(self) -> str:
        return self.scenario.name


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    try:
        return build(Scenario, data)
    except SpecError as err:
        raise err.at(source=source) from None


def apply_overrides(data: dict, overrides: list[str] | dict[str, Any], source: str = "--set") -> dict:
    """Apply ``field.path=value`` overrides (values parsed as YAML scalars) to raw data."""
    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else []
    if not isinstance(overrides, dict):
        parsed = []
        for item in overrides:
            if "=" not in item:
                raise SpecError(f"expected FIELD=VALUE, got {item!r}", source=source)
            k, v = item.split("=", 1)
            try:
                parsed.append((k.strip(), parse_yaml_text(v, source)))
            except SpecError as err:
                raise SpecError(f"cannot parse value {excerpt(v)}: {err.message}", source=source,
                                field=k.strip()) from None
        items = parsed
    for key, value in items:
        parts = key.split(".")
        if len(parts) >= 2 and parts[0] == "cluster" and isinstance(data.get("cluster"), dict):
            role = parts[1].split("[")[0]
            if role in ("prefill", "decode", "colocated") and not data["cluster"].get(role):
                have = [r for r in ("prefill", "decode", "colocated") if data["cluster"].get(r)]
                raise SpecError(f"this scenario has no {role} groups (it has {', '.join(have) or 'none'}); "
                                "--set changes existing fields, it does not add groups", source=source, field=key)
        # `cluster.decode.count=6` addresses the first group when a role holds a list
        replace_path(data, _first_group_alias(data, key), value)
    return data


def override_keys(overrides: list[str] | dict[str, Any] | None) -> list[str]:
    """The field paths ``overrides`` set, normalised like SpecError field paths (``a.b[0].c``)."""
    if not overrides:
        return []
    keys = overrides.keys() if isinstance(overrides, dict) else [o.split("=", 1)[0].strip() for o in overrides]
    return [re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", k) for k in keys]


def _first_group_alias(data: dict, key: str) -> str:
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "cluster" and parts[1] in ("prefill", "decode", "colocated"):
        role = data.get("cluster", {}).get(parts[1]) if isinstance(data.get("cluster"), dict) else None
        if isinstance(role, list) and not parts[2].startswith("[") and not parts[2].isdigit():
            return ".".join(parts[:2]) + "[0]." + ".".join(parts[2:])
    return key


def normalize_cluster(data: Any) -> Any:
    """Accept a single mapping where a list of groups is expected (``decode: {count: 2, ...}``)."""
    if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
        cl = data["cluster"]
        for role in ("prefill", "decode", "colocated"):
            if isinstance(cl.get(role), dict):
                cl[role] = [cl[role]]
    return data


def read_scenario_data(path: str | Path) -> dict:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping at the top level", source=str(path))
    return normalize_cluster(data)


def validate_against(resolved_scenario: Scenario, hw: HardwareProfile, model: ModelSpec, source: str,
                     group_hw: dict | None = None) -> None:
    """Cross-checks that need the hardware and the model: divisibility and memory fit. Each
    group is checked on its own profile (``group_hw[(role, index)]``, else ``hw``)."""
    from .memory import group_memory

    group_hw = group_hw or {}
    groups = resolved_scenario.cluster.groups()
    # the limits hold for the whole deployment: every replica builds the cluster again
    copies = resolved_scenario.replicas.count if resolved_scenario.replicas is not None else 1
    field = "replicas.count" if copies > 1 else "cluster"
    n_inst = copies * sum(g.count for _r, _i, g in groups)
    check_at_most(n_inst, max_instances(), "instances", "PDSIM_MAX_INSTANCES", source=source, field=field)
    n_gpus = copies * sum(g.count * g.gpus_per_instance(group_hw.get((r, i), hw).gpus_per_node) for r, i, g in groups)
    check_at_most(n_gpus, max_gpus(), "GPUs", "PDSIM_MAX_GPUS", source=source, field=field)
    if resolved_scenario.experts is not None:  # expert servers are GPUs too (one each)
        check_at_most(n_gpus + copies * resolved_scenario.experts.servers, max_gpus(), "GPUs with the expert servers",
                      "PDSIM_MAX_GPUS", source=source, field="experts.servers")
    for role, i, g in groups:
        ghw = group_hw.get((role, i), hw)
        _validate_group(resolved_scenario, role, i, g, ghw, model, source, group_memory(ghw, model, g, role))
    clients = [(r, i) for r, i, g in groups if g.expert_service]
    if clients and resolved_scenario.experts is None:
        raise SpecError("expert_service: true needs an experts: block (the expert servers)", source=source,
                        field=f"cluster.{clients[0][0]}[{clients[0][1]}].expert_service")
    if clients and model.moe is None:
        raise SpecError(f"expert_service on dense model {model.name}", source=source,
                        field=f"cluster.{clients[0][0]}[{clients[0][1]}].expert_service")
    if resolved_scenario.experts is not None and not clients:
        raise SpecError("an experts: service without clients: set expert_service: true on the attention groups",
                        source=source, field="experts")
    if resolved_scenario.faults is not None:
        names = {n for *_x, n in resolved_scenario.cluster.instance_names()}
        for j, ev in enumerate(resolved_scenario.faults.events):
            if ev.instance is not None and ev.instance not in names:
                raise SpecError(f"no instance {ev.instance!r}; instances are {', '.join(sorted(names))}",
                                source=source, field=f"faults.events[{j}].instance")
    if resolved_scenario.kv_offload is not None:
        from .catalog import load_storage

        devices = load_storage().devices
        for i, t in enumerate(resolved_scenario.kv_offload.tiers):
            if t.device not in devices:
                raise SpecError(f"unknown storage device {t.device!r}; expected one of {', '.join(devices)}",
                                source=source, field=f"kv_offload.tiers[{i}].device")
    if resolved_scenario.cluster.disaggregated:
        kinds = {g.world(group_hw.get((r, i), hw).gpus_per_node) // g.dp for r, i, g in groups if r != "colocated"}
        if resolved_scenario.transfer.backend == "nccl" and len(kinds) > 1:
            raise SpecError("P2P NCCL needs the same attention TP on P and D (symmetric TP only)",
                            source=source, field="transfer.backend")


def _validate_group(sc: Scenario, role: str, i: int, g: GroupSpec, hw: HardwareProfile, model: ModelSpec,
                    source: str, mem) -> None:
    where = f"cluster.{role}[{i}]"
    gpn = hw.gpus_per_node
    gpus = g.stage_gpus(gpn)
    if g.gpus is not None and gpus < gpn and gpn % gpus != 0:
        raise SpecError(f"{gpus} GPUs do not divide {gpn} GPUs per node", source=source, field=f"{where}.gpus")
    if g.gpus is not None and gpus > gpn:
        raise SpecError(f"{gpus} GPUs exceed one node ({gpn}); use nodes: for multi-node instances",
                        source=source, field=f"{where}.gpus")
    world = g.world(gpn)
    if world != gpus:
        if gpus <= gpn and gpn % world != 0:
            raise SpecError(f"{world} does not divide {gpn} GPUs per node", source=source, field=f"{where}.tp")
        raise SpecError(f"tp is the world size of an instance (of a pipeline stage) and must equal its {gpus} GPUs, "
                        f"got {world}", source=source, field=f"{where}.tp")
    if world % g.dp:
        raise SpecError(f"dp {g.dp} does not divide tp {world}", source=source, field=f"{where}.dp")
    attn_tp = world // g.dp
    if model.attention != "mla" and model.num_heads % attn_tp:
        raise SpecError(f"attention TP {attn_tp} does not divide {model.num_heads} heads",
                        source=source, field=f"{where}.tp")
    if g.ep > 1:
        if model.moe is None:
            raise SpecError(f"ep {g.ep} on dense model {model.name}", source=source, field=f"{where}.ep")
        if g.ep != world:
            raise SpecError(f"ep must be 1 or the world size {world}, got {g.ep}", source=source, field=f"{where}.ep")
        slots = model.moe.num_experts + g.engine.ep_num_redundant_experts
        if slots % g.ep:
            raise SpecError(f"{model.moe.num_experts} experts + {g.engine.ep_num_redundant_experts} redundant "
                            f"do not divide over ep {g.ep}", source=source, field=f"{where}.ep")
    if g.expert_service and g.ep > 1:
        raise SpecError("an expert-service client runs attention only: ep must be 1", source=source,
                        field=f"{where}.ep")
    check_backend(g.engine.attention_backend, model.attention == "mla", hw.gpu.arch,
                  f"{where}.engine.attention_backend", source)
    if g.engine.elementwise == "unfused":
        if hw.gpu.arch == "cpu":
            raise SpecError("unfused is counted for GPU profiles; a CPU profile measures the engine's work per prompt "
                            "token outside its timed kernels (efficiency.prefill_token_ns)", source=source,
                            field=f"{where}.engine.elementwise")
        if model.moe or model.attention == "mla":
            raise SpecError("unfused is counted for dense GQA/MHA decoder layers (transformers' Llama and Qwen2 "
                            f"modeling code); model {model.name!r} is {'MoE' if model.moe else 'MLA'}",
                            source=source, field=f"{where}.engine.elementwise")
    if g.pp > model.num_layers:
        raise SpecError(f"pp_size {g.pp} exceeds the model's {model.num_layers} layers", source=source,
                        field=f"{where}.pipeline.pp_size")
    spec = g.engine.speculative
    if spec is not None:
        if role == "prefill":
            raise SpecError("speculative decoding runs where tokens are decoded: set it on decode or colocated groups",
                            source=source, field=f"{where}.engine.speculative")
        if spec.method == "mtp" and model.mtp_layers < spec.draft_layers:
            raise SpecError(f"{model.name} ships {model.mtp_layers} MTP layer(s); MTP drafting needs {spec.draft_layers}",
                            source=source, field=f"{where}.engine.speculative")
        if spec.method != "mtp" and spec.draft_model is None:
            raise SpecError(f"{spec.method} drafts with a separate model: give draft_model", source=source,
                            field=f"{where}.engine.speculative.draft_model")
        if g.pp > 1:
            raise SpecError("speculative decoding with pipeline parallelism is not modelled", source=source,
                            field=f"{where}.engine.speculative")
    if role == "decode" and sc.transfer.backend == "nccl":
        buf_tokens = int(g.dp * sc.transfer.kv_buffer_fraction * hw.gpu.hbm_bytes / mem.kv_bytes_per_token_per_gpu)
        if mem.kv_tokens - buf_tokens < g.engine.min_kv_reserve_tokens:
            raise SpecError(f"the receive buffer ({sc.transfer.kv_buffer_fraction:.1%} of HBM) "
                            f"leaves {max(0, mem.kv_tokens - buf_tokens)} KV tokens on {where}, below its "
                            f"min_kv_reserve_tokens {g.engine.min_kv_reserve_tokens}",
                            source=source, field="transfer.kv_buffer_fraction")
    mtt = g.engine.max_total_tokens
    if mtt is not None and mtt < g.engine.min_kv_reserve_tokens:
        raise SpecError(f"max_total_tokens {mtt} is below min_kv_reserve_tokens {g.engine.min_kv_reserve_tokens}: "
                        "the KV pool would be too small to serve a request (lower min_kv_reserve_tokens to "
                        "simulate a tiny pool on purpose)", source=source, field=f"{where}.engine.max_total_tokens")
    if mem.kv_tokens < g.engine.min_kv_reserve_tokens:
        raise SpecError(
            f"{model.name} does not fit on {hw.name}: per GPU it needs {mem.weights_gb:.1f} GB of weights + "
            f"{mem.reserve_gb:.1f} GB KV reserve ({g.engine.min_kv_reserve_tokens} tokens), but "
            f"{mem.available_gb:.1f} GB is available (mem_fraction_static {g.engine.mem_fraction_static} "
            f"x {hw.gpu.hbm_gib} GiB, less runtime buffers)", source=source, field=where)
