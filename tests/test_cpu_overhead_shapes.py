"""The dedicated overhead runs (calibration/microbench/cpu_overhead.py) time decode steps while
all B requests decode. B prompts of P tokens take about B P / 512 steps to prefill, so with a
fixed 48-token output the widest shapes left no such stretch: 16 and 32 requests of 2,048 tokens
gave NaN in every repeat (2026-11-29, validation/cpu-vllm-calibration/emr3/profile3) and the fit
had no row where the validation runs' decode batches are (32 requests, 1-2k tokens of context)."""
from __future__ import annotations

import pytest
from builders import load_script


@pytest.fixture(scope="module")
def ov():
    return load_script("calibration/microbench/cpu_overhead.py")


@pytest.mark.parametrize("b, p", [(1, 32), (4, 512), (16, 512), (32, 512)])
def test_shapes_that_fit_keep_their_output(ov, b, p):
    out, ctx = ov.shape_output(b, p, 48)
    assert out == 48 and ctx == p + 24  # the stretch's mean: the prompt and half the output


@pytest.mark.parametrize("b, p", [(16, 2048), (32, 2048), (32, 4000)])
def test_wide_shapes_leave_a_stretch_where_all_decode(ov, b, p):
    out, ctx = ov.shape_output(b, p, 48)
    prefill_steps = -(-b * p // 512)
    assert out - prefill_steps >= 16  # tokens of the first request left once the last has its first
    # over the stretch the requests' generated tokens run from [0, steps] to [out - steps, out]:
    # mean out / 2, whatever the prefill took
    assert ctx == p + out // 2
