"""The fabric: links and flows, bandwidth shared among concurrent transfers by max-min fairness.

The topology is a networkx graph whose edges are links (capacity in bytes/s); a flow takes
the shortest path between two endpoints and may carry its own rate cap (the NICs its bytes
can use). Rates are re-solved by progressive filling whenever a flow starts or ends, and
one SimPy timeout is pending for the earliest completion (stale ones are ignored).

Each link keeps its flows and the sum of their caps, updated only for the links of a flow
that starts or ends: while every link has room for its flows at their caps (the common case)
every flow runs at its cap and nothing else is solved.
"""
from __future__ import annotations

import math
from functools import partial, reduce
from itertools import chain
from operator import add, attrgetter
from typing import Callable

import networkx as nx
import numpy as np
import simpy

from ..clock import call_later
from ..columns import CHUNK, ColumnLog

INF = float("inf")


#: a link whose flows' caps sum to at most this share of its capacity serves them all at their caps
_ROOM = 1.0 - 1e-9


def _cap(f: "Flow") -> float:
    return f.cap


_path = attrgetter("path")
_cap_of = attrgetter("cap")  # as _cap, in C


class Flow:
    __slots__ = ("fid", "path", "remaining", "cap", "rate", "on_done", "start", "nbytes")

    def __init__(self, fid: int, path: tuple[str, ...], nbytes: float, cap: float, on_done: Callable, start: float):
        self.fid = fid
        self.path = path
        self.remaining = nbytes
        self.nbytes = nbytes
        self.cap = cap
        self.rate = 0.0
        self.on_done = on_done
        self.start = start


