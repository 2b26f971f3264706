"""The host a run's engines share their CPU cores with, as measured during that run."""
from __future__ import annotations

from dataclasses import dataclass, field

from ._convert import check
from .errors import SpecError

VISIT_MS_MIN = 0.1  # ms: the shortest host.visit_ms (0 aside); see HostSpec.__post_init__


@dataclass(frozen=True)
class HostSpec:
    """``cpu_stretch``: how much longer the engine's steps took than on a quiet host because other
    work shared its cores (processor sharing), >= 1; 1 = the host the profile was measured on, as
    quiet as then. Measured, never fitted: the same steps (fixed-batch decode steps, a prompt
    alone; ``calibration/microbench/cpu_overhead.py``, ``cpu_mixed_steps.py``) timed under the
    run's other load and without it, the ratio of the two. The kernel's run-queue wait of the
    worker (``calibration/microbench/host_share.py``) is not that ratio: on the CPU validation host
    it read 1.17 and 1.19 in two knee runs whose steps took the same time shape for shape (the
    worker waits mostly while it polls for the next step). On a profile whose device is the host's
    CPU (``gpu.arch: cpu``) the whole step runs on the shared cores and stretches; on a GPU
    profile only its per-step host work does (``step_overhead_us``, ``seq_overhead_us``,
    ``ctx_overhead_ns``)."""

    cpu_stretch: float = 1.0
    # Processes placed on host cores (sim/host_cores.py): ``cores`` the host has, ``placement`` the
    # core each instance's model worker is bound to, per group (a group's ``name``, or its role when
    # it is the only group of that role, or ``role[i]``): one core id per instance, or one id for all
    # of them. CPU-device workers placed on the same core share it (processor sharing). What a
    # recording observed (``taskset -p``, /proc/PID/stat field 39), never fitted. Empty = no sharing.
    # With a placement the request path shares the cores too: the way in (``overheads.router_ms`` +
    # the tokeniser) and the first token's way out are CPU work of unpinned processes, each a hop on
    # the core where it shares with the fewest (sim/host_cores.py ``hop``), one at a time at the
    # path's front process (``SerialFront``: the proxy's or API server's one thread); behind vLLM's
    # P/D proxy (transfer ``shared_storage``) the way from P's answer to D is a hop of its own and a
    # CPU D computes the prompt's tail on its core; without a placement they are fixed delays.
    # ``unpinned``: per placed group, how many of an instance's other processes (engine core, API
    # server) are busy, on no core in particular, while its worker steps (their CPU seconds over the
    # worker's stepping seconds in a recording, host_share.py); the kernel spreads them over all cores.
    cores: int = 0
    placement: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unpinned: dict[str, float] = field(default_factory=dict)
    # ``beside``: per placed group, busy processes on an instance's *own* core while its worker steps
    # (its API server when each server's threads are bound to its cores, ``run_case.py --pin-servers``;
    # the proxy or client where the kernel kept them there): their CPU seconds on that core over the
    # worker's stepping seconds (host_share.py ``cpu_s_on``), the engine cores left out (a poller
    # beside its own worker costs nothing). Unlike ``unpinned`` they do not spread to other cores.
    beside: dict[str, float] = field(default_factory=dict)
    # ``background``: busy processes of other work on the host (not the deployment's), unpinned,
    # throughout the run: the other CPU seconds over the span (host_share.py ``other_cpu_s / wall_s``).
    background: float = 0.0
    # ``background_weight``: the fair scheduler's weight of that other work's processes relative to
    # the deployment's (1: equal). Each shares a core in proportion to its weight (Linux
    # ``sched_prio_to_weight``: nice 0 = 1,024, nice -10 = 9,548); with autogroup scheduling on, the
    # weights of the sessions' autogroups (``/proc/<pid>/autogroup``): other sessions' jobs at the
    # default beside a deployment whose sessions were set to nice -10 weigh 1,024 / 9,548 = 0.107.
    background_weight: float = 1.0
    # ``visit_ms``: how the background and unpinned load reach a placed worker's core. 0 (default):
    # spread evenly over time, each core's share of it a constant fractional process (processor
    # sharing at the mean, as before). >= 0.1: as whole processes that visit a core for ``visit_ms`` on
    # average (exponential), present for the fraction of the time that keeps the core's mean load
    # (sim/host_stalls.py): a step that meets a visitor runs at 1/(k + 1) for as long as it stays.
    # What sets the visit: the kernel's periodic load balance of a busy CPU, every
    # ``balance_interval`` (= the domain's CPU count, ms) x ``busy_factor`` (16) (Linux
    # kernel/sched/topology.c ``sd_init``): 32 ms on a 2-CPU host (``busy_balance_ms``).
    visit_ms: float = 0.0
    # Busy-waiting processes (sim/host_cores.py ``pollers``). ``pollers``: per placed group, how many
    # of an instance's processes wait for its worker's answer by spinning on ``sched_yield()`` while
    # it steps: vLLM V1's engine core reads the worker's output from shared memory
    # (``shm_broadcast.SpinCondition.wait``), spinning for ``poll_window_ms`` after its last read (its
    # ``busy_loop_s``, 1 s in vLLM 0.32) before it sleeps on a socket; 1 for a vLLM V1 server.
    # ``autogroup``: the kernel's autogroup scheduling is on (``/proc/sys/kernel/sched_autogroup_enabled``
    # = 1, Linux's default where built in) and each server runs in a session of its own (as
    # ``pdsim.replay.local_server`` and ``run_case.py`` start them). A process that yields gives the
    # core away to every runnable process of its own group, so a poller costs its own server nothing,
    # and with autogroup off nothing at all; with autogroup on its server's session is a scheduling
    # group that the fair scheduler weighs against every other server's processes, on each core in
    # proportion to the group's runnable load there over its load on all cores (Linux
    # ``calc_group_shares``; costs/group_share.py): a poller whose server also keeps its own worker's
    # core busy weighs half a group on the other core. Measured on the 2-core validation hosts
    # (calibration/microbench/poller_share.py, group_share.py): a one-thread CPU-bound process pinned
    # beside a ``sched_yield`` loop ran at ~1x its time alone in the same session, 1.68-2.10x with
    # autogroup on and the loop in another session, 1.49-1.56x when that session also keeps the other
    # core busy; eight such arrangements within 4% of the group price, 1.5-4.2x
    # (validation/cpu-vllm-calibration/emr2b/ and emr3/host-contention/, 2026-11-28; the Zen 1 host's
    # 2.07-2.94x of 2026-11-27 in zen1/host-contention/ came from a two-thread job).
    # ``poll_away``: per placed group, the share of its pollers' spinning they spend on another
    # server's core (1, the default: all of it); the rest they spin beside their own worker, where a
    # yielding process costs nothing. Where a spinning process sits is the kernel's choice (a waking
    # task goes to an idle or its previous core, the load balancer leaves cache-hot tasks where they
    # are): what a recording observed, never fitted. The ten traced 1P1D recordings (each engine
    # core's CPU sampled every 0.2 s, /proc/PID/stat field 39) put D's engine core on P's core
    # 68-84% of the time and P's on D's 31-70% (medians of the eight before the two zen1b ones
    # that check them: 0.735 and 0.52). A group without pollers (unplaced, or a host without
    # autogroup) has nothing to place: its share is then unused.
    pollers: dict[str, float] = field(default_factory=dict)
    autogroup: bool = False
    poll_window_ms: float = 1000.0
    poll_away: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(1.0 <= self.cpu_stretch <= 100.0, f"must be in [1, 100] (a stretch factor), got {self.cpu_stretch}",
              "cpu_stretch")
        check(0 <= self.cores <= 4096, f"must be in [0, 4096] (host cores), got {self.cores}", "cores")
        if self.placement and self.cores < 1:
            raise SpecError("a placement needs the host's core count (cores: N, N >= 1)", field="cores")
        for group, ids in self.placement.items():
            check(len(ids) >= 1, "expected at least one core id", f"placement.{group}")
            for i, c in enumerate(ids):
                check(0 <= c < self.cores, f"core id {c} is out of range: the host has cores 0..{self.cores - 1}",
                      f"placement.{group}[{i}]")
        check(0.0 <= self.background <= 4096.0, f"must be in [0, 4096] (busy processes), got {self.background}",
              "background")
        check(0.0 < self.background_weight <= 100.0,
              f"must be in (0, 100] (a weight relative to the deployment's processes), got {self.background_weight}",
              "background_weight")
        if self.background and not self.placement:
            raise SpecError("background load shares the placed workers' cores: give a placement too",
                            field="background")
        # below ~0.1 ms a visit is shorter than any scheduler time slice (CFS / EEVDF base slice
        # 0.75 ms), i.e. sharing at the mean (0), and costs an event per visit: a run would be endless
        check(self.visit_ms == 0.0 or VISIT_MS_MIN <= self.visit_ms <= 60000.0,
              f"must be 0 (off) or in [{VISIT_MS_MIN}, 60000] ms (a visit of other work to a core), got "
              f"{self.visit_ms}", "visit_ms")
        if self.visit_ms and not self.placement:
            raise SpecError("visits of other work need the placed cores they visit: give a placement too",
                            field="visit_ms")
        if self.cpu_stretch != 1.0 and self.placement:
            # the stretch is other load measured as a step-time ratio; a placement simulates the same
            # sharing (background, unpinned): both together would count that load twice
            raise SpecError("a measured stretch and a placement count the same load twice: with a placement "
                            "give the other load as background / unpinned, or leave out the placement "
                            "(--set host.placement={} host.unpinned={} host.pollers={}; the CPU scenarios "
                            "bundle one)",
                            field="cpu_stretch")
        for kind, counts in (("unpinned", self.unpinned), ("pollers", self.pollers), ("beside", self.beside)):
            for group, n in counts.items():  # that each is a placed group: check_placement (names alias)
                check(0.0 <= n <= 64.0, f"must be in [0, 64] (busy processes), got {n}", f"{kind}.{group}")
                if not self.placement:
                    raise SpecError("only a placed group's processes can be counted (add it to placement, or "
                                    f"clear host.{kind} with the placement: --set host.{kind}={{}})",
                                    field=f"{kind}.{group}")
        check(0.0 <= self.poll_window_ms <= 3.6e6, f"must be in [0, 3600000] ms, got {self.poll_window_ms}",
              "poll_window_ms")
        for group, f in self.poll_away.items():
            check(0.0 <= f <= 1.0, f"must be in [0, 1] (a share of the pollers' spinning time), got {f}",
                  f"poll_away.{group}")


