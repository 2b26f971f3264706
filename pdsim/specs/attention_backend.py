"""Which attention backends (``engine.attention_backend``) a model and GPU can run; prices are in
costs/attention_backends.py.

FlashMLA is an MLA decode kernel (deepseek-ai/FlashMLA); FA3 and FlashMLA are Hopper (SM90)
kernels; FlashInfer and Triton run on every CUDA GPU pdsim profiles; ``sdpa_packed`` is
transformers' continuous batching with ``paged|sdpa`` (PyTorch's scaled_dot_product_attention
over the packed batch with a mask; GQA models); a CPU profile runs the engine's CPU attention
(``auto``) or SGLang's ``torch_native`` backend (a per-sequence SDPA whose query spans the whole
sequence, so each chunk computes attention over everything before it again: sim/engine/admission.py).
"""
from __future__ import annotations

from .errors import SpecError

BACKENDS = ("auto", "flashmla", "flashinfer", "fa3", "triton", "sdpa_packed", "torch_native")
HOPPER_ONLY = ("fa3", "flashmla")


def check_backend(backend: str, mla: bool, arch: str, where: str = "engine.attention_backend",
                  source: str | None = None) -> None:
    """SpecError (one line, naming the field) for a backend the model or GPU cannot run."""
    if backend not in BACKENDS:
        raise SpecError(f"{backend!r} is not an attention backend ({', '.join(BACKENDS)})", source=source,
                        field=where)
    if backend == "auto":
        return
    if backend == "torch_native":
        if arch != "cpu":
            raise SpecError("torch_native is priced on CPU profiles only (its SDPA is timed by cpu_profile.py "
                            "measure --attention sdpa); no GPU figure is measured", source=source, field=where)
        if mla:
            raise SpecError("torch_native is priced for GQA/MHA models and this model's attention is MLA",
                            source=source, field=where)
        return
    if arch == "cpu":
        raise SpecError(f"{backend} is a GPU kernel; a CPU profile runs the engine's CPU attention (auto)",
                        source=source, field=where)
    if backend == "flashmla" and not mla:
        raise SpecError("flashmla is an MLA decode kernel and this model's attention is not MLA "
                        "(use fa3, flashinfer or triton)", source=source, field=where)
    if backend == "sdpa_packed" and mla:
        raise SpecError("sdpa_packed is transformers' paged|sdpa attention for GQA/MHA models and this "
                        "model's attention is MLA", source=source, field=where)
    if backend in HOPPER_ONLY and arch != "hopper":
        raise SpecError(f"{backend} runs on Hopper (SM90) GPUs only and this GPU is {arch} "
                        "(use flashinfer or triton)", source=source, field=where)
