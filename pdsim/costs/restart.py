"""The time an instance takes to (re)start and serve: seconds.

    restart = process + weights per GPU / weight-load bandwidth + communicator init + graph capture

- ``process_s``: a serving process's start (interpreter, torch/CUDA context, server threads).
- weight load: each GPU reads its own share of the weights (specs/memory.py ``weights_per_gpu``)
  from the node's disk or page cache at ``weight_load_gbps`` GB/s per GPU.
- ``comm_init_s``: NCCL communicators and DeepEP buffers; NCCL's bootstrap is a ring exchange,
  so it grows with the world size: base + per-rank.
- ``graph_capture_s``: CUDA-graph capture of the decode batch sizes (0 when the engine runs
  eager, ``cuda_graph_max_bs: 0``).

No public measurement isolates these for the deployments pdsim models; the defaults below are
assumptions sized from the start-up log lines engines print (SGLang's "Load weight end",
"Capture cuda graph end", vLLM's "Loading model weights took", "Graph capturing finished"),
each with a wide relative uncertainty: a failure study should vary them (``faults.restart``).
"""
from __future__ import annotations

PROCESS_S = 20.0  # assumption (+-100%)
WEIGHT_LOAD_GBPS = 1.0  # assumption: per GPU, local NVMe / page cache (+-100%)
COMM_INIT_BASE_S = 5.0  # assumption (+-100%)
COMM_INIT_PER_RANK_S = 0.1  # assumption (+-100%)
GRAPH_CAPTURE_S = 30.0  # assumption: a few dozen batch sizes captured (+-100%)
UNCERTAINTY = 1.0


def restart_s(weights_bytes_per_gpu: float, world: int, cuda_graphs: bool, spec=None) -> float:
    """Seconds from a (re)start to serving for an instance of ``world`` GPUs holding
    ``weights_bytes_per_gpu`` bytes each; ``spec``: a specs.faults.RestartSpec or None."""
    process = spec.process_s if spec is not None and spec.process_s is not None else PROCESS_S
    gbps = spec.weight_load_gbps if spec is not None and spec.weight_load_gbps is not None else WEIGHT_LOAD_GBPS
    comm = (spec.comm_init_s if spec is not None and spec.comm_init_s is not None
            else COMM_INIT_BASE_S + COMM_INIT_PER_RANK_S * world) if world > 1 else 0.0
    graphs = spec.graph_capture_s if spec is not None and spec.graph_capture_s is not None else GRAPH_CAPTURE_S
    return process + weights_bytes_per_gpu / (gbps * 1e9) + comm + (graphs if cuda_graphs else 0.0)
