"""What the API returns (and the store's reads hand out): pydantic models, so the OpenAPI
schema says exactly what a client gets."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rightsize.service.models import Job


class _View(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


class JobView(_View):
    """A job: what was asked and where it stands."""

    id: int
    name: str
    phase: str = Field(description="waiting, running, finished, failed or cancelled")
    source: str = Field(description="service (submitted) or run (rightsize run)")
    host: str
    workload: str
    dataset: str
    batch_size: int
    policy: str
    budget: dict[str, Any]
    samples_total: float | None = Field(description="samples the job trains, when known")
    submitted_at: float = Field(description="Unix time, seconds")
    started_at: float | None
    finished_at: float | None
    launch_source: str | None = Field(description="history, prediction, policy or job file")
    launch_note: str | None
    predicted_time_s: float | None
    measured_time_s: float | None
    predicted_core_h: float | None = Field(description="CPU core-hours the plan expected")
    predicted_note: str | None = Field(description="what the prediction rests on")
    host: str = Field(description="the machine that ran it")
    instance_type: str | None = Field(description="the host's instance type, if declared")
    measured_core_h: float | None = Field(description="CPU core-hours the job held")
    best_samples_per_s: float | None
    time_to_95_s: float | None = Field(description="seconds to 95% of its best throughput")
    accounting: dict[str, Any] | None = Field(description="the exactly-once check")
    error: str | None

    @classmethod
    def of(cls, row: Job) -> JobView:
        fields = {name: getattr(row, name) for name in cls.model_fields if hasattr(row, name)}
        return cls(**fields, budget=row.spec.get("budget", {}))


class ShapeView(_View):
    """One timeline row: the shape, why, whether it was applied and how long it took."""

    seq: int
    time_s: float
    action: str
    reason: str
    shape: dict[str, Any]
    applied: bool
    transition_s: float | None
    details: dict[str, Any]


class NodeSampleView(_View):
    node: str
    role: str
    cpu_used: float = Field(description="cores")
    cpu_allocated: float = Field(description="cores")
    memory_used: int = Field(description="bytes")
    memory_allocated: int = Field(description="bytes")
    net_in: float = Field(description="bytes/s")
    net_out: float = Field(description="bytes/s")
    steps_per_s: float


class SampleView(_View):
    seq: int
    time_s: float
    steps_done: int
    steps_per_s: float
    samples_per_s: float
    loss: float | None
    e_job: float | None
    shape: str
    nodes: list[NodeSampleView]


class RunSummary(_View):
    """A finished run as the history reads it."""

    id: int
    name: str
    host: str
    instance_type: str | None
    batch_size: int
    parameters: int | None
    spec: dict[str, Any]
    final_shape: dict[str, Any] | None
    best_samples_per_s: float | None
    measured_time_s: float | None

    @classmethod
    def of(cls, row: Job) -> RunSummary:
        final = (row.report or {}).get("final_shape")
        return cls(id=row.id, name=row.name, host=row.host, instance_type=row.instance_type,
                   batch_size=row.batch_size,
                   parameters=row.parameters, spec=row.spec, final_shape=final,
                   best_samples_per_s=row.best_samples_per_s,
                   measured_time_s=row.measured_time_s)  # fmt: skip


class LaunchPreview(_View):
    """``POST /jobs/preview``: where the service would start a job, and what it predicts."""

    source: str = Field(description="history, prediction, policy or job file")
    shape: dict[str, Any]
    shape_text: str
    reason: str
    cpu_cores: float = Field(description="cores the launch holds")
    memory_bytes: int = Field(description="bytes the launch holds")
    predicted_time_s: float | None = Field(description="seconds at the launch shape")
    predicted_core_h: float | None = Field(description="CPU core-hours at the launch shape")
    predicted_note: str | None = Field(description="what the prediction rests on")
    fits_now: bool = Field(description="whether it would start now (else it waits)")
    waiting: int = Field(description="jobs waiting ahead of it")


class QueueRow(_View):
    """``GET /queue``: a job and its newest sample."""

    job: JobView
    latest: SampleView | None


class JobDetail(_View):
    """``GET /jobs/{name}``: the job, its timeline and its latest sample."""

    job: JobView
    shapes: list[ShapeView]
    latest: SampleView | None


class SimulationView(_View):
    """A simulation started from the web pages, and its per-policy results when done."""

    id: int
    trace: str
    request: dict[str, Any]
    phase: str = Field(description="running, finished or failed")
    created_at: float = Field(description="Unix time, seconds")
    finished_at: float | None
    result: dict[str, Any] | None = Field(description="`rightsize simulate --json`'s output")
    error: str | None


class TuneRung(BaseModel):
    """One rung of a Hyperband bracket as `rightsize tune --json` reports it."""

    model_config = ConfigDict(extra="allow")

    bracket: int = Field(ge=0, le=100)
    rung: int = Field(ge=0, le=100)
    n: int = Field(ge=0, le=10**6)
    r: float = Field(ge=0, le=10**9)
    packs: list[list[str]] = Field(max_length=10**5, description="trials trained together")
    losses: dict[str, float | None] = Field(description="each trial's validation loss")


class TuneReport(BaseModel):
    """What `rightsize tune --json` prints: the fields the study pages read are checked."""

    model_config = ConfigDict(extra="allow")

    workload: str = Field(max_length=200)
    dataset: str = Field(max_length=200)
    max_resource: float = Field(gt=0, le=10**9)
    eta: float = Field(gt=1, le=1000)
    best: dict[str, Any]
    trials: dict[str, dict[str, Any]] = Field(max_length=10**5)
    rungs: list[TuneRung] = Field(min_length=1, max_length=10**4)


class StudyUpload(BaseModel):
    """``POST /studies``: a name and a `rightsize tune --json` report."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    report: TuneReport


class StudyView(_View):
    """A study: its name, what it tuned, and (``GET /studies/{id}``) the whole report."""

    id: int
    name: str
    workload: str
    dataset: str
    created_at: float = Field(description="Unix time, seconds")
    best: dict[str, Any]
    host: bool = Field(False, description="written by `rightsize tune` on the service's host "
                       "without a token: every token sees it")  # fmt: skip
    report: dict[str, Any] | None = None
