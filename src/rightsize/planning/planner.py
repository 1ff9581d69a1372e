"""One call from "profiles, instances, request" to ranked plans with the baselines beside them.

The seam SkyPilot keeps between estimating and solving is kept here too:
:func:`build_options` turns catalog rows into plannable options (compute,
memory, price, availability), the :class:`Estimator` predicts, ``search``
solves, and the front doors only format what :func:`plan` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rightsize.core.catalog import Catalog
from rightsize.core.errors import SpecError
from rightsize.core.limits import INSTANCES
from rightsize.perf.comm import CommModel
from rightsize.planning.baselines import cap_plan, tap_plan
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.options import (
    DEFAULT_DEVICE,
    DeviceChoice,
    InstanceOption,
    make_option,
)
from rightsize.planning.plan import CloudPlan
from rightsize.planning.search import SearchMode, SearchSettings, search
from rightsize.profiling.profile import Profile

DEFAULT_CAP = 16  # VMs of one type assumed available when the user gives no availability
EXHAUSTIVE_MAX_TYPES = 4  # auto mode searches exhaustively up to this many instance types


@dataclass(frozen=True)
class PlanResult:
    plans: list[CloudPlan]
    baselines: list[CloudPlan]
    mode: SearchMode


def parse_instances(text: str, catalog: Catalog, flag: str = "--instances") -> dict[str, int]:
    """``"g4dn.8xlarge:16,g3.8xlarge"`` -> availability per type (``DEFAULT_CAP`` when omitted).

    Raises:
        UnknownNameError: an instance type the catalog does not have.
        SpecError: a count that is not a whole number from 1 to ``MAX_INSTANCES``, or a list
            of only commas.
    """
    caps: dict[str, int] = {}
    items = [part.strip() for part in text.split(",") if part.strip()]
    if text.strip() and not items:
        raise SpecError(f"{flag} {text!r} names no instance type; e.g. g4dn.8xlarge:4")
    for item in items:
        name, _, count = item.partition(":")
        catalog.get(name)
        try:
            caps[name] = int(count) if count else DEFAULT_CAP
        except ValueError:
            raise SpecError(
                f"{flag} {item!r}: the count after ':' must be a whole number"
            ) from None
        if caps[name] < 1:
            raise SpecError(f"{flag} {item!r}: the count must be at least 1")
        INSTANCES.check(caps[name], f"{flag} {item!r}: count")
    return caps


def build_options(profiles: Sequence[Profile], catalog: Catalog, caps: dict[str, int],
                  spot: bool, region: str | None = None,
                  device: DeviceChoice = DEFAULT_DEVICE) -> list[InstanceOption]:  # fmt: skip
    """Plannable options for the given instance types (all GPU types of the catalog if none)."""
    if not caps:
        rows = catalog.filter(gpus_only=True, region=region or main_region(catalog))
        caps = {i.name: DEFAULT_CAP for i in rows}
    options, shared = [], {}
    for name, cap in caps.items():
        instance = catalog.get(name, region) if region else catalog.get(name)
        if spot and instance.spot_price_usd_per_hour is None:
            continue  # a type without a spot market cannot be rented as spot
        options.append(make_option(profiles, instance, cap, spot, device, shared))
    if not options:
        raise SpecError(
            "no instance type is left to plan with (with --spot, none has a spot price)"
        )
    return options


def main_region(catalog: Catalog) -> str:
    """The region most of the catalog's rows are in (where "every GPU type" is planned)."""
    regions = [i.region for i in catalog]
    return max(set(regions), key=regions.count)


def plan(options: Sequence[InstanceOption], comm: CommModel, request: PlanRequest,
         mode: SearchMode | str = "auto", top: int = 5) -> PlanResult:  # fmt: skip
    """Srift's search over ``options`` (exhaustive when few types, else eager) and CAP/TAP beside it."""
    if request.global_batch < 1 or request.iterations < 1:
        raise SpecError("the global batch and the number of iterations must be at least 1")
    # A budget is the whole job's: one below an instance-hour is fine when the job costs less
    # (billing is per second, as plan.total_cost computes it); the search says when no plan fits.
    if mode == "auto":
        mode = SearchMode.EXHAUSTIVE if len(options) <= EXHAUSTIVE_MAX_TYPES else SearchMode.EAGER
    settings = SearchSettings(mode=mode, top=top)  # an unknown mode is refused here
    estimator = Estimator({o.name: o for o in options}, comm, request)
    plans = search(options, estimator, settings)
    baselines = [p for p in (cap_plan(options, estimator), tap_plan(options, estimator)) if p]
    return PlanResult(plans, baselines, settings.mode)


def best_single_type(options: Sequence[InstanceOption], comm: CommModel,
                     request: PlanRequest) -> CloudPlan:  # fmt: skip
    """The best plan whose VMs are all of one type: what one SkyPilot task can launch.

    Each type alone is a small space (counts times batches), so it is searched
    exhaustively, whatever mode found the best plan overall.

    Raises:
        InfeasiblePlanError: no single-type configuration meets the constraints.
    """
    estimator = Estimator({o.name: o for o in options}, comm, request)
    return search(options, estimator, SearchSettings(mode=SearchMode.EXHAUSTIVE, top=1, max_types=1))[0]
