"""The engine arguments the recording harnesses start vLLM with (pdsim/replay/local_server.py)."""
from __future__ import annotations


def test_a_token_budget_replaces_only_the_step_budget():
    """here.py --token-budget N (the --chunked-prefill-size what-if) and P's whole-prompt budget are
    the engine's arguments with --max-num-batched-tokens changed, nothing else."""
    from pdsim.replay.local_server import ENGINE_ARGS, PREFILL_ARGS, with_token_budget

    two = with_token_budget(ENGINE_ARGS, 2048)
    i = ENGINE_ARGS.index("--max-num-batched-tokens") + 1
    assert ENGINE_ARGS[i] == "512" and two[i] == "2048"
    assert two[:i] + two[i + 1:] == ENGINE_ARGS[:i] + ENGINE_ARGS[i + 1:]
    assert PREFILL_ARGS == with_token_budget(ENGINE_ARGS, 32768) + ("--no-enable-prefix-caching",)
