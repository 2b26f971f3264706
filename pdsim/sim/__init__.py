"""The world: SimPy entities (clients, router, instances, fabric) playing a workload."""
from .cluster import World
from .record import RunRecord
from .router import ROUTERS, Router

__all__ = ["World", "RunRecord", "ROUTERS", "Router"]
