"""Shapes the policies launch with, and the budget check they share.

``one_ps_two_workers`` is NEARCHUS's starting DT-config ``(1, 2, R/3, 2R/3)``
(§IV); ``fixed_node_shape`` is the layout Optimus and FA-BF use, every node the
same size (5 vCPU in NEARCHUS §V).
"""

from __future__ import annotations

from rightsize.core.errors import ResourceError
from rightsize.core.resources import CPU_DECIMALS, Resources
from rightsize.core.shape import ClusterShape, DTConfig
from rightsize.scaling.api import Observation

MILLICORE = 10**-CPU_DECIMALS


def one_ps_two_workers(total: Resources) -> ClusterShape:
    """``total`` split as (1 PS, 2 workers) with a third and two thirds: NEARCHUS's DT-config."""
    return ClusterShape.from_dt_config(DTConfig(1, 2, total.scaled(1 / 3), total.scaled(2 / 3)))


def fixed_node_shape(n_ps: int, n_workers: int, node: Resources) -> ClusterShape:
    """``n_ps`` PS and ``n_workers`` workers, each holding ``node``."""
    return ClusterShape.from_counts(n_ps, n_workers, node, node)


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
    """The job's headroom less one millicore per node, which rounding each node may add."""
    head = obs.headroom
    return Resources(max(0.0, head.cpu_cores - nodes * MILLICORE), head.memory_bytes, head.gpus)


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
