"""Request streams: generators, trace readers and load shaping that produce a RequestTable,
and the statistics of one."""
from .generators import PRESETS, Preset, lengths_for, resolve_lengths, sample_lengths, shared_prefix_ids
from .materialize import materialize, resolve_trace_path
from .sessions import AGENT_OUTPUT, TOOL_AGENT, conversations
from .shaping import arrivals, closed_loop, open_loop, rate_sweep, scale_sweep, scale_time, with_arrivals
from .stats import prefix_hit_tokens, prefix_reuse_ratio, workload_stats
from .table import RequestTable
from .trace_writer import write_mooncake, write_trace
from .traces import FORMATS, detect_format, read_trace

__all__ = ["RequestTable", "materialize", "resolve_trace_path",
           "arrivals", "open_loop", "closed_loop", "with_arrivals", "scale_time", "rate_sweep", "scale_sweep",
           "read_trace", "detect_format", "FORMATS", "write_trace", "write_mooncake",
           "workload_stats", "prefix_reuse_ratio", "prefix_hit_tokens",
           "PRESETS", "Preset", "sample_lengths", "lengths_for", "resolve_lengths", "shared_prefix_ids",
           "conversations", "TOOL_AGENT", "AGENT_OUTPUT"]
