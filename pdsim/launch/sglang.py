"""SGLang server and router commands for a scenario, for one release range (versions.py).

One ``python -m sglang.launch_server`` per instance and node (a multi-node instance runs one
process per node with ``--nnodes/--node-rank/--dist-init-addr``), P and D servers with
``--disaggregation-mode`` and the Mooncake transfer backend, and the router
``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ...
--decode URL ...`` (0.5; on 0.4 ``python -m sglang.srt.disaggregation.mini_lb``), or
``--worker-urls`` for several colocated instances.

Large-scale EP servers (DP attention with DeepEP) follow the SGLang team's recipe (sgl-project/
sglang issue #6017, LMSYS blog 2025-05-05 "large-scale EP"): ``--moe-dense-tp-size 1
--enable-dp-lm-head`` (the dense layers and LM head per DP rank, as pdsim prices them), online
EPLB on prefill (``--enable-eplb --eplb-algorithm deepseek --ep-dispatch-algorithm dynamic
--eplb-rebalance-num-iterations 500``) and a static placement on decode (``--init-expert-location``
from a recorded expert distribution), and the environment block (``SGL_ENABLE_JIT_DEEPGEMM=1``
for FP8 weights on Hopper, ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK`` on low-latency
decode, ``NCCL_IB_HCA`` with ``--ib-devices``). Decode servers get no prefill-only flags.

The simulated new-token reserve is SGLang's own default (pdsim applies SGLang's x0.3 under DP
attention), so no ``--schedule-conservativeness`` is written unless the scenario changes it.
"""
from __future__ import annotations

from ..specs.errors import SpecError
from .flags import ENGINE_FACTS, NO_LAUNCH_FORM, SGLANG_ROUTER_POLICIES
from .placement import DIST_PORT, Placement, gpus_per_node_of, node_var, place
from .plan import MODEL_IDS, Command, LaunchPlan, changed, model_path
from .versions import Release, release

ROUTER_PORT = 8000
# SGLang defaults the reserve is expressed against (sglang/global_config.py, 0.5.3)
SGL_INIT_RATIO = 0.7
SGL_MIN_RATIO_FACTOR = 0.14
SGL_DECAY_STEPS = 600
SGL_DP_CONSERVATIVENESS = 0.3  # server_args: enable_dp_attention multiplies conservativeness by this
SGL_DISPATCH_TOKENS_DEFAULT = 128  # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK's default (DeepEP LL buffers)
EPLB_PREFILL = ["--enable-eplb", "--eplb-algorithm", "deepseek", "--ep-dispatch-algorithm", "dynamic",
                "--eplb-rebalance-num-iterations", "500"]  # issue #6017's prefill values
EXPERT_LOCATION = "${EXPERT_LOCATION}"

