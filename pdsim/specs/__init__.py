"""Specs: typed, validated, frozen data loaded from YAML. Imports nothing else of pdsim."""
from .errors import SpecError
from .hardware import Efficiency, GPUSpec, HardwareProfile, NodeSpec, load_hardware
from .hf_config import load_model
from .model import MLASpec, ModelSpec, MoESpec
from .scenario import (ClusterSpec, EngineSpec, GroupSpec, ResolvedScenario, RouterSpec, Scenario,
                       SLOSpec, TransferSpec)
from .workload import LengthDist, TraceSpec, WorkloadSpec
from .memory import InstanceMemory, instance_memory

__all__ = [
    "SpecError", "Efficiency", "GPUSpec", "HardwareProfile", "NodeSpec", "load_hardware",
    "MLASpec", "ModelSpec", "MoESpec", "load_model", "ClusterSpec", "EngineSpec", "GroupSpec",
    "ResolvedScenario", "RouterSpec", "Scenario", "SLOSpec", "TransferSpec", "LengthDist",
    "TraceSpec", "WorkloadSpec", "InstanceMemory", "instance_memory",
]
