"""The world: SimPy entities (arrivals, control plane, instances, transports, fabric) playing a
workload. ``World(resolved, table).run()`` returns a RunRecord (record.py).

Plug-in base classes (subclass one, declare a frozen ``Params`` dataclass; see pdsim/plugins.py
and docs/architecture.md): ``Router`` (with ``Route``/``Hold``/``Reject`` decisions),
``BatchScheduler``, ``Transport``, ``EvictionPolicy``.
"""
from .control.membership import InstanceView
from .control.router import ROUTERS, Hold, Reject, Route, Router
from .engine.scheduler import SCHEDULERS, BatchScheduler
from .kv.tiers import EVICTION, EvictionPolicy
from .record import RunRecord
from .transports import TRANSPORTS, Transport
from .world import World

__all__ = ["World", "RunRecord", "Router", "Route", "Hold", "Reject", "InstanceView", "BatchScheduler",
           "Transport", "EvictionPolicy", "ROUTERS", "SCHEDULERS", "TRANSPORTS", "EVICTION"]
