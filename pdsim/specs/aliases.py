"""Other tools' names for pdsim's spec fields, used to explain an unknown field.

pdsim names its engine knobs after SGLang's server arguments. A scenario written with vLLM's
engine arguments (``max_num_seqs``), a command-line spelling (``--max-num-seqs``), a bench
tool's workload options (``request_rate``), Hugging Face ``config.json`` keys or a field put
one level too high or too low gets a hint in the unknown-field error, e.g.
``unknown field (vLLM's `max_num_seqs` is `max_running_requests`)``. The names are not
accepted silently: most are near but not exact equivalents (the notes say how they differ).

Sources of the foreign names: vLLM 0.11.0 ``vllm/engine/arg_utils.py`` and
``vllm/config/{scheduler,cache,parallel,kv_transfer}.py`` (``max_cudagraph_capture_size``:
vLLM 0.33.0, which replaced ``cuda_graph_sizes``); SGLang 0.5.3
``python/sglang/srt/server_args.py`` (``attn_dp_size``: SGLang 0.5.23,
``srt/arg_groups/fields/parallel.py``); ``sglang.bench_serving`` / ``vllm bench serve``
options; vLLM's ``--goodput`` keys; Hugging Face ``transformers`` config attributes.
"""
from __future__ import annotations

import sys

# spec class name -> {foreign name: (whose name, pdsim field, note or "")}
ALIASES: dict[str, dict[str, tuple[str, str, str]]] = {
    "EngineSpec": {
        "max_num_seqs": ("vLLM", "max_running_requests", ""),
        "max_num_batched_tokens": ("vLLM", "chunked_prefill_size",
                                   "the per-step token budget; pdsim also has max_prefill_tokens"),
        "block_size": ("vLLM", "page_size", ""),
        "gpu_memory_utilization": ("vLLM", "mem_fraction_static",
                                   "both are the share of GPU memory for weights + KV cache"),
        "enable_prefix_caching": ("vLLM", "disable_radix_cache", "inverted: enable_prefix_caching: false is "
                                                                 "disable_radix_cache: true"),
        "enable_chunked_prefill": ("vLLM", "chunked_prefill_size", "chunked_prefill_size: -1 disables chunking"),
        "cuda_graph_sizes": ("vLLM", "cuda_graph_max_bs", "pdsim takes the largest captured batch size"),
        "max_cudagraph_capture_size": ("vLLM", "cuda_graph_max_bs", ""),
        "cuda_graph_bs": ("SGLang", "cuda_graph_max_bs", "pdsim takes the largest captured batch size"),
        "scheduling_policy": ("vLLM", "schedule_policy", ""),
        "cache_dtype": ("vLLM", "kv_cache_dtype", ""),
        "enable_dbo": ("vLLM", "enable_two_batch_overlap", "vLLM's dual-batch overlap"),
        "num_redundant_experts": ("vLLM", "ep_num_redundant_experts", ""),
        "enable_deepep_moe": ("SGLang < 0.4.10", "deepep_mode", "pdsim uses DeepEP whenever ep > 1"),
        "moe_a2a_backend": ("SGLang", "deepep_mode", "pdsim uses DeepEP whenever ep > 1"),
        "max_prefill_tokens_per_rank": ("", "max_prefill_tokens", ""),
    },
    "GroupSpec": {
        "tensor_parallel_size": ("vLLM", "tp", ""),
        "tp_size": ("vLLM/SGLang", "tp", ""),
        "data_parallel_size": ("vLLM", "dp", "pdsim's dp is SGLang's attention DP (with enable_dp_attention)"),
        "dp_size": ("SGLang", "dp", ""),
        "expert_parallel_size": ("SGLang", "ep", ""),
        "ep_size": ("SGLang", "ep", ""),
        "enable_expert_parallel": ("vLLM", "ep", "set ep to the instance's world size"),
        "attn_dp_size": ("SGLang >= 0.5.20", "dp", "with enable_dp_attention: true"),
        "num_gpus": ("", "gpus", ""),
        "replicas": ("", "count", ""),
        "instances": ("", "count", ""),
        "num_instances": ("", "count", ""),
        "nnodes": ("SGLang", "nodes", ""),
    },
    "TransferSpec": {
        "kv_connector": ("vLLM", "backend", "P2pNcclConnector is backend: nccl"),
        "disaggregation_transfer_backend": ("SGLang", "backend", ""),
        "transfer_backend": ("SGLang", "backend", ""),
        "send_type": ("vLLM P2P NCCL", "mode", "PUT/PUT_ASYNC/GET are put/put_async/get"),
        "kv_buffer_size": ("vLLM", "kv_buffer_fraction", "bytes in vLLM; a share of D's HBM in pdsim"),
        "mem_pool_size_gb": ("vLLM P2P NCCL", "host_pool_gib", ""),
    },
    "RouterSpec": {
        "load_balance_method": ("SGLang", "policy", ""),
        "routing_policy": ("", "policy", ""),
    },
    "SLOSpec": {
        "ttft": ("vLLM --goodput", "ttft_ms", ""),
        "tpot": ("vLLM --goodput", "tpot_ms", ""),
        "e2el": ("vLLM --goodput", "e2e_ms", ""),
        "e2el_ms": ("vLLM", "e2e_ms", ""),
        "e2e_latency_ms": ("bench_serving", "e2e_ms", ""),
        "itl": ("bench_serving", "itl_ms", ""),
        "worst_itl_ms": ("", "max_itl_ms", ""),
    },
    "WorkloadSpec": {
        "request_rate": ("bench_serving", "rate", ""),
        "num_prompts": ("bench_serving", "num_requests", ""),
        "random_input_len": ("bench_serving", "input", "input: {dist: random_ratio, value: N, range_ratio: R}"),
        "random_output_len": ("bench_serving", "output", "output: {dist: random_ratio, value: N, range_ratio: R}"),
        "random_range_ratio": ("bench_serving", "input", "the range_ratio of input/output"),
        "dataset_name": ("bench_serving", "preset", "preset: sharegpt or sonnet"),
        "dataset_path": ("bench_serving", "trace", "trace: {path: ..., format: ...}"),
        "random_prefix_len": ("vLLM", "shared_prefix_tokens", ""),
        "concurrency": ("", "max_concurrency", ""),
    },
    "ModelSpec": {
        "num_hidden_layers": ("Hugging Face", "num_layers", "or name the config.json as the model"),
        "hidden_size": ("Hugging Face", "hidden", "or name the config.json as the model"),
        "intermediate_size": ("Hugging Face", "ffn", ""),
        "num_attention_heads": ("Hugging Face", "num_heads", ""),
        "num_key_value_heads": ("Hugging Face", "num_kv_heads", ""),
        "vocab_size": ("Hugging Face", "vocab", ""),
        "max_position_embeddings": ("Hugging Face", "max_context", ""),
        "torch_dtype": ("Hugging Face", "weight_dtype", ""),
    },
    "Scenario": {
        "model_path": ("SGLang", "model", ""),
        "random_seed": ("SGLang", "seed", ""),
        "gpu": ("", "hardware", ""),
    },
}

