"""Host (CPU) work of a serving engine, priced apart from the accelerator's kernels. Seconds.

Three parts, each a formula over the engine's structure and the host it runs on, and the
tokeniser on each request's way in (``tokenize_s``):

1. **Eager launches, derived from the layer's structure.** Without CUDA graphs every layer
   launches its kernels one by one from Python: per layer, kernels x ``kernel_launch_us`` (the
   host-side cost of one launch) + module calls x ``module_call_us`` (PyTorch ``nn.Module``
   dispatch). The counts follow the decoder layer as vLLM and SGLang write it (e.g. vLLM
   ``vllm/model_executor/models/llama.py``, ``LlamaDecoderLayer``: input norm; attention = QKV
   projection, rotary embedding, KV-cache write, attention kernel, output projection; post-
   attention fused add + norm; MLP = gate/up projection, SiLU-and-mul, down projection); a
   tensor-parallel layer adds two all-reduces; an MoE layer replaces the MLP by router GEMM,
   top-k, token permutation, two grouped GEMMs, activation and un-permutation (+ a shared expert's
   three, + EP dispatch and combine). A CUDA graph replays all of that as one launch per layer
   (``graph_launch_us``): the launches and module calls are what it removes. With both costs
   left at 0 (every bundled profile), the flat ``layer_launch_us`` per layer is used as before.
   Assumptions, no public measurement of these two figures in serving: ``kernel_launch_us``
   ~ 2-8 us (a CUDA launch from PyTorch, host side), ``module_call_us`` ~ 1-5 us. A GPU
   session measures ``kernel_launch_us`` as the issue time per kernel of a whole eager step
   (costs/measured.py: the host-bound batch-1 decode step / its layers x kernels; h100.yaml:
   14.5 us, the median over the H100 sessions, 17.9 us on the first cloud VM alone). This is
   the host's ISSUE time: launches are asynchronous, so costs/step.py exposes only the part of
   it the step's GPU work does not cover.

2. **Per-step host work** (schedule, prepare inputs, sample, detokenise, stream):
   ``step_overhead_us + seq_overhead_us x B + ctx_overhead_ns x context`` (costs/step.py
   prices it; measured on the CPU profile by calibration/microbench/cpu_profile.py, refitted
   from real runs by ``pdsim calibrate from-runs``).

3. **Processes sharing host cores.** A measured profile records its machine's cores and how many
   busy processes shared them while the host work was measured (``machine.cores``,
   ``machine.host_processes``: vLLM's API server, engine core and worker, plus the load
   generator). A deployment on that host runs its own processes: per instance an API server, an
   engine core and one worker per device, plus the P/D proxy and the load generator. When busy
   processes outnumber cores each runs for cores / busy of the time, so host work stretches by
   share = max(1, busy / cores); the measured constants already contain the measuring
   deployment's share, so a scenario's host work is scaled by share(scenario) / share(measured).
   A profile without those two facts (every GPU datasheet profile) is not scaled: GPU hosts have
   tens of cores per node.
"""
from __future__ import annotations

import dataclasses

# ---- 1. eager launches ------------------------------------------------------------------------
ATTN_KERNELS = 5  # QKV GEMM, rotary, KV-cache write, attention, output GEMM
NORM_KERNELS = 2  # input RMSNorm, post-attention fused add + RMSNorm
MLP_KERNELS = 3  # gate/up GEMM, SiLU-and-mul, down GEMM
MOE_KERNELS = 7  # router GEMM, top-k, permute, grouped GEMM up, activation, grouped GEMM down, un-permute
EP_KERNELS = 2  # dispatch, combine
TP_KERNELS = 2  # all-reduce after attention and after the MLP
LAYER_MODULES = 12  # decoder layer, 2 norms, attention (+ qkv, rotary, attention backend, o_proj), MLP (+ 3)


def kernels_per_layer(moe: bool, shared_experts: int, tp: int, ep: int) -> int:
    """Kernels one decoder layer launches in eager mode (module doc)."""
    n = ATTN_KERNELS + NORM_KERNELS
    n += (MOE_KERNELS + MLP_KERNELS * (1 if shared_experts else 0) + (EP_KERNELS if ep > 1 else 0)) if moe \
        else MLP_KERNELS
    return n + (TP_KERNELS if tp > 1 else 0)


