"""Workers placed on host cores share them (sim/host_cores.py, specs/host.py ``host.placement``):
processor sharing with analytic answers, no placement = nothing changes, bad placements refused."""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from pdsim import api
from pdsim.sim.host_cores import HostCores
from pdsim.specs.errors import SpecError
from pdsim.workload.table import RequestTable

from builders import REPO

CPU = REPO / "workloads/scenarios/cpu-vllm-tiny-llama.yaml"
PD = REPO / "workloads/scenarios/cpu-vllm-tiny-llama-1p1d.yaml"
# the bundled 1P1D scenario states its launch's placement; these tests build their own from none
NO_HOST = ["host.unpinned={}", "host.pollers={}", "host.cores=0", "host.placement={}"]


def _pd(sets):
    return api.load_scenario(PD, NO_HOST + list(sets))


def _ends(jobs: list[tuple[float, float]]) -> list[float]:
    """End times of steps (start s, work s) on one core."""
    env = simpy.Environment()
    core = HostCores(env, 1, {}).cores[0]
    ends = [None] * len(jobs)

    def one(i, start, work):
        yield env.timeout(start)
        yield core.run(work).done
        ends[i] = env.now

    for i, (s, w) in enumerate(jobs):
        env.process(one(i, s, w))
    env.run()
    return ends


def test_processor_sharing_on_one_core():
    assert _ends([(0.0, 1.0)]) == [pytest.approx(1.0)]  # alone: its price
    assert _ends([(0.0, 1.0), (0.0, 1.0)]) == [pytest.approx(2.0)] * 2  # both busy throughout: 2x
    # joined halfway by a long step: 0.5 alone, then the other 0.5 at half speed -> 1.5x
    a, b = _ends([(0.0, 1.0), (0.5, 10.0)])
    assert a == pytest.approx(1.5)
    assert b == pytest.approx(1.5 + 9.5)  # 1 s of wall shared (0.5 of its work), then 9.5 alone
    # three at once, unequal: the short one leaves at 3 x 0.2, the others continue at 1/2
    e = _ends([(0.0, 0.2), (0.0, 1.0), (0.0, 1.0)])
    assert e[0] == pytest.approx(0.6)
    assert e[1] == e[2] == pytest.approx(0.6 + 2 * 0.8)


def _two_instances(extra: list[str]):
    # no request path: its hops queue at one front (host_cores.py SerialFront) and would stagger
    # the two instances' arrivals; this compares the workers' sharing alone
    sc = api.load_scenario(CPU, ["cluster.colocated.count=2", "overheads.router_ms=0", *extra])
    n = 8  # identical requests, all at t=0, round robin: both instances run the same steps in lockstep
    table = RequestTable(np.zeros(n), np.full(n, 300), np.full(n, 12), source="t")
    res = api.simulate(sc, table=table)
    return [np.asarray(c["step_s"], float) for c in res.record.steps], res


def test_two_cpu_workers_on_one_core_take_twice_as_long():
    # each on its own core: every step at its price (a placement replaces the static host share,
    # costs/host.py host_scale, so the reference is placed too)
    alone, r0 = _two_instances(["host.cores=2", "host.placement={colocated: [0, 1]}"])
    shared, r1 = _two_instances(["host.cores=1", "host.placement={colocated: [0]}"])
    for a, s in zip(alone, shared):
        assert len(a) == len(s)
        assert s == pytest.approx(2 * a, rel=1e-9)


def test_no_placement_changes_nothing():
    table = RequestTable(np.array([0.0, 0.3, 0.5, 2.0]), np.array([700, 200, 450, 900]), np.array([20, 9, 30, 5]),
                         source="t")
    base = api.simulate(_pd([]), table=table)
    with_host = api.simulate(_pd(["host.cores=2"]), table=table)
    for col in ("ttft_s", "e2e_s"):
        assert with_host.requests[col].to_numpy().tolist() == base.requests[col].to_numpy().tolist()


