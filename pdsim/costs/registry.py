"""Registry of step-cost models: ``roofline`` (first principles) and ``calibrated``."""
from __future__ import annotations

import warnings
from typing import Callable

from ..specs.hardware import HardwareProfile
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec
from .base import StepCost
from .calibrated import CalibratedStepCost
from .roofline import RooflineStepCost

COST_MODELS: dict[str, Callable[..., StepCost]] = {"roofline": RooflineStepCost, "calibrated": CalibratedStepCost}


def register_cost_model(key: str, factory: Callable[..., StepCost]) -> None:
    COST_MODELS[key] = factory


def build_step_cost(kind: str, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                    nic_gbit: float | None = None, **features) -> StepCost:
    """``kind``: 'roofline', 'calibrated' or 'auto' (calibrated when ``hw`` carries constants).
    ``features``: keyword arguments of the step models (``expert_load``: ExpertLoadSpec;
    ``lm_head``: False for a pipeline stage without it)."""
    if kind == "auto":
        kind = "calibrated" if hw.calibration else "roofline"
    if kind == "calibrated" and not hw.calibration:
        warnings.warn(f"hardware profile {hw.name!r} has no calibrated constants (run `pdsim calibrate fit`); "
                      "falling back to the roofline", stacklevel=2)
        kind = "roofline"
    if kind not in COST_MODELS:
        raise KeyError(kind)
    return COST_MODELS[kind](hw, model, group, role, nic_gbit=nic_gbit, **features)
