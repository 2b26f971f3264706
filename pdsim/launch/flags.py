"""The server, router and proxy flags ``pdsim launch`` writes, as their sources define them.

Each table maps a flag to its value kind (``bool`` for a switch, ``int``, ``float``, ``str``,
``json``, ``url+port`` for the router's ``--prefill URL [PORT]``) and, where the source
restricts it, its choices. Every flag here was checked against these files (read from the
released wheels):

- SGLang 0.5.3 ``python/sglang/srt/server_args.py`` (``ServerArgs.add_cli_args``): flags,
  types and choices (``--deepep-mode``: normal, low_latency, auto; ``--kv-cache-dtype``: auto,
  fp8_e5m2, fp8_e4m3; ``--moe-a2a-backend``: none, deepep; ``--schedule-policy``: lpm,
  random, fcfs, dfs-weight, lof, priority; ``--disaggregation-transfer-backend``: mooncake,
  nixl, ascend, fake; ``--speculative-algorithm``: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM;
  ``--pp-size``). Under ``--enable-dp-attention`` it divides ``--chunked-prefill-size`` by
  ``--dp-size`` and multiplies ``--schedule-conservativeness`` by 0.3; the scheduler's new-token
  ratio starts at 0.7 x conservativeness (``SGLANG_INIT_NEW_TOKEN_RATIO``), falls to
  ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` (0.14) of that over ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``
  (600) steps (``sglang/global_config.py``, ``srt/managers/scheduler.py``).
- sglang-router 0.2.1 and 0.3.2 ``sglang_router/router_args.py``: ``--pd-disaggregation``,
  ``--prefill URL [BOOTSTRAP_PORT]`` (repeatable), ``--decode URL`` (repeatable),
  ``--worker-urls``, ``--policy`` / ``--prefill-policy`` / ``--decode-policy`` in random,
  round_robin, cache_aware, power_of_two (0.3.2 adds manual), ``--cache-threshold``,
  ``--balance-abs-threshold``, ``--balance-rel-threshold``, ``--eviction-interval-secs``,
  ``--max-tree-size``, ``--host``, ``--port``. SGLang 0.5.3 priority scheduling:
  ``--enable-priority-scheduling`` (higher values first) and ``--schedule-low-priority-values-first``.
- vLLM 0.11.0 ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``),
  ``vllm/entrypoints/openai/cli_args.py`` (``--host``, ``--port``), ``vllm/config/cache.py``
  (``--block-size`` in 1, 8, 16, 32, 64, 128; ``--kv-cache-dtype`` in auto, bfloat16, fp8,
  fp8_e4m3, fp8_e5m2, fp8_inc), ``vllm/config/kv_transfer.py`` (``KVTransferConfig``: kv_connector,
  kv_role, kv_buffer_size bytes, kv_port, kv_connector_extra_config),
  ``vllm/distributed/kv_transfer/kv_connector/v1/p2p/p2p_nccl_engine.py`` (extra config:
  proxy_ip, proxy_port, http_port, send_type PUT / PUT_ASYNC / GET, mem_pool_size_gb,
  nccl_num_channels), ``vllm/envs.py`` (``VLLM_ALL2ALL_BACKEND``: deepep_high_throughput,
  deepep_low_latency, ...), ``vllm/config/speculative.py`` (``--speculative-config`` method
  deepseek_mtp / eagle / eagle3, num_speculative_tokens, model). ``--num-redundant-experts`` is deprecated there in favour of
  ``--eplb-config '{"num_redundant_experts": N}'``. The xPyD proxy is vLLM's example
  ``examples/online_serving/disaggregated_serving_p2p_nccl_xpyd/disagg_proxy_p2p_nccl_xpyd.py``
  (service discovery on port 30001, HTTP on 10001, round robin over registered P and D).

Later releases renamed some of these (SGLang 0.5.23: ``--attn-dp-size`` for ``--dp-size N
--enable-dp-attention``, ``--cuda-graph-max-bs-decode``; vLLM 0.33.0 has no P2pNcclConnector
and replaced ``--cuda-graph-sizes`` with ``--max-cudagraph-capture-size``): the scripts name the
versions they were written for.
"""
from __future__ import annotations