def eager_layer_s(model, group, eff, attn_tp: int) -> float:
    """Host time per layer of an eager step, averaged over the model's dense and MoE layers:
    the structural form when the profile gives ``kernel_launch_us`` or ``module_call_us``,
    else its flat ``layer_launch_us``. An engine that writes its layer otherwise states its own
    count (``engine.eager_kernels_per_layer``: transformers' unfused layer launches ~5x the
    fused one's kernels), which replaces the count below."""
    if not (eff.kernel_launch_us or eff.module_call_us):
        return eff.layer_launch_us * 1e-6
    own = group.engine.eager_kernels_per_layer
    if own:
        k = own
    else:
        moe = model.moe
        shared = moe.num_shared_experts if moe is not None else 0
        n_moe = model.n_moe_layers
        n_dense = model.num_layers - n_moe
        k = (n_dense * kernels_per_layer(False, 0, attn_tp, 1)
             + n_moe * kernels_per_layer(True, shared, attn_tp, group.ep)) / model.num_layers
    return (k * eff.kernel_launch_us + LAYER_MODULES * eff.module_call_us) * 1e-6


# ---- per request: the tokeniser -----------------------------------------------------------------
def tokenize_s(input_len: int, eff) -> float:
    """The API server tokenising a text prompt: ``tokenize_ns`` per prompt token, once per request
    on its way in (0 where prompts arrive as token ids, as ``pdsim replay`` sends them). Not a
    queue: concurrent requests tokenise side by side. Assumption for a Rust fast tokenizer
    (Hugging Face ``tokenizers``): ~0.2-2 us per token on one core, so a 100k-token prompt spends
    20-200 ms before it reaches the scheduler."""
    return eff.tokenize_ns * 1e-9 * input_len


# ---- 3. processes sharing host cores ------------------------------------------------------------
PER_INSTANCE = 2  # API server + engine core (vLLM V1: the HTTP front end and the scheduler loop)


def core_share(busy: float, cores: float) -> float:
    """How much longer host work takes when ``busy`` processes share ``cores`` cores (>= 1)."""
    return max(1.0, busy / cores) if cores > 0 else 1.0


def busy_processes(scenario, gpus_per_node: int) -> int:
    """Busy processes of a deployment on one host: per instance its API server, engine core and
    one worker per device; a P/D proxy; the load generator."""
    n = 0
    for _, _, g in scenario.cluster.groups():
        n += g.count * (PER_INSTANCE + g.world(gpus_per_node))
    return n + (1 if scenario.cluster.prefill else 0) + 1


def placed_groups(scenario) -> set[tuple[str, int]]:
    """(role, group index) of every group the scenario's ``host.placement`` puts on host cores."""
    from ..specs.host import group_keys

    host = getattr(scenario, "host", None)
    if host is None or not host.placement:
        return set()
    keys = group_keys(scenario.cluster)
    return {keys[g][:2] for g in host.placement if g in keys}


def host_scale(resolved) -> float:
    """share(this deployment) / share(the deployment the profile's host work was measured in);
    1 when the profile does not record its cores and busy processes. The groups a placement puts
    on cores (``host.placement``) do not take it: their sharing is simulated step by step
    (sim/host_cores.py) instead of this static count of every process as always busy
    (``with_host_sharing``); the groups it does not place (a GPU group beside placed CPU groups)
    keep it."""
    hw = resolved.hardware
    m = getattr(hw, "machine", None) or {}
    cores, measured = m.get("cores"), m.get("host_processes")
    if not cores or not measured:
        return 1.0
    busy = busy_processes(resolved.scenario, hw.gpus_per_node)
    return core_share(busy, cores) / core_share(measured, cores)


def with_host_sharing(resolved):
    """``resolved`` with every profile's per-step host constants scaled by ``host_scale`` (and, on
    GPU profiles, by the scenario's measured host stretch: costs/host_load.py); a group placed on
    host cores keeps its profile's constants (its sharing is simulated), and so does the scenario's
    default profile once anything is placed, each unplaced group getting its own scaled copy."""
    from .host_load import host_constants, stretch_of

    f = host_scale(resolved)
    if f == 1.0 and stretch_of(resolved.scenario) == 1.0:
        return resolved
    sc = resolved.scenario
    placed = placed_groups(sc)
    if not placed:
        return dataclasses.replace(resolved, hardware=host_constants(resolved.hardware, sc, f),
                                   group_hardware={k: host_constants(h, sc, f)
                                                   for k, h in resolved.group_hardware.items()})
    # a placement takes the static share off the groups it places only (a placement and a stretch
    # never come together: specs/host.py)
    groups = dict(resolved.group_hardware)
    for role, i, _g in sc.cluster.groups():
        groups.setdefault((role, i), resolved.hardware)
    if getattr(sc, "experts", None) is not None:  # the expert service: never placed (world.py hardware_of)
        groups.setdefault(("experts", 0), resolved.hardware)
    return dataclasses.replace(resolved, group_hardware={
        k: h if k in placed else host_constants(h, sc, f) for k, h in groups.items()})
