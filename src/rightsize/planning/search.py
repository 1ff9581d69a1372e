"""Srift's optimizer (§4.4): the configuration that minimises cost or time under a deadline and budget.

Minimise ``N·t_iter·Σ counts[i]·P[i]`` (cost) or ``N·t_iter`` (time) subject to
``Σ batches[i]·counts[i] = B_global``, ``counts[i] <= CAPS[i]``, and the
deadline and/or budget. The search space is pruned as Srift prunes it: per-VM
batches are powers of two from a saturating batch up to B_max (insight 1; beyond
Srift, a global batch that is not a power of two also gets its equal shares), all
VMs of a type share one batch (insight 2), and among equally good plans fewer
instance types win, then larger instances (insights 3 and 4). On top of that,
beyond Srift, the configurations of each subset of types are built by branch
and bound (bounds.py), so that no branch that cannot meet the constraints or
beat the k-th best plan is enumerated, and the ones left are predicted in the
order of a lower bound (``Estimator.bound_plan``) until it passes the k-th
best: the search stays exact and simulates few configurations.

``eager`` mode (Srift's best-effort heuristic for large catalogs) ranks
instance types by preference and widens heterogeneity type by type — the
configurations of each type alone first (beyond Srift, all of them before any
mix: they are few and set the bar every mix must pass), then the mixes of the
first two types, then those adding the third, and so on, with at most
``eager_k`` VMs of a type — until its solving-time budget runs out, returning
the best plans found so far. The budget is read from the clock ``search`` is
given, before every subset, every candidate and every prediction.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from rightsize.core.errors import RightsizeError, choose
from rightsize.core.spec import Constraints, Objective
from rightsize.core.units import format_duration, format_money
from rightsize.planning.bounds import Bounds, Brancher, TypeTable, type_table
from rightsize.planning.estimate import Estimator
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config, Slot

MAX_TYPES = 3  # instance types in one configuration (Srift's largest case uses three)
EAGER_K = 8  # Srift's K: VMs of one type tried before widening to the next type
EAGER_BUDGET_S = 1.0  # Srift §5.4 gives its solver 1 s
TIE_TOLERANCE = 0.01  # plans within 1% count as equally good; then simpler and larger win


class InfeasiblePlanError(RightsizeError, ValueError):
    """No configuration meets the constraints; the message names the closest one."""


class SearchMode(StrEnum):
    """How the search visits configurations: every one (``exhaustive``), or Srift's
    best-effort heuristic for large catalogs (``eager``), which stops when its time is up."""

    EXHAUSTIVE = "exhaustive"
    EAGER = "eager"


@dataclass(frozen=True)
class SearchSettings:
    mode: SearchMode = SearchMode.EXHAUSTIVE
    top: int = 5
    max_types: int = MAX_TYPES
    eager_k: int = EAGER_K
    eager_budget_s: float = EAGER_BUDGET_S

    def __post_init__(self) -> None:  # an unknown mode is refused, never run as exhaustive
        object.__setattr__(self, "mode", choose(SearchMode, self.mode, "search mode", "mode"))


def configurations(options: Sequence[InstanceOption], global_batch: int, max_types: int,
                   count_limit: int | None = None) -> Iterator[Config]:  # fmt: skip
    """Every config over ``options`` with ``Σ batch·count = global_batch`` and counts within caps."""
    choices = [
        [(b, c) for b in o.batches(global_batch=global_batch)
         for c in range(1, min(o.cap, count_limit or o.cap) + 1)
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


class Budget:
    """Solving time left, read from a clock the caller passes in (eager mode's promise).

    An unlimited budget never reads its clock.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds, self._clock = seconds, clock
        self._end = clock() + seconds if math.isfinite(seconds) else math.inf

    def spent(self) -> bool:
        return self._end != math.inf and self._clock() > self._end


class _Best:
    """The k best feasible plans so far, by objective."""

    def __init__(self, estimator: Estimator, k: int) -> None:
        self.estimator, self.k = estimator, k
        self.plans: list[tuple[float, CloudPlan]] = []

    def limit(self) -> float:
        """The objective a configuration must reach to matter: the k-th best, give or take a tie."""
        return self.plans[-1][0] * (1 + TIE_TOLERANCE) if len(self.plans) >= self.k else math.inf

    def offer(self, configs: Iterable[Config], budget: Budget) -> bool:
        """Simulate in the order of their bound plans, those that can meet the constraints;
        stop once the bound exceeds the k-th best.

        Returns False when the budget ran out first (while reading ``configs`` or simulating).
        """
        estimator, bounded = self.estimator, []
        for i, config in enumerate(configs):
            if budget.spent():
                return False
            floor = estimator.bound_plan(config)
            if estimator.feasible(floor):  # else neither is the prediction
                value = estimator.objective_value(floor.seconds_per_iter, config)
                bounded.append((value, i, config))
        for bound, _, config in sorted(bounded):
            if bound > self.limit():
                break
            if budget.spent():
                return False
            plan = estimator.estimate(config)
            if estimator.feasible(plan):
                value = estimator.objective_value(plan.seconds_per_iter, config)
                self.plans = heapq.nsmallest(
                    self.k, self.plans + [(value, plan)], key=lambda p: p[0]
                )
        return True


def search(options: Sequence[InstanceOption], estimator: Estimator,
           settings: SearchSettings = SearchSettings(),
           clock: Callable[[], float] = time.perf_counter) -> list[CloudPlan]:  # fmt: skip
    """The best plans, best first; eager mode stops when ``settings.eager_budget_s`` of
    ``clock`` has passed and returns the best found by then.

    Raises:
        InfeasiblePlanError: no configuration meets the constraints (the message
            names the fastest or cheapest one and what it misses by), or eager mode
            found none within its budget.
    """
    eager = settings.mode is SearchMode.EAGER
    budget = Budget(settings.eager_budget_s if eager else math.inf, clock)
    plans = _solve(options, estimator, settings, budget)
    if not plans:
        raise InfeasiblePlanError(_why_none(options, estimator, settings, budget))
    by_name = {o.name: o for o in options}
    return _rank_ties(plans, estimator, by_name)


def _solve(
    options, estimator: Estimator, settings: SearchSettings, budget: Budget
) -> list[CloudPlan]:
    """The k best plans found (unordered by preference), over every subset the mode visits."""
    best = _Best(estimator, settings.top)
    ranked = rank_instances(options, estimator.request.objective)
    eager = settings.mode is SearchMode.EAGER
    count_limit = settings.eager_k if eager else None
    global_batch = estimator.request.global_batch
    bounds = Bounds(estimator)

    @functools.cache
    def table(i: int) -> TypeTable | None:
        # made when a subset first needs it: eager mode's budget starts on the best type
        return type_table(ranked[i], estimator, bounds, count_limit)

    most_vms = settings.max_types * max(min(o.cap, count_limit or o.cap) for o in options)
    brancher = Brancher(bounds, global_batch, most_vms)
    subsets = _widening if eager else _by_size
    for subset in subsets(len(ranked), settings.max_types):
        if budget.spent():
            break
        chosen = [table(i) for i in subset]
        if any(table is None for table in chosen):
            continue  # a type with no batch that fits cannot be part of any configuration
        if not best.offer(brancher.configs(chosen, best.limit()), budget):
            break
    return [plan for _, plan in best.plans]


def _by_size(types: int, max_types: int) -> Iterator[tuple[int, ...]]:
    """Every subset of up to ``max_types`` types, homogeneous first (Srift's insight 3)."""
    for size in range(1, max_types + 1):
        yield from itertools.combinations(range(types), size)


def _widening(types: int, max_types: int) -> Iterator[tuple[int, ...]]:
    """Eager mode's order: every type alone, best first (Srift's insight 3, and the bar every
    mix must pass), then the mixes widened type by type: those adding the second type to
    the first, then the third to the first two, and so on."""
    yield from ((i,) for i in range(types))
    for newest in range(1, types):
        for size in range(2, min(max_types, newest + 1) + 1):
            for others in itertools.combinations(range(newest), size - 1):
                yield (*others, newest)


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


def _why_none(options, estimator: Estimator, settings: SearchSettings, budget: Budget) -> str:
    limits = estimator.request.constraints
    if budget.spent():
        return _out_of_time(budget)
    if limits.deadline_s is None and limits.budget_usd is None:
        return _no_configuration(options, estimator.request.global_batch)
    return _closest(options, estimator, settings, budget)


def _out_of_time(budget: Budget) -> str:
    return (
        f"the eager search found no plan that meets the constraints within its {budget.seconds:g} s "
        "budget; relax the constraints, or search exhaustively (--mode exhaustive)"
    )


def _closest(options, estimator: Estimator, settings: SearchSettings, budget: Budget) -> str:
    """Describe the plan that comes nearest to the violated constraint (within what is left
    of the budget)."""
    limits = estimator.request.constraints
    one = replace(settings, top=1)
    fastest = _solve(options, _unconstrained(estimator, Objective.TIME), one, budget)
    cheapest = _solve(options, _unconstrained(estimator, Objective.COST), one, budget)
    if not (fastest and cheapest):
        return (
            _out_of_time(budget)
            if budget.spent()
            else _no_configuration(options, estimator.request.global_batch)
        )
    fastest, cheapest = fastest[0], cheapest[0]
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
    most = sum(o.cap * o.bmax for o in options)
    if global_batch > most:
        return (
            f"no configuration adds up to global batch {global_batch}: the allowed instances hold "
            f"at most {most} samples a step (each VM's B_max times the VMs of its type); lower "
            "the global batch or allow more instances"
        )
    # the nearest global batch that one type alone holds: a plan exists for it
    held = {count * batch for o in options for batch in o.batches() for count in range(1, o.cap + 1)}
    nearest = min(held, key=lambda b: (abs(b - global_batch), b), default=None)
    hint = f"use one such as {nearest}" if nearest else "use another"
    return (
        f"no configuration adds up to global batch {global_batch}: per-VM batches are powers of "
        f"two from the saturating batch up to B_max or equal shares of the global batch that fit "
        f"B_max and the VM's devices, at most the available VMs of each type; {hint}, or allow "
        "more instances"
    )


def _unconstrained(estimator: Estimator, objective: Objective) -> Estimator:
    request = replace(estimator.request, constraints=Constraints(), objective=objective)
    return Estimator(estimator.options, estimator.comm, request)
