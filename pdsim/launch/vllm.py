"""vLLM commands for a scenario (flags: flags.py; release ranges: versions.py): ``vllm serve`` per instance,
P2P NCCL xPyD with ``--kv-transfer-config`` (P2pNcclConnector: kv_producer on P, kv_consumer on
D, send_type PUT / PUT_ASYNC / GET, the consumer's GPU receive buffer kv_buffer_size in bytes,
the host tensor pool mem_pool_size_gb) and vLLM's example proxy, which round-robins over the
instances that register with it (it needs ``quart`` and ``aiohttp``).

The consumer's receive buffer is what the scenario simulates (``transfer.kv_buffer_fraction`` of
HBM; vLLM's xPyD example gives it ~10%); the decode server's ``--gpu-memory-utilization`` is
lowered by the same share, because vLLM allocates the buffer outside its KV budget, so the KV
pool is the one simulated. ``nccl_num_channels`` is written as in vLLM's xPyD example (16).

Attention under vLLM: pdsim's ``tp`` is the instance's world size; vLLM's
``--tensor-parallel-size`` is the attention TP (world / dp) and ``--data-parallel-size`` the
attention DP; ``--enable-expert-parallel`` spreads experts over all of them (pdsim ep = world).
A multi-node instance runs its DP ranks across nodes (``--data-parallel-size-local``,
``--data-parallel-address``, ``--data-parallel-start-rank``, ``--headless`` on all but the first)
or, without DP, one tensor-parallel engine over a Ray cluster.
"""
from __future__ import annotations

import json

from ..specs.errors import SpecError
from ..specs.memory import instance_memory
from .flags import ENGINE_FACTS, NO_LAUNCH_FORM, VLLM_ATTENTION_BACKENDS, VLLM_PROXY_DISCOVERY_PORT
from .placement import Placement, gpus_per_node_of, node_var, place
from .plan import MODEL_IDS, Command, LaunchPlan, changed, model_path
from .versions import Release, release

BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
SEND_TYPE = {"put": "PUT", "put_async": "PUT_ASYNC", "get": "GET"}
PRODUCER_KV_PORT, CONSUMER_KV_PORT = 21001, 22001  # as vLLM's xPyD example
DP_RPC_PORT = 13345
HTTP_BASE = 20000  # the example proxy listens on 10001 and 30001
RAY_PORT = 6379
PROXY = "disagg_proxy_p2p_nccl_xpyd.py"
NCCL_NUM_CHANNELS = "16"  # docs/features/disagg_prefill p2p_nccl_connector example configs

