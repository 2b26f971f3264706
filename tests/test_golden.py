"""Golden per-request outputs: every golden case must reproduce its frozen table exactly
(after the CSV round trip; see tests/golden/cases.py). Floats are compared bit for bit up to the
last bits: ``ABS_S`` + ``REL`` x |value|. The same code and inputs gave one case 1 ulp apart in its
times on an AVX-512 Xeon (2026-11-28: dsr1-h800-decode64-monolithic, 759.2964667751055 against
...054, the frozen value from AVX2 hosts), as numpy takes other SIMD paths there; a difference of a
time (prefill_s) carries that ulp as 1e-13 s. Any change of the model moves times by far more."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from golden.cases import case_names, golden_path, request_table

ABS_S = 1e-9  # seconds (and tokens, bytes): far below any modelled effect
REL = 1e-12


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
        if not np.all(same) and a.dtype.kind == "f" and b.dtype.kind == "f":
            same |= np.abs(a - b) <= ABS_S + REL * np.abs(a)
        if not np.all(same):
            i = int(np.argmin(same))
            bad.append(f"{col} (first at row {i}: golden {a[i]!r}, now {b[i]!r}; {int((~same).sum())} rows)")
    assert not bad, f"{name}: outputs moved in " + "; ".join(bad[:6])
