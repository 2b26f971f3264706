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
has a core and nothing here runs (every existing scenario unchanged).
"""
from __future__ import annotations

from ..specs.host import group_keys


class _Job:
    __slots__ = ("left", "done")

    def __init__(self, work: float, done):
        self.left = work  # seconds of work still to do at full speed
        self.done = done  # triggered when ``left`` reaches 0


class HostCore:
    """One host core: the steps running on it share its speed equally (seconds of work each)."""

    def __init__(self, env, cid: int):
        self.env, self.cid = env, cid
        self.jobs: list[_Job] = []
        self._t = 0.0  # when ``left`` of every job was last settled
        self._version = 0  # a completion timer scheduled for an older set of jobs is stale

    @property
    def busy(self) -> int:
        """Workers stepping on this core now."""
        return len(self.jobs)

    def run(self, work: float):
        """Start a step of ``work`` seconds (at full speed) on this core; returns the event that
        fires when it is done (a SimPy event to ``yield``)."""
        self._settle()
        job = _Job(float(work), self.env.event())
        self.jobs.append(job)
        self._reschedule()
        return job

    def cancel(self, job: _Job) -> None:
        """Take ``job`` off the core (its instance failed mid-step); the others speed up."""
        if job in self.jobs:
            self._settle()
            self.jobs.remove(job)
            self._reschedule()

    def _settle(self) -> None:
        now = self.env.now
        if self.jobs and now > self._t:
            done = (now - self._t) / len(self.jobs)
            for j in self.jobs:
                j.left -= done
        self._t = now

    def _reschedule(self) -> None:
        self._version += 1
        if not self.jobs:
            return
        first = min(self.jobs, key=lambda j: j.left)
        ev = self.env.timeout(max(first.left, 0.0) * len(self.jobs))
        ev.callbacks.append(lambda _e, v=self._version, j=first: self._complete(v, j))

    def _complete(self, version: int, first: _Job) -> None:
        if version != self._version:
            return  # the set of jobs changed since this timer was set
        self._settle()
        eps = 1e-12 * max(1.0, self.env.now)
        for j in [j for j in self.jobs if j is first or j.left <= eps]:
            self.jobs.remove(j)
            j.done.succeed()
        self._reschedule()


class HostCores:
    """The host's cores and which instance's worker is bound to which (``host.placement``)."""

    def __init__(self, env, cores: int, placement: dict[tuple[str, int], tuple[int, ...]]):
        self.cores = [HostCore(env, c) for c in range(cores)]
        self.placement = placement  # (role, group index) -> core id per instance (or one for all)

    @classmethod
    def of(cls, env, scenario) -> "HostCores | None":
        """The scenario's placed cores, or None when it places nothing (no sharing)."""
        host = getattr(scenario, "host", None)
        if host is None or not host.placement:
            return None
        keys = group_keys(scenario.cluster)
        return cls(env, host.cores, {keys[g][:2]: ids for g, ids in host.placement.items()})

    def core_of(self, role: str, index: int, k: int) -> HostCore | None:
        """The core of instance ``k`` of group ``index`` of ``role``; None when not placed."""
        ids = self.placement.get((role, index))
        if ids is None:
            return None
        return self.cores[ids[k] if len(ids) > 1 else ids[0]]
