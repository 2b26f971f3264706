"""The README demo: the bundled demo scenario runs healthy (prices move; this notices when they
push it out of its SLO), and the overloaded case shown next to it gets its overload verdict."""
from __future__ import annotations

import pdsim
from pdsim.explore.what_if import diagnose

from builders import REPO

DEMO = "dsv3-h800-p4d9"  # the README's `pdsim run dsv3-h800-p4d9 --out runs/demo`
OVERLOADED = "dsv3-h800-p4d6"


def test_readme_demo_is_healthy():
    res = pdsim.simulate(pdsim.load_scenario(DEMO))
    s = res.summary()
    assert s["goodput_share"] >= 0.9, (
        f"the README demo {DEMO} fell to {s['goodput_share']:.1%} goodput: choose its load again "
        "(README Quick start says how) and update the README")
    assert [v.kind for v in diagnose(res, check=False)] == ["healthy"]


def test_readme_demo_keeps_its_margin():
    """1.5x the demo's rate still meets the SLO: the healthy load is not at the edge."""
    res = pdsim.simulate(pdsim.load_scenario(DEMO, ["workload.rate=45"]))
    assert res.summary()["goodput_share"] >= 0.9


def test_readme_overloaded_case_gets_its_verdict():
    res = pdsim.simulate(pdsim.load_scenario(OVERLOADED))
    verdicts = diagnose(res, check=False)
    assert verdicts[0].kind == "overload"
    assert verdicts[0].metrics["load_ratio"] > 0.95


def test_readme_shows_both_commands():
    text = (REPO / "README.md").read_text()
    assert f"pdsim run {DEMO} --out runs/demo" in text
    assert f"$ pdsim run {OVERLOADED}" in text and "verdict: overload (high)" in text
