"""Fixed allocation: the job keeps the shape it was given for its whole life (static, FA-BF).

``static`` is the baseline every adaptive policy is compared with, and what a
user gets who already knows the shape they want. Without a shape it launches
the whole budget as NEARCHUS's starting layout, one parameter server and two
workers sharing it 1:2 (NEARCHUS §IV's ``(1, 2, R/3, 2R/3)``, with R the full
budget).

``fa-bf`` is NEARCHUS §V's fixed-allocation brute force: the best (p, w) at a
fixed node size, found by an exhaustive search, used from the start.
"""

from __future__ import annotations

import math

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action, LaunchRequest, Observation, Plan, Policy, ShapeRecord
from rightsize.scaling.shapes import fixed_node_shape, node_of, one_ps_two_workers, require_budget

__all__ = ["FaBfPolicy", "StaticPolicy", "one_ps_two_workers"]


class StaticPolicy(Policy):
    """Keeps ``shape`` (or the whole budget as 1 PS + 2 workers) and never changes it."""

    name = "static"

    def __init__(self, shape: ClusterShape | None = None) -> None:
        self.shape = shape

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        shape = self.shape or one_ps_two_workers(budget)
        return shape if shape.total().fits_within(free) else None

    def decide(self, observation: Observation) -> Plan | None:
        return None

    def decision_due_s(self, observation: Observation) -> float:
        return math.inf  # a fixed allocation never changes


class FaBfPolicy(Policy):
    """Fixed-allocation brute force (NEARCHUS §V): the best (p, w) at a fixed node size, for good.

    FA-BF runs every (p, w) with ``p + w`` nodes of ``cores_per_node`` (5 vCPU)
    that fit the budget — an offline exhaustive search whose time is not
    counted — and launches the job with the fastest one, whole, from the start.
    It never changes it: "the best achievable performance by Optimus".
    :meth:`prior_shapes` lists the search; the mechanism measures it and passes
    the speeds back in ``LaunchRequest.prior``.
    """

    name = "fa-bf"

    def __init__(self, cores_per_node: float = 5.0) -> None:
        if cores_per_node <= 0:
            raise SpecError(f"fa-bf: cores_per_node={cores_per_node} must be > 0")
        self.cores_per_node = cores_per_node

    def max_nodes(self, budget: Resources) -> int:
        return int(budget.cpu_cores / self.cores_per_node + 1e-9)

    def prior_shapes(
        self, budget: Resources, node_limit: Resources | None = None
    ) -> tuple[ClusterShape, ...]:
        """Every (p, w), p and w at least 1, whose nodes fit the budget."""
        require_budget(self.name, budget, 2 * self.cores_per_node, "1 PS + 1 worker")
        node = node_of(budget, self.cores_per_node)
        return tuple(
            fixed_node_shape(p, n - p, node)
            for n in range(2, self.max_nodes(budget) + 1)
            for p in range(1, n)
        )

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        raise SpecError(
            "fa-bf needs the measured speed of every (p, w) shape (an exhaustive search); "
            "launch it through launch_plan with those speeds, or use 'static' with a shape"
        )

    def launch_plan(self, request: LaunchRequest) -> Plan | None:
        """The fastest searched shape within the budget, once the cluster can hold it whole.

        Raises:
            SpecError: no measured shapes were given.
        """
        best, searched = self.best(request.prior, request.budget)
        if best is None:
            return self.initial_shape(request.budget, request.free)
        if not best.shape.total().fits_within(request.free):
            return None
        return Plan(
            best.shape,
            Action.LAUNCH,
            f"fa-bf: fastest of {searched} searched shapes is ({best.shape.n_ps} ps, "
            f"{best.shape.n_workers} workers) at {best.steps_per_s:.3g} steps/s",
            {"searched": float(searched), "steps_per_s": best.steps_per_s},
        )

    def best(
        self, prior: tuple[ShapeRecord, ...], budget: Resources
    ) -> tuple[ShapeRecord | None, int]:
        """The fastest record of ``cores_per_node`` nodes within ``budget`` (fewest nodes on
        a tie; the first such record on an exact tie) and how many records qualified.
        Searched at every ask, in one pass without a key function: the simulator asks once per
        job launched, over a prior of about a hundred records, and a call per record cost more
        than the rest of a fixed allocation's simulation."""
        max_nodes, cores = self.max_nodes(budget), self.cores_per_node
        best, best_key, count = None, (0.0, 0), 0
        for record in prior:
            nodes = record.shape.nodes
            if nodes and len(nodes) <= max_nodes and abs(nodes[0].resources.cpu_cores - cores) < 1e-6:
                count += 1
                key = (record.steps_per_s, -len(nodes))
                if best is None or key > best_key:
                    best, best_key = record, key
        return best, count

    def decide(self, observation: Observation) -> Plan | None:
        return None

    def decision_due_s(self, observation: Observation) -> float:
        return math.inf  # a fixed allocation never changes