# Every pdsim knob and what it becomes; None: no launch equivalent (the reason follows).
# Kernel-backend knobs (attention / MoE runner / GEMM backends) go here as "engine.<knob>": "<flag>",
# with their flags in flags.SGLANG_KERNEL_FLAGS (merged into every release table in versions.py).
KNOBS: dict[str, str | None] = {
    "group.count": "one server (set of processes) per instance",
    "group.nodes": "--nnodes / --node-rank / --dist-init-addr, one process per node",
    "group.gpus": "--base-gpu-id for instances packed onto one node",
    "group.tp": "--tp-size",
    "group.dp": "--dp-size",
    "group.ep": "--ep-size with --moe-a2a-backend deepep (0.4: --enable-deepep-moe)",
    "group.enable_dp_attention": "--enable-dp-attention (with EP: --moe-dense-tp-size 1 --enable-dp-lm-head)",
    "group.engine": "the engine.* knobs",
    "group.name": "the instance label in the script's comments",
    "group.hardware": "the nodes the group's instances are placed on (named per profile in the script)",
    "group.pipeline": "--pp-size (the instance spans pp_size x the stage's nodes)",
    "group.expert_service": None,
    "engine.chunked_prefill_size": "--chunked-prefill-size (prefill and colocated servers)",
    "engine.max_prefill_tokens": "--max-prefill-tokens (prefill and colocated servers)",
    "engine.max_running_requests": "--max-running-requests",
    "engine.max_total_tokens": "--max-total-tokens",
    "engine.page_size": "--page-size",
    "engine.mem_fraction_static": "--mem-fraction-static",
    "engine.cuda_graph_max_bs": "--cuda-graph-max-bs on decode and colocated servers (0: --disable-cuda-graph)",
    "engine.enable_two_batch_overlap": "--enable-two-batch-overlap",
    "engine.ep_num_redundant_experts": "--ep-num-redundant-experts; prefill and colocated: online EPLB "
                                       "(--enable-eplb ...), decode: a static --init-expert-location",
    "engine.deepep_mode": "--deepep-mode",
    "engine.moe_runner": "--moe-runner-backend deep_gemm / triton (0.4: SGL_ENABLE_JIT_DEEPGEMM=1 / 0); "
                         "deepgemm_swapab has no upstream switch (Ant Group's DeepGEMM PR #192 build)",
    "engine.moe_a2a_backend": "deepep: --moe-a2a-backend deepep (0.4: --enable-deepep-moe); none: neither (EP "
                              "exchanges by all-reduce)",
    "engine.attention_backend": "--attention-backend fa3 / flashmla / flashinfer / triton (auto: not written, "
                                "SGLang picks)",
    "engine.kv_cache_dtype": "--kv-cache-dtype (fp8 -> fp8_e4m3)",
    "engine.enable_mixed_chunk": "--enable-mixed-chunk on colocated servers",
    "engine.init_new_token_ratio": "--schedule-conservativeness (ratio / 0.7; both apply x0.3 under DP attention)",
    "engine.min_new_token_ratio": "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
    "engine.new_token_ratio_decay_steps": "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
    "engine.min_kv_reserve_tokens": None,
    "engine.disable_radix_cache": "--disable-radix-cache",
    "engine.prefix_share": None,
    "engine.max_retractions_per_request": None,
    **dict.fromkeys(ENGINE_FACTS),
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
    "engine.prefix_share": "SGLang lends a chunked prompt's KV blocks to other prompts after each chunk's step (cache_unfinished_req: after_step); no switch changes it",
    "engine.max_retractions_per_request": "pdsim's guard against retraction livelock; SGLang retracts without a limit",
    **ENGINE_FACTS,
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
    """(flags, env, unmapped) that give SGLang the new-token reserve pdsim simulated. pdsim's knobs
    are SGLang's values before its DP-attention factor, which both apply (instance.py), so the
    defaults need no flag."""
    e = p.group.engine
    flags, env, unmapped = [], [], []
    conservativeness = e.init_new_token_ratio / SGL_INIT_RATIO
    if abs(conservativeness - 1.0) > 1e-3:
        if SGL_INIT_RATIO * conservativeness > 1.0 + 1e-9:
            unmapped.append(("engine.init_new_token_ratio", "SGLang caps the initial ratio at 1.0"))
        flags += ["--schedule-conservativeness", f"{conservativeness:.4g}"]
    factor = e.min_new_token_ratio / e.init_new_token_ratio if e.init_new_token_ratio else 0.0
    if abs(factor - SGL_MIN_RATIO_FACTOR) > 0.05 * SGL_MIN_RATIO_FACTOR:  # 0.1 / 0.7 = 0.143 is SGLang's 0.14
        env.append(("SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR", f"{factor:.4g}"))
    if e.new_token_ratio_decay_steps != SGL_DECAY_STEPS:
        env.append(("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", str(e.new_token_ratio_decay_steps)))
    return flags, env, unmapped


def _expert_parallel(p: Placement, resolved, rel: Release) -> tuple[list[str], list[tuple[str, str]]]:
    """(flags, env) of a DeepEP server: the a2a switch of the release, large-scale EP flags under
    DP attention, EPLB per role (recipe: online on prefill, static on decode), the env block."""
    g, e = p.group, p.group.engine
    f = ["--ep-size", str(g.ep)]
    if e.moe_a2a_backend == "deepep":
        f += ["--moe-a2a-backend", "deepep"] if rel.accepts("--moe-a2a-backend") else ["--enable-deepep-moe"]
        f += ["--deepep-mode", e.deepep_mode]
    if g.enable_dp_attention:
        f += ["--moe-dense-tp-size", "1", "--enable-dp-lm-head"]
    if e.ep_num_redundant_experts:
        f += ["--ep-num-redundant-experts", str(e.ep_num_redundant_experts)]
        f += ["--init-expert-location", EXPERT_LOCATION] if p.role == "decode" else EPLB_PREFILL
    env = []
    hw = resolved.hardware_of(p.role, p.group_index)
    if e.moe_runner != "triton" and resolved.model.weight_dtype == "fp8" and hw.gpu.arch == "hopper":
        env.append(("SGL_ENABLE_JIT_DEEPGEMM", "1"))  # DeepGEMM's FP8 grouped GEMMs (the recipe's env)
    if p.role == "decode" and e.deepep_mode != "normal" and e.moe_a2a_backend == "deepep":
        spec = e.speculative
        per_step = 1 if spec is None else spec.num_draft_tokens
        tokens = e.cuda_graph_max_bs * per_step  # a rank's largest low-latency dispatch
        if tokens != SGL_DISPATCH_TOKENS_DEFAULT and tokens > 0:
            env.append(("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", str(tokens)))
    return f, env


def _moe_runner(p: Placement, resolved, rel: Release, f: list, env: list, unmapped: list):
    """The routed-expert GEMM kernel (engine.moe_runner) of a MoE model's server."""
    e = p.group.engine
    if resolved.model.moe is None:
        return f, env, unmapped
    if e.moe_runner == "triton":  # Triton fused MoE, the kernel of engines before DeepGEMM
        if rel.accepts("--moe-runner-backend"):
            f = f + ["--moe-runner-backend", "triton"]
        env = [kv for kv in env if kv[0] != "SGL_ENABLE_JIT_DEEPGEMM"] + [("SGL_ENABLE_JIT_DEEPGEMM", "0")]
    elif e.moe_runner == "deepgemm_swapab":
        unmapped = unmapped + [("engine.moe_runner", "deepgemm_swapab is Ant Group's DeepGEMM build (PR #192), "
                                                     "selected by installing it, not by a flag")]
    return f, env, unmapped


def _speculative(p: Placement) -> list[str]:
    spec = p.group.engine.speculative
    if spec is None:
        return []
    f = ["--speculative-algorithm", SPEC_ALGORITHM[spec.method], "--speculative-num-steps", str(spec.num_steps),
         "--speculative-eagle-topk", str(spec.topk), "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    if spec.draft_model:
        f += ["--speculative-draft-model-path", MODEL_IDS.get(spec.draft_model, "${DRAFT_MODEL_PATH}")]
    return f


def _server_flags(p: Placement, resolved, disaggregated: bool, rel: Release,
                  ib_devices: str | None) -> tuple[list[str], list, list]:
    g, e = p.group, p.group.engine
    gpn = resolved.hardware_of(p.role, p.group_index).gpus_per_node
    unmapped: list[tuple[str, str]] = []
    env: list[tuple[str, str]] = []
    f = ["--tp-size", str(g.world(gpn))]
    if g.pp > 1:
        f += ["--pp-size", str(g.pp)]
    if g.enable_dp_attention:
        f += ["--dp-size", str(g.dp), "--enable-dp-attention"]
    if g.ep > 1:
        ef, env = _expert_parallel(p, resolved, rel)
        f += ef
    elif changed(e, "deepep_mode"):
        unmapped.append(("engine.deepep_mode", "ep is 1: no DeepEP all-to-all to configure"))
    f, env, unmapped = _moe_runner(p, resolved, rel, f, env, unmapped)
    if e.attention_backend == "sdpa_packed":
        unmapped.append(("engine.attention_backend", "sdpa_packed is transformers' continuous batching "
                                                     "(paged|sdpa); SGLang has no such kernel"))
    elif e.attention_backend != "auto":  # the attention kernels the step was priced with
        f += ["--attention-backend", e.attention_backend]
    if e.enable_two_batch_overlap:
        f.append("--enable-two-batch-overlap")
    if p.role != "decode":  # prefill-only knobs: a decode server never prefills (SGLang ignores them there)
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
        unmapped.append(("engine.kv_cache_dtype", f"{rel.label} stores KV as the model's dtype "
                                                  "(auto) or FP8; a BF16 cache for an FP8 model has no flag"))
    if e.disable_radix_cache:
        f.append("--disable-radix-cache")
    if e.schedule_policy in ("priority", "priority-low-first"):
        if rel.accepts("--enable-priority-scheduling"):
            f.append("--enable-priority-scheduling")  # SGLang sorts by priority, then arrival (fcfs)
            if e.schedule_policy == "priority-low-first":
                f.append("--schedule-low-priority-values-first")
        else:
            unmapped.append(("engine.schedule_policy", f"{rel.label} has no priority scheduling (0.5 added it)"))
    elif e.schedule_policy in SCHEDULE_POLICIES:
        if e.schedule_policy != "fcfs":
            f += ["--schedule-policy", e.schedule_policy]
    else:
        unmapped.append(("engine.schedule_policy", f"{e.schedule_policy!r} is not one of SGLang's policies"))
    if p.role == "colocated" and e.enable_mixed_chunk:
        f.append("--enable-mixed-chunk")  # pdsim's default; SGLang's is off
    spec = _speculative(p)
    if spec and spec[1] not in rel.server["--speculative-algorithm"][1]:
        unmapped.append(("engine.speculative", f"{spec[1]} is not a speculative algorithm of {rel.label}"))
        spec = []
    f += spec
    rf, renv, ru = _reserve(p)
    f += rf
    env += renv
    unmapped += ru
    if disaggregated:
        f += ["--disaggregation-mode", p.role, "--disaggregation-transfer-backend", "mooncake"]
        if p.role == "prefill":
            f += ["--disaggregation-bootstrap-port", str(p.bootstrap_port)]
        if ib_devices:
            f += ["--disaggregation-ib-device", ib_devices]
    if ib_devices and (p.multi_node or g.ep > 1):
        env.append(("NCCL_IB_HCA", ib_devices))
    return f, env, unmapped


def _instance_commands(p: Placement, resolved, model: str, disaggregated: bool, rel: Release,
                       ib_devices: str | None) -> tuple[list[Command], list]:
    flags, env, unmapped = _server_flags(p, resolved, disaggregated, rel, ib_devices)
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


def _mini_lb(placements: list[Placement], resolved, rel: Release) -> tuple[list[Command], list]:
    """SGLang 0.4's P/D load balancer: it picks a P and a D at random for each request."""
    url = lambda p: f"http://{node_var(p.nodes[0])}:{p.http_port}"  # noqa: E731
    pre = [p for p in placements if p.role == "prefill"]
    args = ["--prefill", *[url(p) for p in pre], "--decode", *[url(p) for p in placements if p.role == "decode"],
            "--prefill-bootstrap-ports", *[str(p.bootstrap_port) for p in pre], "--host", "0.0.0.0",
            "--port", str(ROUTER_PORT)]
    policy = resolved.scenario.router.policy
    unmapped = [] if policy == "random" else [
        ("router.policy", f"{rel.router_version} picks a prefill and a decode server at random; {policy!r} is "
                          "not available there (sglang-router's --pd-disaggregation, SGLang >= 0.5, has policies)")]
    comment = f"router ({rel.router_version}): requests go to http://<router host>:{ROUTER_PORT}"
    return [Command(None, ("python", "-m", "sglang.srt.disaggregation.mini_lb", *args), (), comment)], unmapped


def _router(placements: list[Placement], resolved, disaggregated: bool, rel: Release) -> tuple[list[Command], list]:
    if disaggregated and rel.router_form == "mini_lb":
        return _mini_lb(placements, resolved, rel)
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
    comment = f"router ({rel.router_version if rel.router_form == 'sglang_router' else 'sglang-router'}): " \
              f"requests go to http://<router host>:{ROUTER_PORT}" + (f"; {note}" if note else "")
    return [Command(None, tuple(head + args), (), comment)], unmapped


def sglang_plan(resolved, model_override: str | None = None, version: str | None = None,
                ib_devices: str | None = None) -> LaunchPlan:
    """The SGLang deployment of ``resolved`` (a ResolvedScenario) for SGLang ``version`` (default:
    the newest checked release); ``ib_devices``: the RDMA devices of each node (mlx5_0,...)."""
    rel = release("sglang", version)
    sc = resolved.scenario
    if sc.transfer.backend != "mooncake" and sc.cluster.disaggregated:
        raise SpecError(f"SGLang P/D moves KV with Mooncake (or NIXL); this scenario uses the {sc.transfer.backend!r} "
                        "transport: write vLLM commands instead (--engine vllm)", field="transfer.backend")
    if resolved.hardware.gpu.arch == "cpu":
        raise SpecError(f"hardware {resolved.hardware.name!r} is a CPU profile: SGLang's launch commands target "
                        "GPUs (SGLang on a CPU, as the validation runs it: pdsim/replay/local_server.py SGLANG_ARGS; "
                        "--engine vllm for vLLM's CPU build)", field="hardware")
    placements, n_nodes = place(sc.cluster, gpus_per_node_of(resolved))
    model = model_path(resolved, model_override)
    commands, unmapped = [], []
    for p in placements:
        cmds, un = _instance_commands(p, resolved, model, sc.cluster.disaggregated, rel, ib_devices)
        commands += cmds
        unmapped += [(f"cluster.{p.role}[{p.group_index}].{k}", why) for k, why in un]
    router, un = _router(placements, resolved, sc.cluster.disaggregated, rel)
    commands += router
    unmapped += un
    unmapped += _unmapped_changes(sc)
    mapped = [(k, v) for k, v in KNOBS.items() if v is not None]
    notes = []
    if sc.cluster.disaggregated and not ib_devices:
        notes.append("each node's RDMA devices are not named: give --ib-devices mlx5_0,... (written as "
                     "--disaggregation-ib-device and NCCL_IB_HCA) where the defaults do not find them")
    if any(EXPERT_LOCATION in c.argv for c in commands):
        notes.append("EXPERT_LOCATION: the decode servers' static expert placement, a file written by a run with "
                     "--expert-distribution-recorder-mode stat (issue #6017's recipe; prefill rebalances online)")
    versions = f"{rel.label} (flags checked against {rel.checked}), {rel.router_version}"
    return LaunchPlan("sglang", versions, sc.name,
                      sc.description, " + ".join(dict.fromkeys(p.hardware for p in placements)), resolved.model.name,
                      model, n_nodes, tuple(commands),
                      tuple(mapped), tuple(dict.fromkeys(unmapped)), tuple(notes))


def _unmapped_changes(sc) -> list[tuple[str, str]]:
    """Knobs without a launch equivalent that the scenario sets away from their defaults."""
    out = []
    for role, gi, g in sc.cluster.groups():
        for k in ("min_kv_reserve_tokens", "max_retractions_per_request",
                  *(f.split(".", 1)[1] for f in ENGINE_FACTS)):
            if changed(g.engine, k):
                out.append((f"cluster.{role}[{gi}].engine.{k}", WHY_NOT[f"engine.{k}"]))
        if g.engine.prefix_share != "after_step":  # the engine's own behaviour, not the scenario's
            out.append((f"cluster.{role}[{gi}].engine.prefix_share", WHY_NOT["engine.prefix_share"]))
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
