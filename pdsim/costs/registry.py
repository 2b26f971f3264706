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


def resolve_cost_kind(kind: str, hw: HardwareProfile, warn: bool = False) -> str:
    """The one decision of which cost model runs on ``hw``: 'auto' is 'calibrated' when the
    profile carries fitted constants, else 'roofline' (so is 'calibrated' without them). The KV
    transfer prices follow the same decision (fitted Mooncake constants only when calibrated)."""
    if kind == "auto":
        return "calibrated" if hw.calibration else "roofline"
    if kind == "calibrated" and not hw.calibration:
        if warn:
            warnings.warn(f"hardware profile {hw.name!r} has no calibrated constants (run `pdsim calibrate fit`); "
                          "falling back to the roofline", stacklevel=3)
        return "roofline"
    return kind


def build_step_cost(kind: str, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                    nic_gbit: float | None = None, **features) -> StepCost:
    """``kind``: 'roofline', 'calibrated' or 'auto' (calibrated when ``hw`` carries constants).
    ``features``: keyword arguments of the step models (``expert_load``: ExpertLoadSpec;
    ``lm_head``: False for a pipeline stage without it)."""
    kind = resolve_cost_kind(kind, hw, warn=True)
    if kind not in COST_MODELS:
        raise KeyError(kind)
    return COST_MODELS[kind](hw, model, group, role, nic_gbit=nic_gbit, **features)
