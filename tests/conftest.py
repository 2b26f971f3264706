"""Test-wide settings: every simulated world checks its own conservation laws at the end of
the run (requests in = finished + dropped with a reason; all KV pages, queues, batches,
buffers and flows empty); see World._check_conservation."""
import os

os.environ.setdefault("PDSIM_CHECK", "1")
