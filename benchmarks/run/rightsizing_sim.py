"""The simulated half of the right-sizing benchmark (``runtime_rightsizing.py``, issue 17 item 5).

Every real run is simulated again, as the simulator runs any job: a ``SimModel`` fitted
to the measured sweep (its tensors and memory floors from the real model, its compute per
sample and PS update cost by least squares on the sweep's speeds), the run's mis-sized
start as the job's ``initial_shape`` — launched as it is under every policy, as the
runtime launches a job file's shape (``scaling.launch``) — the same policy on the
runtime's clock, and every plan raised to the memory floors (``scaling.floors``: the
simulator takes its model's floors, which are fitted to be the runtime's). The simulated
JCT against the real one is the simulator's fidelity. The rows say ``simulated: true``.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.errors import coefficient_of_variation, relative_error_percent
from rightsize.cluster.clusters import machine_cluster
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec, JobModel, SimModel
from rightsize.cluster.simjob import Noise
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace, TraceJob
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec
from rightsize.runtime.memory_need import MemoryNeed, memory_need
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node import build_workload
from rightsize.scaling.api import Policy


@dataclass(frozen=True)
class Setting:
    """What the real runs ran under: the budget, the metric interval (the policies' clock and
    the simulator's decision interval) and the warm-up the steady medians leave out."""

    budget: Resources
    metric_interval_s: float
    warmup_s: float


def job_need(spec: JobSpec) -> MemoryNeed:
    """What the runtime measures of ``spec``'s model before launch: tensor sizes and floors."""
    workload = build_workload(spec)
    return memory_need(spec, workload, layout_of(workload.make_model(seed=spec.training.seed)))


def base_sim_model(
    name: str, need: MemoryNeed, batch_size: int, sweep_rows: list[dict]
) -> SimModel:
    """The job's tensors (sizes as the PS partition them) and the runtime's memory floors, from
    its model; compute per sample and PS update cost: the medians over the sweep of what its
    cgroups measured (``runtime_rightsizing.node_costs``), the starting point of
    :func:`fit_sim_model`. A PS's floor is linear in the bytes it holds
    (``MemoryNeed.ps_bytes``): its base and its slope are the model's PS memory."""
    sizes = tuple(sorted(need.sizes.values(), reverse=True))
    costs = [r["costs"] for r in sweep_rows if r["costs"]["worker_core_s_per_sample"]]
    compute = statistics.median(c["worker_core_s_per_sample"] for c in costs)
    update = statistics.median(c["ps_core_s_per_step"] for c in costs)
    ps_base = need.ps_bytes(0)
    per_byte = (need.ps_bytes(sum(sizes)) - ps_base) / sum(sizes)
    return SimModel(name, sum(sizes), sizes, compute, batch_size, update, need.worker_bytes(),
                    "fitted to this machine's sweep (benchmarks/run/runtime_rightsizing.py)",
                    ps_base, per_byte)  # fmt: skip


def fit_sim_model(
    base: SimModel, points: list[tuple[ClusterShape, float]], cluster: ClusterSpec
) -> tuple[SimModel, dict]:
    """``base`` with the compute per sample and the PS's update cost that make the simulator's
    speeds closest to the measured ones (least squares on log speed, over the sweep's
    shapes), starting from ``base``'s (the measured costs). Returns the model and the fit's
    error per shape."""

    def model_of(x: np.ndarray) -> SimModel:
        return replace(base, compute_core_s_per_sample=float(np.exp(x[0])),
                       update_core_s=float(np.exp(x[1])))  # fmt: skip

    def loss(x: np.ndarray) -> float:
        job = JobModel(model_of(x), cluster)
        return sum((math.log(job.evaluate(s).samples_per_s / measured)) ** 2
                   for s, measured in points)  # fmt: skip

    x0 = np.log([base.compute_core_s_per_sample, base.update_core_s])
    best = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-8})
    model = model_of(best.x)
    job = JobModel(model, cluster)
    errors = [100 * (job.evaluate(s).samples_per_s / m - 1) for s, m in points]
    return model, {"compute_core_s_per_sample": model.compute_core_s_per_sample,
                   "update_core_s": model.update_core_s,
                   "sweep_error_percent": errors,
                   "sweep_mape_percent": statistics.fmean(abs(e) for e in errors)}  # fmt: skip


