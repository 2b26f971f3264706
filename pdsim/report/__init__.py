"""Plotly figure builders and the HTML report (shared by the CLI and the dashboard)."""
from .figures import (instance_timeline_figure, latency_cdf_figure, link_timeline_figure, report_html,
                      request_gantt_figure, summary_rows, throughput_timeline_figure, ttft_breakdown_figure)

__all__ = ["instance_timeline_figure", "latency_cdf_figure", "link_timeline_figure", "report_html",
           "request_gantt_figure", "summary_rows", "throughput_timeline_figure", "ttft_breakdown_figure"]
