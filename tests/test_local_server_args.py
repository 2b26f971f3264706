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
