"""Price of vLLM's shared-storage KV handoff (``ExampleConnector``), pure functions.

How the connector moves KV (vllm ``distributed/kv_transfer/kv_connector/v1/example_connector.py``):
P, after prefilling a request, saves each attention layer's KV of the prompt as one safetensors
file under ``shared_storage_path/<prompt hash>/<layer>.safetensors`` (``save_kv_layer``, once per
layer per request, on P's engine thread); D, scheduling the same prompt, finds the folder
("External Cache Hit!") and loads every layer's file back into its paged KV cache before the
request's first decode step (``start_load_kv``, synchronous in D's forward). So:

    bytes per layer   = tokens x kv_bytes_per_token_per_layer           (K and V, bf16 here)
    P write time      = layers x (file_overhead_s + bytes_per_layer / write_Bps)
    D read time       = layers x (file_overhead_s + bytes_per_layer / read_Bps)

Which tokens (``align_to_block_size(n) = (n - 1) // block_size * block_size`` in the same file): P
saves the KV of ``align(L)`` = the whole pages of the prompt's first L - 1 tokens, under a folder
keyed by those tokens; D looks the prompt up by ``align(L - 1)`` tokens and, when that folder
exists, loads them and computes the rest of the prompt (the tail, 2 to page + 1 tokens) in its
first step, which samples the first token the client sees (the proxy drops P's token). When
L - 1 is a whole number of pages the two keys differ (P saved L - 1 tokens, D asks for one page
less): D finds nothing and computes the whole prompt. ``saved_tokens``, ``loaded_tokens``,
``tail_tokens`` below.

``file_overhead_s`` (open/create + safetensors header + close per file) and the bandwidths are
measured on the file system of the deployment (calibration/microbench/cpu_shared_storage.py writes
them; page-cache speed for a local disk, network speed for NFS). Units: bytes, bytes/s, seconds.
"""
from __future__ import annotations


def kv_layer_bytes(tokens: int, kv_bytes_per_token: float, layers: int) -> float:
    """Bytes of one layer's KV file for ``tokens`` prompt tokens (``kv_bytes_per_token`` over all layers)."""
    return tokens * kv_bytes_per_token / layers


def write_s(tokens: int, kv_bytes_per_token: float, layers: int, write_Bps: float, file_overhead_s: float) -> float:
    """Seconds P spends saving a prompt's KV (one file per layer), on its engine thread."""
    return layers * (file_overhead_s + kv_layer_bytes(tokens, kv_bytes_per_token, layers) / write_Bps)


def read_s(tokens: int, kv_bytes_per_token: float, layers: int, read_Bps: float, file_overhead_s: float) -> float:
    """Seconds D spends loading a prompt's KV before the request's first decode step."""
    return layers * (file_overhead_s + kv_layer_bytes(tokens, kv_bytes_per_token, layers) / read_Bps)


def saved_tokens(prompt: int, page: int) -> int:
    """Tokens whose KV P saves: whole pages of the first ``prompt - 1`` tokens."""
    return max(0, (prompt - 1) // page * page)


def loaded_tokens(prompt: int, page: int) -> int:
    """Tokens D loads from P's files: ``align(prompt - 1)`` when that is the folder P wrote, else 0."""
    ask = max(0, (prompt - 2) // page * page)
    return ask if ask == saved_tokens(prompt, page) else 0


def tail_tokens(prompt: int, page: int) -> int:
    """Prompt tokens D computes itself before its first token (the tail past the loaded pages)."""
    return prompt - loaded_tokens(prompt, page)
