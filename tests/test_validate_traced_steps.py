"""A case's own step traces (case.yaml ``steps:``): how its profile prices the engine's steps of
that run, as a note beside the verdicts (validate/traced_steps.py). It separates the two places a
latency error can come from: the steps' prices, or what lies outside the steps."""
from __future__ import annotations

import shutil

import pytest

from pdsim.specs.errors import SpecError
from pdsim.validate.case import load_case, run_case

from builders import REPO


def test_a_traced_case_says_how_its_steps_are_priced():
    """The knee recorded again on the H200 of the second start: priced with the probe's host work
    at that start's speed (its warm-up steps: x1.092), its steps still took 1.10x their price by
    median (the host slowed further during the run), which is why its p90 ITL is 23% under the
    engine's; the same requests on the first machine: 1.02x."""
    notes = {c: next(n for n in run_case(REPO / "validation" / c).notes if "the engine's own steps" in n)
             for c in ("hf-cb-h200-knee-repeat", "hf-cb-h200-knee")}
    assert "750 steps: median real time over the step price all 1.10" in notes["hf-cb-h200-knee-repeat"]
    assert "841 steps: median real time over the step price all 1.02" in notes["hf-cb-h200-knee"]


def test_a_pd_case_prices_p_and_d_on_their_own_groups():
    notes = [n for n in run_case(REPO / "validation" / "cpu-vllm-fifo-pd-knee").notes if "own steps" in n]
    assert len(notes) == 2
    assert notes[0].startswith("the engine's own steps (prefill.0), p, 122 steps")
    assert notes[1].startswith("the engine's own steps (decode.0), d, 16,932 steps")


@pytest.mark.parametrize("steps, says", [
    ("steps: 3\n", "expected a list of step traces"),
    ("steps: [{trace: x, role: decode}]\n", "expected a list of step traces"),
    ("steps: [{trace: x, group: 3}]\n", "expected a list of step traces"),
    ("steps: [nothing-here.jsonl]\n", "steps[0]"),
    ("steps: [{trace: ../../calibration/sessions/h200-2026-11-28/run1/load0.3.steps.json, group: decode}]\n",
     "steps[0]: --group: the scenario has 0 decode group(s)"),
])
def test_bad_steps_entries_name_the_case_file_and_the_entry(tmp_path, steps, says):
    case = tmp_path / "validation" / "c"
    shutil.copytree(REPO / "validation" / "hf-cb-h200-light", case)
    text = (case / "case.yaml").read_text()
    text = text[:text.index("# the engine's own steps")] + steps
    text = text.replace("../../workloads/", str(REPO / "workloads") + "/")
    text = text.replace("../../validation/", str(REPO / "validation") + "/")
    (case / "case.yaml").write_text(text)
    (tmp_path / "calibration").symlink_to(REPO / "calibration")
    with pytest.raises(SpecError, match="case.yaml") as err:
        load_case(case) if "expected" in says else run_case(case)
    assert says in str(err.value)


def test_a_trace_file_whose_name_has_an_at_sign_is_that_file(tmp_path):
    """``PATH@LOAD`` names one load of a vLLM recording; an existing file named with an @ is read as
    itself."""
    import json

    from pdsim.validate.traced_steps import read_trace

    cols = ["start_s", "end_s", "decodes", "prefills", "prefill_tokens", "decode_context", "prefill_context"]
    p = tmp_path / "run@2026.json"
    p.write_text(json.dumps({"columns": cols, "rows": [[0, 0.1, 2, 0, 0, 50, 0]]}))
    assert read_trace(str(p)).took == pytest.approx([0.1])
