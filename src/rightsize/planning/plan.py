"""A cloud configuration (Srift's ``counts[]`` and ``batches[]``) and a plan: its predicted time and cost.

``Config`` is what gets launched: for each chosen instance type, how many VMs
and the batch each VM trains on per step. ``CloudPlan`` adds the predictions
and how they were made. Configurations print as in the Srift paper,
``16×g4dn.8xlarge@32`` (and ``+`` between instance types).
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class CloudPlan:
    """A configuration with its predicted iteration time, total time and total cost.

    Attributes:
        policy: who chose it (``srift``, ``cap``, ``tap``, ``cost-opt``, ...).
        models: how the numbers were predicted (compute and comm model per instance).
        price_per_hour: the whole configuration's hourly price.
    """

    config: Config
    seconds_per_iter: float
    iterations: int
    price_per_hour: float
    policy: str
    models: dict[str, str] = field(default_factory=dict)
    launch_s: float = 0.0  # startup time before training, counted in time and cost

    @property
    def total_seconds(self) -> float:
        return self.launch_s + self.iterations * self.seconds_per_iter

    @property
    def total_cost(self) -> float:
        return self.total_seconds / 3600 * self.price_per_hour

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
            "models": dict(self.models),
        }
