"""What-if exploration: sweeps over deployments (grid, random, max sustainable rate), Pareto
frontiers, side-by-side comparison; local process pool by default, Ray for clusters.

    from pdsim.explore import run_sweep, compare
    df = run_sweep("workloads/sweeps/llama8b-a800.yaml", "out/sweep")
"""
from .compare import compare
from .pareto import frontier, pareto_mask
from .plan import Config, Plan, build_plan, config_id
from .search import evaluate, max_sustainable_rate, meets_target
from .spec import AxisSpec, ConstraintSpec, ObjectiveSpec, RangeSpec, SearchSpec, SweepSpec, load_sweep
from .sweep import knob_columns, plan_sweep, run_sweep

__all__ = ["compare", "frontier", "pareto_mask", "Config", "Plan", "build_plan", "config_id", "evaluate",
           "max_sustainable_rate", "meets_target", "AxisSpec", "ConstraintSpec", "ObjectiveSpec", "RangeSpec",
           "SearchSpec", "SweepSpec", "load_sweep", "knob_columns", "plan_sweep", "run_sweep"]
