"""Prices: pure functions and small models from (spec, batch shape) to seconds or bytes/s."""
from .base import StepCost
from .calibrated import CalibratedStepCost
from .registry import COST_MODELS, build_step_cost, register_cost_model
from .roofline import RooflineStepCost

__all__ = ["StepCost", "COST_MODELS", "build_step_cost", "register_cost_model", "RooflineStepCost",
           "CalibratedStepCost"]