SGLANG_VERSION = "0.5.3"
SGLANG_ROUTER_VERSION = "0.2.1-0.3.2"
VLLM_VERSION = "0.11.0"

# flag -> (value kind, choices or None)
SGLANG_SERVER: dict[str, tuple[str, tuple | None]] = {
    "--model-path": ("str", None),
    "--trust-remote-code": ("bool", None),
    "--host": ("str", None),
    "--port": ("int", None),
    "--tp-size": ("int", None),
    "--dp-size": ("int", None),
    "--ep-size": ("int", None),
    "--enable-dp-attention": ("bool", None),
    "--moe-a2a-backend": ("str", ("none", "deepep")),
    "--deepep-mode": ("str", ("normal", "low_latency", "auto")),
    "--ep-num-redundant-experts": ("int", None),
    "--enable-eplb": ("bool", None),
    "--eplb-algorithm": ("str", None),
    "--ep-dispatch-algorithm": ("str", None),
    "--eplb-rebalance-num-iterations": ("int", None),
    "--init-expert-location": ("str", None),
    "--moe-dense-tp-size": ("int", None),
    "--enable-dp-lm-head": ("bool", None),
    "--disaggregation-ib-device": ("str", None),
    "--enable-two-batch-overlap": ("bool", None),
    "--chunked-prefill-size": ("int", None),
    "--max-prefill-tokens": ("int", None),
    "--max-running-requests": ("int", None),
    "--max-total-tokens": ("int", None),
    "--page-size": ("int", None),
    "--mem-fraction-static": ("float", None),
    "--cuda-graph-max-bs": ("int", None),
    "--disable-cuda-graph": ("bool", None),
    "--kv-cache-dtype": ("str", ("auto", "fp8_e5m2", "fp8_e4m3")),
    "--disable-radix-cache": ("bool", None),
    "--schedule-policy": ("str", ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")),
    "--schedule-conservativeness": ("float", None),
    "--enable-mixed-chunk": ("bool", None),
    "--disaggregation-mode": ("str", ("null", "prefill", "decode")),
    "--disaggregation-transfer-backend": ("str", ("mooncake", "nixl", "ascend", "fake")),
    "--disaggregation-bootstrap-port": ("int", None),
    "--nnodes": ("int", None),
    "--node-rank": ("int", None),
    "--dist-init-addr": ("str", None),
    "--base-gpu-id": ("int", None),
    "--enable-priority-scheduling": ("bool", None),
    "--schedule-low-priority-values-first": ("bool", None),
    "--pp-size": ("int", None),
    "--speculative-algorithm": ("str", ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")),
    "--speculative-num-steps": ("int", None),
    "--speculative-eagle-topk": ("int", None),
    "--speculative-num-draft-tokens": ("int", None),
    "--speculative-draft-model-path": ("str", None),
}
#: kernel-backend flags of the step model's engine.moe_runner / engine.moe_a2a_backend knobs.
#: SGLang: ``--moe-runner-backend`` (MoeRunnerBackend in server_args: auto, deep_gemm, triton, ...; the 0.5
#: MoE-runner refactor; 0.4 selects DeepGEMM with SGL_ENABLE_JIT_DEEPGEMM only, versions.py drops it there).
#: vLLM selects both by environment (VLLM_USE_DEEP_GEMM, VLLM_ALL2ALL_BACKEND): no server flag.
SGLANG_KERNEL_FLAGS: dict[str, tuple[str, tuple | None]] = {
    "--moe-runner-backend": ("str", ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm",
                                     "flashinfer_cutlass", "flashinfer_mxfp4", "cutlass")),
}
#: engine.attention_backend (costs/attention_backends.py): SGLang ``--attention-backend`` (server_args
#: ATTENTION_BACKEND_CHOICES; the four pdsim prices, fa3 / flashmla / flashinfer / triton, are choices in
#: 0.4.7-0.4.9 and 0.5.0-0.5.3 alike, with torch_native; later choices such as trtllm_mla are not written).
SGLANG_ATTENTION_FLAGS: dict[str, tuple[str, tuple | None]] = {
    "--attention-backend": ("str", ("flashinfer", "triton", "torch_native", "fa3", "flashmla", "cutlass_mla")),
}
#: vLLM selects attention with VLLM_ATTENTION_BACKEND (vllm/envs.py, platforms/interface.py _Backend):
#: per pdsim backend and attention form (mla / gqa), per release range; None: no kernel of that name there.
#: FLASH_ATTN is FA3 on Hopper; vLLM 0.11 renamed TRITON_ATTN_VLLM_V1 to TRITON_ATTN; FLASHINFER_MLA is the
#: Blackwell trtllm-gen kernel, not FlashInfer's Hopper MLA.
VLLM_ATTENTION_BACKENDS: dict[str, dict[tuple[str, str], str | None]] = {
    "0.10.1": {("fa3", "gqa"): "FLASH_ATTN", ("flashinfer", "gqa"): "FLASHINFER",
               ("triton", "gqa"): "TRITON_ATTN_VLLM_V1", ("flashmla", "mla"): "FLASHMLA",
               ("triton", "mla"): "TRITON_MLA", ("fa3", "mla"): None, ("flashinfer", "mla"): None},
    "0.11.0": {("fa3", "gqa"): "FLASH_ATTN", ("flashinfer", "gqa"): "FLASHINFER",
               ("triton", "gqa"): "TRITON_ATTN", ("flashmla", "mla"): "FLASHMLA",
               ("triton", "mla"): "TRITON_MLA", ("fa3", "mla"): None, ("flashinfer", "mla"): None},
}
VLLM_KERNEL_FLAGS: dict[str, tuple[str, tuple | None]] = {}
SGLANG_ENV = ("SGLANG_INIT_NEW_TOKEN_RATIO", "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR", "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
              "SGL_ENABLE_JIT_DEEPGEMM", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "NCCL_IB_HCA")
SGLANG_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
SGLANG_ROUTER: dict[str, tuple[str, tuple | None]] = {
    "--pd-disaggregation": ("bool", None),
    "--prefill": ("url+port", None),
    "--decode": ("url", None),
    "--worker-urls": ("urls", None),
    "--policy": ("str", SGLANG_ROUTER_POLICIES),
    "--prefill-policy": ("str", SGLANG_ROUTER_POLICIES),
    "--decode-policy": ("str", SGLANG_ROUTER_POLICIES),
    "--cache-threshold": ("float", None),
    "--balance-abs-threshold": ("int", None),
    "--balance-rel-threshold": ("float", None),
    "--eviction-interval-secs": ("int", None),
    "--max-tree-size": ("int", None),
    "--host": ("str", None),
    "--port": ("int", None),
}
VLLM_SERVE: dict[str, tuple[str, tuple | None]] = {
    "--host": ("str", None),
    "--port": ("int", None),
    "--trust-remote-code": ("bool", None),
    "--tensor-parallel-size": ("int", None),
    "--data-parallel-size": ("int", None),
    "--data-parallel-size-local": ("int", None),
    "--data-parallel-address": ("str", None),
    "--data-parallel-rpc-port": ("int", None),
    "--data-parallel-start-rank": ("int", None),
    "--headless": ("bool", None),
    "--distributed-executor-backend": ("str", ("ray", "mp", "uni", "external_launcher")),
    "--enable-expert-parallel": ("bool", None),
    "--enable-eplb": ("bool", None),
    "--eplb-config": ("json", None),
    "--enable-dbo": ("bool", None),
    "--max-num-seqs": ("int", None),
    "--max-num-batched-tokens": ("int", None),
    "--enable-chunked-prefill": ("bool", None),
    "--no-enable-chunked-prefill": ("bool", None),
    "--block-size": ("int", (1, 8, 16, 32, 64, 128)),
    "--gpu-memory-utilization": ("float", None),
    "--kv-cache-memory-bytes": ("int", None),
    "--kv-cache-dtype": ("str", ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")),
    "--enable-prefix-caching": ("bool", None),
    "--no-enable-prefix-caching": ("bool", None),
    "--cuda-graph-sizes": ("int", None),
    "--enforce-eager": ("bool", None),
    "--scheduling-policy": ("str", ("fcfs", "priority")),
    "--kv-transfer-config": ("json", None),
    "--pipeline-parallel-size": ("int", None),
    "--speculative-config": ("json", None),
}
VLLM_ENV = ("VLLM_ALL2ALL_BACKEND", "NCCL_IB_HCA", "VLLM_ATTENTION_BACKEND")
VLLM_ALL2ALL = ("deepep_high_throughput", "deepep_low_latency")
VLLM_P2P_SEND_TYPES = ("PUT", "PUT_ASYNC", "GET")
VLLM_KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
VLLM_P2P_EXTRA = ("proxy_ip", "proxy_port", "http_port", "send_type", "mem_pool_size_gb", "nccl_num_channels")
VLLM_KV_TRANSFER_KEYS = ("kv_connector", "kv_role", "kv_buffer_size", "kv_port", "kv_connector_extra_config")
VLLM_PROXY_HTTP_PORT = 10001  # hard-coded in the example proxy
VLLM_PROXY_DISCOVERY_PORT = 30001


def check_args(table: dict[str, tuple[str, tuple | None]], args: list[str]) -> list[str]:
    """Problems parsing ``args`` (a command's options, program removed) against ``table``:
    unknown flags, missing or ill-typed values, values outside the choices."""
    import json

    problems = []
    i = 0
    while i < len(args):
        flag = args[i]
        if flag not in table:
            problems.append(f"unknown flag {flag}")
            i += 1
            continue
        kind, choices = table[flag]
        if kind == "bool":
            i += 1
            continue
        n = 2 if kind == "url+port" and i + 2 < len(args) and not args[i + 2].startswith("--") else 1
        if kind in ("urls", "ints"):
            n = 0
            while i + 1 + n < len(args) and not args[i + 1 + n].startswith("--"):
                n += 1
        values = args[i + 1:i + 1 + n]
        if len(values) < max(n, 1) or any(v.startswith("--") for v in values):
            problems.append(f"{flag} needs a value")
            i += 1
            continue
        v = values[0]
        try:
            if kind == "int":
                int(v)
            elif kind == "float":
                float(v)
            elif kind == "json":
                json.loads(v)
            elif kind == "ints":
                for x in values:
                    int(x)
            elif kind in ("url", "url+port", "urls"):
                for u in values[:1] if kind != "urls" else values:
                    if not u.startswith("http://"):
                        raise ValueError(u)
                if kind == "url+port" and n == 2:
                    int(values[1])
        except ValueError:
            problems.append(f"{flag}: {v!r} is not a valid {kind}")
        if choices is not None:
            parsed = int(v) if kind == "int" and v.lstrip("-").isdigit() else v
            if parsed not in choices:
                problems.append(f"{flag}: {v!r} not in {choices}")
        i += 1 + n
    return problems

#: scenario parts no engine's launch flags express (every engine's knob table lists them as None)
NO_LAUNCH_FORM: dict[str, None] = dict.fromkeys(
    ("transfer.params", "transfer.link", "kv_offload", "overheads", "faults", "autoscaler", "experts", "network"))

#: engine fields that describe how the served engine's code is written, not how it is launched
#: (transformers' continuous batching): no engine's flags set them, so a scenario that changes one
#: is told why (every engine's knob table lists them as None and its WHY_NOT takes these reasons)
ENGINE_FACTS: dict[str, str] = {
    "engine.eager_kernels_per_layer": "a fact about the engine's own eager layer (transformers' continuous "
                                      "batching), not a launch flag",
    "engine.elementwise": "a fact about how the engine's layer is written (transformers' modeling code runs "
                          "unfused), not a launch flag",
}