@dataclass(frozen=True)
class Transitions:
    """What the simulator charges for a plan, from the real runs' transitions: a plan that
    launches or removes nodes (and the launch) costs ``restart_s``, their mean; one that
    only resizes nodes in place ``resize_s``, the mean of those (the runtime writes the
    cgroups; the simulator once charged every plan a launch, which made a policy of many
    small rebalances tens of seconds slower than the real one)."""

    restart_s: float
    resize_s: float

    @classmethod
    def of(cls, rows: list[dict]) -> Transitions:
        with_nodes = [t for r in rows for t in r.get("node_transitions_s", ())]
        in_place = [t for r in rows for t in r.get("in_place_transitions_s", ())]
        restart_s = statistics.fmean(with_nodes) if with_nodes else 0.0
        # none measured: charge a restart, as the simulator did before
        return cls(restart_s, statistics.fmean(in_place) if in_place else restart_s)


def simulate(model: SimModel, policy: Policy, start: ClusterShape, samples: float,
             costs: Transitions, noise: Noise, setting: Setting) -> dict:  # fmt: skip
    """One job of ``samples`` started at ``start`` in the simulator; its JCT (None: it
    failed) and decisions."""
    interval = setting.metric_interval_s
    config = SimConfig(metric_interval_s=interval, decision_interval_s=interval,
                       launch_s=costs.restart_s, init_s=0.0, resize_s=costs.resize_s,
                       noise=noise)  # fmt: skip
    job = TraceJob(model.name, 0.0, model.name, setting.budget, samples, initial_shape=start)
    sim = Simulator(machine_cluster(setting.budget), policy, config, models=lambda _name: model)
    result = sim.run(Trace("rightsizing", (job,))).jobs[0]
    return {"simulated": True, "jct_s": result.jct_s if not result.failed else None,
            "plans_applied": result.restarts, "final_shape": result.final_shape,
            "decisions": list(result.decisions)}  # fmt: skip


def simulated_rows(
    spec: JobSpec,
    sweep: list[dict],
    points: list[tuple[ClusterShape, float]],
    oracle_rates: list[float],
    oracle_e_jobs: list[float],
    rows: list[dict],
    starts: dict[str, ClusterShape],
    policy_of: Callable[[str], Policy],
    setting: Setting,
) -> dict:
    """Every real run of ``rows`` (each gets a ``sim`` entry) again in the simulator, for
    ``spec``'s fixed work: a model fitted to the sweep's ``points`` (shape, measured
    samples/s), the mean measured transition time as its restart cost, the CV of the
    oracle's steady ``oracle_rates`` as its speed's noise and of its steady ``e_job``
    readings (``oracle_e_jobs``) as its nodes' CPU noise (``Noise.cpu_cv``; none read:
    the speed's). Returns the model's fit and the mean absolute JCT error."""
    cluster = machine_cluster(setting.budget)
    base = base_sim_model(str(spec.workload), job_need(spec), spec.batch_size, sweep)
    model, fit = fit_sim_model(base, points, cluster)
    costs = Transitions.of(rows)
    cv = coefficient_of_variation(oracle_rates)
    cpu_cv = coefficient_of_variation(oracle_e_jobs) if len(oracle_e_jobs) > 1 else None
    noise = Noise(steady_cv=cv, warmup_s=setting.warmup_s, cpu_cv=cpu_cv)
    samples = spec.dataset_size * spec.epochs
    for row in rows:
        if "error" in row:
            continue
        policy = policy_of(row["policy"])
        sim = simulate(model, policy, starts[row["start"]], samples, costs, noise, setting)
        row["sim"] = {**sim, "jct_error_percent": relative_error_percent(sim["jct_s"], row["jct_s"])}
        print(f"  {row['start']:>10} {row['policy']:>9}: simulated JCT {sim['jct_s'] or 0:6.1f} s "
              f"(real {row['jct_s']:.1f} s)", file=sys.stderr)  # fmt: skip
    errors = [abs(r["sim"]["jct_error_percent"]) for r in rows
              if "sim" in r and r["sim"]["jct_error_percent"] is not None]  # fmt: skip
    return {"sim_model": {"fit": fit, "restart_s": costs.restart_s,
                          "resize_s": costs.resize_s, "noise_cv": cv, "cpu_noise_cv": cpu_cv,
                          "param_bytes": model.param_bytes, "batch_size": model.batch_size,
                          "worker_memory_bytes": model.worker_memory_bytes,
                          "ps_base_memory_bytes": model.ps_base_memory_bytes,
                          "ps_memory_per_param_byte": model.ps_memory_per_param_byte},
            "sim_jct_mape_percent": statistics.fmean(errors) if errors else None}  # fmt: skip
