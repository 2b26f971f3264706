"""DeepEP normal kernels across nodes: the slower of two concurrent legs, RDMA to the other nodes
and NVLink forwarding inside the destination node (costs/deepep.py, comm.deepep_legs).

Source: DeepEP README (legacy table, H800, 4096 tokens, hidden 7168, top-8, FP8 dispatch / BF16
combine; calibration/data/deepep_normal.csv): intranode EP8 153 / 158 GB/s (NVLink); internode
EP16 43 / 43, EP32 58 / 57, EP64 51 / 50 GB/s ("RDMA bottleneck" bandwidth, counted over every
destination node, the own node too). In link bytes EP16's RDMA bandwidth comes out half of
EP32/64's: at two nodes a token crosses RDMA once but is forwarded over NVLink to ~5.6 ranks,
and that NVLink leg is the slower one. A fit that never sees the EP16 row predicts it.
"""
from __future__ import annotations

from pdsim.calibrate import data
from pdsim.calibrate.fit_comm import fit_deepep_normal, legs
from pdsim.costs.deepep import ELEM_BYTES, normal_time_s
from pdsim.costs.comm import deepep_reported_bytes

README_EP16 = {"dispatch": 43.0, "combine": 43.0}  # GB/s, DeepEP README (H800)
BASE_US = {"dispatch": 38.9, "combine": 67.7}  # the H100 fit's kernel latencies (one token count in the README table)


def _h800():
    d = data.load("deepep_normal")
    return d[d["hardware"] == "h800"]


def test_ep16_held_out_is_predicted_within_the_stated_uncertainty():
    rows = _h800()
    for op in ("dispatch", "combine"):
        p = fit_deepep_normal(rows[rows["ep_size"] != 16], op, BASE_US[op], base_label="h100")
        t = normal_time_s(p, 4096, 7168, 8, 16, 8, ELEM_BYTES[op])
        _, rep = deepep_reported_bytes(4096, 7168, 8, 16, 8, ELEM_BYTES[op])
        gbps = rep / t / 1e9
        # the README's 43 GB/s within 15% (this form: 47.6 dispatch, 49.1 combine, +11% / +14%; the
        # RDMA-only form was 43% off; with every row fitted the errors are ~3-4% per row)
        assert abs(gbps - README_EP16[op]) / README_EP16[op] < 0.15, (op, gbps)


def test_ep16_is_bound_by_nvlink_forwarding_and_ep32_up_by_rdma():
    rows = _h800()
    p = fit_deepep_normal(rows, "dispatch", BASE_US["dispatch"], base_label="h100")
    for ep, nvl_bound in ((16, True), (32, False), (64, False)):
        nvl, rdma = legs(rows[rows["ep_size"] == ep], ELEM_BYTES["dispatch"], True)[0]
        assert (nvl / p["nvl_gbps"] > rdma / p["rdma_gbps"]) == nvl_bound, ep


def test_fitted_rdma_bandwidth_is_the_nic_s():
    """One RDMA bandwidth for the 400 Gb/s CX-7 of every H800 row, below its ~50 GB/s line rate
    (DOMAIN.md s2: ~50 GB/s per 400 Gb/s NIC), and within 10% of H100's fit on AIConfigurator's
    times with the same NIC."""
    from pdsim.calibrate.fit import fit_all

    fits = fit_all(["h800", "h100"], write=False, quiet=True)
    for op in ("dispatch", "combine"):
        a, b = fits["h800"][f"deepep_normal_{op}"]["rdma_gbps"], fits["h100"][f"deepep_normal_{op}"]["rdma_gbps"]
        assert 35.0 < a < 50.0 and abs(a - b) / b < 0.10, (op, a, b)
        assert fits["h800"][f"deepep_normal_{op}"]["heldout_mape"] < 0.08
