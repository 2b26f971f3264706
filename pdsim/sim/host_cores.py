"""Host cores shared by the model workers placed on them: processor sharing, like the fabric's fair share.

A CPU device's step is work for the core its worker is bound to (``host.placement``,
specs/host.py). A core shared by k workers that are stepping at the same moment gives each 1/k of
its speed (the kernel's fair scheduler between runnable processes of equal weight), so a step
priced ``work`` seconds alone takes ``work`` while alone, ``k x`` the time for the part of it that
k busy workers share, and a step joined halfway by another worker slows from then on. The price
of a step (the step-cost contract, costs/base.py) is unchanged: the sharing is a property of the
world the step runs in, as a link's fair share is of a transfer.

Each change of who is busy on a core (a step starts or ends) settles the work done so far at the
old rate and reschedules the next completion at the new one, so every step ends exactly when its
remaining work reaches zero under the piecewise-constant rate. Without a placement no instance
has a core and nothing here runs (every existing scenario unchanged). Instances an autoscaler adds
during the run go on their group's core when the placement gives one id for all; with one id per
instance they are not placed (they step at their price).

With ``host.visit_ms`` the other load comes to a core as whole processes that stay a while
(sim/host_stalls.py) instead of a steady fraction of one: the intermittent ~2x decode steps of the
CPU validation host (docs/validation/host-stalls.md).

The request path (issue 24): each request's hops outside the engines (the way in through the HTTP
server, proxy, tokeniser and engine core; the first token's way out) are CPU work of those
unpinned processes, their idle-host time (``overheads.router_ms``, the tokeniser) measured as
work. With a placement each hop is a job here (``hop``): it lands on the core that is least
loaded at that moment (busy steps and hops plus the spread unpinned load: where the kernel's
wake-up path puts a waking task) and shares that core's speed with whatever runs there until its
work is done, slowing the steps beside it too. A hop alone on an idle core takes its work; beside
one always-busy worker on each of two cores it takes twice that. Without a placement the world
keeps the fixed delays (world.py).

The request path's processes are single threads (issue 24 item 5): the proxy and each API server
run one asyncio event loop, each engine core one Python thread, so a hop waits for the hops ahead of
it in the same process before its own work starts (``SerialFront``, sim/host_front.py: FIFO, one hop
at a time, each on the cores as above). Two hops submitted together end at the sum of their works on an idle host.

Engine cores that poll (``host.pollers``, ``host.autogroup``; docs/mechanisms/engine-core-polling.md):
vLLM's engine core waits for its worker's answer spinning on ``sched_yield()``, for up to
``poll_window_ms`` after its last read. A yielding process gives the core to every process of its
own scheduling group, so it costs its own server's worker nothing; under autogroup scheduling each
server's session is a group of its own, and the fair scheduler shares each core between the groups
runnable there, each weighing its runnable load on that core over its load on all cores (Linux
``calc_group_shares``; the price in costs/group_share.py, measured in eight arrangements within 4%).
While an instance with pollers steps, its server is such a group: its worker working on its core,
its pollers spinning (the share of the step they spin, ``poll_weight``) on the least busy other core
for the share ``host.poll_away`` of that spinning and beside the worker for the rest (``_grouped``).
So D's engine core spinning on P's core while D's worker steps weighs half a group there (P's
step 1.5x, not the 2x of an equal share). Hops and the spread unpinned load stay outside every
group, one process each. With autogroup off, or on a host of one core, pollers weigh nothing.
Processes bound to an instance's own core (``host.beside``: its API server when each server's
threads are pinned to its cores) add to that core only while the instance steps, never spreading.

Measured on the CPU 1P1D case (validation/README.md, 2026-11-26): P's worker bound to core 0 ran
its prefills at 1.07x their price while D's worker was idle and 1.71x while it computed; D's
decode steps 0.92x / 1.25x the other way round; the unpinned processes (D's engine core, API
server, proxy, client) ran on either core.
"""
from __future__ import annotations