def group_keys(cluster) -> dict[str, tuple[str, int, int]]:
    """The names a placement may use for each group of ``cluster`` -> (role, index, count): its
    ``name`` if it has one, ``role[i]``, and the bare role when the role has one group."""
    out: dict[str, tuple[str, int, int]] = {}
    for role, i, g in cluster.groups():
        out[f"{role}[{i}]"] = (role, i, g.count)
        if len(getattr(cluster, role)) == 1:
            out[role] = (role, i, g.count)
        if g.name:
            out[g.name] = (role, i, g.count)
    return out


def check_placement(host: "HostSpec | None", cluster) -> None:
    """Every placed group exists and gets one core id per instance (or one for all)."""
    if host is None or not host.placement:
        return
    keys = group_keys(cluster)
    named: dict[tuple[str, int], str] = {}  # group -> the placement key that names it
    for group, ids in host.placement.items():
        if group not in keys:
            raise SpecError(f"no group {group!r}; expected one of {', '.join(sorted(keys))}",
                            field=f"host.placement.{group}")
        count = keys[group][2]
        if len(ids) not in (1, count):
            raise SpecError(f"{len(ids)} core ids for {count} instances; give one per instance or one for all",
                            field=f"host.placement.{group}")
        g = keys[group][:2]
        if g in named:  # e.g. ``decode`` and ``decode[0]``: one of them would be dropped
            raise SpecError(f"names the same group as {named[g]!r}; place each group once",
                            field=f"host.placement.{group}")
        named[g] = group
    for kind, counts in (("unpinned", host.unpinned), ("pollers", host.pollers), ("beside", host.beside)):
        counted: dict[tuple[str, int], str] = {}
        for group in counts:
            if group not in keys or keys[group][:2] not in named:
                raise SpecError("only a placed group's processes can be counted (add it to placement)",
                                field=f"host.{kind}.{group}")
            g = keys[group][:2]
            if g in counted:
                raise SpecError(f"names the same group as {counted[g]!r}; count each group once",
                                field=f"host.{kind}.{group}")
            counted[g] = group
    for group in host.poll_away:  # a misspelt group would place nothing (an unplaced one has no pollers)
        if group not in keys:
            raise SpecError(f"no group {group!r}; expected one of {', '.join(sorted(keys))}",
                            field=f"host.poll_away.{group}")