def test_p_and_d_on_one_core_slow_each_other():
    table = RequestTable(np.array([0.0, 0.05, 0.1]), np.array([900, 900, 900]), np.array([60, 60, 60]), source="t")
    apart = api.simulate(_pd(["host.cores=2", "host.placement={prefill: [0], decode: [1]}"]),
                         table=table)
    shared = api.simulate(_pd(["host.cores=1", "host.placement={prefill: [0], decode: [0]}"]),
                          table=table)
    # the second and third prompts are prefilled while D decodes the first: slower than alone
    assert shared.requests["ttft_s"].iloc[1] > apart.requests["ttft_s"].iloc[1]
    assert shared.requests["e2e_s"].mean() > apart.requests["e2e_s"].mean()


@pytest.mark.parametrize("sets, field, words", [
    (["host.cores=2", "host.placement={prefil: [0]}"], "host.placement.prefil", "no group 'prefil'"),
    (["host.cores=2", "host.placement={prefill: [2]}"], "placement.prefill[0]", "out of range"),
    (["host.placement={prefill: [0]}"], "cores", "core count"),
    (["host.cores=2", "host.placement={decode: [0, 1, 1]}"], "host.placement.decode", "3 core ids for 1"),
    # a measured stretch and a simulated sharing of the same other load: counted twice
    (["host.cores=2", "host.placement={prefill: [0], decode: [1]}", "host.cpu_stretch=1.5"], "cpu_stretch", "twice"),
])
def test_bad_placements_are_refused_naming_the_field(sets, field, words):
    with pytest.raises(SpecError) as err:  # from no host block (the bundled scenario states its own)
        _pd(sets)
    assert field in str(err.value) and words in str(err.value)


def test_unpinned_processes_go_to_the_least_loaded_cores():
    """Two workers pinned to cores 0 and 1, each bringing one unpinned busy process while it steps:
    alone, its process takes the idle core (1x); both stepping, one each (2x)."""
    def ends(jobs):
        env = simpy.Environment()
        host = HostCores(env, 2, {})
        out = [None] * len(jobs)

        def one(i, core, work):
            yield host.cores[core].run(work, 1.0).done
            out[i] = env.now

        for i, (core, work) in enumerate(jobs):
            env.process(one(i, core, work))
        env.run()
        return out

    assert ends([(0, 1.0)]) == [pytest.approx(1.0)]
    assert ends([(0, 1.0), (1, 1.0)]) == [pytest.approx(2.0)] * 2
    # the short one leaves at 2 x 0.5; the other's last 0.5 runs alone, its process on the freed core
    assert ends([(0, 0.5), (1, 1.0)]) == [pytest.approx(1.0), pytest.approx(1.5)]
    # both on core 0: their two processes go to the idle core 1, the two steps share core 0 (2x)
    assert ends([(0, 1.0), (0, 1.0)]) == [pytest.approx(2.0)] * 2


def test_unpinned_needs_a_placed_group():
    with pytest.raises(SpecError) as err:
        _pd(["host.cores=2", "host.placement={prefill: [0]}", "host.unpinned={decode: 1}"])
    assert "unpinned.decode" in str(err.value)


def test_a_group_placed_under_two_of_its_names_is_refused():
    """``decode`` and ``decode[0]`` are one group: one of the two placements was dropped silently
    (the last key won); an ``unpinned`` count under another of a placed group's names counts."""
    with pytest.raises(SpecError) as err:
        _pd(["host.cores=2", 'host.placement={prefill: [0], decode: [1], "decode[0]": [0]}'])
    assert "host.placement.decode[0]" in str(err.value) and "'decode'" in str(err.value)
    with pytest.raises(SpecError) as err:
        _pd(["host.cores=2", "host.placement={prefill: [0]}",
                               'host.unpinned={prefill: 1, "prefill[0]": 0.5}'])
    assert "host.unpinned.prefill[0]" in str(err.value)
    sc = _pd(["host.cores=2", "host.placement={prefill: [0]}", 'host.unpinned={"prefill[0]": 0.5}'])
    assert HostCores.of(simpy.Environment(), sc.scenario).extra_of("prefill", 0) == 0.5


