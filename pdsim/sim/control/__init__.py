"""The control plane: which instances exist and are believed up (membership), where each
request goes (the router), and the hooks that change the cluster while it runs."""
from .membership import InstanceView, Membership
from .router import ROUTERS, Hold, Reject, Route, Router
from . import routers  # noqa: F401,E402 - registers the published baselines (routers/)

__all__ = ["Membership", "InstanceView", "Router", "ROUTERS", "Route", "Hold", "Reject"]
