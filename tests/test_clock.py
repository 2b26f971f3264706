"""The clock's shortcuts (sim/clock.py) change nothing: a run with engine steps inlined between
events equals, bit for bit, the run with every engine step an event (requests, step logs,
token times, link usage), on the small golden cases, random scenarios with faults and a
horizon, and the clock refuses a jump past an event or the horizon."""
from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings

from golden.cases import _dicts, load_case
from pdsim.sim.clock import Clock
from pdsim.sim.world import World
from pdsim.workload import materialize

from strategies import scenarios
from builders import assert_same_requests, resolve


def _run(resolved, inline: bool):
    table = materialize(resolved.scenario.workload, resolved.scenario.seed, resolved.base_dir)
    w = World(resolved, table)
    w.env.inline = inline
    return w.run()


def _same(a, b) -> None:
    assert_same_requests(a, b)
    for sa, sb in zip(a.steps, b.steps):
        for col in sa:
            assert np.array_equal(sa[col], sb[col]), col
    for ea, eb in zip(a.tokens.step_end, b.tokens.step_end):
        assert np.array_equal(ea, eb)
    for col in a.link_usage:
        assert np.array_equal(a.link_usage[col], b.link_usage[col]), col
    assert a.end_s == b.end_s and a.events == b.events


@pytest.mark.parametrize("name", sorted(_dicts()))
def test_inline_steps_equal_event_steps_on_the_golden_cases(name):
    sc = load_case(name)
    _same(_run(sc, True), _run(sc, False))


@settings(deadline=None)
@given(scenarios())
def test_inline_steps_equal_event_steps_on_random_scenarios(d):
    sc = resolve(d)  # some with failures, some with a horizon (strategies.py)
    _same(_run(sc, True), _run(sc, False))


def test_the_clock_never_jumps_past_an_event_or_the_horizon():
    env = Clock(horizon=10.0)
    env.timeout(5.0)
    assert env.quiet_until() == 5.0
    assert env.skip_to(4.0) and env.now == 4.0
    assert not env.skip_to(5.0)  # an event is due then: it goes first
    with pytest.raises(RuntimeError):
        env.jump_to(6.0)
    env.run()
    assert env.now == 5.0 and env.quiet_until() == math.inf
    assert not env.skip_to(10.5) and env.skip_to(10.0)
    env.inline = False
    assert not env.skip_to(10.0) and env.quiet_until() == env.now
    assert isinstance(env, simpy.Environment)
