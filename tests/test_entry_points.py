"""A policy shipped as an installed package (a ``*.dist-info`` with a ``pdsim.plugins`` entry
point on sys.path) is used from YAML by name everywhere: the API under the dashboard's
sandboxed Trust, the dashboard's own validation, and the CLI, without --allow-plugin."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

import pdsim
from pdsim.sim.control.router import ROUTERS
from pdsim.sim.engine.scheduler import SCHEDULERS
from pdsim.specs.errors import SpecError
from pdsim.specs.trust import Trust

from builders import REPO, scenario_dict

PACKAGE = '''
"""acme-policies: a research group's routing and scheduling policies."""
from dataclasses import dataclass

from pdsim.sim.control.router import Router
from pdsim.sim.engine.scheduler import BatchScheduler


class LastInstance(Router):
    """Every request to the last registered prefill instance and the first decode one."""

    @dataclass(frozen=True)
    class Params:
        offset: int = 1  # 1: the last instance, 2: the one before it, ...

    def pick_prefill(self, req, instances):
        return instances[-min(self.params.offset, len(instances))]

    def pick_decode(self, req, instances):
        return instances[0]


class NewestFirst(BatchScheduler):
    """LIFO among waiting prompts (prompts holding KV stay in front)."""

    def order(self, queue, cache):
        held = [r for r in queue if r.pf_admitted]
        return held + sorted((r for r in queue if not r.pf_admitted), key=lambda r: -r.rid)
'''

ENTRY_POINTS = """
[pdsim.plugins]
acme-last = acme_policies:LastInstance
acme-newest = acme_policies:NewestFirst
acme-broken = acme_broken:Nothing
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site folder holding the installed package, first on sys.path."""
    root = tmp_path / "site"
    (root / "acme_policies").mkdir(parents=True)
    (root / "acme_policies" / "__init__.py").write_text(PACKAGE)
    (root / "acme_broken.py").write_text("raise ImportError('acme_broken needs a GPU driver')\n")
    info = root / "acme_policies-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-policies\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS).lstrip())
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield root
    for mod in ("acme_policies", "acme_broken"):
        sys.modules.pop(mod, None)


def scenario_text() -> str:
    d = scenario_dict()
    d["cluster"]["prefill"][0]["count"] = 3
    d["cluster"]["prefill"][0]["engine"]["schedule_policy"] = "acme-newest"
    d["router"] = {"policy": "acme-last", "params": {"offset": 2}}
    return yaml.safe_dump(d)


def test_installed_policies_resolve_by_name_in_a_sandbox(site, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    sandbox = Trust.sandboxed(data_dir)  # what the dashboard uses: no module:Class at all
    sc = pdsim.resolve_scenario(yaml.safe_load(scenario_text()), "editor.yaml", data_dir, trust=sandbox)
    router = sc.plugins["router"]
    assert router.cls.__module__ == "acme_policies" and router.params.offset == 2
    assert sc.plugins["schedulers"][("prefill", 0)].cls.__name__ == "NewestFirst"
    df = pdsim.simulate(sc).requests
    assert df["finished"].all()
    assert set(df["prefill_instance"]) == {"P0.1"}  # offset 2: the second to last of three


def test_the_dashboards_validation_accepts_it(site, tmp_path):
    validation = pytest.importorskip("pdsim.dashboards.validation")
    data_dir, uploads = tmp_path / "data", tmp_path / "uploads"
    data_dir.mkdir()
    uploads.mkdir()
    resolved, err = validation.validate(scenario_text(), validation.Sandbox(data_dir, uploads))
    assert err is None, err
    assert resolved.plugins["router"].cls.__name__ == "LastInstance"


def test_the_module_itself_is_still_refused_as_module_class_in_a_sandbox(site, tmp_path):
    d = yaml.safe_load(scenario_text())
    d["router"] = {"policy": "acme_policies:LastInstance"}
    with pytest.raises(SpecError, match="install the package"):
        pdsim.resolve_scenario(d, "editor.yaml", tmp_path, trust=Trust.sandboxed(tmp_path))


def test_entry_points_are_listed_under_their_kind_and_checked(site):
    assert "acme-last" in ROUTERS.installed() and "acme-last" not in SCHEDULERS.installed()
    assert "acme-newest" in SCHEDULERS.installed()
    assert "acme-broken" not in ROUTERS.installed()  # a broken package does not break listing
    with pytest.raises(SpecError, match="acme-broken.*failed to load: ImportError"):
        ROUTERS.get("acme-broken", "router.policy")
    with pytest.raises(SpecError, match="not a router"):
        ROUTERS.get("acme-newest", "router.policy")  # a scheduler named where a router goes
    with pytest.raises(SpecError) as e:
        ROUTERS.resolve("acme-last", {"offset": "two"}, "router.policy", params_field="router.params")
    assert e.value.field == "router.params.offset"


def test_the_cli_uses_it_without_allow_plugin(site, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(scenario_text())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    r = subprocess.run([sys.executable, "-m", "pdsim", "run", str(path), "--no-progress"], capture_output=True,
                       text=True, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert "pdsim run" in r.stdout and "error" not in r.stderr
