"""SGLang server and router commands for a scenario (flags: flags.py, SGLang 0.5.3).

One ``python -m sglang.launch_server`` per instance and node (a multi-node instance runs one
process per node with ``--nnodes/--node-rank/--dist-init-addr``), P and D servers with
``--disaggregation-mode`` and the Mooncake transfer backend, and the router
``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ...
--decode URL ...`` (or ``--worker-urls`` for several colocated instances).

What pdsim simulated is what the commands ask for: the new-token reserve pdsim uses is
restored under DP attention, where SGLang multiplies ``--schedule-conservativeness`` by 0.3.
"""
from __future__ import annotations

from ..specs.errors import SpecError
from .flags import NO_LAUNCH_FORM, SGLANG_ROUTER_POLICIES, SGLANG_ROUTER_VERSION, SGLANG_VERSION
from .placement import DIST_PORT, Placement, gpus_per_node_of, node_var, place
from .plan import MODEL_IDS, Command, LaunchPlan, changed, model_path

ROUTER_PORT = 8000
# SGLang defaults the reserve is expressed against (sglang/global_config.py, 0.5.3)
SGL_INIT_RATIO = 0.7
SGL_MIN_RATIO_FACTOR = 0.14
SGL_DECAY_STEPS = 600
SGL_DP_CONSERVATIVENESS = 0.3  # server_args: enable_dp_attention multiplies conservativeness by this

