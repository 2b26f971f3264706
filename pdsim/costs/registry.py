"""Registry of step-cost models: ``roofline`` (first principles) and ``calibrated``."""
from __future__ import annotations

import warnings
from typing import Callable

from ..specs.hardware import HardwareProfile
from ..specs.model import ModelSpec
from ..specs.scenario import GroupSpec
from .base import StepCost
from .roofline import RooflineStepCost

COST_MODELS: dict[str, Callable[..., StepCost]] = {"roofline": RooflineStepCost}


def register_cost_model(key: str, factory: Callable[..., StepCost]) -> None:
    COST_MODELS[key] = factory


def build_step_cost(kind: str, hw: HardwareProfile, model: ModelSpec, group: GroupSpec, role: str,
                    nic_gbit: float | None = None) -> StepCost:
    """``kind``: 'roofline', 'calibrated' or 'auto' (calibrated when ``hw`` carries constants)."""
    if kind == "auto":
        kind = "calibrated" if hw.calibration and "calibrated" in COST_MODELS else "roofline"
    if kind == "calibrated" and "calibrated" not in COST_MODELS:
        warnings.warn(f"no calibrated cost model available; falling back to the roofline for {hw.name}")
        kind = "roofline"
    if kind not in COST_MODELS:
        raise KeyError(kind)
    return COST_MODELS[kind](hw, model, group, role, nic_gbit=nic_gbit)
