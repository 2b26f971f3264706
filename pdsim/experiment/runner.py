"""Run an experiment's runs serially, on a local process pool or as Ray tasks.

The sweep runner's machinery is reused where it fits (its atomic per-run ``Cache``, worker
count, Ray reachability check); the loop is this module's because the sweep's loop is bound
to the sweep's evaluation function. Each run is computed by ``evaluate.evaluate_run`` from
its scenario data alone and its row lands in the plan's order, so results do not depend on
the worker count or on where a run executed.
"""
from __future__ import annotations

from typing import Any, Callable

from ..explore.runner import _check_reachable, _worker_init, default_workers
from ..specs.errors import SpecError
from .evaluate import evaluate_run

Job = tuple  # (cache key, scenario data, base dir, Trust)
OnDone = Callable[[str, dict], None]


def _bar(total: int, progress: bool, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", desc=desc, disable=not progress or total == 0, dynamic_ncols=True)


def run_local(jobs: list[Job], on_done: OnDone, workers: int | None = None, progress: bool = True) -> None:
    workers = min(workers or default_workers(), max(len(jobs), 1))
    bar = _bar(len(jobs), progress, "experiment")
    try:
        if workers <= 1:
            for key, data, base_dir, trust in jobs:
                on_done(key, evaluate_run(data, base_dir, trust))
                bar.update()
            return
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        ex = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)
        try:
            pending = {ex.submit(evaluate_run, data, base_dir, trust): key for key, data, base_dir, trust in jobs}
            while pending:
                done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)  # Ctrl-C stays responsive
                for fut in done:
                    key = pending.pop(fut)
                    try:
                        row = fut.result()
                    except BrokenProcessPool:
                        raise SpecError("an experiment worker process died (out of memory?); finished runs are "
                                        "cached, rerun to continue", field="--workers") from None
                    on_done(key, row)
                    bar.update()
        except BaseException:  # Ctrl-C or a failure: stop now; what finished is cached
            procs = list(getattr(ex, "_processes", {}).values())
            ex.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
            raise
        ex.shutdown(wait=True)
    finally:
        bar.close()


def run_ray(jobs: list[Job], on_done: OnDone, address: str | None = None, workers: int | None = None,
            progress: bool = True) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError("Ray is not installed: pip install 'pdsim[ray]' (or \"ray[default]\")",
                        field="--ray-address" if address else "--ray") from None
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            _check_reachable(address)
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=workers or default_workers(), **kwargs)
        except Exception as err:  # noqa: BLE001 - connection problems are user input problems here
            where = "--ray-address" if address else "--ray"
            raise SpecError(f"cannot start or reach Ray: {err}", field=where) from None
        started = True
    bar = _bar(len(jobs), progress, "experiment (ray)")
    pending: dict = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(evaluate_run)
        pending = {remote.remote(data, base_dir, trust): key for key, data, base_dir, trust in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
            for ref in done:
                key = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as err:
                    row = {"status": "error", "reason": f"ray: {str(err).strip().splitlines()[-1]}"}
                on_done(key, row)
                bar.update()
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        if started:
            ray.shutdown()


def run_jobs(jobs: list[Job], on_done: OnDone, workers: int | None = None, ray: bool = False,
             ray_address: str | None = None, progress: bool = True) -> None:
    if ray or ray_address:
        run_ray(jobs, on_done, ray_address, workers, progress)
    else:
        run_local(jobs, on_done, workers, progress)