# Every pdsim knob and what it becomes; None: no launch equivalent (the reason follows).
KNOBS: dict[str, str | None] = {
    "group.count": "one server (set of processes) per instance",
    "group.nodes": "--nnodes / --node-rank / --dist-init-addr, one process per node",
    "group.gpus": "--base-gpu-id for instances packed onto one node",
    "group.tp": "--tp-size",
    "group.dp": "--dp-size",
    "group.ep": "--ep-size with --moe-a2a-backend deepep",
    "group.enable_dp_attention": "--enable-dp-attention",
    "group.engine": "the engine.* knobs",
    "group.name": "the instance label in the script's comments",
    "group.hardware": "the nodes the group's instances are placed on (named per profile in the script)",
    "group.pipeline": "--pp-size (the instance spans pp_size x the stage's nodes)",
    "group.expert_service": None,
    "engine.chunked_prefill_size": "--chunked-prefill-size",
    "engine.max_prefill_tokens": "--max-prefill-tokens",
    "engine.max_running_requests": "--max-running-requests",
    "engine.max_total_tokens": "--max-total-tokens",
    "engine.page_size": "--page-size",
    "engine.mem_fraction_static": "--mem-fraction-static",
    "engine.cuda_graph_max_bs": "--cuda-graph-max-bs on decode and colocated servers (0: --disable-cuda-graph)",
    "engine.enable_two_batch_overlap": "--enable-two-batch-overlap",
    "engine.ep_num_redundant_experts": "--ep-num-redundant-experts with --enable-eplb",
    "engine.deepep_mode": "--deepep-mode",
    "engine.kv_cache_dtype": "--kv-cache-dtype (fp8 -> fp8_e4m3)",
    "engine.enable_mixed_chunk": "--enable-mixed-chunk on colocated servers",
    "engine.init_new_token_ratio": "--schedule-conservativeness (x 1/0.3 under DP attention)",
    "engine.min_new_token_ratio": "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
    "engine.new_token_ratio_decay_steps": "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
    "engine.min_kv_reserve_tokens": None,
    "engine.disable_radix_cache": "--disable-radix-cache",
    "engine.max_retractions_per_request": None,
    "engine.schedule_policy": "--schedule-policy (fcfs, lpm, dfs-weight, lof); priority: --enable-priority-scheduling "
                              "(--schedule-low-priority-values-first for priority-low-first)",
    "engine.schedule_params": None,
    "engine.speculative": "--speculative-algorithm NEXTN (mtp) / EAGLE / EAGLE3, --speculative-num-steps, "
                          "--speculative-eagle-topk, --speculative-num-draft-tokens, --speculative-draft-model-path",
    "router.policy": "sglang_router --policy (least_loaded -> power_of_two; cache_aware -> cache_aware prefill, "
                     "power_of_two decode; sglang_cache_aware -> cache_aware with its thresholds; vllm_xpyd -> "
                     "round_robin)",
    "router.params": None,
    "transfer.backend": "--disaggregation-transfer-backend mooncake",
    "transfer.mode": "Mooncake in SGLang pre-allocates on D and P writes (pdsim mode get): nothing to set",
    "transfer.batched": None,
    "transfer.setup_ms": None,
    "transfer.per_page_us": None,
    "transfer.nic_gbit": None,
    "transfer.kv_buffer_fraction": None,
    "transfer.host_pool_gib": None,
    **NO_LAUNCH_FORM,
}
WHY_NOT = {
    "engine.min_kv_reserve_tokens": "pdsim's memory check only",
    "engine.max_retractions_per_request": "pdsim's guard against retraction livelock; SGLang retracts without a limit",
    "router.params": "the router's balance thresholds count requests, not tokens: set --balance-abs-threshold / "
                     "--balance-rel-threshold by hand",
    "transfer.batched": "Mooncake batch transfer is the default (transfer engine >= 0.3.4, SGLang PR #7236); false "
                        "simulates the old per-page path",
    "transfer.setup_ms": "a price override of the simulator",
    "transfer.per_page_us": "a price override of the simulator",
    "transfer.nic_gbit": "a hardware what-if: the NICs are what the nodes have",
    "transfer.kv_buffer_fraction": "P2P NCCL (vLLM) only",
    "transfer.host_pool_gib": "P2P NCCL (vLLM) only",
    "transfer.params": "a plug-in transport's parameters",
    "kv_offload": "pdsim's offload tiers model LMCache-style offload; SGLang's HiCache "
                  "(--enable-hierarchical-cache) is configured differently and is not written",
    "group.expert_service": "expert-as-a-service (attention clients calling remote expert servers) is a research "
                            "design with no SGLang launch form",
    "experts": "expert-as-a-service servers have no SGLang launch form",
    "transfer.link": "the transfer engine picks NVLink or RDMA itself; Mooncake's NVLink transport "
                     "(SGLANG_MOONCAKE_CUSTOM_MEM_POOL, MC_FORCE_MNNVL) is not written",
    "overheads": "fixed costs the simulator adds; nothing to configure",
    "engine.schedule_params": "a pdsim batch-scheduler plug-in's parameters",
    "faults": "simulated failures, not deployment settings",
    "autoscaler": "a simulated scaling policy: the router and a cluster manager would implement it",
    "network": "the fabric's topology is the data centre's, not a server flag",
}
SPEC_ALGORITHM = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3"}
KV_DTYPE = {"fp8": "fp8_e4m3"}
SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight", "lof")


def _reserve(p: Placement) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    """(flags, env, unmapped) that give SGLang the new-token reserve pdsim simulated."""
    e, g = p.group.engine, p.group
    flags, env, unmapped = [], [], []
    dp_factor = SGL_DP_CONSERVATIVENESS if g.enable_dp_attention else 1.0
    conservativeness = e.init_new_token_ratio / SGL_INIT_RATIO / dp_factor
    if abs(conservativeness - 1.0) > 1e-3:
        if SGL_INIT_RATIO * conservativeness * dp_factor > 1.0 + 1e-9:
            unmapped.append(("engine.init_new_token_ratio", "SGLang caps the initial ratio at 1.0"))
        flags += ["--schedule-conservativeness", f"{conservativeness:.4g}"]
    factor = e.min_new_token_ratio / e.init_new_token_ratio if e.init_new_token_ratio else 0.0
    if abs(factor - SGL_MIN_RATIO_FACTOR) > 0.05 * SGL_MIN_RATIO_FACTOR:  # 0.1 / 0.7 = 0.143 is SGLang's 0.14
        env.append(("SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR", f"{factor:.4g}"))
    if e.new_token_ratio_decay_steps != SGL_DECAY_STEPS:
        env.append(("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", str(e.new_token_ratio_decay_steps)))
    return flags, env, unmapped


