"""The workload's priority column: generated classes, traces that carry classes, and the errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pdsim.specs._convert import build
from pdsim.specs.errors import SpecError
from pdsim.specs.workload import WorkloadSpec
from pdsim.workload import RequestTable, materialize, read_trace, with_arrivals, write_trace

CLASSES = [{"priority": 2, "share": 0.2}, {"priority": 1, "share": 0.3}, {"priority": 0, "share": 0.5}]


def spec(**over) -> WorkloadSpec:
    return build(WorkloadSpec, {"num_requests": 4000, "rate": 5.0, **over})


def test_classes_are_drawn_with_their_shares_without_moving_anything_else():
    plain = materialize(spec(), seed=4)
    t = materialize(spec(priority_classes=CLASSES), seed=4)
    assert plain.priority is None
    assert np.array_equal(t.arrival_s, plain.arrival_s) and np.array_equal(t.input_len, plain.input_len)
    share = {c["priority"]: float(np.mean(t.priority == c["priority"])) for c in CLASSES}
    for c in CLASSES:  # 4000 draws: within 4 standard errors
        assert abs(share[c["priority"]] - c["share"]) < 4 * np.sqrt(c["share"] * (1 - c["share"]) / 4000)
    again = materialize(spec(priority_classes=CLASSES), seed=4)
    assert np.array_equal(again.priority, t.priority)
    assert not np.array_equal(materialize(spec(priority_classes=CLASSES), seed=5).priority, t.priority)


@pytest.mark.parametrize("classes,field,msg", [
    ([{"priority": 1, "share": 0.5}], "priority_classes", "sum to 1"),
    ([{"priority": 1, "share": 0.5}, {"priority": 1, "share": 0.5}], "priority_classes", "once"),
    ([{"priority": 1, "share": 0.0}, {"priority": 2, "share": 1.0}], "priority_classes[0].share", "(0, 1]"),
    ([{"priority": 1}], "priority_classes[0].share", "missing"),
])
def test_bad_classes_name_the_field(classes, field, msg):
    with pytest.raises(SpecError) as e:
        build(WorkloadSpec, {"priority_classes": classes}, "workload")
    assert e.value.field == f"workload.{field}" and msg in e.value.message


def test_a_mooncake_trace_carries_priorities_through_reading_writing_and_reshaping(tmp_path):
    table = RequestTable(np.array([0.0, 0.5, 1.0]), np.array([600, 100, 1200]), np.array([5, 6, 7]),
                         hash_ids=[np.array([1, 2]), np.array([3]), np.array([1, 2, 4])], priority=[1, 0, 3])
    path = write_trace(table, tmp_path / "t.jsonl")
    assert json.loads(path.read_text().splitlines()[2])["priority"] == 3
    back = read_trace(path)
    assert back.priority.tolist() == [1, 0, 3]
    assert read_trace(path, limit=2).priority.tolist() == [1, 0]
    assert read_trace(path, start_s=0.4).priority.tolist() == [0, 3]
    assert with_arrivals(back, np.array([0.0, 2.0, 3.0])).priority.tolist() == [1, 0, 3]


def test_sorting_a_trace_keeps_each_row_with_its_priority(tmp_path):
    p = tmp_path / "u.jsonl"
    rows = [{"timestamp": 900, "input_length": 10, "output_length": 2, "priority": 9},
            {"timestamp": 100, "input_length": 20, "output_length": 2},
            {"timestamp": 500, "input_length": 30, "output_length": 2, "priority": 5}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = read_trace(p, sort=True)
    assert t.input_len.tolist() == [20, 30, 10] and t.priority.tolist() == [0, 5, 9]


def test_a_bad_priority_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                 '{"timestamp": 1, "input_length": 5, "output_length": 1, "priority": "high"}\n')
    with pytest.raises(SpecError, match=r"line 2: priority: expected an integer"):
        read_trace(p)
    assert read_trace(p, skip_bad_rows=True).skipped_rows == 1


def test_classes_on_a_trace_with_its_own_priorities_are_refused(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "priority": 1}\n')
    s = build(WorkloadSpec, {"kind": "trace", "trace": {"path": str(p)}, "priority_classes": CLASSES})
    with pytest.raises(SpecError) as e:
        materialize(s)
    assert e.value.field == "workload.priority_classes"


def test_a_table_refuses_a_priority_column_of_the_wrong_length():
    with pytest.raises(ValueError, match="priority"):
        RequestTable(np.zeros(2), np.ones(2), np.ones(2), priority=[1])
