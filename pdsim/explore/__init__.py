"""What-if exploration: sweeps, max sustainable rate, Pareto frontiers, side-by-side compare."""
from .pareto import frontier, pareto_mask
from .spec import AxisSpec, SearchSpec, SweepSpec
from .sweep import compare, config_id, expand, load_sweep, run_config, run_sweep

__all__ = ["frontier", "pareto_mask", "AxisSpec", "SearchSpec", "SweepSpec", "compare", "config_id", "expand",
           "load_sweep", "run_config", "run_sweep"]