def test_background_work_shares_the_cores_throughout():
    """One busy process of other work on a 1-core host: a step takes 2x; on 2 cores it takes the
    idle core and the step runs at its price."""
    for cores, want in ((1, 2.0), (2, 1.0)):
        env = simpy.Environment()
        host = HostCores(env, cores, {}, background=1.0)
        job = host.cores[0].run(1.0)
        env.run()
        assert job.done.processed and env.now == pytest.approx(want)


def test_background_needs_a_placement():
    with pytest.raises(SpecError) as err:
        _pd(["host.background=1"])
    assert "background" in str(err.value) and "placement" in str(err.value)


def test_a_worker_failing_mid_step_leaves_its_core(monkeypatch):
    """D fails while P and D share one core: its step leaves the core (P speeds up again), the run
    ends with every request finished (the world's conservation checks run after every run)."""
    sets = ["host.cores=1", "host.placement={prefill: [0], decode: [0]}",
            "faults={events: [{at_s: 1.0, kill: gpu, instance: D0, gpu: 0, recover_after_s: 1.0}], "
            "restart: {process_s: 1.0, weight_load_gbps: 100.0, comm_init_s: 0.5, graph_capture_s: 1.0}}"]
    table = RequestTable(np.linspace(0.0, 2.0, 8), np.full(8, 600), np.full(8, 80), source="t")
    cancelled = []
    cancel = HostCores.cancel

    def counted(self, job):
        cancel(self, job)
        cancelled.append(job not in job.core.jobs)  # off the core

    monkeypatch.setattr(HostCores, "cancel", counted)
    res = api.simulate(_pd(sets), table=table)
    assert res.requests["finished"].all() and res.requests["retries"].sum() > 0
    assert cancelled == [True]  # D was mid-step when it failed


def test_a_cpu_group_left_out_of_a_placement_is_refused():
    """Placing only P turned off the static host share for D too (costs/host.py host_scale: 2.0 ->
    1.0 on the 2-core 1P1D case) while D shared no core: D stepped as if alone on the host."""
    table = RequestTable(np.array([0.0]), np.array([300]), np.array([4]), source="t")
    with pytest.raises(SpecError) as err:
        api.simulate(_pd(["host.cores=2", "host.placement={prefill: [0]}"]), table=table)
    assert "host.placement" in str(err.value) and "decode[0]" in str(err.value) and "no core" in str(err.value)


def test_instances_the_autoscaler_adds_share_their_groups_core(monkeypatch):
    """Placement {prefill: [0], decode: [0]}, one id for all: the prefill instances the autoscaler
    adds run on core 0 too, so every step of every instance is a job on the shared core (they
    stepped at their price, off every core, before)."""
    jobs = []
    start = HostCores.start

    def counted(self, core, work, *args):
        jobs.append(core.cid)
        return start(self, core, work, *args)

    monkeypatch.setattr(HostCores, "start", counted)
    sets = ["host.cores=1", "host.placement={prefill: [0], decode: [0]}",
            "autoscaler={policy: queue, params: {role: prefill, target_waiting: 1, max_count: 3}, interval_s: 0.5}",
            "faults={events: [], restart: {process_s: 0.2, weight_load_gbps: 100.0, comm_init_s: 0.1, "
            "graph_capture_s: 0.1}}"]  # a quick start-up, so that the added instances step
    table = RequestTable(np.linspace(0.0, 3.0, 60), np.full(60, 3000), np.full(60, 20), source="t")
    res = api.simulate(_pd(sets), table=table)
    steps = [len(c["step_s"]) for c in res.record.steps]
    assert len(steps) > 2 and min(steps[2:]) > 0  # the autoscaler added prefill instances, and they stepped
    assert res.requests["finished"].all()
    assert len(jobs) == sum(len(c["step_s"]) for c in res.record.steps) and set(jobs) == {0}


def test_a_gpu_group_cannot_be_placed_on_host_cores():
    from builders import resolve, scenario_dict

    d = scenario_dict("disagg")
    d["host"] = {"cores": 2, "placement": {"decode": [0]}}
    with pytest.raises(SpecError) as err:
        api.simulate(resolve(d))
    assert "host.placement" in str(err.value) and "CPU" in str(err.value)


