"""Request streams: generators and trace readers that produce a RequestTable."""
from .table import RequestTable
from .materialize import materialize

__all__ = ["RequestTable", "materialize"]
