"""The world: SimPy entities (clients, router, instances, fabric) playing a workload."""
from .cluster import RunLog, World
from .router import ROUTERS, Router

__all__ = ["World", "RunLog", "ROUTERS", "Router"]
