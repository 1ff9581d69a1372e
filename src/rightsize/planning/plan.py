"""A cloud configuration (Srift's ``counts[]`` and ``batches[]``) and a plan: its predicted time and cost.

``Config`` is what gets launched: for each chosen instance type, how many VMs
and the batch each VM trains on per step. ``CloudPlan`` adds the predictions
and how they were made. Configurations print as in the Srift paper,
``16×g4dn.8xlarge@32`` (and ``+`` between instance types).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Slot:
    """``count`` VMs of ``instance``, each with per-VM batch ``batch``.

    ``role`` is ``ps`` for parameter servers (which train on no batch) and empty
    for the data-parallel workers of an allreduce or PS job.
    """

    instance: str
    count: int
    batch: int
    role: str = ""

    def __str__(self) -> str:
        return f"{self.count}×{self.instance}@{self.role or self.batch}"


@dataclass(frozen=True)
class Config:
    """Srift's ``counts[i]`` and ``batches[i]``, as one slot per instance type used."""

    slots: tuple[Slot, ...]

    @property
    def global_batch(self) -> int:
        return sum(s.count * s.batch for s in self.slots)

    @property
    def vms(self) -> int:
        """Training VMs (parameter servers excluded)."""
        return sum(s.count for s in self.slots if s.role != "ps")

    def __str__(self) -> str:
        return " + ".join(str(s) for s in self.slots)


#: What each planner picks by, in a user's words: a recommender's name says less than it
#: seems ("Cost-Opt" takes the cheapest price per hour, which need not be the cheapest job).
OPTIMISES = {
    "srift": "the objective asked (total cost or total time) within the deadline or budget",
    "cap": "cheapest instances per hour first, filled greedily (Srift's CAP baseline)",
    "tap": "fastest instances first, filled greedily (Srift's TAP baseline)",
    "cost-opt": "the lowest price per hour per worker (FC2 §5.2.2), not the lowest total cost",
    "time-opt": "the highest price per hour per worker, as a stand-in for the fastest (FC2)",
    "scala-opt": "as many workers as the parameter server's link carries, of the type needing "
                 "fewest (FC2)",
    "scala-opt-m": "Scala-Opt's worker count for the worker type you chose (FC2)",
}


@dataclass(frozen=True)
class CloudPlan:
    """A configuration with its predicted iteration time, total time and total cost.

    Attributes:
        policy: who chose it (``srift``, ``cap``, ``tap``, ``cost-opt``, ...).
        models: how the numbers were predicted (compute and comm model per instance).
        price_per_hour: the whole configuration's hourly price.
        log_spread: half-width of the step time's interval in log space, from the held-out
            errors of the models behind it (0: measured on the device; None: not known).
    """

    config: Config
    seconds_per_iter: float
    iterations: int
    price_per_hour: float
    policy: str
    models: dict[str, str] = field(default_factory=dict)
    launch_s: float = 0.0  # startup time before training, counted in time and cost
    log_spread: float | None = 0.0

    @property
    def total_seconds(self) -> float:
        return self.launch_s + self.iterations * self.seconds_per_iter

    @property
    def total_cost(self) -> float:
        return self.total_seconds / 3600 * self.price_per_hour

    def interval(self, value: float) -> tuple[float, float] | None:
        """``value`` (this plan's time or cost) stretched by the step time's interval."""
        if self.log_spread is None:
            return None
        factor = math.exp(self.log_spread)
        return value / factor, value * factor

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": str(self.config),
            "counts": {s.instance: s.count for s in self.config.slots},
            "batches": {s.instance: s.batch for s in self.config.slots},
            "seconds_per_iter": self.seconds_per_iter,
            "total_seconds": self.total_seconds,
            "total_cost": self.total_cost,
            "price_per_hour": self.price_per_hour,
            "policy": self.policy,
            "optimises": OPTIMISES.get(self.policy),
            "models": dict(self.models),
            "total_seconds_interval": self.interval(self.total_seconds),
            "total_cost_interval": self.interval(self.total_cost),
        }


def overlapping(plans: list[CloudPlan], objective: str) -> list[int]:
    """Indexes of the plans after the first whose interval of ``objective`` (``time`` or
    ``cost``) reaches into the first plan's: their order is within the models' error."""
    if not plans:
        return []
    value = (lambda p: p.total_seconds) if objective == "time" else (lambda p: p.total_cost)
    best = plans[0].interval(value(plans[0]))
    if best is None:
        return []
    out = []
    for i, plan in enumerate(plans[1:], start=1):
        other = plan.interval(value(plan))
        if other is not None and other[0] <= best[1]:
            out.append(i)
    return out
