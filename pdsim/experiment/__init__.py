"""Experiments for scheduling research: policies x workloads x deployments x seeds, with
confidence intervals and paired significance tests over common random numbers.

    from pdsim.experiment import run_experiment
    res = run_experiment("workloads/experiments/mooncake-routing.yaml", "out/exp")
    res.paired            # each policy minus the baseline, paired by replicate

See docs/policies.md ("Running an experiment") and spec.py for the file format.
"""
from .run import ExperimentResult, plan_experiment, run_experiment
from .spec import Arm, ExperimentSpec, load_experiment
from .stats import holm, mean_ci, paired, t_cdf, t_ppf

__all__ = ["run_experiment", "plan_experiment", "ExperimentResult", "ExperimentSpec", "Arm", "load_experiment",
           "mean_ci", "paired", "holm", "t_cdf", "t_ppf"]
