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
