"""Executors: what running one engine step costs an instance.

``LocalExecutor`` prices the step on the instance's own GPUs with its step-cost model
(pdsim/costs): attention, dense layers and MoE layers (with the EP all-to-all) all local.
The executor is where a step whose MoE layers run elsewhere (expert servers) would be priced
differently; the engine loop only asks ``step_time``.
"""
from __future__ import annotations


class LocalExecutor:
    """Every layer on the instance's GPUs: the step time is the cost model's. (Expert-service
    clients use sim/experts.py RemoteExpertExecutor, whose ``gate`` can stall the engine.)"""

    __slots__ = ("cost", "step_time")
    gate = None  # never stalls

    def idle(self) -> None:
        pass

    def __init__(self, cost):
        self.cost = cost
        self.step_time = cost.step_time  # bound once: the engine calls it every step
