"""vLLM's shared-storage KV handoff: P writes one file per layer (its loop waits), D loads them
and computes the prompt's tail before its first token; the times follow the measured file-system
constants and ExampleConnector's page alignment."""
from __future__ import annotations

import numpy as np

import pdsim
from pdsim.costs.shared_storage import loaded_tokens, read_s, saved_tokens, tail_tokens, write_s

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
    page = res.scenario.scenario.cluster.decode[0].engine.page_size
    want_w = np.array([write_s(saved_tokens(n, page), kvb, model.num_layers, 2e9, 50e-6) for n in df["input_len"]])
    assert np.allclose(df["transfer_s"], want_w, rtol=1e-9)
    want_r = np.array([read_s(loaded_tokens(n, page), kvb, model.num_layers, 10e9, 50e-6) if loaded_tokens(n, page)
                       else 0.0 for n in df["input_len"]])
    # D's load also holds its own compute of the tail (a prefill chunk), and the first token comes after both
    tail = df["d_load_s"] - want_r
    assert (tail > 0).all() and np.allclose(df["first_token_s"] - df["decode_admit_s"], df["d_load_s"], rtol=1e-9)
    assert np.allclose(df["transfer_bytes"], [loaded_tokens(n, page) * kvb for n in df["input_len"]])


def test_example_connector_token_alignment():
    """vLLM example_connector.py: align(n) = (n - 1) // page * page; P saves align(L) tokens, D asks
    for align(L - 1); a miss (L - 1 a whole number of pages) leaves D the whole prompt."""
    assert (saved_tokens(600, 128), loaded_tokens(600, 128), tail_tokens(600, 128)) == (512, 512, 88)
    assert (saved_tokens(130, 128), loaded_tokens(130, 128), tail_tokens(130, 128)) == (128, 128, 2)
    assert (saved_tokens(129, 128), loaded_tokens(129, 128), tail_tokens(129, 128)) == (128, 0, 129)
    assert (saved_tokens(128, 128), loaded_tokens(128, 128), tail_tokens(128, 128)) == (0, 0, 128)
    assert all(2 <= tail_tokens(L, 128) <= 129 for L in range(131, 2000) if (L - 1) % 128)


def test_unknown_transport_parameter_is_refused():
    d = scenario_dict("disagg")
    d["transfer"] = {"backend": "shared_storage", "params": {"write_gbs": 2.0}}
    try:
        resolve(d)
    except pdsim.SpecError as err:
        assert "transfer.params.write_gbs" in str(err) and "did you mean 'write_gbps'" in str(err)
    else:
        raise AssertionError("accepted an unknown parameter")


def test_a_one_token_output_finishes_at_its_first_token_not_before():
    """Fuzz find (tests/test_fuzz.py): with one output token, D's own tail compute puts the first
    token after admission, and the request finished on admission, before its only token."""
    d = scenario_dict("disagg")
    d["transfer"] = {"backend": "shared_storage"}
    d["workload"].update(num_requests=20, rate=4.0, input={"dist": "uniform", "min": 1, "max": 64},
                         output={"dist": "uniform", "min": 1, "max": 1})
    for group in ("prefill", "decode"):
        d["cluster"][group][0]["engine"]["page_size"] = 1
    df = pdsim.simulate(resolve(d)).requests
    assert df["finished"].all()
    assert (df["finish_s"] >= df["first_token_s"]).all()
    assert (df["first_token_s"] > df["decode_admit_s"]).all()  # D computed the tail before its token