# Kernel-backend knobs (attention / MoE runner / GEMM backends) go here as "engine.<knob>": "<flag>",
# with their flags in flags.VLLM_KERNEL_FLAGS (merged into every release table in versions.py).
KNOBS: dict[str, str | None] = {
    "group.count": "one vllm serve per instance",
    "group.nodes": "DP ranks across nodes (--data-parallel-size-local/-address/-start-rank, --headless), or a Ray "
                   "cluster for tensor parallelism across nodes",
    "group.gpus": "CUDA_VISIBLE_DEVICES for instances packed onto one node",
    "group.tp": "--tensor-parallel-size (attention TP = tp / dp)",
    "group.dp": "--data-parallel-size",
    "group.ep": "--enable-expert-parallel (EP over TP x DP)",
    "group.enable_dp_attention": "--data-parallel-size",
    "group.engine": "the engine.* knobs",
    "group.name": "the instance label in the script's comments",
    "group.hardware": "the nodes the group's instances are placed on (named per profile in the script)",
    "group.pipeline": "--pipeline-parallel-size",
    "group.expert_service": None,
    "engine.chunked_prefill_size": "--max-num-batched-tokens per DP rank (-1: --no-enable-chunked-prefill)",
    "engine.max_prefill_tokens": "bounds --max-num-batched-tokens per DP rank",
    "engine.max_running_requests": "--max-num-seqs",
    "engine.max_total_tokens": "--kv-cache-memory-bytes per GPU (VLLM_CPU_KVCACHE_SPACE GiB on a CPU)",
    "engine.page_size": "--block-size (1, 8, 16, 32, 64, 128)",
    "engine.mem_fraction_static": "--gpu-memory-utilization (decode: less the receive buffer's share)",
    "engine.cuda_graph_max_bs": "--cuda-graph-sizes (0: --enforce-eager)",
    "engine.enable_two_batch_overlap": "--enable-dbo (0.11)",
    "engine.ep_num_redundant_experts": "--enable-eplb with --eplb-config num_redundant_experts (0.10: "
                                       "--num-redundant-experts)",
    "engine.deepep_mode": "VLLM_ALL2ALL_BACKEND (normal: deepep_high_throughput, low_latency: deepep_low_latency)",
    "engine.moe_runner": "VLLM_USE_DEEP_GEMM=1 (deepgemm) / 0 (triton); deepgemm_swapab has no switch (Ant "
                         "Group's DeepGEMM PR #192 build)",
    "engine.moe_a2a_backend": "deepep: VLLM_ALL2ALL_BACKEND=deepep_*; none: VLLM_ALL2ALL_BACKEND=naive",
    "engine.attention_backend": "VLLM_ATTENTION_BACKEND (fa3: FLASH_ATTN, flashinfer: FLASHINFER, triton: "
                                "TRITON_ATTN / TRITON_MLA, flashmla: FLASHMLA)",
    "engine.kv_cache_dtype": "--kv-cache-dtype (fp8, bfloat16)",
    "engine.enable_mixed_chunk": "vLLM V1 always mixes prefill chunks into decode steps",
    "engine.init_new_token_ratio": None,
    "engine.min_new_token_ratio": None,
    "engine.new_token_ratio_decay_steps": None,
    "engine.min_kv_reserve_tokens": None,
    "engine.disable_radix_cache": "--no-enable-prefix-caching",
    "engine.prefix_share": None,
    "engine.max_retractions_per_request": None,
    **dict.fromkeys(ENGINE_FACTS),
    "engine.schedule_policy": "--scheduling-policy fcfs; priority-low-first: --scheduling-policy priority",
    "engine.schedule_params": None,
    "engine.speculative": "--speculative-config (method deepseek_mtp / eagle / eagle3, num_speculative_tokens)",
    "router.policy": "the example proxy round-robins (pdsim's vllm_xpyd)",
    "router.params": None,
    "transfer.backend": "--kv-transfer-config kv_connector P2pNcclConnector",
    "transfer.mode": "--kv-transfer-config send_type (PUT, PUT_ASYNC, GET)",
    "transfer.batched": None,
    "transfer.setup_ms": None,
    "transfer.per_page_us": None,
    "transfer.nic_gbit": None,
    "transfer.kv_buffer_fraction": "--kv-transfer-config kv_buffer_size (bytes) of the consumer (and producer for GET)",
    "transfer.host_pool_gib": "--kv-transfer-config mem_pool_size_gb",
    **NO_LAUNCH_FORM,
}
WHY_NOT = {
    "engine.init_new_token_ratio": "vLLM V1 admits without a reserve for future tokens and preempts when KV runs out",
    "engine.min_new_token_ratio": "vLLM V1 admits without a reserve for future tokens",
    "engine.new_token_ratio_decay_steps": "vLLM V1 admits without a reserve for future tokens",
    "engine.min_kv_reserve_tokens": "pdsim's memory check only",
    "engine.prefix_share": "vLLM V1 lends a chunked prompt's KV blocks to other prompts when it schedules the step computing them (at_schedule); no switch changes it",
    "engine.max_retractions_per_request": "pdsim's guard against retraction livelock",
    **ENGINE_FACTS,
    "router.params": "the example proxy takes no parameters",
    "transfer.batched": "a Mooncake option",
    "transfer.setup_ms": "a price override of the simulator",
    "transfer.per_page_us": "a price override of the simulator",
    "transfer.nic_gbit": "a hardware what-if",
    "transfer.params": "a plug-in transport's parameters",
    "kv_offload": "offload tiers are LMCache's configuration (LMCacheConnectorV1 and its YAML), not written here",
    "group.expert_service": "expert-as-a-service has no vLLM launch form",
    "experts": "expert-as-a-service servers have no vLLM launch form",
    "transfer.link": "NCCL picks NVLink between GPUs of one node by itself",
    "overheads": "fixed costs the simulator adds; nothing to configure",
    "engine.schedule_params": "a pdsim batch-scheduler plug-in's parameters",
    "faults": "simulated failures, not deployment settings",
    "autoscaler": "a simulated scaling policy, not a server flag",
    "network": "the fabric's topology is the data centre's, not a server flag",
}
SPEC_METHOD = {"mtp": "deepseek_mtp", "eagle": "eagle", "eagle3": "eagle3"}


