"""Resources: the CPU, memory and GPUs one node (or a whole job) holds.

A small immutable value with arithmetic, so that policies can reason about
allocations (``used / allocated``, ``budget - current``) without unit mistakes.
CPU is kept to millicore precision, the granularity a cgroup quota is set in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes, parse_cpu, parse_memory

CPU_DECIMALS = 3  # millicores


@dataclass(frozen=True)
class Resources:
    """An amount of compute resources.

    Attributes:
        cpu_cores: CPU cores (fractional; 0.5 is half a core).
        memory_bytes: memory in bytes.
        gpus: whole accelerators.
    """

    cpu_cores: float = 0.0
    memory_bytes: int = 0
    gpus: int = 0

    def __init__(self, cpu_cores: float = 0.0, memory_bytes: int = 0, gpus: int = 0) -> None:
        # Written by hand (dataclass keeps a class's own ``__init__``): the generated one stores
        # each field through ``object.__setattr__`` and then calls a ``__post_init__``, twice
        # as slow, and the scheduling simulator builds hundreds of thousands of these.
        fields = self.__dict__
        fields["cpu_cores"] = cpu_cores = round(float(cpu_cores), CPU_DECIMALS)
        fields["memory_bytes"] = memory_bytes = (
            memory_bytes if type(memory_bytes) is int else int(memory_bytes)
        )
        fields["gpus"] = gpus
        if cpu_cores < 0 or memory_bytes < 0 or gpus < 0:
            raise ResourceError(f"resources cannot be negative: {self}")

    @classmethod
    def parse(cls, cpu: object = 0, memory: object = 0, gpus: int = 0) -> Resources:
        """Build from user strings such as ``cpu="500m", memory="4Gi"``."""
        return cls(parse_cpu(cpu), parse_memory(memory), int(gpus))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resources:
        """Inverse of :meth:`to_dict`; also accepts unit strings."""
        return cls.parse(data.get("cpu", 0), data.get("memory", 0), data.get("gpus", 0))

    def to_dict(self) -> dict[str, float | int]:
        return {"cpu": self.cpu_cores, "memory": self.memory_bytes, "gpus": self.gpus}

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_cores + other.cpu_cores,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        """Difference; raises ResourceError if any dimension would go negative."""
        return Resources(
            self.cpu_cores - other.cpu_cores,
            self.memory_bytes - other.memory_bytes,
            self.gpus - other.gpus,
        )

    def less(self, other: Resources) -> Resources:
        """Each dimension less ``other``'s, never below zero: what is left of a capacity."""
        return Resources(
            max(0.0, self.cpu_cores - other.cpu_cores),
            max(0, self.memory_bytes - other.memory_bytes),
            max(0, self.gpus - other.gpus),
        )

    def scaled(self, factor: float) -> Resources:
        """Every dimension times ``factor`` (GPUs rounded down)."""
        return Resources(
            self.cpu_cores * factor, int(self.memory_bytes * factor), int(self.gpus * factor)
        )

    def fits_within(self, limit: Resources) -> bool:
        """True if no dimension exceeds ``limit``'s (to millicore precision)."""
        return (
            self.cpu_cores <= limit.cpu_cores
            and self.memory_bytes <= limit.memory_bytes
            and self.gpus <= limit.gpus
        )

    def clipped_to(self, limit: Resources) -> Resources:
        """Each dimension capped at ``limit``'s."""
        return Resources(
            min(self.cpu_cores, limit.cpu_cores),
            min(self.memory_bytes, limit.memory_bytes),
            min(self.gpus, limit.gpus),
        )

    def __str__(self) -> str:
        text = f"{self.cpu_cores:g} cpu, {format_bytes(self.memory_bytes)}"
        return text + (f", {self.gpus} gpu" if self.gpus else "")


def sum_resources(items: list[Resources] | tuple[Resources, ...]) -> Resources:
    """Sum of many Resources (empty sum is zero)."""
    # The same left-to-right sum as ``Resources() + a + b + ...`` (rounded to millicores after
    # every addition, as ``__add__`` does), without building a Resources per step: shape totals
    # are summed very often by the scheduling simulator.
    cpu_cores, memory_bytes, gpus = 0.0, 0, 0
    for item in items:
        cpu_cores = round(cpu_cores + item.cpu_cores, CPU_DECIMALS)
        memory_bytes += item.memory_bytes
        gpus += item.gpus
    return Resources(cpu_cores, memory_bytes, gpus)
