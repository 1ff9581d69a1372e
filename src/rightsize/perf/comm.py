"""Allreduce bus bandwidth: the analytic model, and the interface the learned one shares (Srift §4.2).

Srift predicts the *bus bandwidth* an allreduce of ``s`` bytes over ``n``
participants achieves, ``b_bus = 2 s (n-1) / (n t)``, rather than its time: it
names the bandwidth each node's shard crosses the network at, and separates
latency-bound small buffers from bandwidth-bound large ones. A
:class:`CommModel` answers ``bus_bandwidth(size, world, link)``; the simulator
turns that back into a transfer time.

:class:`AnalyticCommModel` is the fallback for links never probed: ring
allreduce takes ``2(n-1)`` steps, each paying a latency ``alpha`` and moving
``s/n`` bytes at the link's usable bandwidth, so
``t = 2(n-1)·alpha + 2(n-1)/n · s / (efficiency · rated)``. Its constants are
named and documented below; plans say when they used it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

GBPS = 1e9 / 8  # bytes per second in one gigabit per second
MTU_BYTES = 9001  # EC2's jumbo frame: Srift splits its learned model here (§4.2)


@dataclass(frozen=True)
class Link:
    """What a comm model knows about the machines in an allreduce.

    Attributes:
        name: instance type (or host description) the link belongs to.
        rated_gbps: the provider's rated network bandwidth per VM.
        vcpus, memory_gib: Srift's host features.
        accelerator: GPU product name, or "" for CPU-only hosts.
    """

    name: str
    rated_gbps: float
    vcpus: int = 0
    memory_gib: float = 0.0
    accelerator: str = ""


def bus_bandwidth_from_time(size_bytes: float, world: int, seconds: float) -> float:
    """Srift's ``b_bus = 2 s (n-1) / (n t)`` in bytes per second."""
    return 2 * size_bytes * (world - 1) / (world * seconds)


def allreduce_time(size_bytes: float, world: int, bus_bytes_per_s: float) -> float:
    """Inverse of :func:`bus_bandwidth_from_time`: seconds to allreduce ``size`` bytes."""
    if world <= 1 or size_bytes <= 0:
        return 0.0
    return 2 * size_bytes * (world - 1) / (world * bus_bytes_per_s)


def round_up_pow2(size_bytes: float) -> int:
    """Srift rounds a layer's size up to the next power of two before querying the model."""
    return 1 << max(0, math.ceil(math.log2(max(1.0, size_bytes))))


class CommModel(ABC):
    """Predicts allreduce bus bandwidth; ``kind`` names the model in plans."""

    kind: str = "comm"

    @abstractmethod
    def bus_bandwidth(self, size_bytes: int, world: int, link: Link, concurrent: int = 1) -> float:
        """Bus bandwidth in bytes/s of one allreduce of ``size_bytes`` among ``world`` peers."""

    def kind_for(self, link: Link) -> str:
        """Which model answers for ``link`` (a learned model falls back for unprobed hosts)."""
        return self.kind

    def capacity(self, world: int, link: Link) -> float:
        """``b_cap``: the most bus bandwidth the link gives all concurrent transfers together.

        Taken as what one very large transfer achieves, where latency no longer
        matters (the simulator shares it fairly, Srift eq. 2).
        """
        return self.bus_bandwidth(512 * 2**20, world, link)


@dataclass(frozen=True)
class AnalyticCommModel(CommModel):
    """Ring allreduce with a per-step latency and an efficiency on the rated bandwidth.

    Attributes:
        latency_s: ``alpha``, the cost of one of the ``2(n-1)`` ring steps. 50 µs
            is a typical TCP round trip between VMs in one cloud zone.
        efficiency: fraction of the rated bandwidth a long transfer achieves.
            Srift's Table 2 measured 11.2 of 10 Gbps (p3.8xl), 11.9 of 10 (g3.8xl)
            and 20.3 of 25 (g4dn.4xl) with iperf; allreduce through NCCL/Gloo
            over TCP reaches less, 0.7 is a common figure.
    """

    latency_s: float = 50e-6
    efficiency: float = 0.7
    kind: str = "analytic"

    def __post_init__(self) -> None:
        if self.latency_s < 0 or not 0 < self.efficiency <= 1:
            raise ValueError(f"latency_s must be >= 0 and efficiency in (0, 1]: {self}")

    def bus_bandwidth(self, size_bytes: int, world: int, link: Link, concurrent: int = 1) -> float:
        if world <= 1:
            return math.inf
        usable = self.efficiency * link.rated_gbps * GBPS
        seconds = 2 * (world - 1) * self.latency_s + 2 * (world - 1) / world * size_bytes / usable
        return bus_bandwidth_from_time(size_bytes, world, seconds)
