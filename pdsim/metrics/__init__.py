"""Results: per-request and timeline tables, bench_serving-style summaries, goodput."""
from .results import Results
from .summary import meets_slo, summarize
from .tables import itl_samples, request_frame, timeline_frame

__all__ = ["Results", "meets_slo", "summarize", "itl_samples", "request_frame", "timeline_frame"]
