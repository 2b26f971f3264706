"""Recordings of the same requests: the engine's own run-to-run range beside pdsim's error.

Several cases replay exactly the same requests (same prompts and outputs, same send times) on the
same kind of host at different times: the knee of the bundled workload three times on the zen1
host (zen1, zen1b, zen1c), the 1P1D knee three times (zen1, zen1b, zen1d), the shared-prefix knee
twice (zen1c, zen1d). Their real metrics differ by the host's drift alone (the 1P1D knee's mean
TTFT 2,476-3,856 ms, p90 4,977-9,678 ms). pdsim simulates each with its own re-measured profile;
a failing metric whose simulated value lies within the range of the real values of its repeats is
one the engine itself does not reproduce more closely. It still counts as failing.

Two cases are repeats when their case.yaml names the same ``host`` (the machine they were recorded
on: a label; a case without one is nobody's repeat, since hosts of the same CPU name differ 2x in
speed here), they took their arrivals the same way and have the same requests: the same number,
the same prompt and output lengths (as multisets: two sends a few ms apart may swap), and send
times within ``TOL_S`` of each other, request by request in time order, served by the same
deployment: the same scenario with the same ``cluster.`` overrides (a case that changes the engine,
as the what-if ``hf-cb-h200-chunk512`` cuts the token budget for the knee's requests, is another
experiment, not a repeat; overrides of the host's measured constants, ``hardware=`` or
``overheads.router_ms=``, are the host's and do not count).
"""
from __future__ import annotations

import dataclasses

import numpy as np

#: send times of two recordings of the same requests differ by the client's jitter (ms); rates of
#: different loads of the same workload differ by 30% or more, seconds into a run
TOL_S = 1.0


@dataclasses.dataclass(frozen=True)
class Requests:
    """What makes two recordings repeats: the host, arrivals mode, the requests' lengths and send times."""

    host: str
    arrivals: str
    deployment: tuple  # the scenario and its cluster.* overrides
    input_len: np.ndarray  # sorted
    output_len: np.ndarray  # sorted
    send_s: np.ndarray  # sorted, from the first

    @classmethod
    def of(cls, table, arrivals: str, host: str = "", deployment: tuple = ()) -> "Requests":
        t = np.sort(np.asarray(table.arrival_s, float))
        return cls(host, arrivals, deployment, np.sort(np.asarray(table.input_len)),
                   np.sort(np.asarray(table.output_len)), t - (t[0] if len(t) else 0.0))

    def same(self, other: "Requests") -> bool:
        if not self.host or self.host != other.host:
            return False
        if self.deployment != other.deployment:
            return False
        if self.arrivals != other.arrivals or len(self.send_s) != len(other.send_s):
            return False
        if not (np.array_equal(self.input_len, other.input_len) and np.array_equal(self.output_len, other.output_len)):
            return False
        return self.arrivals != "send_times" or bool(np.all(np.abs(self.send_s - other.send_s) <= TOL_S))


def groups(requests: list[Requests | None]) -> list[list[int]]:
    """Indices of the cases that are repeats of one another, groups of two or more, in case order."""
    seen: set[int] = set()
    out = []
    for i, a in enumerate(requests):
        if i in seen or a is None:
            continue
        g = [i] + [j for j in range(i + 1, len(requests)) if j not in seen and requests[j] is not None
                   and a.same(requests[j])]
        if len(g) > 1:
            seen.update(g)
            out.append(g)
    return out


def with_repeats(results: list) -> list:
    """``results`` (CaseResults) with each repeat's ``repeats`` (the other cases' names) and its rows'
    ``repeat_low`` / ``repeat_high`` (the range of the real values over the whole group) filled."""
    out = list(results)
    for g in groups([r.requests_of for r in results]):
        reals: dict[str, list[float]] = {}
        for i in g:
            for row in results[i].rows:
                if row.real is not None and np.isfinite(row.real):
                    reals.setdefault(row.metric, []).append(row.real)
        for i in g:
            r = results[i]
            rows = [dataclasses.replace(row, repeat_low=min(reals[row.metric]), repeat_high=max(reals[row.metric]))
                    if len(reals.get(row.metric, ())) == len(g) else row for row in r.rows]
            out[i] = dataclasses.replace(r, rows=rows, repeats=[results[j].name for j in g if j != i])
    return out
