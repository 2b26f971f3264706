"""pdsim sensitivity: perturbs each constant with a stated uncertainty, re-simulates, ranks."""
from __future__ import annotations

import dataclasses

import pytest
from builders import resolve, scenario_dict

from pdsim.calibrate.sensitivity import perturbations, sensitivity, sensitivity_table
from pdsim.cli import main


def _small():
    d = scenario_dict()
    d["workload"]["num_requests"] = 40
    return resolve(d)


def test_perturbations_cover_assumed_and_fitted_constants():
    sc = _small()
    names = {p.constant: p for p in perturbations(sc.hardware)}
    assert "efficiency.step_overhead_us" in names and any(n.startswith("calibration.") for n in names)
    p = names["efficiency.step_overhead_us"]
    u = sc.hardware.uncertainty["efficiency.step_overhead_us"]
    assert p.low.efficiency.step_overhead_us == sc.hardware.efficiency.step_overhead_us * (1 - u)
    assert p.high.efficiency.step_overhead_us == sc.hardware.efficiency.step_overhead_us * (1 + u)
    hbm = names["efficiency.hbm"]
    assert hbm.high.efficiency.hbm <= 1.0  # a fraction of peak never exceeds 1 (said in the note)


def test_sensitivity_ranks_constants_and_skips_unused_ones():
    sc = _small()
    base, rows = sensitivity(sc)
    assert rows and all(rows[i]["max_rel_change"] >= rows[i + 1]["max_rel_change"] for i in range(len(rows) - 1))
    constants = [r["constant"] for r in rows]
    assert not any("deepep" in c for c in constants)  # a dense model never re-runs for DeepEP
    assert "efficiency.step_overhead_us" in constants
    assert "baseline:" in sensitivity_table(base, rows)
    # the perturbed scenario is a dataclasses.replace of the resolved one: the original is untouched
    assert sc.hardware == dataclasses.replace(sc).hardware


