"""Shapes the policies launch with and grow through, and the budget check they share.

``one_ps_two_workers`` is NEARCHUS's starting DT-config ``(1, 2, R/3, 2R/3)``
(§IV); ``fixed_node_shape`` is the layout Optimus and FA-BF use, every node the
same size (5 vCPU in NEARCHUS §V); ``scaled_up``, ``scaled_out`` and ``with_node``
are NEARCHUS's scale-up and scale-out (§IV) and Optimus's one more node.
"""

from __future__ import annotations

import math
from functools import lru_cache

from rightsize.core.errors import ResourceError
from rightsize.core.resources import Resources
from rightsize.core.shape import MILLICORE, ClusterShape, NodeRole, rounding_slack  # noqa: F401
from rightsize.scaling.api import EventKind, Observation, Plan
from rightsize.scaling.oom import memory_doubled_after_oom

LAUNCH_SHAPES = 256  # remembered launch shapes (a cache bound, not a model parameter)
DERIVED_SHAPES = 4096  # remembered shapes derived from others (a cache bound)


@lru_cache(maxsize=LAUNCH_SHAPES)  # a shape is immutable; trace jobs share a few budgets
def one_ps_two_workers(total: Resources) -> ClusterShape:
    """``total`` split as (1 PS, 2 workers) with a third and two thirds: NEARCHUS's DT-config.

    Each worker's share is rounded down to the millicore and the PS takes the rest, so the
    nodes add up to ``total`` exactly: thirds rounded each on their own made 1 CPU into
    0.333 + 2 x 0.334 = 1.001, a shape over its budget (found by the service's preview)."""
    worker = Resources(math.floor(total.cpu_cores * 1000 / 3) / 1000, total.memory_bytes // 3,
                       total.gpus // 3)  # fmt: skip
    ps = Resources(round(total.cpu_cores - 2 * worker.cpu_cores, 3),
                   total.memory_bytes - 2 * worker.memory_bytes, total.gpus - 2 * worker.gpus)  # fmt: skip
    return ClusterShape.from_counts(1, 2, ps, worker)


@lru_cache(maxsize=LAUNCH_SHAPES)
def fixed_node_shape(n_ps: int, n_workers: int, node: Resources) -> ClusterShape:
    """``n_ps`` PS and ``n_workers`` workers, each holding ``node``."""
    return ClusterShape.from_counts(n_ps, n_workers, node, node)


# The policies' deterministic moves from one shape to the next. Shapes are immutable values
# and jobs of one budget grow through the same ones, so the moves are remembered: equal
# arguments give the very same shape object, whose totals, hash and simulated performance
# are then computed once.
@lru_cache(maxsize=DERIVED_SHAPES)
def with_node(shape: ClusterShape, role: NodeRole, node: Resources) -> ClusterShape:
    """``shape.with_node_added(role, node)`` (Optimus's one more node)."""
    return shape.with_node_added(role, node)


@lru_cache(maxsize=DERIVED_SHAPES)
def scaled_up(shape: ClusterShape, factor: float) -> ClusterShape:
    """Every node grown by ``factor`` (resources added in proportion to what each holds)."""
    total = shape.total()
    return shape.scaled_up(Resources(total.cpu_cores * factor, int(total.memory_bytes * factor)))


@lru_cache(maxsize=DERIVED_SHAPES)
def scaled_out(shape: ClusterShape, role: NodeRole, count: int = 1) -> ClusterShape:
    """``count`` more nodes of ``role``, the role's total re-divided evenly (``r / n``)."""
    total = shape.role_total(role)
    for _ in range(count):
        shape = shape.with_node_added(role, Resources())
    return shape.redistributed(role, total)


@lru_cache(maxsize=DERIVED_SHAPES)
def redistributed(shape: ClusterShape, role: NodeRole, total: Resources) -> ClusterShape:
    """``shape.redistributed(role, total)``: the role's nodes share ``total`` evenly."""
    return shape.redistributed(role, total)


def node_of(budget: Resources, cpu_cores: float) -> Resources:
    """A node of ``cpu_cores`` with the budget's memory per core (no memory if it has none)."""
    per_core = budget.memory_bytes / budget.cpu_cores if budget.cpu_cores else 0.0
    return Resources(cpu_cores, int(per_core * cpu_cores))


def require_budget(policy: str, budget: Resources, minimum_cores: float, why: str) -> None:
    """Raise if ``budget`` has fewer than ``minimum_cores`` CPU cores.

    Raises:
        ResourceError: naming the policy, the budget, the minimum and why.
    """
    if budget.cpu_cores < minimum_cores - 1e-9:
        raise ResourceError(
            f"budget {budget.cpu_cores:g} cpu is below {policy}'s minimal shape ({why}); "
            f"give the job a budget of at least {minimum_cores:g} cpu"
        )


def rounding_room(obs: Observation, nodes: int) -> Resources:
    """The job's headroom less what rounding ``nodes`` nodes may add (``rounding_slack``)."""
    head = obs.headroom
    return Resources(max(0.0, head.cpu_cores - rounding_slack(nodes)), head.memory_bytes, head.gpus)


def growth_room(obs: Observation) -> Resources:
    """What the job may grow by; a budget without memory does not limit memory.

    NEARCHUS and Optimus budget CPU only; such a budget has ``memory_bytes == 0``,
    and then only the cluster's free memory bounds a policy that sizes memory.
    """
    if obs.budget.memory_bytes:
        return obs.headroom
    return Resources(obs.headroom.cpu_cores, obs.free.memory_bytes, obs.headroom.gpus)


def grows_within(obs: Observation, shape: ClusterShape) -> bool:
    """True if what ``shape`` adds to the job's current total fits in :func:`growth_room`."""
    new, now = shape.total(), obs.shape.total()
    extra = Resources(
        max(0.0, new.cpu_cores - now.cpu_cores), max(0, new.memory_bytes - now.memory_bytes)
    )
    return extra.fits_within(growth_room(obs))


def oom_killed_memory_doubled(obs: Observation) -> Plan | None:
    """The first OOM-killed node of ``obs.events`` relaunched with twice its memory (DLRover
    §4.2's remedy for one node), or None if none was killed. Scripted policies (tests,
    benchmarks) run it before their script; DLRover's policy has its own (§4.2 whole)."""
    for event in obs.events:
        if event.kind == EventKind.OOM_KILLED:
            node = obs.shape.node(event.node)
            return memory_doubled_after_oom(obs.shape, {node.name: node.resources.memory_bytes},
                                            None, by="script")  # fmt: skip
    return None
