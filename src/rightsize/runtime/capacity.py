"""What a backend can hold: a job that cannot fit is refused before anything starts.

The local backend's capacity is this machine: the CPUs this process may run on
and its memory. A node asking for more than that, a shape whose nodes together
ask for more, or a budget (the most a policy may grow the job to) beyond it is
refused with one line naming the node or the budget and the limit — unless the
user opts in to oversubscription (``runtime.oversubscribe``, ``--oversubscribe``):
CPU quotas then only share the cores, and memory limits may together exceed
what the kernel can give.

Launches are bounded too: at most :func:`launch_wave` processes start at once
(each loads Python and torch, about a core-second and 300 MB), and the next
wave starts once they have registered.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.units import format_bytes

#: Processes started at once per CPU of the machine.
LAUNCHES_PER_CPU = 2
#: Fewest processes started at once, whatever the machine.
MIN_LAUNCH_WAVE = 2
_HINT = "; lower it, or set runtime.oversubscribe: true (--oversubscribe) to run anyway"


def launch_wave(machine: Resources) -> int:
    """How many node processes may start at once on ``machine``."""
    return max(MIN_LAUNCH_WAVE, int(LAUNCHES_PER_CPU * machine.cpu_cores))


@dataclass(frozen=True)
class Capacity:
    """What a backend can hold: all of it, and each host a node can land on."""

    total: Resources
    hosts: tuple[Resources, ...]
    name: str = "this machine"  # what the total is, in a refusal

    @classmethod
    def of_machine(cls, machine: Resources) -> Capacity:
        return cls(machine, (machine,))

    def node_problem(self, what: str, asked: Resources) -> str | None:
        """Why no single host can hold ``asked``, or None if one can."""
        if len(self.hosts) == 1:
            return _exceeds(what, asked, self.hosts[0], self.name)
        if any(_exceeds(what, asked, host, "") is None for host in self.hosts):
            return None
        largest = max(self.hosts, key=lambda h: (h.cpu_cores, h.memory_bytes))
        return (f"{what} asks for {asked.cpu_cores:g} CPU and {format_bytes(asked.memory_bytes)} "
                f"but no node of {self.name} has both (the largest: {largest.cpu_cores:g} CPU, "
                f"{format_bytes(largest.memory_bytes)}){_HINT}")  # fmt: skip


def capacity_problem(shape: ClusterShape, budget: Resources,
                     capacity: Resources | Capacity) -> str | None:  # fmt: skip
    """Why ``shape`` (or a job of ``budget``) cannot run on ``capacity``, or None if it can."""
    if isinstance(capacity, Resources):
        capacity = Capacity.of_machine(capacity)
    for node in shape.nodes:
        problem = capacity.node_problem(f"node {node.name}", node.resources)
        if problem:
            return problem
    return (_exceeds("the shape", shape.total(), capacity.total, capacity.name)
            or _exceeds("budget", budget, capacity.total, capacity.name))  # fmt: skip


def _exceeds(what: str, asked: Resources, machine: Resources, name: str) -> str | None:
    if asked.cpu_cores > machine.cpu_cores:
        return (f"{what} asks for {asked.cpu_cores:g} CPU but {name} has "
                f"{machine.cpu_cores:g}{_HINT}")  # fmt: skip
    if asked.memory_bytes > machine.memory_bytes:
        return (f"{what} asks for {format_bytes(asked.memory_bytes)} of memory but {name} "
                f"has {format_bytes(machine.memory_bytes)}{_HINT}")  # fmt: skip
    return None
