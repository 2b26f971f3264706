"""Expert load by default (costs/moe_load.py, specs/features.py DEFAULT_SKEW / DEFAULT_DRIFT).

Source of every figure: LMSYS blog 2025-05-05 "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs" (lm-sys/lm-sys.github.io
blog/2025-05-05-large-scale-ep.md): EPLB "delivers a significant speedup of 1.49x (prefill) and
2.54x (decode)"; the profile table's SGLang with its default expert distribution (EPLB on)
reaches 50,302 tok/s per node against 59,337 with simulated perfect EPLB (random routing),
1.18x. The two default constants are one least-squares fit to these three figures; the test
shows all three within 25% (the model cannot reproduce the prefill and decode gains with one
popularity law: 1.78x / 2.24x).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pdsim.sim.experts import ExpertService
from pdsim.specs.features import DEFAULT_SKEW, ExpertLoadSpec
from pdsim.specs.faults import ExpertServiceSpec

from ._deepseek import DSV3, H100, decode_s, ep_group, prefill_s


def _prefill(load):
    return prefill_s(H100, DSV3, ep_group(4, False, tbo=True), 16384, 4096, load=load)


def _decode(load):
    return decode_s(H100, DSV3, ep_group(9, True, tbo=True), 256, 2000.0, load=load)


def test_lmsys_eplb_figures():
    no, yes = ExpertLoadSpec(eplb=False), ExpertLoadSpec(eplb=True)
    assert _prefill(no) / _prefill(yes) == pytest.approx(1.49, rel=0.25)
    assert _decode(no) / _decode(yes) == pytest.approx(2.54, rel=0.25)
    # EPLB's residual: the real distribution with EPLB against random routing
    assert _prefill(yes) / _prefill(ExpertLoadSpec(skew=0.0)) == pytest.approx(59_337 / 50_302, rel=0.1)


def test_default_routing_is_skewed_and_default_sglang_is_not_priced_as_balanced():
    assert DEFAULT_SKEW > 0
    balanced = ExpertLoadSpec(skew=0.0)
    plain = ep_group(4, False, tbo=True, redundant=0)  # default SGLang: no redundant experts, no EPLB
    assert prefill_s(H100, DSV3, plain, 16384, 4096) > 1.3 * prefill_s(H100, DSV3, plain, 16384, 4096, load=balanced)
    # and EPLB is not perfect: it leaves an imbalance behind
    assert _prefill(None) > 1.05 * _prefill(balanced)


def test_expert_servers_price_with_the_workloads_expert_load():
    spec = ExpertServiceSpec(servers=8, replicas=1)

    def service(load):
        world = SimpleNamespace(env=None, resolved=SimpleNamespace(scenario=SimpleNamespace(
            workload=SimpleNamespace(expert_load=load))))
        return ExpertService(world, spec, H100, DSV3, "calibrated")
    hot, flat = service(ExpertLoadSpec(skew=1.0, eplb=False)), service(ExpertLoadSpec(skew=0.0))
    # at 16K tokens the servers' experts are compute-bound, where the hot GPU's extra tokens show
    # in full (at 4K they are near the weight stream's bound: 1.29x)
    assert hot.layer_s(16384) > 1.3 * flat.layer_s(16384)