from ..costs.group_share import autogroup_speeds
from ..specs.host import group_keys
from .host_stalls import Visits


class _Job:
    __slots__ = ("away", "core", "done", "extra", "group", "left", "near", "poll", "poll_core", "spin")

    def __init__(self, work: float, done, core: HostCore, extra: float, group=None):
        self.left = work  # seconds of work still to do at full speed
        self.done = done  # triggered when ``left`` reaches 0
        self.core = core
        self.extra = extra  # unpinned busy processes it adds to the host while it runs
        self.poll = 0.0  # its server's pollers' weight on core ``poll_core`` while it runs (autogroup)
        self.poll_core = -1  # -1: none
        self.spin = 0.0  # its server's spinning processes while it runs, wherever they are (autogroup)
        self.away = 1.0  # the share of that spinning on core ``poll_core``; the rest beside this job
        self.group = group  # its server (a scheduling group under autogroup); None: a group of its own
        self.near = 0.0  # busy processes it keeps on its own core while it runs (host.beside)


class HostCore:
    """One host core of ``host``: the steps running on it share its speed (seconds of work each)."""

    def __init__(self, host: HostCores, cid: int):
        self.host, self.cid = host, cid
        self.jobs: list[_Job] = []

    @property
    def busy(self) -> int:
        """Workers stepping on this core now."""
        return len(self.jobs)

    def run(self, work: float, extra: float = 0.0, poll: float = 0.0, away: float = 1.0, group=None,
            near: float = 0.0) -> _Job:
        """Start a step of ``work`` seconds (at full speed) on this core, adding ``extra`` unpinned
        busy processes to the host while it runs and ``poll`` busy-waiting ones of its own server,
        ``away`` of their spinning on another core (HostCores ``start``); ``group``: its server, the
        scheduling group the pollers share; ``near``: busy processes beside it on this core while it
        runs (host.beside). ``.done`` of the returned job fires when it is done (a SimPy event to
        ``yield``)."""
        return self.host.start(self, float(work), extra, poll, away, group, near)

    def cancel(self, job: _Job) -> None:
        """Take ``job`` off the core (its instance failed mid-step); the others speed up."""
        self.host.cancel(job)

    def rate(self, extra: float) -> float:
        """Speed of each step on this core (1 = a core of its own) with ``extra`` unpinned busy
        processes' worth of load on it."""
        return 1.0 / (len(self.jobs) + extra)


