"""Run an experiment's runs serially, on a local process pool or as Ray tasks: pdsim's one
runner (pdsim/parallel.py) with the experiment's evaluation function. Each run is computed by
``evaluate.evaluate_run`` from its scenario data alone and its row lands in the plan's order, so
results do not depend on the worker count or on where a run executed.
"""
from __future__ import annotations

from ..parallel import Job, OnDone, run_jobs as _run_jobs
from .evaluate import evaluate_run


def run_jobs(jobs: list[Job], on_done: OnDone, workers: int | None = None, ray: bool = False,
             ray_address: str | None = None, progress: bool = True) -> None:
    _run_jobs(jobs, on_done, evaluate_run, workers, ray, ray_address, progress, desc="experiment", unit="run")
