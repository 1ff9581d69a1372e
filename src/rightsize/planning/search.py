"""Srift's optimizer (§4.4): the configuration that minimises cost or time under a deadline and budget.

Minimise ``N·t_iter·Σ counts[i]·P[i]`` (cost) or ``N·t_iter`` (time) subject to
``Σ batches[i]·counts[i] = B_global``, ``counts[i] <= CAPS[i]``, and the
deadline and/or budget. The search space is pruned as Srift prunes it: per-VM
batches are powers of two from a saturating batch up to B_max (insight 1), all
VMs of a type share one batch (insight 2), and among equally good plans fewer
instance types win, then larger instances (insights 3 and 4). On top of that a
compute-only lower bound (exchange taken as free) orders the candidates and
cuts off the ones that cannot beat the k-th best plan, so the exhaustive mode
simulates few of them and stays exact.

``eager`` mode (Srift's best-effort heuristic for large catalogs) ranks
instance types by preference and widens heterogeneity type by type — first
every configuration of the best type alone, then those adding the second type,
and so on, with at most ``eager_k`` VMs of a type — until its solving-time
budget runs out, returning the best plans found so far.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from rightsize.core.errors import RightsizeError
from rightsize.core.spec import Constraints, Objective
from rightsize.core.units import format_duration, format_money
from rightsize.planning.estimate import Estimator
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config, Slot

MAX_TYPES = 3  # instance types in one configuration (Srift's largest case uses three)
EAGER_K = 8  # Srift's K: VMs of one type tried before widening to the next type
EAGER_BUDGET_S = 1.0  # Srift §5.4 gives its solver 1 s
TIE_TOLERANCE = 0.01  # plans within 1% count as equally good; then simpler and larger win


class InfeasiblePlanError(RightsizeError, ValueError):
    """No configuration meets the constraints; the message names the closest one."""


@dataclass(frozen=True)
class SearchSettings:
    mode: str = "exhaustive"  # or "eager"
    top: int = 5
    max_types: int = MAX_TYPES
    eager_k: int = EAGER_K
    eager_budget_s: float = EAGER_BUDGET_S


def configurations(options: Sequence[InstanceOption], global_batch: int, max_types: int,
                   count_limit: int | None = None) -> Iterator[Config]:  # fmt: skip
    """Every config over ``options`` with ``Σ batch·count = global_batch`` and counts within caps."""
    choices = [
        [(b, c) for b in o.batches() for c in range(1, min(o.cap, count_limit or o.cap) + 1)
         if b * c <= global_batch]
        for o in options
    ]  # fmt: skip
    for size in range(1, max_types + 1):
        for chosen in itertools.combinations(range(len(options)), size):
            yield from _fill(options, choices, chosen, global_batch)


def _fill(options, choices, chosen, remaining, slots=()) -> Iterator[Config]:
    index, rest = chosen[0], chosen[1:]
    for batch, count in choices[index]:
        left = remaining - batch * count
        slot = Slot(options[index].name, count, batch)
        if not rest and left == 0:
            yield Config(tuple(sorted(slots + (slot,))))
        elif rest and left > 0:
            yield from _fill(options, choices, rest, left, slots + (slot,))


def _preference(plan: CloudPlan, options: dict[str, InstanceOption], objective: Objective) -> tuple:
    """Among equally good plans: fewer instance types (Srift insight 3), then the better on
    the other objective, then larger instances (insight 4)."""
    size = sum(
        options[s.instance].devices * 1000 + options[s.instance].instance.vcpus
        for s in plan.config.slots
    )
    other = plan.total_cost if objective == Objective.TIME else plan.total_seconds
    return (len(plan.config.slots), other, -size)


class _Best:
    """The k best feasible plans so far, by objective."""

    def __init__(self, estimator: Estimator, k: int) -> None:
        self.estimator, self.k = estimator, k
        self.plans: list[tuple[float, CloudPlan]] = []

    def bound(self) -> float:
        return self.plans[-1][0] if len(self.plans) >= self.k else float("inf")

    def offer(self, configs: Iterable[Config], deadline: float = math.inf) -> bool:
        """Simulate in lower-bound order; stop once the bound exceeds the k-th best.

        Returns False when ``deadline`` (a ``time.perf_counter`` value) passed first.
        """
        estimator = self.estimator
        ordered = sorted((estimator.lower_bound(c), i, c) for i, c in enumerate(configs))
        for bound, _, config in ordered:
            if bound > self.bound() * (1 + TIE_TOLERANCE):
                break
            if time.perf_counter() > deadline:
                return False
            plan = estimator.estimate(config)
            if estimator.feasible(plan):
                value = estimator.objective_value(plan.seconds_per_iter, config)
                self.plans = heapq.nsmallest(
                    self.k, self.plans + [(value, plan)], key=lambda p: p[0]
                )
        return True


def search(options: Sequence[InstanceOption], estimator: Estimator,
           settings: SearchSettings = SearchSettings()) -> list[CloudPlan]:  # fmt: skip
    """The best plans, best first.

    Raises:
        InfeasiblePlanError: no configuration meets the constraints (the message
            names the fastest or cheapest one and what it misses by).
    """
    best = _Best(estimator, settings.top)
    global_batch = estimator.request.global_batch
    if settings.mode == "eager":
        _eager(options, estimator, settings, best)
    else:
        best.offer(configurations(options, global_batch, settings.max_types))
    if not best.plans:
        limits = estimator.request.constraints
        if limits.deadline_s is None and limits.budget_usd is None:
            raise InfeasiblePlanError(_no_configuration(options, estimator.request.global_batch))
        raise InfeasiblePlanError(_closest(options, estimator, settings))
    by_name = {o.name: o for o in options}
    return _rank_ties([plan for _, plan in best.plans], estimator, by_name)


def _rank_ties(plans: list[CloudPlan], estimator: Estimator, options) -> list[CloudPlan]:
    def key(plan: CloudPlan) -> tuple:
        value = estimator.objective_value(plan.seconds_per_iter, plan.config)
        best = estimator.objective_value(plans[0].seconds_per_iter, plans[0].config)
        tied = value <= best * (1 + TIE_TOLERANCE)
        preference = _preference(plan, options, estimator.request.objective) if tied else ()
        return (0 if tied else 1, preference, value)

    return sorted(plans, key=key)


def rank_instances(options: Sequence[InstanceOption], objective: Objective) -> list[InstanceOption]:
    """Preference order for eager mode: samples/s at B_max (time), or samples per dollar (cost)."""

    def speed(o: InstanceOption) -> float:
        return o.bmax / o.vm_compute(o.bmax).total_s

    key: Callable[[InstanceOption], float] = (
        speed if objective == Objective.TIME else (lambda o: speed(o) / o.price_per_hour)
    )
    return sorted(options, key=key, reverse=True)


def _eager(options, estimator: Estimator, settings: SearchSettings, best: _Best) -> None:
    ranked = rank_instances(options, estimator.request.objective)
    deadline = time.perf_counter() + settings.eager_budget_s
    global_batch = estimator.request.global_batch
    for newest in range(len(ranked)):
        for size in range(1, min(settings.max_types, newest + 1) + 1):
            for others in itertools.combinations(range(newest), size - 1):
                subset = [ranked[i] for i in (*others, newest)]
                configs = configurations(subset, global_batch, size, settings.eager_k)
                if not best.offer((c for c in configs if len(c.slots) == size), deadline):
                    return


def _closest(options, estimator: Estimator, settings: SearchSettings) -> str:
    """Describe the plan that comes nearest to the violated constraint."""
    limits = estimator.request.constraints
    one = replace(settings, top=1)
    try:
        fastest = search(options, _unconstrained(estimator, Objective.TIME), one)[0]
        cheapest = search(options, _unconstrained(estimator, Objective.COST), one)[0]
    except InfeasiblePlanError as exc:
        return str(exc)
    if limits.deadline_s is not None and fastest.total_seconds > limits.deadline_s:
        return (
            f"deadline {format_duration(limits.deadline_s)} cannot be met: the fastest plan, "
            f"{fastest.config}, takes {format_duration(fastest.total_seconds)} "
            f"(costs {format_money(fastest.total_cost)}); relax the deadline or allow more instances"
        )
    if limits.budget_usd is not None and cheapest.total_cost > limits.budget_usd:
        return (
            f"budget {format_money(limits.budget_usd)} is too small: the cheapest plan, "
            f"{cheapest.config}, costs {format_money(cheapest.total_cost)} "
            f"(takes {format_duration(cheapest.total_seconds)}); raise the budget"
        )
    return (
        "no single plan meets both the deadline and the budget: the fastest, "
        f"{fastest.config}, takes {format_duration(fastest.total_seconds)} for "
        f"{format_money(fastest.total_cost)}; the cheapest, {cheapest.config}, takes "
        f"{format_duration(cheapest.total_seconds)} for {format_money(cheapest.total_cost)}"
    )


def _no_configuration(options: Sequence[InstanceOption], global_batch: int) -> str:
    step = min(min(o.batches() or [o.bmax]) for o in options)
    nearest = max(step, round(global_batch / step) * step)
    return (
        f"no configuration adds up to global batch {global_batch}: per-VM batches are powers of "
        f"two from the saturating batch up to B_max, at most the available VMs of each type; use a "
        f"multiple of {step} such as {nearest}, or allow more instances"
    )


def _unconstrained(estimator: Estimator, objective: Objective) -> Estimator:
    request = replace(estimator.request, constraints=Constraints(), objective=objective)
    return Estimator(estimator.options, estimator.comm, request)
