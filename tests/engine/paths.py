"""Where the engine tests find vLLM's CPU build and the tiny Llama (.ci/engine.sh builds both)."""
from __future__ import annotations

import os
from pathlib import Path

VENV = Path(os.environ.get("PDSIM_ENGINE_VENV", "/work/venvs/vllm"))
MODEL = Path(os.environ.get("PDSIM_ENGINE_MODEL", f"{VENV}-models/tiny-llama"))
PYTHON = VENV / "bin" / "python"


def missing() -> str | None:
    """Why the engine tests cannot run here, or None."""
    if not PYTHON.is_file():
        return f"no vLLM engine venv at {VENV} (build it with .ci/engine.sh, or set PDSIM_ENGINE_VENV)"
    if not (MODEL / "config.json").is_file():
        return f"no tiny Llama at {MODEL} (.ci/engine.sh generates it, or set PDSIM_ENGINE_MODEL)"
    return None


# SGLang on the CPU (.ci/sglang.sh builds its venv and the same tiny Llama)
SGLANG_VENV = Path(os.environ.get("PDSIM_SGLANG_VENV", "/work/venvs/sglang"))
SGLANG_MODEL = Path(os.environ.get("PDSIM_SGLANG_MODEL", f"{SGLANG_VENV}-models/tiny-llama"))
SGLANG_PYTHON = SGLANG_VENV / "bin" / "python"


def sglang_missing() -> str | None:
    """Why the SGLang engine tests cannot run here, or None."""
    if not SGLANG_PYTHON.is_file():
        return f"no SGLang venv at {SGLANG_VENV} (build it with .ci/sglang.sh, or set PDSIM_SGLANG_VENV)"
    if not (SGLANG_MODEL / "config.json").is_file():
        return f"no tiny Llama at {SGLANG_MODEL} (.ci/sglang.sh generates it, or set PDSIM_SGLANG_MODEL)"
    return None