# Fields that belong one level down (group -> engine) or up (engine -> group).
_ENGINE_OF_GROUP = ("engine", "an engine knob: put it under the group's engine:")
_GROUP_OF_ENGINE = ("group", "a group field: put it next to engine:, not inside it")


def _norm(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_").lower()


def hint(cls: type, key: str, fields) -> str | None:
    """A hint for ``key``, unknown in dataclass ``cls`` whose fields are ``fields``, or None.

    Checked in order: a field spelled as a command-line flag (``max-running-requests``); a
    foreign name (vLLM, SGLang, bench tools, Hugging Face); a field of the engine written at
    group level or the other way round."""
    name = _norm(str(key))
    if name in fields:
        return f"pdsim spells it `{name}`"
    entry = ALIASES.get(cls.__name__, {}).get(name)
    if entry is not None:
        whose, ours, note = entry
        text = f"{whose}'s `{name}` is `{ours}`" if whose else f"`{name}` is `{ours}`"
        return f"{text}: {note}" if note else text
    # one level off: engine knobs under a group, group fields under an engine. The two classes
    # are taken from the module that defines ``cls`` (specs/scenario.py): the converter imports
    # this module, so importing the scenario specs here would make a loop
    home = sys.modules[cls.__module__]
    if cls.__name__ == "GroupSpec":
        engine_fields = home.EngineSpec.__dataclass_fields__
        if name in engine_fields or name in ALIASES["EngineSpec"]:
            ours = name if name in engine_fields else ALIASES["EngineSpec"][name][1]
            return f"`{ours}` is {_ENGINE_OF_GROUP[1]}"
    if cls.__name__ == "EngineSpec":
        group_fields = home.GroupSpec.__dataclass_fields__
        if name in group_fields or name in ALIASES["GroupSpec"]:
            ours = name if name in group_fields else ALIASES["GroupSpec"][name][1]
            return f"`{ours}` is {_GROUP_OF_ENGINE[1]}"
    return None
