"""Request streams: generators and trace readers that produce a RequestTable."""
from .generators import PRESETS, arrivals, conversations, sample_lengths
from .materialize import materialize, rate_sweep, scale_time
from .stats import workload_stats
from .table import RequestTable
from .traces import read_trace, write_mooncake

__all__ = ["RequestTable", "materialize", "rate_sweep", "scale_time", "read_trace", "write_mooncake",
           "workload_stats", "PRESETS", "arrivals", "conversations", "sample_lengths"]
