"""The same sweep on a real local Ray instance gives the same rows as the serial run."""
from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
import yaml

from pdsim.explore import run_sweep

from builders import scenario_dict

pytestmark = [pytest.mark.ray,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="ray is not installed (optional extra: pip install 'pdsim[ray]')")]

AXES = [{"field": "cluster.colocated.engine.chunked_prefill_size", "values": [512, 2048]},
        {"field": "workload.rate", "values": [4.0, 16.0]}]


@pytest.fixture(scope="module")
def local_ray():
    import ray

    if ray.is_initialized():  # pragma: no cover - another test left one running
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def rows(df):
    return df.drop(columns=["eval_wall_s"]).reset_index(drop=True)


def test_ray_gives_the_same_rows_as_serial_and_pool(tmp_path, local_ray):
    base = scenario_dict("colocated")
    base["workload"]["num_requests"] = 40
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "t", "base": "base.yaml", "axes": AXES + [
        {"field": "cluster.colocated.engine.max_total_tokens", "values": [100, 60_000]}]}))
    serial = run_sweep(p, tmp_path / "s", workers=1, progress=False)
    on_ray = run_sweep(p, tmp_path / "r", ray=True, progress=False)
    assert local_ray.is_initialized()  # an instance it did not start is left running
    assert on_ray.attrs["computed"] == 4 and (serial["status"] == "ok").sum() == 4
    pd.testing.assert_frame_equal(rows(serial), rows(on_ray))
    # the Ray run's cache resumes a local run, and the other way round
    again = run_sweep(p, tmp_path / "r", workers=2, progress=False)
    assert again.attrs["computed"] == 0
    pd.testing.assert_frame_equal(rows(serial), rows(again))
