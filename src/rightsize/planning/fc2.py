"""FC2's resource recommenders (§5.2) for parameter-server clusters, predicted by the PS model.

FC2 picks one parameter server and one worker instance type with a worker
count, under an indicative per-hour budget ``C`` (or a worker limit):

- the PS is the type with the largest network capacity in its list ``L^p``
  (unless the user names one);
- **Cost-Opt**: the cheapest worker type, ``n = (C - c_ps) / c_t``;
- **Time-Opt**: the most expensive worker type, same count formula;
- **Scala-Opt**: from the most expensive type down, the bandwidth one worker
  puts on the PS, ``b_t``, gives ``n_t = min(B_ps·p / b_t, (C - c_ps) / c_t)``;
  the type with the smallest ``n_t`` wins (``p = 0.95``);
- **Scala-Opt-M**: the same count for a worker type the user chose.

FC2 measures ``b_t`` by running the job briefly; rightsize predicts it from the
profile with DLRover's eq. 1 (perf/ps.py), and predicts every recommendation's
time and cost with the same model, so they compare like with like. Counts are
rounded down (a fraction of a VM cannot be rented). The PS's service costs are those of the
framework the request names (perf/ps_profiles.py; rightsize's own runtime by default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rightsize.core.catalog import InstanceType
from rightsize.core.errors import ResourceError
from rightsize.perf.comm import GBPS
from rightsize.perf.ps import (
    FC2_HEADROOM,
    PSModel,
    PSSpec,
    PSThroughput,
    WorkerSpec,
    predict_ps,
)
from rightsize.perf.ps_profiles import PROFILES, PSFramework
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config, Slot
from rightsize.profiling.profile import Profile

RECOMMENDERS = ("cost-opt", "time-opt", "scala-opt", "scala-opt-m")


@dataclass(frozen=True)
class Fc2Request:
    """Inputs of FC2's recommenders.

    Attributes:
        worker_batch: samples per worker step.
        iterations: global steps to train (one per worker update, asynchronous).
        budget_per_hour: FC2's indicative budget ``C``; or ``max_workers`` instead.
        headroom: ``p`` in Scala-Opt.
        ps_model: how a PS cluster's throughput is predicted (perf/ps.py).
        ps_framework: whose PS it is, which sets its service costs (perf/ps_profiles.py).
    """

    worker_batch: int
    iterations: int
    budget_per_hour: float | None = None
    max_workers: int | None = None
    headroom: float = FC2_HEADROOM
    ps_model: PSModel = PSModel.DLROVER
    ps_framework: PSFramework = PSFramework.RIGHTSIZE

    def __post_init__(self) -> None:
        if (self.budget_per_hour is None) == (self.max_workers is None):
            raise ResourceError(
                "FC2 needs either an hourly budget (--budget-per-hour) or --max-workers"
            )


def choose_ps(
    candidates: Sequence[InstanceType], budget_per_hour: float | None = None
) -> InstanceType:
    """FC2 §5.2.1: the parameter server with the largest network capacity (cheaper on ties).

    A PS that alone costs the whole hourly budget is not eligible: it would leave
    nothing for workers.

    Raises:
        ResourceError: no candidate fits the budget.
    """
    eligible = [
        i for i in candidates if budget_per_hour is None or i.price_usd_per_hour < budget_per_hour
    ]
    if not eligible:
        raise ResourceError(
            f"no parameter server type costs less than the hourly budget ${budget_per_hour:g}"
        )
    return max(eligible, key=lambda i: (i.network_gbps, -i.price_usd_per_hour))


def worker_count(request: Fc2Request, ps: InstanceType, worker: InstanceType) -> int:
    """``(C - c_ps) / c_t`` rounded down, or the worker limit."""
    if request.max_workers is not None:
        return request.max_workers
    return math.floor((request.budget_per_hour - ps.price_usd_per_hour) / worker.price_usd_per_hour)


class Fc2Planner:
    """Runs FC2's recommenders for one workload profile and predicts their plans."""

    def __init__(self, profile: Profile, workers: Sequence[InstanceOption], ps: InstanceType,
                 request: Fc2Request) -> None:  # fmt: skip
        self.profile, self.workers, self.ps, self.request = profile, list(workers), ps, request
        if not self.workers:
            raise ResourceError("FC2 needs at least one worker instance type")

    def _ps_spec(self) -> PSSpec:
        """The PS with the framework's costs; the update's CPU is the profiled optimizer step.

        Raises:
            ValueError: the framework costs per tensor and the profile has no tensor counts
                (planning/ps_framework.py fills them in, or says what is missing).
        """
        update_core_s = self.profile.samples[0].optimizer_s * self.profile.device.threads
        costs = PROFILES[self.request.ps_framework]
        counts = self.profile.tensors
        trainable, state = (counts.parameters, counts.state) if counts else (None, None)
        per_step = costs.tensors_per_step(trainable, state)
        return costs.spec(update_core_s=update_core_s, cores=self.ps.vcpus,
                          link_bytes_per_s=self.ps.network_gbps * GBPS, tensors_per_step=per_step,
                          headroom=self.request.headroom)  # fmt: skip

    def _worker_spec(self, option: InstanceOption) -> WorkerSpec:
        batch = self.request.worker_batch
        return WorkerSpec(
            batch, option.vm_compute(batch).total_s, option.instance.network_gbps * GBPS
        )

    def throughput(self, option: InstanceOption, count: int) -> PSThroughput:
        return predict_ps([self._worker_spec(option)] * count, self._ps_spec(),
                          self.profile.param_bytes, self.request.ps_model)  # fmt: skip

    def bandwidth_per_worker(self, option: InstanceOption) -> float:
        """FC2's ``b_t``: bytes/s one worker of this type alone puts on the PS."""
        return self.throughput(option, 1).ps_bytes_per_s_per_worker[0]

    def scala_count(self, option: InstanceOption) -> int:
        """Scala-Opt step 2: ``min(B_ps·p / b_t, (C - c_ps) / c_t)``, rounded down."""
        by_network = math.floor(
            self.ps.network_gbps * GBPS * self.request.headroom / self.bandwidth_per_worker(option)
        )
        return min(by_network, worker_count(self.request, self.ps, option.instance))

    def recommend(self, name: str, manual: str | None = None) -> CloudPlan:
        """The plan of recommender ``name`` (``scala-opt-m`` uses the worker type ``manual``)."""
        by_price = sorted(self.workers, key=lambda o: o.price_per_hour)
        if name == "cost-opt":
            option, count = by_price[0], worker_count(self.request, self.ps, by_price[0].instance)
        elif name == "time-opt":
            option, count = by_price[-1], worker_count(self.request, self.ps, by_price[-1].instance)
        elif name == "scala-opt":
            option, count = self._scala(list(reversed(by_price)))
        elif name == "scala-opt-m":
            option = next((o for o in self.workers if o.name == manual), None)
            if option is None:
                raise ResourceError(
                    f"scala-opt-m needs a worker type from the list, got {manual!r}"
                )
            count = self.scala_count(option)
        else:
            raise ResourceError(
                f"unknown FC2 recommender {name!r}; choose {', '.join(RECOMMENDERS)}"
            )
        return self._plan(name, option, count)

    def _scala(self, most_expensive_first: list[InstanceOption]) -> tuple[InstanceOption, int]:
        # FC2's step 3 keeps the smallest n_t over all types ("n_t should be initialized to a
        # very large value"); on ties the more expensive type, considered first, stays.
        chosen, best = most_expensive_first[0], math.inf
        for option in most_expensive_first:
            count = self.scala_count(option)
            if count < best:
                chosen, best = option, count
        return chosen, int(best)

    def _plan(self, policy: str, option: InstanceOption, count: int) -> CloudPlan:
        if count < 1:
            raise ResourceError(
                f"{policy}: the budget pays for the PS {self.ps.name} but not one {option.name} "
                "worker; raise --budget-per-hour"
            )
        speed = self.throughput(option, count)
        slots = (
            Slot(option.name, count, self.request.worker_batch),
            Slot(self.ps.name, 1, 0, "ps"),
        )
        price = count * option.price_per_hour + self.ps.price_usd_per_hour
        ps_model = "dlrover-eq1" if self.request.ps_model is PSModel.DLROVER else "ps-queueing"
        models = {option.name: option.provenance, "ps": f"{ps_model} ({speed.bottleneck}-bound)"}
        return CloudPlan(
            Config(slots), 1 / speed.steps_per_s, self.request.iterations, price, policy, models
        )
