"""Branch and bound over the configurations of one set of instance types (beyond Srift §4.4).

Srift enumerates ``counts[]`` and ``batches[]`` and simulates what it must; on
a catalog of 38 GPU types that enumeration alone outlasts any solving budget.
Here a configuration is built one instance type at a time, and a branch is
dropped as soon as no configuration completing it can meet the deadline or the
budget, or beat the k-th best plan found so far. The bounds are exact lower
bounds, so the search stays exact. Each slot (a type's VM count and batch)
commits a configuration to at least:

- its compute time ``s``: the mean over iterations of the slowest of its VMs.
  The configuration's step takes at least the mean of the slowest VM of all
  slots (exchange only adds, see ``Estimator.bound_plan``), which is at least
  each slot's own mean (the mean of a maximum is at least the maximum of the means);
- its price ``p`` (the slot's VMs);
- ``s × p``: each VM is paid for the whole job, which lasts at least as long as
  that VM's own compute.

- its VMs: a step also takes at least the exchange of ``n`` VMs at the full
  capacity of the configuration's link (``Estimator.exchange_floor_s``; the
  link is the slowest of its types', the gradients the smallest), and more VMs
  never exchange faster than this bound for fewer allows (it is taken as the
  least over every larger count too).

So with ``T0`` the shortest startup and ``N`` the iterations, a configuration
takes at least ``T = T0 + N·max(max(s), exchange(Σn))`` and costs at least
``max(T·Σp, T0·Σp + N·Σ(s·p)) / 3600``. For the types not chosen yet, the
least ``max(s)``, ``Σp``, ``Σ(s·p)`` and ``Σn`` of their configurations that
take exactly the samples left stand in for their slots; these are worked out
once per run of types (eager mode's subsets share their last types) and the
choices of a type are weighed together, as arrays: a search over a whole
catalog weighs a few hundred thousand.

A slot that alone misses the deadline or the budget is dropped from its type's
choices before any search.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from rightsize.core.spec import Objective
from rightsize.perf.comm import Link
from rightsize.planning.estimate import DDP_PROBE, Estimator
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import Config, Slot

#: Bounds are shrunk by this much before comparing, so that floating-point rounding in a
#: bound never drops a configuration whose prediction equals the limit.
ROUNDING = 1e-9


class Choices(NamedTuple):
    """A type's slot choices, one array per attribute.

    Attributes:
        batch, count: the per-VM batch and the number of VMs.
        samples: ``batch × count``.
        seconds: mean over iterations of the slowest of the ``count`` VMs' compute.
        price_per_hour: the ``count`` VMs' hourly price together.
        usd_s: ``seconds × price_per_hour``, what the slot's compute costs ($/h × s).
    """

    batch: np.ndarray
    count: np.ndarray
    samples: np.ndarray
    seconds: np.ndarray
    price_per_hour: np.ndarray
    usd_s: np.ndarray

    def take(self, keep: np.ndarray) -> Choices:
        return Choices(*(column[keep] for column in self))


@dataclass(frozen=True)
class TypeTable:
    """One instance type's slot choices.

    Attributes:
        choices: every (batch, count) with ``count <= count_limit``, at most the global
            batch, and neither missing the deadline nor the budget alone.
        by_samples: indices into ``choices`` by how many samples the choice takes.
        link, gradient_bytes: what its VMs exchange, and over what.
    """

    name: str
    choices: Choices
    by_samples: dict[int, np.ndarray]
    link: Link
    gradient_bytes: int

    def slot(self, i: int) -> Slot:
        return Slot(self.name, int(self.choices.count[i]), int(self.choices.batch[i]))


def type_table(option: InstanceOption, estimator: Estimator, bounds: Bounds,
               count_limit: int | None = None) -> TypeTable | None:  # fmt: skip
    """The slot choices of ``option`` that fit the global batch and that a configuration
    meeting the deadline and the budget could hold (``None`` if there are none)."""
    limit = min(option.cap, count_limit or option.cap)
    global_batch = estimator.request.global_batch
    rows = []
    for batch in option.batches(global_batch=global_batch):
        seconds = estimator.slowest_vm_s(option.name, batch)
        rows += [(batch, count, seconds[count - 1])
                 for count in range(1, limit + 1) if batch * count <= global_batch]  # fmt: skip
    if not rows:
        return None
    batch, count, seconds = (np.array(column) for column in zip(*rows, strict=True))
    price = option.price_per_hour * count
    choices = Choices(batch, count, batch * count, seconds, price, seconds * price)
    choices = choices.take(bounds.allowed(choices))
    if not len(choices.batch):
        return None
    by_samples = {int(s): np.flatnonzero(choices.samples == s) for s in np.unique(choices.samples)}
    return TypeTable(option.name, choices, by_samples, option.link, option.gradient_bytes)


class Partial(NamedTuple):
    """What some slots commit a configuration to: the largest compute bound, the price,
    Σ seconds × price and the VMs (module docstring). Also the least of these for given
    samples, and arrays of candidates."""

    seconds: float | np.ndarray = 0.0
    price_per_hour: float | np.ndarray = 0.0
    usd_s: float | np.ndarray = 0.0
    vms: int | np.ndarray = 0

    def add(self, choices: Choices, i: int) -> Partial:
        return Partial(max(self.seconds, float(choices.seconds[i])),
                       self.price_per_hour + float(choices.price_per_hour[i]),
                       self.usd_s + float(choices.usd_s[i]),
                       self.vms + int(choices.count[i]))  # fmt: skip

    @classmethod
    def of(cls, choices: Choices, keep: np.ndarray | slice = slice(None)) -> Partial:
        """The ``choices`` (those ``keep`` selects) as arrays of candidates."""
        return cls(choices.seconds[keep], choices.price_per_hour[keep], choices.usd_s[keep],
                   choices.count[keep])  # fmt: skip


class Bounds:
    """Lower bounds on the time, cost and objective of configurations (module docstring)."""

    def __init__(self, estimator: Estimator) -> None:
        request = estimator.request
        self.iterations, self.objective = request.iterations, request.objective
        self.startup_s = request.restart_s  # launching adds to it; nothing subtracts
        self.deadline_s = request.constraints.deadline_s
        self.budget_usd = request.constraints.budget_usd
        # a step the DDP probe predicts has no exchange of its own to bound
        self._estimator = None if request.exchange == DDP_PROBE else estimator
        self._floors: dict[tuple, np.ndarray] = {}

    def allowed(self, choices: Choices) -> np.ndarray:
        """Which choices a configuration meeting the deadline and the budget could hold."""
        return self.keeps(Partial.of(choices), limit=np.inf)

    def exchange_floors(self, tables: Sequence[TypeTable], most: int) -> np.ndarray:
        """``[n]``: the least exchange of a configuration of ``tables`` with ``n`` VMs or more,
        ``n`` up to ``most``."""
        rated = min(t.link.rated_gbps for t in tables)
        links = {t.link.name: t.link for t in tables if t.link.rated_gbps == rated}
        grads = min(t.gradient_bytes for t in tables)
        key = (*sorted(links), grads, most)
        if key not in self._floors:
            estimator = self._estimator
            floors = [min(estimator.exchange_floor_s(n, link, grads) for link in links.values())
                      if estimator else 0.0 for n in range(most + 1)]  # fmt: skip
            self._floors[key] = np.minimum.accumulate(np.array(floors)[::-1])[::-1]
        return self._floors[key]

    def keeps(self, *parts: Partial, limit: float, floors: np.ndarray | None = None) -> np.ndarray:
        """Elementwise, whether configurations committed to all of ``parts`` (scalars, or
        arrays of candidates) could meet the deadline and the budget with an objective
        within ``limit``; ``floors`` bounds their exchange by their VMs."""
        seconds = functools.reduce(np.maximum, (p.seconds for p in parts))
        if floors is not None:
            vms = sum(p.vms for p in parts)
            seconds = np.maximum(seconds, floors[np.asarray(vms, dtype=int)])
        price = sum(p.price_per_hour for p in parts)
        usd_s = sum(p.usd_s for p in parts)
        time = self.startup_s + self.iterations * seconds
        cost = np.maximum(time * price, self.startup_s * price + self.iterations * usd_s) / 3600
        time, cost = time * (1 - ROUNDING), cost * (1 - ROUNDING)
        fails = (time if self.objective == Objective.TIME else cost) > limit
        if self.deadline_s is not None:
            fails = fails | (time > self.deadline_s)
        if self.budget_usd is not None:
            fails = fails | (cost > self.budget_usd)
        return ~fails


class Least(NamedTuple):
    """For each sample total a run of types can take (each type with at least one VM),
    the least commitments of its configurations that take exactly that total."""

    totals: np.ndarray  # sorted
    least: Partial  # arrays aligned with ``totals``

    def at(self, samples: np.ndarray) -> tuple[np.ndarray, Partial]:
        """Which ``samples`` are totals, and the least commitments there (junk elsewhere)."""
        where = np.minimum(np.searchsorted(self.totals, samples), len(self.totals) - 1)
        found = self.totals[where] == samples
        return found, Partial(*(column[where] for column in self.least))


class Brancher:
    """Branch and bound over the configurations of one set of types at a time, for one search.

    The types are chosen in order: a branch per surviving choice of each type but the
    last two, whose choices are paired at once (all pairs that take exactly the samples
    left), so that the innermost work is done on arrays.
    """

    def __init__(self, bounds: Bounds, global_batch: int, most_vms: int) -> None:
        """``most_vms``: the most VMs a configuration of the search may have."""
        self.bounds, self.global_batch, self.most_vms = bounds, global_batch, most_vms
        self._least: dict[tuple[str, ...], Least] = {}

    def configs(self, tables: Sequence[TypeTable], limit: float) -> Iterator[Config]:
        """Every configuration using all of ``tables`` that no bound cuts.

        ``limit`` is the objective value to beat (the k-th best so far, with the tie tolerance).
        """
        space = _Space(tables, limit, self.bounds.exchange_floors(tables, self.most_vms))
        yield from self._branch(space, 0, self.global_batch, Partial(), ())

    def least(self, tables: Sequence[TypeTable]) -> Least:
        """:class:`Least` of ``tables``, up to the global batch (total 0 for no type)."""
        key = tuple(t.name for t in tables)
        if key not in self._least:
            if not tables:
                self._least[key] = Least(np.array([0]), Partial(*np.zeros((4, 1), dtype=int)))
            else:
                self._least[key] = self._widen(tables[0].choices, self.least(tables[1:]))
        return self._least[key]

    def _widen(self, choices: Choices, rest: Least) -> Least:
        totals = choices.samples[:, None] + rest.totals[None, :]
        fits = totals <= self.global_batch
        one, other = Partial.of(choices), rest.least
        columns = (np.maximum(one.seconds[:, None], other.seconds[None, :]),
                   one.price_per_hour[:, None] + other.price_per_hour[None, :],
                   one.usd_s[:, None] + other.usd_s[None, :],
                   one.vms[:, None] + other.vms[None, :])  # fmt: skip
        order = np.argsort(totals[fits], kind="stable")
        ordered = totals[fits][order]
        unique, starts = np.unique(ordered, return_index=True)
        least = (np.minimum.reduceat(column[fits][order], starts) for column in columns)
        return Least(unique, Partial(*least))

    def _branch(self, space: _Space, index, left, partial, slots) -> Iterator[Config]:
        tables = space.tables
        table = tables[index]
        if index == len(tables) - 1:  # one type: it takes exactly what is left
            for i in self._last(space, partial, table, left):
                yield Config((*slots, table.slot(i)))
            return
        if index == len(tables) - 2:
            for i, j in self._pairs(space, partial, table, tables[-1], left):
                yield Config(tuple(sorted((*slots, table.slot(i), tables[-1].slot(j)))))
            return
        least = self.least(tables[index + 1 :])
        if not len(least.totals):
            return  # the types after this one cannot take any total together
        c = table.choices
        after = left - c.samples
        found, rest = least.at(after)
        keep = found & self._keeps(space, partial, Partial.of(c), rest)
        for i in np.flatnonzero(keep):
            yield from self._branch(space, index + 1, int(after[i]), partial.add(c, i),
                                    (*slots, table.slot(i)))  # fmt: skip

    def _last(self, space: _Space, partial: Partial, table: TypeTable, left: int) -> np.ndarray:
        exact = table.by_samples.get(left, np.array([], dtype=int))
        return exact[self._keeps(space, partial, Partial.of(table.choices, exact))]

    def _pairs(self, space: _Space, partial, first: TypeTable, last: TypeTable, left: int):
        """(i, j) for every choice i of ``first`` and j of ``last`` that together take
        exactly ``left`` samples and survive the bounds."""
        a, b = first.choices, last.choices
        i, j = np.nonzero(a.samples[:, None] + b.samples[None, :] == left)
        keep = self._keeps(space, partial, Partial.of(a, i), Partial.of(b, j))
        return zip(i[keep].tolist(), j[keep].tolist(), strict=True)

    def _keeps(self, space: _Space, *parts: Partial) -> np.ndarray:
        return self.bounds.keeps(*parts, limit=space.limit, floors=space.floors)


class _Space(NamedTuple):
    """One set of types being searched: the limit to beat and their exchange floors."""

    tables: Sequence[TypeTable]
    limit: float
    floors: np.ndarray