def _kv_transfer(p: Placement, resolved, proxy_host: str) -> str:
    tr = resolved.scenario.transfer
    hbm = resolved.hardware.gpu.hbm_bytes
    consumer = p.role == "decode"
    buffer = tr.kv_buffer_fraction * hbm if (consumer or tr.mode == "get") else 10.0  # a producer's PUT buffer: none
    cfg = {"kv_connector": "P2pNcclConnector", "kv_role": "kv_consumer" if consumer else "kv_producer",
           "kv_buffer_size": f"{buffer:.3g}",
           "kv_port": str((CONSUMER_KV_PORT if consumer else PRODUCER_KV_PORT) + p.index),
           "kv_connector_extra_config": {"proxy_ip": proxy_host, "proxy_port": str(VLLM_PROXY_DISCOVERY_PORT),
                                         "http_port": str(p.http_port), "send_type": SEND_TYPE[tr.mode],
                                         "mem_pool_size_gb": f"{tr.host_pool_gib:g}",
                                         "nccl_num_channels": NCCL_NUM_CHANNELS}}
    return json.dumps(cfg, separators=(",", ":"))


def _engine_flags(p: Placement, resolved, rel: Release) -> tuple[list[str], list[tuple[str, str]],
                                                                  list[tuple[str, str]]]:
    g, e = p.group, p.group.engine
    hw, model = resolved.hardware_of(p.role, p.group_index), resolved.model
    gpn = hw.gpus_per_node
    attn_tp = g.world(gpn) // g.dp
    f, env, unmapped = ["--tensor-parallel-size", str(attn_tp)], [], []
    if g.pp > 1:
        f += ["--pipeline-parallel-size", str(g.pp)]
    if e.speculative is not None:
        spec = e.speculative
        cfg = {"method": SPEC_METHOD[spec.method], "num_speculative_tokens": spec.num_steps}
        if spec.draft_model:
            cfg["model"] = MODEL_IDS.get(spec.draft_model, "${DRAFT_MODEL_PATH}")
        f += ["--speculative-config", json.dumps(cfg)]
        if spec.topk > 1:
            unmapped.append(("engine.speculative", f"topk {spec.topk}: vLLM drafts a chain (topk 1)"))
    if resolved.model.moe is not None:  # the routed-expert GEMM kernel (engine.moe_runner)
        if e.moe_runner == "deepgemm_swapab":
            unmapped.append(("engine.moe_runner", "deepgemm_swapab is Ant Group's DeepGEMM build (PR #192), "
                                                  "selected by installing it, not by a flag"))
        elif changed(e, "moe_runner") or resolved.model.weight_dtype == "fp8":
            env.append(("VLLM_USE_DEEP_GEMM", "0" if e.moe_runner == "triton" else "1"))
    if e.attention_backend != "auto":  # the attention kernels the step was priced with
        form = "mla" if model.attention == "mla" else "gqa"
        name = VLLM_ATTENTION_BACKENDS[rel.checked].get((e.attention_backend, form))
        if name:
            env.append(("VLLM_ATTENTION_BACKEND", name))
        else:
            unmapped.append(("engine.attention_backend", f"{rel.label} has no {e.attention_backend} kernel for "
                                                         f"{form.upper()} attention on Hopper (VLLM_ATTENTION_BACKEND)"))
    if g.dp > 1:
        f += ["--data-parallel-size", str(g.dp)]
    if g.ep > 1:
        f.append("--enable-expert-parallel")
        mode = e.deepep_mode if e.deepep_mode != "auto" else ("normal" if p.role == "prefill" else "low_latency")
        backend = "deepep_high_throughput" if mode == "normal" else "deepep_low_latency"
        env.append(("VLLM_ALL2ALL_BACKEND", backend if e.moe_a2a_backend == "deepep" else "naive"))
        if e.deepep_mode == "auto" and p.role == "colocated" and e.moe_a2a_backend == "deepep":
            unmapped.append(("engine.deepep_mode", "auto switches per batch in SGLang; a vLLM instance uses one "
                                                   "all-to-all backend (low latency written)"))
        if e.ep_num_redundant_experts:
            f += ["--enable-eplb"] + (
                ["--eplb-config", json.dumps({"num_redundant_experts": e.ep_num_redundant_experts})]
                if rel.accepts("--eplb-config") else ["--num-redundant-experts", str(e.ep_num_redundant_experts)])
    if e.enable_two_batch_overlap:
        if rel.accepts("--enable-dbo"):
            f.append("--enable-dbo")
        else:
            unmapped.append(("engine.enable_two_batch_overlap", f"{rel.label} has no dual-batch overlap (--enable-dbo)"))
    if e.max_running_requests is not None:
        f += ["--max-num-seqs", str(e.max_running_requests)]
    else:
        unmapped.append(("engine.max_running_requests", "unset (bounded by KV memory) has no vLLM form: vLLM caps "
                                                         "running requests at its default --max-num-seqs"))
    f += ["--max-num-batched-tokens", str(e.prefill_budget(g.dp))]
    if e.chunked_prefill_size == -1:
        f.append("--no-enable-chunked-prefill")
    if e.page_size in BLOCK_SIZES:
        f += ["--block-size", str(e.page_size)]
    else:
        unmapped.append(("engine.page_size", f"{e.page_size} is not a vLLM block size ({BLOCK_SIZES})"))
    mem = instance_memory(hw, model, g)
    if hw.gpu.arch == "cpu":
        if e.max_total_tokens is not None:
            gib = max(1, round(e.max_total_tokens * mem.kv_bytes_per_token_per_gpu / 2**30))
            env.append(("VLLM_CPU_KVCACHE_SPACE", str(gib)))
    else:
        tr = resolved.scenario.transfer
        util = e.mem_fraction_static
        if p.role == "decode" and resolved.scenario.cluster.disaggregated and tr.backend == "nccl":
            util -= tr.kv_buffer_fraction  # the receive buffer sits outside vLLM's budget
        f += ["--gpu-memory-utilization", f"{util:.4g}"]
        if e.max_total_tokens is not None:
            per_gpu = e.max_total_tokens / g.dp * mem.kv_bytes_per_token_per_gpu
            if rel.accepts("--kv-cache-memory-bytes"):
                f += ["--kv-cache-memory-bytes", str(int(per_gpu))]
            else:
                unmapped.append(("engine.max_total_tokens", f"{rel.label} has no --kv-cache-memory-bytes"))
    if e.kv_cache_dtype == "fp8":
        f += ["--kv-cache-dtype", "fp8"]
    elif e.kv_cache_dtype == "bf16" and model.kv_dtype != "bf16":
        f += ["--kv-cache-dtype", "bfloat16"]
    if e.disable_radix_cache:
        f.append("--no-enable-prefix-caching")
    if e.cuda_graph_max_bs > 0 and hw.gpu.arch != "cpu":
        f += ["--cuda-graph-sizes", str(e.cuda_graph_max_bs)]
    else:
        f.append("--enforce-eager")
    if e.schedule_policy == "priority-low-first":
        f += ["--scheduling-policy", "priority"]  # vLLM: lower values first
    elif e.schedule_policy != "fcfs":
        unmapped.append(("engine.schedule_policy", f"vLLM schedules fcfs or by priority (lower values first), not "
                                                   f"{e.schedule_policy!r}"))
    if not e.enable_mixed_chunk and p.role == "colocated":
        unmapped.append(("engine.enable_mixed_chunk", "vLLM V1 always mixes prefill chunks into decode steps"))
    return f, env, unmapped


