"""Srift's plans and FC2's recommendations for one request: what `rightsize plan` prints and
what the service's submit page shows, computed in one place.

A :class:`Market` is where to plan (catalog, which types and how many, spot or not, the
device model); :func:`srift` searches it for allreduce configurations with the CAP and
TAP baselines beside them, with past runs' measured speeds in place of predictions for
the types they ran on (planning/measured.py); :func:`fc2` runs FC2's Cost-Opt,
Time-Opt and Scala-Opt (and Scala-Opt-M for a chosen worker type) for a
parameter-server cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rightsize.core.catalog import Catalog, InstanceType
from rightsize.perf.comm import CommModel
from rightsize.planning.estimate import PlanRequest
from rightsize.planning.fc2 import Fc2Planner, Fc2Request, choose_ps
from rightsize.planning.measured import HistoryFit, MeasuredSpeed, with_history
from rightsize.planning.options import DEFAULT_DEVICE, DeviceChoice, InstanceOption
from rightsize.planning.plan import CloudPlan
from rightsize.planning.planner import PlanResult, build_options, parse_instances, plan
from rightsize.profiling.profile import Profile

#: FC2's parameter-server candidates (Table 1).
FC2_PS_TYPES = "m4.large,m4.2xlarge,m4.10xlarge"
FC2_RECOMMENDERS = ("cost-opt", "time-opt", "scala-opt")


@dataclass(frozen=True)
class Market:
    """Where to plan.

    Attributes:
        catalog: the instance types and prices.
        caps: how many of each type may be used (empty: every GPU type, 16 each).
        spot: spot prices (types without one are left out).
        region: the region (None: the catalog's main one).
        device: how GPUs without a profile are predicted, and at which precision.
    """

    catalog: Catalog
    caps: dict[str, int] = field(default_factory=dict)
    spot: bool = False
    region: str | None = None
    device: DeviceChoice = DEFAULT_DEVICE

    @classmethod
    def of(cls, catalog: Catalog, instances: str = "", **fields) -> Market:
        """With availability parsed from ``"g4dn.8xlarge:16,g3.8xlarge"`` (planner's syntax).

        Raises:
            UnknownNameError: a type the catalog does not have.
            SpecError: a bad count.
        """
        return cls(catalog, parse_instances(instances, catalog), **fields)

    def options(self, profiles: Sequence[Profile]) -> list[InstanceOption]:
        return build_options(profiles, self.catalog, self.caps, self.spot, self.region,
                             self.device)  # fmt: skip

    def instance(self, name: str) -> InstanceType:
        return self.catalog.get(name, self.region) if self.region else self.catalog.get(name)


@dataclass(frozen=True)
class SriftRecommendation:
    """The search's plans and baselines, the options they were made from, and what they rest
    on that a user should know (runs measured in place of predictions, noisy profiles)."""

    result: PlanResult
    options: list[InstanceOption]
    notes: list[str]


def srift(profiles: Sequence[Profile], market: Market, request: PlanRequest, comm: CommModel,
          mode: str = "auto", top: int = 5, speeds: Sequence[MeasuredSpeed] = (),
          fit: HistoryFit = HistoryFit.INTERPOLATE) -> SriftRecommendation:  # fmt: skip
    """Srift's search (§4-5) over ``market`` for ``request``."""
    options = [with_history(option, list(speeds), fit) for option in market.options(profiles)]
    names = {option.name for option in options}
    notes = [f"{s.instance_type}: measured by run {s.run} ({s.samples_per_s:.4g} samples/s "
             f"at {s.vm_batch} samples per step on {s.cores:g} cores)"
             for s in speeds if s.instance_type in names]  # fmt: skip
    notes += [line for profile in profiles for line in profile.timing_warnings()]
    return SriftRecommendation(plan(options, comm, request, mode, top), options, notes)


@dataclass(frozen=True)
class Fc2Recommendation:
    """FC2's recommended clusters and the parameter server they share."""

    plans: list[CloudPlan]
    ps: InstanceType
    workers: list[InstanceOption]

    @property
    def header(self) -> str:
        return f"FC2 recommendations: parameter server {self.ps.name} ({self.ps.network_gbps:g} Gbps)"


def fc2(profiles: Sequence[Profile], market: Market, request: Fc2Request,
        ps_types: str = FC2_PS_TYPES, worker_type: str | None = None) -> Fc2Recommendation:  # fmt: skip
    """FC2's recommenders (§5.2) over ``market``'s worker types, the PS chosen from
    ``ps_types`` (Scala-Opt-M too when ``worker_type`` names one of the workers).

    Raises:
        UnknownNameError: a PS or worker type the catalog does not have.
        ResourceError: the budget pays for no worker.
    """
    if worker_type:
        market.catalog.get(worker_type)
    names = parse_instances(ps_types, market.catalog, "--ps-types")
    ps = choose_ps([market.instance(name) for name in names], request.budget_per_hour)
    workers = market.options(profiles)
    planner = Fc2Planner(profiles[0], workers, ps, request)
    chosen = FC2_RECOMMENDERS + (("scala-opt-m",) if worker_type else ())
    return Fc2Recommendation([planner.recommend(name, worker_type) for name in chosen], ps, workers)
