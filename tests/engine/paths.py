"""Where the engine tests find each engine's venv and the tiny Llama beside it (.ci/engine.sh builds
vLLM's CPU build, .ci/sglang.sh SGLang's)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EngineVenv:
    name: str  # vLLM, SGLang
    venv: Path
    model: Path
    venv_var: str  # the variables that override them
    model_var: str
    script: str  # the .ci script that builds both

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def missing(self) -> str | None:
        """Why this engine's tests cannot run here, or None."""
        if not self.python.is_file():
            return f"no {self.name} venv at {self.venv} (build it with {self.script}, or set {self.venv_var})"
        if not (self.model / "config.json").is_file():
            return f"no tiny Llama at {self.model} ({self.script} generates it, or set {self.model_var})"
        return None


def _venv(name: str, default: str, venv_var: str, model_var: str, script: str) -> EngineVenv:
    venv = Path(os.environ.get(venv_var, default))
    return EngineVenv(name, venv, Path(os.environ.get(model_var, f"{venv}-models/tiny-llama")), venv_var, model_var,
                      script)


VLLM = _venv("vLLM", "/work/venvs/vllm", "PDSIM_ENGINE_VENV", "PDSIM_ENGINE_MODEL", ".ci/engine.sh")
SGLANG = _venv("SGLang", "/work/venvs/sglang", "PDSIM_SGLANG_VENV", "PDSIM_SGLANG_MODEL", ".ci/sglang.sh")

# the names the vLLM tests use
MODEL, PYTHON, missing = VLLM.model, VLLM.python, VLLM.missing
