"""The sweep/experiment cache key covers every file a scenario reads, transitively (review F-STALE:
editing a per-group hardware file or a speculative draft model reused stale rows: cached TPOT
6.98 ms against 46.6 ms fresh)."""
from __future__ import annotations

import yaml

from pdsim.explore import plan_sweep, run_sweep
from pdsim.explore.fingerprint import input_files
from pdsim.specs.catalog import hardware_dir, models_dir
from pdsim.specs.scenario import parse_scenario

from builders import scenario_dict

RATES = {"field": "workload.rate", "values": [4.0, 8.0]}


def _sweep(tmp_path, base: dict) -> str:
    base["workload"]["num_requests"] = 12
    base["workload"]["output"] = {"dist": "uniform", "min": 8, "max": 24}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml", "axes": [RATES]}))
    return str(p)


def _tpot(df) -> list[float]:
    return [round(float(x), 4) for x in df["mean_tpot_ms"]]


def test_editing_a_group_hardware_file_recomputes_its_rows(tmp_path):
    hw = tmp_path / "hw_group.yaml"
    hw.write_text((hardware_dir() / "h100.yaml").read_text())
    base = scenario_dict("disagg")
    base["cluster"]["decode"][0]["hardware"] = "hw_group.yaml"
    p = _sweep(tmp_path, base)
    out = tmp_path / "o"
    first = run_sweep(p, out, workers=1, progress=False)
    assert first.attrs["computed"] == 2
    hw.write_text(hw.read_text().replace("hbm_gbps: 3350", "hbm_gbps: 335"))  # 10x slower decode memory
    again = run_sweep(p, out, workers=1, progress=False)
    assert again.attrs["computed"] == 2 and again.attrs["cached"] == 0
    assert all(b > 2 * a for a, b in zip(_tpot(first), _tpot(again)))  # the rows are new, not the stale ones
    assert run_sweep(p, out, workers=1, progress=False).attrs["cached"] == 2  # and unchanged files still hit


def test_editing_a_draft_model_file_recomputes_its_rows(tmp_path):
    draft = tmp_path / "draft.yaml"
    draft.write_text((models_dir() / "llama-3.1-8b.yaml").read_text())
    base = scenario_dict("colocated")
    base["cluster"]["colocated"][0]["engine"]["speculative"] = {
        "method": "eagle", "num_steps": 1, "num_draft_tokens": 2, "accept_rates": [0.7], "draft_model": "draft.yaml"}
    p = _sweep(tmp_path, base)
    out = tmp_path / "o"
    assert run_sweep(p, out, workers=1, progress=False).attrs["computed"] == 2
    draft.write_text(draft.read_text().replace("num_layers: 32", "num_layers: 320"))
    assert run_sweep(p, out, workers=1, progress=False).attrs["computed"] == 2


def test_every_file_field_is_in_the_key(tmp_path):
    for name in ("g.yaml", "e.yaml"):
        (tmp_path / name).write_text((hardware_dir() / "h100.yaml").read_text())
    (tmp_path / "d.yaml").write_text((models_dir() / "llama-3.1-8b.yaml").read_text())
    d = scenario_dict("disagg")
    d["cluster"]["prefill"][0]["hardware"] = "g.yaml"
    d["cluster"]["decode"][0]["engine"]["speculative"] = {"method": "eagle", "num_steps": 1, "num_draft_tokens": 2,
                                                          "accept_rates": [0.7], "draft_model": "d.yaml"}
    d["experts"] = {"servers": 2, "hardware": "e.yaml"}
    sc = parse_scenario(d)
    keys = input_files(sc, tmp_path)
    assert {"hardware", "model", "cluster.prefill[0].hardware", "cluster.decode[0].engine.speculative.draft_model",
            "experts.hardware"} <= set(keys)
    before = dict(keys)
    (tmp_path / "e.yaml").write_text((tmp_path / "e.yaml").read_text() + "\n# edited\n")
    after = input_files(sc, tmp_path)
    assert [k for k in after if after[k] != before[k]] == ["experts.hardware"]


def test_plan_keys_differ_after_a_group_hardware_edit(tmp_path):
    hw = tmp_path / "hw_group.yaml"
    hw.write_text((hardware_dir() / "h100.yaml").read_text())
    base = scenario_dict("disagg")
    base["cluster"]["prefill"][0]["hardware"] = "hw_group.yaml"
    p = _sweep(tmp_path, base)
    k0 = [c.cache_key for c in plan_sweep(p).configs]
    hw.write_text(hw.read_text() + "\n# recalibrated\n")
    assert all(a != b for a, b in zip(k0, [c.cache_key for c in plan_sweep(p).configs]))


def test_editing_an_allowed_plugin_module_changes_the_key(tmp_path, monkeypatch):
    import sys

    from pdsim.specs.trust import Trust

    name = f"fp_plugin_{abs(hash(str(tmp_path))) % 10**8}"
    src = tmp_path / f"{name}.py"
    src.write_text("from pdsim.sim import Router\n"
                   "class Last(Router):\n"
                   "    def pick_prefill(self, req, instances):\n"
                   "        return instances[-1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = scenario_dict("disagg")
    base["router"] = {"policy": f"{name}:Last"}
    p = _sweep(tmp_path, base)
    trust = Trust(allow_plugins=(name,))
    try:
        k0 = [c.cache_key for c in plan_sweep(p, trust).configs]
        assert k0 == [c.cache_key for c in plan_sweep(p, trust).configs]
        src.write_text(src.read_text() + "# a changed policy\n")
        assert all(a != b for a, b in zip(k0, [c.cache_key for c in plan_sweep(p, trust).configs]))
    finally:
        sys.modules.pop(name, None)