def _instance_commands(p: Placement, resolved, model: str, disaggregated: bool, rel: Release,
                       ib_devices: str | None) -> tuple[list[Command], list]:
    flags, env, unmapped = _engine_flags(p, resolved, rel)
    if ib_devices:
        env = env + [("NCCL_IB_HCA", ib_devices)]
    g = p.group
    gpn = resolved.hardware_of(p.role, p.group_index).gpus_per_node
    head = ["vllm", "serve", model]
    common = ["--host", "0.0.0.0", "--port", str(p.http_port), "--trust-remote-code"] + flags
    if disaggregated:
        common += ["--kv-transfer-config", _kv_transfer(p, resolved, node_var(0))]
    if p.gpus < gpn and not p.multi_node:
        env = [("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(p.base_gpu, p.base_gpu + p.gpus)))] + env
    label = f"{p.name} ({p.role}) on {p.hardware}"
    if not p.multi_node:
        return [Command(p.nodes[0], tuple(head + common), tuple(env), label)], unmapped
    cmds = []
    if g.dp > 1:
        local = g.dp // len(p.nodes)
        for rank, node in enumerate(p.nodes):
            dp = ["--data-parallel-size-local", str(local), "--data-parallel-address", node_var(p.nodes[0]),
                  "--data-parallel-rpc-port", str(DP_RPC_PORT + p.index)]
            if rank:
                dp += ["--data-parallel-start-rank", str(rank * local), "--headless"]
            cmds.append(Command(node, tuple(head + common + dp), tuple(env),
                                f"{label}, DP ranks {rank * local}-{(rank + 1) * local - 1} on node rank {rank}"))
        return cmds, unmapped
    # tensor parallel across nodes: a Ray cluster, the engine started on its head node
    head_node = p.nodes[0]
    cmds.append(Command(head_node, ("ray", "start", "--head", "--port", str(RAY_PORT)), (), f"{label}: Ray head",
                        program_len=2))
    for node in p.nodes[1:]:
        cmds.append(Command(node, ("ray", "start", "--address", f"{node_var(head_node)}:{RAY_PORT}"), (),
                            f"{label}: Ray worker", program_len=2))
    cmds.append(Command(head_node, tuple(head + common + ["--distributed-executor-backend", "ray"]), tuple(env),
                        f"{label}: tensor parallel over {len(p.nodes)} nodes via Ray; start it once `ray status` "
                        f"shows all {len(p.nodes)} nodes"))
    return cmds, unmapped


def vllm_plan(resolved, model_override: str | None = None, version: str | None = None,
              ib_devices: str | None = None) -> LaunchPlan:
    """The vLLM deployment of ``resolved`` (P2P NCCL xPyD, or colocated instances) for vLLM
    ``version`` (default: the newest checked release)."""
    rel = release("vllm", version)
    sc = resolved.scenario
    if sc.cluster.disaggregated and sc.transfer.backend == "shared_storage":
        raise SpecError("vLLM's shared-storage handoff (ExampleConnector) is a debugging connector pdsim launch does not "
                        "write commands for; validation/cpu-vllm-pd/run_case.py starts such a pair (P and D with "
                        "--kv-transfer-config ExampleConnector kv_both, python -m pdsim.replay.pd_proxy in front)",
                        field="transfer.backend")
    if sc.cluster.disaggregated and sc.transfer.backend != "nccl":
        raise SpecError(f"{rel.label} P/D here means P2P NCCL (backend: nccl); this scenario uses "
                        f"{sc.transfer.backend!r}, SGLang's transport: write SGLang commands (--engine sglang)",
                        field="transfer.backend")
    placements, n_nodes = place(sc.cluster, gpus_per_node_of(resolved), HTTP_BASE)
    model = model_path(resolved, model_override)
    commands, unmapped = [], []
    for p in placements:
        cmds, un = _instance_commands(p, resolved, model, sc.cluster.disaggregated, rel, ib_devices)
        commands += cmds
        unmapped += [(f"cluster.{p.role}[{p.group_index}].{k}", why) for k, why in un]
    notes = []
    if sc.cluster.disaggregated:
        commands.append(Command(None, ("python3", PROXY), (), "vLLM's xPyD proxy (examples/online_serving/"
                                "disaggregated_serving_p2p_nccl_xpyd of the release; needs pip install quart "
                                "aiohttp): instances register on port "
                                f"{VLLM_PROXY_DISCOVERY_PORT}, requests go to http://<proxy host>:10001", program_len=2))
        notes.append(f"run the proxy on node 0 from vLLM's examples/online_serving/"
                     f"disaggregated_serving_p2p_nccl_xpyd folder (the instances' proxy_ip is {node_var(0)}); it "
                     "needs quart and aiohttp: pip install quart aiohttp")
        if sc.transfer.mode == "get" and sc.transfer.kv_buffer_fraction == 0:
            notes.append("send_type GET keeps each prompt's KV in the producer's buffer until D pulls it, and this "
                         "scenario gives that buffer kv_buffer_size 0 (transfer.kv_buffer_fraction): every transfer "
                         "then goes through the host pool; vLLM's example gives the buffer ~10% of HBM")
        if sc.router.policy not in ("round_robin", "vllm_xpyd"):
            unmapped.append(("router.policy", f"the example proxy round-robins; {sc.router.policy!r} has no "
                                              "equivalent there"))
    elif len(placements) > 1:
        notes.append("several colocated instances: put an HTTP load balancer in front (vLLM ships none)")
        if sc.router.policy != "round_robin":
            unmapped.append(("router.policy", "no vLLM router: the load balancer decides"))
    unmapped += _unmapped_changes(sc)
    mapped = [(k, v) for k, v in KNOBS.items() if v is not None]
    return LaunchPlan("vllm", f"{rel.label} (flags checked against {rel.checked})", sc.name, sc.description,
                      " + ".join(dict.fromkeys(p.hardware for p in placements)), resolved.model.name, model, n_nodes,
                      tuple(commands), tuple(mapped),
                      tuple(dict.fromkeys(unmapped)), tuple(notes))


def _unmapped_changes(sc) -> list[tuple[str, str]]:
    out = []
    for role, gi, g in sc.cluster.groups():
        for k in ("init_new_token_ratio", "min_new_token_ratio", "new_token_ratio_decay_steps",
                  "min_kv_reserve_tokens", "max_retractions_per_request",
                  *(f.split(".", 1)[1] for f in ENGINE_FACTS)):
            if changed(g.engine, k):
                out.append((f"cluster.{role}[{gi}].engine.{k}", WHY_NOT[f"engine.{k}"]))
        if g.engine.prefix_share != "at_schedule":  # the engine's own behaviour, not the scenario's
            out.append((f"cluster.{role}[{gi}].engine.prefix_share", WHY_NOT["engine.prefix_share"]))
    for k in ("batched", "setup_ms", "per_page_us", "nic_gbit", "params"):
        if changed(sc.transfer, k):
            out.append((f"transfer.{k}", WHY_NOT[f"transfer.{k}"]))
    if sc.router.params:
        out.append(("router.params", WHY_NOT["router.params"]))
    for role, gi, g in sc.cluster.groups():
        if g.engine.schedule_params:
            out.append((f"cluster.{role}[{gi}].engine.schedule_params", WHY_NOT["engine.schedule_params"]))
        if g.expert_service:
            out.append((f"cluster.{role}[{gi}].expert_service", WHY_NOT["group.expert_service"]))
    for k in ("kv_offload", "overheads", "faults", "autoscaler", "experts"):
        if getattr(sc, k) is not None:
            out.append((k, WHY_NOT[k]))
    if changed(sc, "network"):
        out.append(("network", WHY_NOT["network"]))
    return out
