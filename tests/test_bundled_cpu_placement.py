"""The bundled CPU scenarios say where their launch puts its processes (host.placement), as the docs
launch the engine: a colocated vLLM's worker on CPU 0 (its auto-binding), the 1P1D pair's workers
on cores 0 and 1 (run_case.py's VLLM_CPU_OMP_THREADS_BIND), so a user only adds what they measured
on their host (host.background)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsim import api
from pdsim.workload.table import RequestTable

REPO = Path(__file__).resolve().parents[1]
CPU = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"
TABLE = RequestTable(np.array([0.0, 0.05, 0.1]), np.array([300, 700, 200]), np.array([12, 8, 10]), source="t")


def _ttft(sc) -> np.ndarray:
    return api.simulate(sc, table=TABLE).requests["ttft_s"].to_numpy()


def test_the_colocated_scenario_places_its_worker_on_cpu0():
    sc = api.load_scenario(CPU)
    assert sc.scenario.host.cores == 2 and dict(sc.scenario.host.placement) == {"colocated": (0,)}
    # alone on its core the worker steps at its price: the same run as without a placement
    np.testing.assert_allclose(_ttft(sc), _ttft(api.load_scenario(CPU, ["host.placement={}"])), rtol=1e-12)
    # other work measured on the host (more than the free core holds) now shares the worker's core
    busy = _ttft(api.load_scenario(CPU, ["host.background=2"]))
    assert (busy > _ttft(sc) * 1.1).all()


def test_the_1p1d_scenario_places_p_and_d_as_run_case_binds_them():
    host = api.load_scenario(PD).scenario.host
    assert host.cores == 2 and dict(host.placement) == {"prefill": (0,), "decode": (1,)}
    assert dict(host.unpinned) == pytest.approx({"prefill": 0.015, "decode": 0.22})
    # both engine cores poll; each server in a session of its own under autogroup (Linux's default)
    assert dict(host.pollers) == {"prefill": 1.0, "decode": 1.0} and host.autogroup