class HostCores:
    """The host's cores, which instance's worker is bound to which (``host.placement``), and the
    load of unpinned processes (an instance's engine core and API server while it steps,
    ``host.unpinned``), which the kernel's load balancer puts on the least loaded cores."""

    def __init__(self, env, cores: int, placement: dict[tuple[str, int], tuple[int, ...]],
                 unpinned: dict[tuple[str, int], float] | None = None, background: float = 0.0,
                 visit_s: float = 0.0, seed: int = 0, pollers: dict[tuple[str, int], float] | None = None,
                 poll_window_s: float = 1.0, poll_away: dict[tuple[str, int], float] | None = None,
                 beside: dict[tuple[str, int], float] | None = None):
        self.env = env
        self.cores = [HostCore(self, c) for c in range(cores)]
        self.placement = placement  # (role, group index) -> core id per instance (or one for all)
        self.unpinned = unpinned or {}  # (role, group index) -> busy unpinned processes while it steps
        # (role, group index) -> its server's busy-waiting processes while it steps, weighed against
        # other servers' processes (host.autogroup on; off: none weigh anything, so none are kept)
        self.pollers = pollers or {}
        self.poll_away = poll_away or {}  # (role, group index) -> the share of its spinning on another core
        self.beside = beside or {}  # (role, group index) -> busy processes on its own core while it steps
        self.near = [0.0] * cores  # those processes on each core now
        self._nears = 0  # jobs with some now (0: nothing added)
        self.poll_window_s = float(poll_window_s)
        self.poll = [0.0] * cores  # pollers' weight on each core now
        self._polls = 0  # jobs with a poller on some core now (0: the per-core sum is skipped)
        self.background = float(background)  # other work on the host, busy throughout
        self.load = self.background  # busy unpinned processes now, over all cores
        self._t = 0.0  # when ``left`` of every job was last settled
        self._version = 0  # a completion timer scheduled for an older state is stale
        # the other load as whole processes visiting cores (host.visit_ms, sim/host_stalls.py); None:
        # a steady fraction of a process on each core
        self.visits = Visits(cores, visit_s, seed) if visit_s > 0 else None

    @classmethod
    def of(cls, env, scenario) -> HostCores | None:
        """The scenario's placed cores, or None when it places nothing (no sharing)."""
        host = getattr(scenario, "host", None)
        if host is None or not host.placement:
            return None
        keys = group_keys(scenario.cluster)
        # a poller weighs on another server's core only for the share of its spinning it spends there
        away = {keys[g][:2]: f for g, f in host.poll_away.items()}  # by group, whatever name it used
        pollers = {keys[g][:2]: n for g, n in host.pollers.items() if n > 0} if host.autogroup else {}
        return cls(env, host.cores, {keys[g][:2]: ids for g, ids in host.placement.items()},
                   {keys[g][:2]: n for g, n in host.unpinned.items()}, host.background * host.background_weight,
                   host.visit_ms * 1e-3, getattr(scenario, "seed", 0), pollers, host.poll_window_ms * 1e-3,
                   {g: away.get(g, 1.0) for g in pollers}, {keys[g][:2]: n for g, n in host.beside.items()})

    def core_of(self, role: str, index: int, k: int) -> HostCore | None:
        """The core of instance ``k`` of group ``index`` of ``role``: its own id, or the group's
        one id for all (also for instances an autoscaler adds); None when not placed (an added
        instance beyond a list of one id per instance)."""
        ids = self.placement.get((role, index))
        if ids is None:
            return None
        if len(ids) == 1:
            return self.cores[ids[0]]
        return self.cores[ids[k]] if k < len(ids) else None

    def extra_of(self, role: str, index: int) -> float:
        """Unpinned busy processes an instance of that group adds while it steps."""
        return self.unpinned.get((role, index), 0.0)

    def pollers_of(self, role: str, index: int) -> float:
        """Busy-waiting processes of an instance of that group that weigh on other servers while it
        steps (0 with autogroup off)."""
        return self.pollers.get((role, index), 0.0)

    def beside_of(self, role: str, index: int) -> float:
        """Busy processes an instance of that group keeps on its own core while it steps."""
        return self.beside.get((role, index), 0.0)

    def away_of(self, role: str, index: int) -> float:
        """The share of those processes' spinning they spend on another server's core."""
        return self.poll_away.get((role, index), 1.0)

    def poll_weight(self, pollers: float, since_read: float, work: float) -> float:
        """The pollers' mean weight over a step of ``work`` seconds that starts ``since_read``
        seconds after their last read (the previous step's end): they spin until the window after
        that read closes, then sleep; the share of the step they spin, as a steady fraction (the
        unpinned load's processor sharing at the mean)."""
        left = self.poll_window_s - since_read
        if pollers <= 0.0 or left <= 0.0:
            return 0.0
        return pollers if work <= left else pollers * left / work

    def hop(self, work: float):
        """A request-path hop of ``work`` seconds of CPU (at full speed) by an unpinned process: it
        takes the core where it would share with the fewest busy processes (the steps and hops
        there plus that core's share of the unpinned load once the hop is counted: the load
        balancer then moves the other load off it; the lowest id on a tie) and shares it from then on. Returns its job
        (``.done``: the SimPy event that fires when its work is done)."""
        if not (work >= 0.0 and work < float("inf")):
            raise ValueError(f"a hop's work must be >= 0 s and finite, got {work}")
        self._settle()
        busy = [c.busy for c in self.cores]

        def load_if_there(c: HostCore) -> float:  # busy processes it would share with, the hop among them
            busy[c.cid] += 1
            spread = self._spread(busy)
            busy[c.cid] -= 1
            return busy[c.cid] + 1 + spread[c.cid] + self.poll[c.cid] + self.near[c.cid]

        # cores with the same busy count are alike to the water filling: weigh the first of each
        candidates: dict[int, HostCore] = {}
        for c in self.cores:
            candidates.setdefault(c.busy, c)
        core = min(candidates.values(), key=lambda c: (load_if_there(c), c.cid))
        return self._start(core, work)

    def finish_time(self, job: _Job) -> float:
        """When ``job`` would be done if who runs where stayed as it is now (a hop still running
        when the world stops: nothing else changes after the last request is done)."""
        if job.done.triggered:
            raise ValueError("the job is already done")
        self._settle()
        core = job.core
        extra = self._extra(self._spread())
        rate = self._grouped(extra)[job] if self._polls else core.rate(extra[core.cid])
        return self.env.now + max(job.left, 0.0) / rate

    # ---- processor sharing -------------------------------------------------------------------
    def start(self, core: HostCore, work: float, extra: float = 0.0, poll: float = 0.0, away: float = 1.0,
              group=None, near: float = 0.0) -> _Job:
        """A step of ``work`` seconds on ``core`` (``HostCore.run``). ``poll``: its server's pollers,
        which yield to their own server's worker wherever they run; ``away`` of their spinning is on
        the least busy other core (the lowest id on a tie), where the kernel's wake-up path finds
        room for them, the rest beside the step. Both count in the server's scheduling group
        (``group``), whose weight on each core follows its runnable load there (``_grouped``); on a
        host of one core they weigh on nothing. ``near``: busy processes that share ``core`` with the
        step while it runs (host.beside)."""
        return self._start(core, work, extra, poll, away, group, near)

    def _start(self, core: HostCore, work: float, extra: float = 0.0, poll: float = 0.0, away: float = 1.0,
               group=None, near: float = 0.0) -> _Job:
        self._settle()
        if self.visits is not None and not core.jobs:
            self.visits.wake(core.cid, self.env.now)
        job = _Job(work, self.env.event(), core, extra, group)
        if poll > 0.0 and away > 0.0:
            others = [c for c in self.cores if c is not core]
            if others:
                at = min(others, key=lambda c: (c.busy, c.cid)).cid
                job.poll, job.poll_core = poll * away, at
                job.spin, job.away = poll, away
                if job.group is None:  # a server of its own (a caller that names none)
                    job.group = job
                self.poll[at] += job.poll
                self._polls += 1
        if near > 0.0:
            job.near = near
            self.near[core.cid] += near
            self._nears += 1
        core.jobs.append(job)
        self.load += extra
        self._reschedule()
        return job

    def cancel(self, job: _Job) -> None:
        if job in job.core.jobs:
            self._settle()
            self._leave(job)
            self._reschedule()

    def _leave(self, job: _Job) -> None:
        job.core.jobs.remove(job)
        self.load = max(self.background, self.load - job.extra)  # float residue of the sum
        if job.poll_core >= 0:
            self._polls -= 1
            at = job.poll_core
            self.poll[at] = max(0.0, self.poll[at] - job.poll) if self._polls else 0.0  # float residue
        if job.near:
            self._nears -= 1
            c = job.core.cid
            self.near[c] = max(0.0, self.near[c] - job.near) if self._nears else 0.0

    def _spread(self, busy_now: list[int] | None = None) -> list[float]:
        """Unpinned load on each core: the kernel's load balancer moves runnable processes to the
        least loaded cores, so the load fills the cores with the fewest busy workers first, up to a
        common level (water filling): extra_c = max(0, w - busy_c), summing to ``load``.
        ``busy_now``: busy jobs per core other than the cores' own (a hop weighing where to go)."""
        per_core = busy_now if busy_now is not None else [c.busy for c in self.cores]
        busy = sorted(per_core)
        left, w = self.load, 0.0
        for i, b in enumerate(busy):  # raise the level over the i + 1 least busy cores
            nxt = busy[i + 1] if i + 1 < len(busy) else float("inf")
            room = (nxt - b) * (i + 1)
            if left <= room:
                w = b + left / (i + 1)
                break
            left -= room
        return [max(0.0, w - b) for b in per_core]

    def _extra(self, spread: list[float]) -> list[float]:
        """Extra busy processes on each core now, outside every server's group: the mean ones, or as
        visits realise them, and those a step keeps beside it (host.beside; the pollers weigh through
        their groups, ``_grouped``)."""
        out = spread if self.visits is None else self.visits.extra(spread)
        if self._nears:
            out = [x + n for x, n in zip(out, self.near)]
        return out

    def _grouped(self, extra: list[float]) -> dict[_Job, float]:
        """Each job's speed while some server's pollers spin (autogroup on): each server a
        scheduling group, its steps working and its pollers spinning where they are, its weight on a
        core its share of its runnable load there (costs/group_share.py); hops and the spread load
        outside every group, one each."""
        runnable: list[dict] = [{} for _ in self.cores]
        other = list(extra)
        for c in self.cores:
            here = runnable[c.cid]
            for j in c.jobs:
                if j.group is None:
                    other[c.cid] += 1.0
                    continue
                w, s = here.get(j.group, (0.0, 0.0))
                here[j.group] = (w + 1.0, s + j.spin * (1.0 - j.away))
                if j.poll_core >= 0:
                    there = runnable[j.poll_core]
                    w, s = there.get(j.group, (0.0, 0.0))
                    there[j.group] = (w, s + j.poll)
        speeds, others = autogroup_speeds(runnable, other)
        return {j: (others[c.cid] if j.group is None else speeds[c.cid][j.group]) for c in self.cores
                for j in c.jobs}

    def _settle(self) -> None:
        now = self.env.now
        if now > self._t:
            spread = self._extra(self._spread())
            if self._polls:
                dt = now - self._t
                for j, r in self._grouped(spread).items():
                    j.left -= dt * r
                self._t = now
                return
            for c in self.cores:
                if c.jobs:
                    done = (now - self._t) * c.rate(spread[c.cid])
                    for j in c.jobs:
                        j.left -= done
        self._t = now

    def _reschedule(self) -> None:
        self._version += 1
        mean = self._spread()
        spread = self._extra(mean)
        best, first = None, None
        if self._polls:
            for j, r in self._grouped(spread).items():
                t = max(j.left, 0.0) / r
                if best is None or t < best:
                    best, first = t, j
        for c in ([] if self._polls else self.cores):
            if c.jobs:
                j = min(c.jobs, key=lambda j: j.left)
                t = max(j.left, 0.0) / c.rate(spread[c.cid])
                if best is None or t < best:
                    best, first = t, j
        if self.visits is not None:
            now = self.env.now
            for c in self.cores:
                if not c.jobs:
                    self.visits.sleep(c.cid, now, mean[c.cid])
            at, vc = self.visits.next_change(now, mean, [bool(c.jobs) for c in self.cores])
            if vc >= 0 and (best is None or at - now < best):
                ev = self.env.timeout(max(at - now, 0.0))
                ev.callbacks.append(lambda _e, v=self._version, c=vc: self._visit(v, c))
                return
        if first is None:
            return
        ev = self.env.timeout(best)
        ev.callbacks.append(lambda _e, v=self._version, j=first: self._complete(v, j))

    def _visit(self, version: int, cid: int) -> None:
        """A visitor comes to or leaves core ``cid``: its steps change speed from now."""
        if version != self._version:
            return
        self._settle()
        self.visits.flip(cid)
        self._reschedule()

    def _complete(self, version: int, first: _Job) -> None:
        if version != self._version:
            return  # the set of jobs changed since this timer was set
        self._settle()
        eps = 1e-12 * max(1.0, self.env.now)
        for c in self.cores:
            for j in [j for j in c.jobs if j is first or j.left <= eps]:
                self._leave(j)
                j.done.succeed()
        self._reschedule()
