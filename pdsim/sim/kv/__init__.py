"""KV memory of an instance: paged pool, prefix cache, offload tiers, and the manager that
composes them for prompt admission."""
from .manager import KVManager, PromptGrant
from .pool import KVPool, pages_for
from .prefix_cache import PrefixCache
from .tiers import EVICTION, FIFO, LRU, EvictionPolicy, Tier, TierStack

__all__ = ["KVManager", "PromptGrant", "KVPool", "pages_for", "PrefixCache", "EVICTION", "EvictionPolicy",
           "LRU", "FIFO", "Tier", "TierStack"]
