"""vLLM's shared-storage KV handoff: P writes one file per layer (its loop waits), D loads them
before the first decode step; the times follow the measured file-system constants."""
from __future__ import annotations

import numpy as np

import pdsim
from pdsim.costs.shared_storage import read_s, write_s

from builders import resolve, scenario_dict


def test_shared_storage_prices_the_write_and_the_load():
    d = scenario_dict("disagg")
    d["transfer"] = {"backend": "shared_storage", "params": {"write_gbps": 2.0, "read_gbps": 10.0,
                                                            "file_overhead_us": 50.0}}
    d["workload"].update(num_requests=40, rate=2.0)
    res = pdsim.simulate(resolve(d))
    df = res.requests
    assert df["finished"].all()
    model = res.scenario.model
    kvb = model.kv_bytes_per_token()
    want_w = np.array([write_s(n, kvb, model.num_layers, 2e9, 50e-6) for n in df["input_len"]])
    assert np.allclose(df["transfer_s"], want_w, rtol=1e-9)
    want_r = np.array([read_s(n, kvb, model.num_layers, 10e9, 50e-6) for n in df["input_len"]])
    assert np.allclose(df["d_load_s"], want_r, rtol=1e-9)


def test_unknown_transport_parameter_is_refused():
    d = scenario_dict("disagg")
    d["transfer"] = {"backend": "shared_storage", "params": {"write_gbs": 2.0}}
    try:
        resolve(d)
    except pdsim.SpecError as err:
        assert "transfer.params.write_gbs" in str(err) and "did you mean 'write_gbps'" in str(err)
    else:
        raise AssertionError("accepted an unknown parameter")
