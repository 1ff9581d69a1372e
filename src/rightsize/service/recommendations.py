"""``POST /recommendations``: Srift's plans and FC2's recommendations for a workload, before
it is submitted (FC2 §4.1: the user sees the recommended cluster and may take or change it).

The request names a zoo workload (its profile is the service's: profiles.py measures it
once, on this machine, and the answer is "profiling" until then), a global batch and the
iterations, a deadline and/or a dollar budget, and where to plan. The answer carries
each plan's predicted time and cost and the models behind each prediction (`models`),
exactly as `rightsize plan --json` prints them, with the measured speeds of past runs in
place of predictions for the instance types they ran on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rightsize.core.catalog import Catalog, load_catalogs
from rightsize.core.errors import RightsizeError, SpecError
from rightsize.core.limits import MAX_BATCH, MAX_INSTANCES, MAX_ITERATIONS
from rightsize.core.spec import Constraints, Objective
from rightsize.perf.comm import AnalyticCommModel
from rightsize.perf.precision import Precision
from rightsize.perf.ps_profiles import PSFramework
from rightsize.planning.estimate import PlanRequest
from rightsize.planning.fc2 import Fc2Request
from rightsize.planning.options import DeviceChoice
from rightsize.planning.planner import main_region
from rightsize.planning.ps_framework import PSFrameworkStatement, with_tensor_counts
from rightsize.planning.recommend import Market, fc2, srift
from rightsize.service.history import measured_speeds
from rightsize.service.profiles import ProfileBook, ProfilingState, WorkloadKey
from rightsize.service.store import Store

#: FC2 needs an hourly budget or a worker limit; this limit when the request gives neither.
FC2_DEFAULT_MAX_WORKERS = 8


class RecommendationRequest(BaseModel):
    """What to recommend cloud clusters for."""

    model_config = ConfigDict(extra="forbid")

    workload: str = Field(description="a zoo workload (the service profiles it once)")
    dataset: str | None = Field(default=None, description="default: the workload's own")
    options: dict[str, Any] = Field(default_factory=dict, description="model options")
    global_batch: int = Field(ge=1, le=MAX_BATCH, description="samples per step over all VMs")
    iterations: int = Field(ge=1, le=MAX_ITERATIONS, description="training steps")
    constraints: Constraints = Field(default_factory=Constraints,
                                     description="deadline and/or dollar budget")  # fmt: skip
    objective: Objective = Objective.COST
    cloud: Literal["aws", "gcp", "azure", "fc2-2018", "srift-2020"] = "aws"
    instances: str = Field(default="", max_length=2000,
                           description="TYPE[:COUNT],... (default: every GPU type, 16 each)")  # fmt: skip
    spot: bool = False
    precision: Precision = Precision.PYTORCH
    fc2_workers: str = Field(default="", max_length=2000, description="FC2's worker "
                             "candidates TYPE,... (default: the instances planned)")  # fmt: skip
    fc2_max_workers: int = Field(default=FC2_DEFAULT_MAX_WORKERS, ge=1, le=MAX_INSTANCES)
    fc2_worker_type: str | None = Field(default=None, max_length=100, description="Scala-Opt-M's "
                                        "manually chosen worker type (one of FC2's workers)")  # fmt: skip
    ps_framework: PSFramework = Field(default=PSFramework.RIGHTSIZE, description="whose "
                                      "parameter server FC2 plans for (its service costs)")  # fmt: skip


def workload_key(request: RecommendationRequest) -> WorkloadKey:
    """The profile the request needs, its names checked against the zoo.

    Raises:
        SpecError: not a zoo workload (the service never runs a user's code to profile
            it), an unknown dataset, or options the model does not take.
    """
    from rightsize.workloads.registry import WorkloadRegistry

    if ":" in request.workload:
        raise SpecError("the service profiles zoo workloads only; profile your own "
                        "with `rightsize profile` and plan it with `rightsize plan`", field="workload")  # fmt: skip
    try:
        workload = WorkloadRegistry().get(request.workload, request.dataset, request.options)
    except RightsizeError as exc:
        raise SpecError(str(exc), field="workload") from None
    options = tuple(sorted((k, str(v)) for k, v in request.options.items()))
    return WorkloadKey(workload.name, workload.dataset.name, options)


def recommend(request: RecommendationRequest, profiles: ProfileBook,
              store: Store) -> dict[str, Any] | ProfilingState:  # fmt: skip
    """Srift's plans and FC2's recommendations, or where the workload's profile stands.

    Raises:
        SpecError: a field that cannot be planned, named.
    """
    key = workload_key(request)
    try:
        catalog = load_catalogs([request.cloud])
        market = Market.of(catalog, request.instances, spot=request.spot,
                           device=DeviceChoice(precision=request.precision))  # fmt: skip
    except RightsizeError as exc:
        raise SpecError(str(exc), field="instances") from None
    state = profiles.request(key)
    profile = profiles.profile(key)
    if profile is None:
        return state
    plan_request = PlanRequest(request.global_batch, request.iterations, request.constraints,
                               request.objective)  # fmt: skip
    speeds = measured_speeds(store, key.workload, key.dataset, request.options, "allreduce")
    try:
        found = srift([profile], market, plan_request, AnalyticCommModel(), speeds=speeds)
        srift_answer = {"plans": [p.to_dict() for p in found.result.plans],
                        "baselines": [p.to_dict() for p in found.result.baselines],
                        "mode": found.result.mode, "notes": found.notes}  # fmt: skip
    except RightsizeError as exc:
        srift_answer = {"error": str(exc)}
    try:
        workers = Market.of(catalog, request.fc2_workers or request.instances or _cheapest_gpus(catalog),
                            spot=request.spot, device=market.device)  # fmt: skip
        fc2_request = Fc2Request(request.global_batch, request.iterations,
                                 max_workers=request.fc2_max_workers,
                                 ps_framework=request.ps_framework)  # fmt: skip
        counted = with_tensor_counts(profile, request.ps_framework, "the service's profile")
        found_fc2 = fc2([counted], workers, fc2_request, worker_type=request.fc2_worker_type)
        fc2_answer = {"ps": found_fc2.ps.name, "header": found_fc2.header,
                      "plans": [p.to_dict() for p in found_fc2.plans],
                      **PSFrameworkStatement(request.ps_framework).to_dict()}  # fmt: skip
    except RightsizeError as exc:
        fc2_answer = {"error": str(exc)}
    return {"profile": {"workload": profile.workload, "dataset": profile.dataset,
                        "device": profile.device.name, "created_at": profile.created_at},
            "srift": srift_answer, "fc2": fc2_answer}  # fmt: skip


#: FC2's worker list when none is given: this many GPU types, the cheapest first.
FC2_DEFAULT_WORKER_TYPES = 8


def _cheapest_gpus(catalog: Catalog) -> str:
    """The GPU types `plan` searches by default (the main region's), the cheapest first."""
    gpus = sorted(catalog.filter(gpus_only=True, region=main_region(catalog)),
                  key=lambda i: i.price_usd_per_hour)  # fmt: skip
    return ",".join(i.name for i in gpus[:FC2_DEFAULT_WORKER_TYPES])