class Fabric:
    """Links between endpoints; ``send`` starts a flow and calls ``on_done(flow)`` at its end."""

    def __init__(self, env: simpy.Environment, graph: nx.Graph, log_usage: bool = True):
        self.env = env
        self.graph = graph
        self.capacity: dict[str, float] = {}
        for u, v, data in graph.edges(data=True):
            self.capacity[data["name"]] = float(data["capacity"])
        self.flows: dict[int, Flow] = {}
        self._next_id = 0
        self._version = 0
        self._last = 0.0
        self._paths: dict[tuple[str, str], tuple[str, ...]] = {}
        # every change of a link's use: time, link (code into ``link_codes``), bytes/s in use, flows
        self.usage_log = ColumnLog(("time_s", "link", "bytes_per_s", "flows"), (np.float64, np.int32, np.float64, np.int32))
        self.link_codes: dict[str, int] = {}  # link name -> code in the usage log (first use order)
        self._log = log_usage
        self.bytes_sent = 0.0
        # links logged busy at the last solve, in log order: a dict, not a set, so the rows of links
        # that went idle come out in one order whatever PYTHONHASHSEED is (a set of str does not)
        self._busy: dict[str, None] = {}
        self._emptied = False  # some link lost its last flow since the last solve (_unlink)
        # per link in use: its flows (oldest first) and the sum of their caps in that order;
        # the links whose caps sum above their capacity (with the _ROOM margin): where caps clash
        self._on: dict[str, list[Flow]] = {}
        self._load: dict[str, float] = {}
        self._over: set[str] = set()
        self._capped = True  # every flow's rate is its cap (the last solve needed no filling)
        self._res_lo, self._res_hi, self._res = 1.0, 0.0, 1e-9  # _resolution within [lo, hi)
        self._order: dict[str, None] | None = {}  # links in use in order of first use (None: to redo)

    def path(self, src: str, dst: str) -> tuple[str, ...]:
        key = (src, dst)
        if key not in self._paths:
            nodes = nx.shortest_path(self.graph, src, dst)
            self._paths[key] = tuple(self.graph.edges[a, b]["name"] for a, b in zip(nodes, nodes[1:]))
        return self._paths[key]

    def send(self, src: str, dst: str, nbytes: float, cap: float, on_done: Callable) -> Flow:
        """Start moving ``nbytes`` from ``src`` to ``dst`` at most ``cap`` bytes/s."""
        self._advance()
        path = self._paths.get((src, dst)) or self.path(src, dst)
        f = Flow(self._next_id, path, float(nbytes), cap, on_done, self.env.now)
        self._next_id += 1
        self.bytes_sent += nbytes
        if nbytes <= 0:
            self.env.timeout(0).callbacks.append(lambda _e, f=f: on_done(f))
            return f
        self.flows[f.fid] = f
        on, load, capacity, over = self._on, self._load, self.capacity, self._over
        cap = f.cap
        for link in f.path:
            fs = on.get(link)
            if fs is None:
                on[link] = [f]
                if self._order is not None:
                    self._order[link] = None  # the newest flow's new links come last
                if self._log and link not in self.link_codes:  # codes in first-use order, as the log lists links
                    self.link_codes[link] = len(self.link_codes)
            else:
                fs.append(f)
            # as _relink: the flow joins last, so its cap added to the sum so far is the sum of
            # the link's caps in flow order, bit for bit (``_relink`` folds them left to right from 0)
            total = load[link] = load.get(link, 0) + cap
            if total <= capacity[link] * _ROOM:
                over.discard(link)
            else:
                over.add(link)
        self._reschedule(f)
        return f

    def cancel(self, flow: Flow) -> bool:
        """Stop ``flow`` now (its peer failed, its request was dropped): its bytes stop moving,
        the others get its share, and its ``on_done`` is never called. False if it had ended."""
        if flow.fid not in self.flows:
            return False
        self._advance()
        del self.flows[flow.fid]
        self._unlink(flow)
        self._reschedule()
        return True

    def add_links(self) -> None:
        """Take in links added to the graph since (an instance added while the world runs)."""
        for _u, _v, data in self.graph.edges(data=True):
            if data["name"] not in self.capacity or data["name"].endswith(".uplink"):
                self.capacity[data["name"]] = float(data["capacity"])
        self._paths.clear()  # a leaf uplink may have grown
        for link in self._on:
            self._relink(link)

    def set_capacity(self, link: str, bytes_per_s: float) -> None:
        """Change a link's capacity now (a NIC failed or came back); flows re-share it."""
        self._advance()
        self.capacity[link] = float(bytes_per_s)
        if link in self._on:
            self._relink(link)
        self._reschedule()

    # -- internals ------------------------------------------------------------------------
    def _relink(self, link: str) -> None:
        """The flows on ``link`` changed (or its capacity): its cap sum and whether caps clash."""
        # a left fold from 0, as ``send``'s running sum adds a joining flow's cap: ``sum`` of floats
        # compensates rounding from Python 3.12 on, which would give another last bit
        load = self._load[link] = reduce(add, map(_cap_of, self._on[link]), 0.0)
        if load <= self.capacity[link] * _ROOM:
            self._over.discard(link)
        else:
            self._over.add(link)

    def _unlink(self, f: Flow) -> None:
        self._order = None  # the order of first use may change: redone at the next solve
        on = self._on
        for link in f.path:
            fs = on[link]
            fs.remove(f)
            if fs:
                self._relink(link)
            else:
                del on[link], self._load[link]
                self._emptied = True
                self._over.discard(link)

    def _resolution(self) -> float:
        """Smallest time step the simulated clock can represent around now (>= 1 ns)."""
        now = self.env._now
        if not self._res_lo <= now < self._res_hi:
            # ulp(now) is one value across a binade [2**(e-1), 2**e): computed once per binade
            e = math.frexp(now)[1]
            self._res_lo, self._res_hi = math.ldexp(0.5, e), math.ldexp(1.0, e)
            self._res = max(1e-9, 4.0 * math.ulp(now))
        return self._res

    def _advance(self) -> None:
        now = self.env._now
        dt = now - self._last
        if dt > 0:
            for f in self.flows.values():
                f.remaining -= f.rate * dt
        self._last = now

    def _solve(self, new: Flow | None = None) -> None:
        """Max-min fair rates with per-flow caps (progressive filling).

        Each round fixes the tightest constraint: the smallest fair share of a link (its
        capacity left over the flows on it still unfixed; the first such link in order of
        first use) or, when some unfixed flow's own cap is no larger, that flow (the first of
        the smallest cap in the order of the set of unfixed flow ids). The unfixed flows per
        link are kept as counts and the flows ordered by cap once, so a round costs a pass
        over the links, not over links x flows.

        When every link has room for all its flows at their caps, with a margin far above the
        rounding of the fill's subtractions, each round would fix the smallest-cap flow at its
        cap, so every flow gets exactly its cap (the common case: NIC-capped flows): then only
        ``new`` (a flow just started) needs its rate, unless the last solve filled."""
        flows = self.flows
        order = self._order
        if order is None:  # links in order of first use (flows in id order, each along its path)
            order = self._order = dict.fromkeys(chain.from_iterable(map(_path, flows.values())))
        if not self._over:
            if self._capped:
                if new is not None:
                    new.rate = new.cap
            else:
                for f in flows.values():
                    f.rate = f.cap
                self._capped = True
            self._log_usage(order, self._load)
            return
        capacity = self.capacity
        on = self._on
        users = {link: on[link] for link in order}
        cap_left = {link: capacity[link] for link in order}
        for f in flows.values():
            f.rate = -1.0
        self._fill(users, cap_left)
        self._capped = False
        self._log_usage(order, {link: sum(f.rate for f in fs) for link, fs in users.items()})

    def _fill(self, users: dict[str, list[Flow]], cap_left: dict[str, float]) -> None:
        """Progressive filling proper (see ``_solve``)."""
        flows = self.flows
        count = {link: len(fs) for link, fs in users.items()}
        active = set(f.fid for f in flows.values())  # built as before: its iteration order is the tie-break
        # min() over the set of unfixed ids takes the first smallest cap in the set's order;
        # a stable sort of that order by cap, walked past fixed flows, picks the same flow
        by_cap = sorted((flows[i] for i in active), key=_cap)
        k = 0
        while active:
            best_share, best_link = INF, None
            for link, n in count.items():
                if n:
                    share = cap_left[link] / n
                    if share < best_share:
                        best_share, best_link = share, link
            while by_cap[k].fid not in active:
                k += 1
            min_cap_flow = by_cap[k]
            if min_cap_flow.cap <= best_share:
                fixed = [min_cap_flow]
                rate = min_cap_flow.cap
            else:
                fixed = [f for f in users[best_link] if f.fid in active]
                rate = best_share
            for f in fixed:
                f.rate = rate
                active.discard(f.fid)
                for link in f.path:
                    cap_left[link] = max(0.0, cap_left[link] - rate)
                    count[link] -= 1

    def _log_usage(self, order: dict, rates: dict[str, float]) -> None:
        """Every link in use (``order``: their bytes/s in ``rates``) and every link no longer
        in use: its bytes/s and flows now."""
        if self._log:
            now = self.env.now
            log = self.usage_log
            if len(log.lists[0]) >= CHUNK:
                log.flush()
            t, code, rate, nflows = log.lists
            codes = self.link_codes
            on = self._on
            # (a link's code was given when it first carried a flow: ``send``)
            t.extend([now] * len(order))
            code.extend(map(codes.__getitem__, order))
            rate.extend(map(rates.__getitem__, order))
            nflows.extend(map(len, map(on.__getitem__, order)))
            if self._emptied:  # a link of the last solve can be idle now only if it lost its last flow
                for link in self._busy:
                    if link in order:
                        continue
                    t.append(now)
                    code.append(codes[link])
                    rate.append(0.0)
                    nflows.append(0)
        self._emptied = False
        self._busy = order.copy()

    def _reschedule(self, new: Flow | None = None) -> None:
        self._solve(new)
        self._version += 1
        if not self.flows:
            return
        dt = INF
        for f in self.flows.values():
            if f.rate > 0:
                d = f.remaining / f.rate
                if d < dt:
                    dt = d
        self._arm(dt)

    def _arm(self, dt: float) -> None:
        """The timer of the earliest completion, ``dt`` s from now (this version's)."""
        # never schedule below the clock's resolution: now + dt must be > now, or time stalls
        now = self.env._now
        res = self._res if self._res_lo <= now < self._res_hi else self._resolution()  # same binade: kept
        call_later(self.env, dt if dt > res else res, partial(self._on_timer, self._version))

    def _on_timer(self, version: int, _ev=None) -> None:
        if version != self._version:
            return
        # as _advance, and in the same pass the flows that are done and the earliest completion
        # among the others at their present rates
        now = self.env._now
        dt = now - self._last
        self._last = now
        # floating-point tolerance: a flow is done when what is left of it is below the clock's
        # resolution (1 ns, or a few ulps of the current time once that is coarser: ~4 ns at
        # 1e7 s, ~60 ns at ten years) or below 1e-9 of its bytes
        tol = self._res if self._res_lo <= now < self._res_hi else self._resolution()  # as in _arm
        flows = self.flows
        done = []
        first = INF
        for f in flows.values():
            rate = f.rate
            if dt > 0:
                f.remaining -= rate * dt
            left = f.remaining
            if left <= f.nbytes * 1e-9 or (rate > 0 and left <= rate * tol):
                done.append(f)
            elif rate > 0:
                d = left / rate
                if d < first:
                    first = d
        for f in done:
            del flows[f.fid]
            self._unlink(f)
        if self._capped and not self._over:
            # every flow stays at its cap (flows leaving only free capacity): the completions
            # found above stand, nothing is re-solved but the log
            self._solve()
            self._version += 1
            if flows:
                self._arm(first)
        else:
            self._reschedule()
        for f in done:
            f.on_done(f)