def _speculative(p: Placement) -> list[str]:
    spec = p.group.engine.speculative
    if spec is None:
        return []
    f = ["--speculative-algorithm", SPEC_ALGORITHM[spec.method], "--speculative-num-steps", str(spec.num_steps),
         "--speculative-eagle-topk", str(spec.topk), "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    if spec.draft_model:
        f += ["--speculative-draft-model-path", MODEL_IDS.get(spec.draft_model, "${DRAFT_MODEL_PATH}")]
    return f


def _server_flags(p: Placement, resolved, disaggregated: bool) -> tuple[list[str], list, list]:
    g, e = p.group, p.group.engine
    gpn = resolved.hardware_of(p.role, p.group_index).gpus_per_node
    unmapped: list[tuple[str, str]] = []
    f = ["--tp-size", str(g.world(gpn))]
    if g.pp > 1:
        f += ["--pp-size", str(g.pp)]
    if g.enable_dp_attention:
        f += ["--dp-size", str(g.dp), "--enable-dp-attention"]
    if g.ep > 1:
        f += ["--ep-size", str(g.ep), "--moe-a2a-backend", "deepep", "--deepep-mode", e.deepep_mode]
        if e.ep_num_redundant_experts:
            f += ["--ep-num-redundant-experts", str(e.ep_num_redundant_experts), "--enable-eplb"]
    elif changed(e, "deepep_mode"):
        unmapped.append(("engine.deepep_mode", "ep is 1: no DeepEP all-to-all to configure"))
    if e.enable_two_batch_overlap:
        f.append("--enable-two-batch-overlap")
    f += ["--chunked-prefill-size", str(e.chunked_prefill_size), "--max-prefill-tokens", str(e.max_prefill_tokens)]
    if e.max_running_requests is not None:
        f += ["--max-running-requests", str(e.max_running_requests)]
    if e.max_total_tokens is not None:
        f += ["--max-total-tokens", str(e.max_total_tokens)]
    f += ["--page-size", str(e.page_size), "--mem-fraction-static", f"{e.mem_fraction_static:g}"]
    if p.role != "prefill":  # prefill servers run eager; graphs serve decode batches
        f += ["--cuda-graph-max-bs", str(e.cuda_graph_max_bs)] if e.cuda_graph_max_bs else ["--disable-cuda-graph"]
    if e.kv_cache_dtype == "fp8":
        f += ["--kv-cache-dtype", KV_DTYPE["fp8"]]
    elif e.kv_cache_dtype == "bf16" and resolved.model.kv_dtype != "bf16":
        unmapped.append(("engine.kv_cache_dtype", f"SGLang {SGLANG_VERSION} stores KV as the model's dtype "
                                                  "(auto) or FP8; a BF16 cache for an FP8 model has no flag"))
    if e.disable_radix_cache:
        f.append("--disable-radix-cache")
    if e.schedule_policy in ("priority", "priority-low-first"):
        f.append("--enable-priority-scheduling")  # SGLang sorts by priority, then arrival (fcfs)
        if e.schedule_policy == "priority-low-first":
            f.append("--schedule-low-priority-values-first")
    elif e.schedule_policy in SCHEDULE_POLICIES:
        if e.schedule_policy != "fcfs":
            f += ["--schedule-policy", e.schedule_policy]
    else:
        unmapped.append(("engine.schedule_policy", f"{e.schedule_policy!r} is not one of SGLang's policies"))
    if p.role == "colocated" and e.enable_mixed_chunk:
        f.append("--enable-mixed-chunk")  # pdsim's default; SGLang's is off
    f += _speculative(p)
    rf, env, ru = _reserve(p)
    f += rf
    unmapped += ru
    if disaggregated:
        f += ["--disaggregation-mode", p.role, "--disaggregation-transfer-backend", "mooncake"]
        if p.role == "prefill":
            f += ["--disaggregation-bootstrap-port", str(p.bootstrap_port)]
    return f, env, unmapped


def _instance_commands(p: Placement, resolved, model: str, disaggregated: bool) -> tuple[list[Command], list]:
    flags, env, unmapped = _server_flags(p, resolved, disaggregated)
    head = ["python", "-m", "sglang.launch_server", "--model-path", model, "--trust-remote-code",
            "--host", "0.0.0.0", "--port", str(p.http_port)]
    cmds = []
    for rank, node in enumerate(p.nodes):
        extra = []
        if p.multi_node:
            extra = ["--nnodes", str(len(p.nodes)), "--node-rank", str(rank),
                     "--dist-init-addr", f"{node_var(p.nodes[0])}:{DIST_PORT + p.index}"]
        gpn = resolved.hardware_of(p.role, p.group_index).gpus_per_node
        if not p.multi_node and p.gpus < gpn:
            extra = ["--base-gpu-id", str(p.base_gpu)]
        where = (f"rank {rank} of {len(p.nodes)} nodes" if p.multi_node
                 else f"GPUs {p.base_gpu}-{p.base_gpu + p.gpus - 1}" if p.gpus < gpn else "the whole node")
        label = f"{p.name} ({p.role}) on {p.hardware}, {where}"
        cmds.append(Command(node, tuple(head + flags + extra), tuple(env), label))
    return cmds, unmapped


def _policy(resolved, disaggregated: bool) -> tuple[list[str], list, str]:
    """(router policy flags, unmapped, note) for the scenario's router."""
    ref = resolved.plugins.get("router")
    policy = resolved.scenario.router.policy
    if policy in ("round_robin", "random"):
        return ["--policy", policy], [], ""
    if policy == "least_loaded":
        return ["--policy", "power_of_two"], [], "least_loaded becomes power_of_two (the less loaded of two random " \
                                                 "instances)"
    if policy == "cache_aware":
        flags = ["--prefill-policy", "cache_aware", "--decode-policy", "power_of_two"] if disaggregated \
            else ["--policy", "cache_aware"]
        return flags, [("router.params", WHY_NOT["router.params"])] if resolved.scenario.router.params else [], ""
    if policy == "sglang_cache_aware" and ref is not None:
        p = ref.params
        flags = ["--policy", "cache_aware", "--cache-threshold", f"{p.cache_threshold:g}",
                 "--balance-abs-threshold", str(p.balance_abs_threshold),
                 "--balance-rel-threshold", f"{p.balance_rel_threshold:g}",
                 "--eviction-interval-secs", str(int(round(p.eviction_interval_s))),
                 # the router counts characters; pdsim's blocks assume ~4 characters per token
                 "--max-tree-size", str(p.max_tree_blocks * p.block_tokens * 4)]
        return flags, [], "sglang_cache_aware with its thresholds"
    if policy == "vllm_xpyd":
        return ["--policy", "round_robin"], [], "vllm_xpyd (vLLM's proxy) round-robins: --policy round_robin"
    why = {"dynamo_kv": "NVIDIA Dynamo's KV router runs in Dynamo's frontend, not in sglang-router",
           "llmd": "llm-d's scheduler runs in its gateway (inference extension), not in sglang-router",
           "mooncake_conductor": "Mooncake's Conductor is not part of sglang-router"}.get(
        policy, f"{policy!r} is a pdsim plug-in; the router's policies are {', '.join(SGLANG_ROUTER_POLICIES)}")
    return [], [("router.policy", why)], ""


def _router(placements: list[Placement], resolved, disaggregated: bool) -> tuple[list[Command], list]:
    pol, unmapped, note = _policy(resolved, disaggregated)
    head = ["python", "-m", "sglang_router.launch_router"]
    url = lambda p: f"http://{node_var(p.nodes[0])}:{p.http_port}"  # noqa: E731
    if disaggregated:
        args = ["--pd-disaggregation"]
        for p in placements:
            if p.role == "prefill":
                args += ["--prefill", url(p), str(p.bootstrap_port)]
        for p in placements:
            if p.role == "decode":
                args += ["--decode", url(p)]
    else:
        if len(placements) < 2:
            return [], unmapped
        args = ["--worker-urls"] + [url(p) for p in placements]
    args += pol + ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    comment = f"router ({SGLANG_ROUTER_VERSION}): requests go to http://<router host>:{ROUTER_PORT}" + \
        (f"; {note}" if note else "")
    return [Command(None, tuple(head + args), (), comment)], unmapped


def sglang_plan(resolved, model_override: str | None = None) -> LaunchPlan:
    """The SGLang deployment of ``resolved`` (a ResolvedScenario)."""
    sc = resolved.scenario
    if sc.transfer.backend != "mooncake" and sc.cluster.disaggregated:
        raise SpecError(f"SGLang P/D moves KV with Mooncake (or NIXL); this scenario uses the {sc.transfer.backend!r} "
                        "transport: write vLLM commands instead (--engine vllm)", field="transfer.backend")
    if resolved.hardware.gpu.arch == "cpu":
        raise SpecError(f"hardware {resolved.hardware.name!r} is a CPU profile: SGLang's launch commands target "
                        "GPUs (use --engine vllm for vLLM's CPU build)", field="hardware")
    placements, n_nodes = place(sc.cluster, gpus_per_node_of(resolved))
    model = model_path(resolved, model_override)
    commands, unmapped = [], []
    for p in placements:
        cmds, un = _instance_commands(p, resolved, model, sc.cluster.disaggregated)
        commands += cmds
        unmapped += [(f"cluster.{p.role}[{p.group_index}].{k}", why) for k, why in un]
    router, un = _router(placements, resolved, sc.cluster.disaggregated)
    commands += router
    unmapped += un
    unmapped += _unmapped_changes(sc)
    mapped = [(k, v) for k, v in KNOBS.items() if v is not None]
    notes = ("each node needs its RDMA devices named for Mooncake (--disaggregation-ib-device) where the "
             "defaults do not find them" if sc.cluster.disaggregated else "",)
    return LaunchPlan("sglang", f"SGLang {SGLANG_VERSION}, sglang-router {SGLANG_ROUTER_VERSION}", sc.name,
                      sc.description, " + ".join(dict.fromkeys(p.hardware for p in placements)), resolved.model.name,
                      model, n_nodes, tuple(commands),
                      tuple(mapped), tuple(dict.fromkeys(unmapped)), tuple(n for n in notes if n))


def _unmapped_changes(sc) -> list[tuple[str, str]]:
    """Knobs without a launch equivalent that the scenario sets away from their defaults."""
    out = []
    for role, gi, g in sc.cluster.groups():
        for k in ("min_kv_reserve_tokens", "max_retractions_per_request"):
            if changed(g.engine, k):
                out.append((f"cluster.{role}[{gi}].engine.{k}", WHY_NOT[f"engine.{k}"]))
    for k in ("batched", "setup_ms", "per_page_us", "nic_gbit", "kv_buffer_fraction", "host_pool_gib", "params"):
        if changed(sc.transfer, k):
            out.append((f"transfer.{k}", WHY_NOT[f"transfer.{k}"]))
    if sc.router.params:
        out.append(("router.params", WHY_NOT["router.params"]))
    for role, gi, g in sc.cluster.groups():
        if g.engine.schedule_params:
            out.append((f"cluster.{role}[{gi}].engine.schedule_params", WHY_NOT["engine.schedule_params"]))
        if g.expert_service:
            out.append((f"cluster.{role}[{gi}].expert_service", WHY_NOT["group.expert_service"]))
    if sc.transfer.link != "rdma":
        out.append(("transfer.link", WHY_NOT["transfer.link"]))
    for k in ("kv_offload", "overheads", "faults", "autoscaler", "experts"):
        if getattr(sc, k) is not None:
            out.append((k, WHY_NOT[k]))
    if changed(sc, "network"):
        out.append(("network", WHY_NOT["network"]))
    return out
