"""The example transport and fault plug-ins of examples/plugins/ load by module:Class only when
allowed, and do what they say."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import pdsim
from pdsim.specs.trust import Trust

from builders import resolve, scenario_dict

EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples" / "plugins")


@pytest.fixture(autouse=True)
def on_path():
    sys.path.insert(0, EXAMPLES)
    yield
    sys.path.remove(EXAMPLES)


def _resolve(d, module):
    return pdsim.resolve_scenario(d, "<test>", Path(EXAMPLES), trust=Trust(allow_plugins=(module,)))


def test_host_staged_transport_adds_the_two_pcie_copies():
    d = scenario_dict("disagg")
    d["workload"].update(num_requests=30, rate=1.0)
    d["transfer"] = {"backend": "transport_host_staged:HostStaged", "params": {"pcie_gbps": 10.0}}
    with pytest.raises(pdsim.SpecError, match="--allow-plugin transport_host_staged"):
        resolve(d)
    slow = pdsim.simulate(_resolve(d, "transport_host_staged")).requests
    d["transfer"]["params"]["pcie_gbps"] = 20.0
    fast = pdsim.simulate(_resolve(d, "transport_host_staged")).requests
    # the two copies (GPU -> host on P, host -> GPU on D) take 2 x bytes / PCIe
    saved = slow["transfer_s"] - fast["transfer_s"]
    assert (abs(saved - 2 * slow["transfer_bytes"] * (1 / 10e9 - 1 / 20e9)) < 1e-9).all()


def test_rolling_restart_takes_each_decode_instance_down_once():
    d = scenario_dict("disagg")
    d["cluster"]["decode"][0]["count"] = 3
    d["workload"].update(num_requests=400, rate=5.0)
    d["faults"] = {"plugins": [{"policy": "fault_rolling_restart:RollingRestart",
                                "params": {"role": "decode", "start_s": 5.0, "gap_s": 2.0}}],
                   "restart": {"process_s": 1.0, "weight_load_gbps": 100.0, "comm_init_s": 0.1, "graph_capture_s": 1.0}}
    res = pdsim.simulate(_resolve(d, "fault_rolling_restart"))
    failed = [e["what"] for e in res.record.stats["events"] if e["kind"] == "failed"]
    assert failed == ["D0.0", "D0.1", "D0.2"]
    assert res.requests["finished"].all()
