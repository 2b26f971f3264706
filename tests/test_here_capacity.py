"""here.py sets each recording's load as a fraction of the capacity the fresh profile's
simulation sustains (``capacity_rps``): the workload's requests sent at once through the
scenario. A formula of mean prompt and output ignored cached prefixes and put the multi-turn
workload's "knee" where the engine's TTFT had not moved (cpu-vllm-emr3-multiturn-light/-knee:
mean TTFT 46 and 48 ms; vLLM counted 71% of prompt tokens from its prefix cache)."""
from __future__ import annotations

import dataclasses

import pytest
from builders import REPO, load_script

import pdsim
from pdsim.cli.workload_stats import load_target

PROFILE = REPO / "validation/cpu-vllm-calibration/emr3/profile/cpu-epyc-2c.yaml"


@pytest.fixture(scope="module")
def here():
    return load_script("validation/cpu-vllm/here.py")


def _scenario():
    return pdsim.load_scenario(REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml", [f"hardware={PROFILE}"])


def test_cached_prefixes_raise_the_capacity(here):
    table = load_target(str(REPO / "validation/cpu-vllm-fifo3-multiturn-light/workload.yaml"), seed=21)
    cached = here.capacity_rps(_scenario(), table)
    uncached = here.capacity_rps(_scenario(), dataclasses.replace(table, hash_ids=None))
    # about twice (1.99x since the profile's host work was refitted with the compute priced as the
    # world prices it, 2026-11-29: more of each step is host work, which cached prefixes do not save)
    assert cached > 1.8 * uncached > 0


def test_a_bigger_batch_cap_raises_it_and_a_longer_output_lowers_it(here):
    sc = _scenario()
    table = load_target(str(REPO / "validation/cpu-vllm-emr3-azure-light/workload.yaml"), seed=0)
    base = here.capacity_rps(sc, table)
    wide = here.capacity_rps(pdsim.load_scenario(REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml", [
        f"hardware={PROFILE}", "cluster.colocated.0.engine.max_running_requests=64"]), table)
    longer = here.capacity_rps(sc, dataclasses.replace(table, output_len=table.output_len * 2))
    assert wide > base > longer > 0


def test_too_few_requests_to_measure_a_rate_is_one_line(here):
    table = load_target(str(REPO / "validation/cpu-vllm-emr3-azure-light/workload.yaml"), seed=0)
    with pytest.raises(SystemExit, match="too few to measure a rate"):
        here.capacity_rps(_scenario(), table.head(2))
