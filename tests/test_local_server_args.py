"""The engine arguments the recording harnesses start vLLM with (pdsim/replay/local_server.py)."""
from __future__ import annotations


import pytest


@pytest.mark.parametrize("flag, old, new", [("--max-num-batched-tokens", "512", 2048), ("--max-num-seqs", "32", 4)])
def test_an_engine_argument_changes_only_its_own_value(flag, old, new):
    """here.py --token-budget N / --max-num-seqs N (the --chunked-prefill-size and
    --max-running-requests what-ifs) and P's whole-prompt budget are the engine's arguments with one
    value changed, nothing else."""
    from pdsim.replay.local_server import ENGINE_ARGS, PREFILL_ARGS, with_engine_arg

    out = with_engine_arg(ENGINE_ARGS, flag, new)
    i = ENGINE_ARGS.index(flag) + 1
    assert ENGINE_ARGS[i] == old and out[i] == str(new)
    assert out[:i] + out[i + 1:] == ENGINE_ARGS[:i] + ENGINE_ARGS[i + 1:]
    assert PREFILL_ARGS == with_engine_arg(ENGINE_ARGS, "--max-num-batched-tokens", 32768) + (
        "--no-enable-prefix-caching",)


def test_the_sglang_scenario_runs_the_servers_arguments():
    """workloads/scenarios/cpu-sglang-tiny-llama.yaml is the engine SGLangServer starts: the same
    chunk size, running-request cap, page and KV pool; SGLang's own prefill batches (no mixed
    chunk) and its radix cache lending a chunk's prefix after its step."""
    from pdsim.api import load_scenario
    from pdsim.replay.local_server import SGLANG_ARGS

    from builders import REPO

    def arg(flag):
        return int(SGLANG_ARGS[SGLANG_ARGS.index(flag) + 1])

    eng = load_scenario(REPO / "workloads/scenarios/cpu-sglang-tiny-llama.yaml").scenario.cluster.colocated[0].engine
    assert (eng.chunked_prefill_size, eng.max_running_requests, eng.page_size, eng.max_total_tokens) == (
        arg("--chunked-prefill-size"), arg("--max-running-requests"), arg("--page-size"), arg("--max-total-tokens"))
    assert "--enable-mixed-chunk" not in SGLANG_ARGS and not eng.enable_mixed_chunk
    assert "--disable-radix-cache" not in SGLANG_ARGS and not eng.disable_radix_cache
    assert eng.prefix_share == "after_step" and eng.cuda_graph_max_bs == 0
    assert {"--disable-overlap-schedule", "--sleep-on-idle"} <= set(SGLANG_ARGS)


def test_the_sgl_kernel_stand_in_answers_imports_and_refuses_every_call():
    """.ci/sgl_kernel (installed by .ci/sglang.sh): SGLang's imports of sgl-kernel succeed, and a
    kernel called on this path fails at once, naming it, instead of computing nothing."""
    import subprocess
    import sys

    from builders import REPO

    code = ("import sys; sys.path.insert(0, '.ci'); import sgl_kernel\n"
            "from sgl_kernel.kvcacheio import transfer_kv_direct\n"
            "from sgl_kernel import rmsnorm\n"
            "for f in (transfer_kv_direct, rmsnorm):\n"
            "    try:\n"
            "        f(1, 2)\n"
            "    except RuntimeError as e:\n"
            "        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("sgl_kernel.kvcacheio.transfer_kv_direct: sgl-kernel is a stand-in")
    assert lines[1].startswith("sgl_kernel.rmsnorm: sgl-kernel is a stand-in")