def test_a_placement_takes_the_static_host_share_off_the_groups_it_places_only():
    """A mixed cluster: P on an H100 profile, D on the host's CPU. The static host share
    (costs/host.py: 8 busy processes on the CPU profile's 2 cores against the 4 it was measured
    with, x2) priced both groups' host work; placing D on core 1 used to take it off P too (its
    per-step host work went from 2x back to 1x). Now only D, whose sharing is simulated, loses it."""
    from pdsim.sim.world import World

    table = RequestTable(np.array([0.0]), np.array([300]), np.array([4]), source="t")
    gpu_p = ["cluster.prefill[0].hardware=h100"]
    loose = World(_pd(gpu_p), table).resolved
    placed = World(_pd(gpu_p + ["host.cores=2", "host.placement={decode: [1]}"]), table).resolved
    bare = _pd(gpu_p)
    p0, d0 = (bare.hardware_of(r, 0).efficiency.step_overhead_us for r in ("prefill", "decode"))
    assert loose.hardware_of("prefill", 0).efficiency.step_overhead_us == pytest.approx(2 * p0)
    assert loose.hardware_of("decode", 0).efficiency.step_overhead_us == pytest.approx(2 * d0)
    assert placed.hardware_of("prefill", 0).efficiency.step_overhead_us == pytest.approx(2 * p0)  # as unplaced
    assert placed.hardware_of("decode", 0).efficiency.step_overhead_us == pytest.approx(d0)  # shares core 1 instead


def test_an_expert_service_beside_a_placement_keeps_the_static_host_share():
    """The expert service (sim/experts.py, priced on ``hardware_of("experts", 0)``) is no group a
    placement can put on a core, so like an unplaced group it keeps the static host share. On the
    scenario's default profile it used to get the unscaled profile once anything was placed
    (with_host_sharing gave a scaled copy only to the cluster's groups)."""
    import dataclasses

    from pdsim.costs.host import with_host_sharing
    from pdsim.specs.faults import ExpertServiceSpec

    placed = _pd(["host.cores=2", "host.placement={prefill: [0], decode: [1]}"])
    r = dataclasses.replace(placed, scenario=dataclasses.replace(placed.scenario, experts=ExpertServiceSpec(servers=2)))
    base = r.hardware.efficiency.step_overhead_us
    shared = with_host_sharing(r)
    assert shared.hardware_of("decode", 0).efficiency.step_overhead_us == pytest.approx(base)  # placed: simulated
    assert shared.hardware_of("experts", 0).efficiency.step_overhead_us == pytest.approx(2 * base)  # 8 busy on 2 cores vs 4


def test_processes_beside_a_step_share_its_own_core_only():
    """``host.beside``: busy processes an instance keeps on its own core while it steps (its API
    server when each server's threads are bound to its cores; cpu-vllm-emr3-pd-pinned-*: D's API
    server, proxy and client used 0.27-0.35 of D's core per second of D's stepping). A step with
    0.5 of them beside it takes 1.5x; a step on the other core is untouched; they leave with it."""
    env = simpy.Environment()
    host = HostCores(env, 2, {})
    a = host.cores[0].run(1.0, near=0.5)
    b = host.cores[1].run(1.0)
    env.run(b.done)
    assert env.now == pytest.approx(1.0)
    env.run(a.done)
    assert env.now == pytest.approx(1.5)
    c = host.cores[0].run(1.0)
    env.run(c.done)
    assert env.now == pytest.approx(2.5) and host.near == [0.0, 0.0]


def test_beside_is_checked_like_the_other_counts():
    sc = api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.beside={prefill: 0.3, decode: 0.35}"])
    assert sc.scenario.host.beside == {"prefill": 0.3, "decode": 0.35}
    with pytest.raises(SpecError, match="beside.decode"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.beside={decode: -1}"])
    with pytest.raises(SpecError, match="host.beside.dec"):
        api.load_scenario("cpu-vllm-tiny-llama-1p1d", ["host.beside={dec: 0.3}"])
