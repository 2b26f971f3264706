"""The example scenarios of issue 12's features (workloads/scenarios/features): every new block
validates against its spec dataclass, the rest of each file against today's Scenario."""
from __future__ import annotations

import copy

import pytest

import pdsim
from pdsim.specs import catalog
from pdsim.specs._convert import build, read_yaml
from pdsim.specs.features import (ExpertLoadSpec, GroupHardwareSpec, PDOverheadSpec, PipelineSpec,
                                  SpeculativeSpec)
from pdsim.specs.scenario import normalize_cluster

FOLDER = catalog.scenarios_dir() / "features"
FILES = sorted(FOLDER.glob("*.yaml"))


def _split(data: dict) -> tuple[dict, dict]:
    """(today's scenario, {field path: (spec class, block)}) of one feature scenario."""
    data = normalize_cluster(copy.deepcopy(data))
    new = {}
    for role in ("prefill", "decode", "colocated"):
        for i, g in enumerate(data["cluster"].get(role) or []):
            if "hardware" in g:
                new[f"cluster.{role}[{i}].hardware"] = (GroupHardwareSpec, {"hardware": g.pop("hardware")})
            if "pipeline" in g:
                new[f"cluster.{role}[{i}].pipeline"] = (PipelineSpec, g.pop("pipeline"))
            if "speculative" in g.get("engine", {}):
                new[f"cluster.{role}[{i}].engine.speculative"] = (SpeculativeSpec, g["engine"].pop("speculative"))
    if "expert_load" in data.get("workload", {}):
        new["workload.expert_load"] = (ExpertLoadSpec, data["workload"].pop("expert_load"))
    if "pd_overheads" in data:
        new["pd_overheads"] = (PDOverheadSpec, data.pop("pd_overheads"))
    if "link" in data.get("transfer", {}):
        link = data["transfer"].pop("link")
        assert link in ("auto", "rdma", "nvlink"), link
        new["transfer.link"] = (None, link)
    return data, new


def test_every_feature_has_an_example():
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_feature_scenario_validates(path):
    data, new = _split(read_yaml(path))
    for where, (cls, block) in new.items():
        if cls is not None:
            build(cls, block, where)
        if cls is GroupHardwareSpec:  # the profile it names exists
            catalog.load_hardware_ref(block["hardware"])
    sc = pdsim.resolve_scenario(data, str(path), path.parent)
    assert sc.scenario.name == path.stem
