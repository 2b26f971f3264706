"""The published routing baselines, one module each, registered in ``ROUTERS`` on import.

| key | source | module |
|---|---|---|
| ``round_robin``, ``random``, ``least_loaded``, ``cache_aware`` | SGLang mini LB; pdsim | ``control/router.py`` |
| ``sglang_cache_aware`` | SGLang router, cache-aware policy | ``sglang.py`` |
| ``dynamo_kv`` | NVIDIA Dynamo KV router | ``dynamo.py`` |
| ``llmd`` | llm-d inference scheduler (prefix + load scorers) | ``llmd.py`` |
| ``mooncake_conductor`` | Mooncake (FAST'25) Conductor with early rejection | ``mooncake.py`` |
| ``vllm_xpyd`` | vLLM P2P NCCL xPyD proxy | ``vllm_xpyd.py`` |

``control/__init__.py`` imports this package, so the keys exist wherever a router is resolved.
"""
from . import dynamo, llmd, mooncake, sglang, vllm_xpyd  # noqa: F401 - registration
from .dynamo import DynamoKV
from .llmd import LLMD
from .mooncake import MooncakeConductor
from .sglang import SGLangCacheAware
from .vllm_xpyd import VLLMxPyD

__all__ = ["SGLangCacheAware", "DynamoKV", "LLMD", "MooncakeConductor", "VLLMxPyD"]
