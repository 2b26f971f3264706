"""Golden per-request outputs: every golden case must reproduce its frozen table exactly
(floats compared bit for bit after the CSV round trip). See tests/golden/cases.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from golden.cases import case_names, golden_path, request_table


@pytest.mark.parametrize("name", case_names())
def test_golden_requests(name):
    path = golden_path(name)
    if not path.exists():
        pytest.fail(f"no golden file for {name}; freeze it with `python -m tests.golden.freeze {name}`")
    want = pd.read_csv(path)
    got = pd.read_csv(pd.io.common.StringIO(request_table(name).to_csv(index=False)))
    missing = [c for c in want.columns if c not in got.columns]
    assert not missing, f"{name}: columns gone: {missing}"  # new columns may be added
    assert len(got) == len(want), f"{name}: {len(got)} requests, golden has {len(want)}"
    bad = []
    for col in want.columns:
        a, b = want[col].to_numpy(), got[col].to_numpy()
        same = (a == b) | (pd.isna(a) & pd.isna(b))
        if not np.all(same):
            i = int(np.argmin(same))
            bad.append(f"{col} (first at row {i}: golden {a[i]!r}, now {b[i]!r}; {int((~same).sum())} rows)")
    assert not bad, f"{name}: outputs moved in " + "; ".join(bad[:6])