def test_cli(tmp_path, capsys):
    import yaml

    p = tmp_path / "s.yaml"
    d = scenario_dict()
    d["workload"]["num_requests"] = 30
    p.write_text(yaml.safe_dump(d))
    out = tmp_path / "s.json"
    assert main(["sensitivity", str(p), "--only", "efficiency.step_overhead_us", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "efficiency.step_overhead_us" in text and out.exists()


def test_help_says_the_price_modules_assumptions_are_perturbed(capsys):
    """`pdsim sensitivity --help` names the assumptions that live in the price modules (issue 23
    item 7), not only the profile's constants: a user reading it knows P/D fixed costs or MTP
    acceptance are in the table."""
    with pytest.raises(SystemExit):
        main(["sensitivity", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for what in ("P/D fixed costs", "restart", "MTP acceptance", "expert skew", "NVLink", "Mooncake", "dequantisation"):
        assert what in text, what


def test_module_assumptions_are_perturbed_and_restored():
    """Constants that live in the price modules (issue 23 item 7: P/D fixed costs, restart, MTP
    acceptance, expert skew, CUDA-graph memory, NVLink transfer, dequantisation, small kernels)
    are perturbed too, each only where the scenario uses it, and restored afterwards."""
    from pdsim.calibrate.sensitivity import ASSUMPTIONS, assumption_patch
    from pdsim.costs import elementwise
    from pdsim.specs import features

    names = {a.constant for a in ASSUMPTIONS}
    for want in ("pd_overheads.ROUTER_MS", "pd_overheads.CONNECT_MS", "restart.PROCESS_S", "features.DEEPSEEK_MTP_ACCEPT",
                 "features.DEFAULT_SKEW", "features.DEFAULT_DECODE_DRIFT", "memory.CUDA_GRAPH_GIB_MOE", "transfer.NVLINK_PER_CHUNK_US",
                 "roofline.W4A16_DEQUANT", "elementwise.ATTN_KERNELS"):
        assert want in names, want
    mtp = next(a for a in ASSUMPTIONS if a.attr == "DEEPSEEK_MTP_ACCEPT")
    before = features.DEEPSEEK_MTP_ACCEPT
    with assumption_patch(mtp, 1.2):
        assert all(x <= 1.0 for x in features.DEEPSEEK_MTP_ACCEPT)  # a probability stays one
        assert features.DEEPSEEK_MTP_ACCEPT[0] > before[0]
    assert features.DEEPSEEK_MTP_ACCEPT == before
    sc = _small()
    base, rows = sensitivity(sc, only=["elementwise.ATTN_KERNELS", "features.DEFAULT_SKEW"])
    constants = {r["constant"]: r for r in rows}
    assert "elementwise.ATTN_KERNELS" in constants and constants["elementwise.ATTN_KERNELS"]["max_rel_change"] > 0
    assert "features.DEFAULT_SKEW" not in constants  # a dense model has no experts to skew
    assert elementwise.ATTN_KERNELS == 5


def test_a_slowdown_factor_is_never_perturbed_below_one():
    """NORMAL_OVERLAP_SLOWDOWN (1.31, 1.21: DeepEP's normal kernels beside compute) at -20% would
    be 1.05 / 0.97: a combine faster beside compute than alone. The perturbation stops at 1."""
    from pdsim.calibrate import sensitivity
    from pdsim.costs import tbo

    a = next(x for x in sensitivity.ASSUMPTIONS if x.attr == "NORMAL_OVERLAP_SLOWDOWN")
    before = tbo.NORMAL_OVERLAP_SLOWDOWN
    with sensitivity.assumption_patch(a, 1.0 - a.rel_uncertainty):
        low = tbo.NORMAL_OVERLAP_SLOWDOWN
    assert tbo.NORMAL_OVERLAP_SLOWDOWN == before
    assert min(low) == 1.0 and low[0] == before[0] * (1.0 - a.rel_uncertainty)


def test_mooncake_priors_are_perturbed_where_no_fit_prices_the_transfer():
    """The transfer module's Mooncake priors (setup, per-chunk, per-page: DOMAIN.md s4, SGLang PR
    #7236) price a disaggregated run's KV transfer under the roofline cost model: `pdsim
    sensitivity` perturbs them there, and not where the profile's fitted calibration.mooncake
    prices it (that model is perturbed by its own uncertainty)."""
    import pdsim
    from pdsim.calibrate.sensitivity import ASSUMPTIONS, assumption_patch
    from pdsim.costs import transfer

    by = {a.attr: a for a in ASSUMPTIONS if a.attr.startswith("MOONCAKE_")}
    assert set(by) == {"MOONCAKE_SETUP_MS", "MOONCAKE_PER_CHUNK_US", "MOONCAKE_PER_PAGE_US"}
    fitted = pdsim.load_scenario("dsv3-h800-p4d9")
    prior = pdsim.load_scenario("dsv3-h800-p4d9", ["cost_model=roofline"])
    per_page = pdsim.load_scenario("dsv3-h800-p4d9", ["cost_model=roofline", "transfer.batched=false"])
    assert not any(a.applies(fitted) for a in by.values())
    assert by["MOONCAKE_SETUP_MS"].applies(prior) and by["MOONCAKE_PER_CHUNK_US"].applies(prior)
    assert not by["MOONCAKE_PER_PAGE_US"].applies(prior) and by["MOONCAKE_PER_PAGE_US"].applies(per_page)
    before = transfer.mooncake_constants(prior.hardware, False)["setup_ms"]
    with assumption_patch(by["MOONCAKE_SETUP_MS"], 2.0):
        assert transfer.mooncake_constants(prior.hardware, False)["setup_ms"] == 2.0 * before
    assert transfer.MOONCAKE_SETUP_MS == before


def test_a_calibration_model_is_listed_with_the_kind_its_profile_gives_it():
    """A Mooncake model copied from another system's fit (``label: borrowed``) is perturbed as
    'borrowed', a measured copy model as 'measured': the kinds the constants report lists (issue 23
    item 7, labels), not 'derived' / 'fitted' for every one."""
    from pdsim.specs.catalog import load_hardware_ref

    h20 = {p.constant: p.kind for p in perturbations(load_hardware_ref("h20"))}
    assert h20["calibration.mooncake"] == "borrowed" and h20["calibration.gemm_bf16"] == "derived"
    h100 = {p.constant: p.kind for p in perturbations(load_hardware_ref("h100"))}
    assert h100["calibration.memcopy"] == "measured" and h100["calibration.gemm_bf16"] == "fitted"
    assert h100["calibration.mooncake"] == "borrowed"


def test_the_step_dispersion_of_a_profile_is_perturbed(tmp_path):
    """efficiency.step_cv / step_cv_tau_ms change no price (sim/engine/dispersion.py draws each
    step around it), so the price probe alone called them unused and `pdsim sensitivity` left out
    the uncertainty the CPU profile states for them (validation/cpu-vllm-calibration/fifo2)."""
    from pathlib import Path

    from pdsim import api

    root = Path(__file__).resolve().parents[1]
    sc = api.load_scenario(root / "workloads/scenarios/cpu-vllm-tiny-llama.yaml",
                           ["workload.num_requests=30", "workload.rate=0.5",
                            f"hardware={root}/validation/cpu-vllm-calibration/fifo2/cpu-epyc-2c.yaml"])
    _, rows = sensitivity(sc, only=["efficiency.step_cv", "efficiency.step_cv_tau_ms"])
    assert {r["constant"] for r in rows} == {"efficiency.step_cv", "efficiency.step_cv_tau_ms"}
    cv = next(r for r in rows if r["constant"] == "efficiency.step_cv")
    assert cv["max_rel_change"] > 0  # a wider or narrower spread moves the results
