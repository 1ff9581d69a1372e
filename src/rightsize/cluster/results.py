"""What a simulation run produced: per-job results and the cluster's summary metrics.

The metrics are NEARCHUS §V's: job completion time (JCT) = queueing time +
run time, makespan, restarts (§V-C), and for the single-job experiment the
best speed, JCT and the time to reach 95% of the best speed (Fig. 7-9). Mean
CPU utilization is the time average of the CPU jobs used over the cluster's
vCPUs, from the first arrival to the last completion.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rightsize.cluster.simjob import SimJob, SimJobState

REACH_FRACTION = 0.95  # "time to reach 95% of the best speed" (single-job experiment)


@dataclass(frozen=True)
class JobResult:
    """One job's fate. Times are absolute seconds on the simulator's clock."""

    name: str
    model: str
    budget_cores: float
    batch_size: int
    arrival_s: float
    start_s: float | None
    finish_s: float | None
    failed: bool
    restarts: int
    final_shape: str
    decisions: tuple[str, ...]  # every plan's reason, launch first
    timeline: tuple[tuple[float, float, float], ...]  # (t, samples/s, cpu used) at changes

    @property
    def queue_s(self) -> float:
        return (self.start_s if self.start_s is not None else self.arrival_s) - self.arrival_s

    @property
    def run_s(self) -> float:
        if self.start_s is None or self.finish_s is None:
            return 0.0
        return self.finish_s - self.start_s

    @property
    def jct_s(self) -> float:
        return self.queue_s + self.run_s

    @property
    def best_steps_per_s(self) -> float:
        return max((r for _, r, _ in self.timeline), default=0.0) / self.batch_size

    @property
    def time_to_reach_s(self) -> float | None:
        """Seconds from start until the speed first reached 95% of its best."""
        best = self.best_steps_per_s * self.batch_size
        for t, rate, _ in self.timeline:
            if best and rate >= REACH_FRACTION * best:
                return t - (self.start_s or 0.0)
        return None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "budget_cpu": self.budget_cores,
            "arrival_s": self.arrival_s,
            "queue_s": self.queue_s,
            "run_s": self.run_s,
            "jct_s": self.jct_s,
            "failed": self.failed,
            "restarts": self.restarts,
            "best_steps_per_s": self.best_steps_per_s,
            "time_to_95pct_s": self.time_to_reach_s,
            "final_shape": self.final_shape,
            "decisions": list(self.decisions),
        }


def job_result(job: SimJob) -> JobResult:
    return JobResult(
        job.name,
        job.spec.model,
        job.budget.cpu_cores,
        job.model.model.batch_size,
        job.arrival_s,
        job.started_s,
        job.finished_s,
        job.state == SimJobState.FAILED or job.finished_s is None,
        job.restarts,
        job.shape.describe(),
        tuple(p.reason for p in job.plans),
        tuple(job.timeline),
    )


@dataclass(frozen=True)
class SimResult:
    """One run: a policy on a cluster with a trace and a seed."""

    policy: str
    cluster: str
    trace: str
    seed: int
    jobs: tuple[JobResult, ...]
    usage: tuple[tuple[float, float, float], ...]  # (t, cpu used, cpu allocated) at changes
    capacity_cores: float

    @property
    def done(self) -> tuple[JobResult, ...]:
        return tuple(j for j in self.jobs if not j.failed)

    @property
    def makespan_s(self) -> float:
        ends = [j.finish_s for j in self.jobs if j.finish_s is not None]
        return max(ends, default=0.0) - min((j.arrival_s for j in self.jobs), default=0.0)

    def _mean(self, values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    def time_average(self, column: int) -> float:
        """Time-weighted mean of a usage column over the cluster's capacity."""
        if len(self.usage) < 2 or self.makespan_s <= 0:
            return 0.0
        area = sum(
            (t1 - t0) * row[column]
            for (t0, *_), (t1, *_), row in zip(self.usage, self.usage[1:], self.usage, strict=False)
        )
        return area / (self.makespan_s * self.capacity_cores)

    def summary(self) -> dict:
        done = self.done
        return {
            "policy": self.policy,
            "cluster": self.cluster,
            "trace": self.trace,
            "seed": self.seed,
            "jobs": len(self.jobs),
            "failed": len(self.jobs) - len(done),
            "avg_jct_s": self._mean([j.jct_s for j in done]),
            "avg_queue_s": self._mean([j.queue_s for j in done]),
            "avg_run_s": self._mean([j.run_s for j in done]),
            "makespan_s": self.makespan_s,
            "cpu_used_pct": 100 * self.time_average(1),
            "cpu_allocated_pct": 100 * self.time_average(2),
            "restarts": sum(j.restarts for j in self.jobs),
            "avg_restarts": self._mean([float(j.restarts) for j in self.jobs]),
        }
