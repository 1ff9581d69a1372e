"""The profile-based prediction of a job's launch shape on this machine.

Issue 19 asks every finished run to show its predicted time and cost beside the
measured ones. A job launched from history carries the speed a similar run measured
(service/history.py); any other job is predicted here, from what was profiled
before it ran: the zoo's models profiled with one thread on this machine
(``cluster/data/profiled_models.json``, the simulator's numbers, seconds that are
core-seconds) turned into a shape's steps per second by the simulator's performance
model (``cluster/jobmodel.py``: worker compute, the PS's update cost, the
partitioned parameters). An allreduce shape is its slowest worker's compute (the
simulator has no collective model; on one machine the exchange costs CPU the
profile does not count, so this is an optimistic bound and says so).

A zoo model built with other options or for another dataset than it was profiled
with keeps the profiled compute per sample and has its parameters counted: the PS's
update cost and the bytes it moves scale with them, as the simulator's models do
(cluster/models.py). A user's own workload has no profile that ships: it gets no
prediction rather than a wrong one.

The prediction is for the launch shape held to the end: a policy that grows the job
finishes sooner than predicted, one that shrinks it later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rightsize.cluster.clusters import machine_cluster
from rightsize.cluster.jobmodel import JobModel, SimModel
from rightsize.cluster.models import Derivation, derive, profiled
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec, Strategy
from rightsize.scaling.api import ShapeRecord


@dataclass(frozen=True)
class LaunchPrediction:
    """What a job is expected to take at its launch shape.

    Attributes:
        steps_per_s: predicted worker steps per second (all workers together).
        time_s: the job's samples at that speed.
        core_h: ``time_s`` times the shape's CPU cores, in core-hours.
        source: what the numbers rest on, for the job's note.
    """

    steps_per_s: float
    time_s: float
    core_h: float
    source: str

    @classmethod
    def at(cls, steps_per_s: float, spec: JobSpec, shape: ClusterShape,
           source: str) -> LaunchPrediction | None:  # fmt: skip
        """``spec``'s samples at ``steps_per_s`` on ``shape`` (None: no known length)."""
        samples = samples_of(spec)
        if samples <= 0 or steps_per_s <= 0:
            return None
        time_s = samples / (steps_per_s * spec.batch_size)
        return cls(steps_per_s, time_s, time_s * shape.total().cpu_cores / 3600, source)


def samples_of(spec: JobSpec) -> float:
    """The samples a job trains (steps × batch, or epochs × dataset); 0 when unknown (a
    script decides its own)."""
    if spec.is_script:
        return 0.0
    if spec.steps is not None:
        return float(spec.steps * spec.batch_size)
    return float((spec.epochs or 1) * (spec.dataset_size or 0))


def profiled_model(spec: JobSpec) -> SimModel | None:
    """The simulator's model of ``spec``'s workload at its batch (None: not a profiled zoo
    model); its parameters counted when its options or dataset differ from the profile's."""
    base = profiled().get(spec.workload)
    if base is None:
        return None
    params = None
    if spec.options or (spec.dataset or base["dataset"]) != base["dataset"]:
        from rightsize.workloads.registry import WorkloadRegistry  # torch: only to count
        from rightsize.workloads.workload import count_on_meta

        workload = WorkloadRegistry().get(spec.workload, spec.dataset, spec.options,
                                          spec.dataset_size, seed=spec.training.seed)  # fmt: skip
        # counted on the meta device: a submitted job's options may ask for billions of
        # parameters (the registry allows 1e10), which a real build would allocate here, in
        # the service's own process, before the job is even queued
        params = count_on_meta(workload.build_model).parameters
    how = Derivation(spec.workload, params=params, batch_size=spec.batch_size,
                     source="profiled with one thread on this machine")  # fmt: skip
    return derive(spec.workload, how, base)


def predict_launch(spec: JobSpec, shape: ClusterShape) -> LaunchPrediction | None:
    """The time and core-hours of ``spec`` held at ``shape`` (None: no profile of its model,
    no known length, or a shape that cannot train)."""
    model = profiled_model(spec)
    steps = _speed(model, spec)(shape) if model is not None else None
    if not steps:
        return None
    how = ("the simulator's PS model" if spec.strategy == Strategy.PS
           else "the slowest worker's compute, exchange not counted")  # fmt: skip
    return LaunchPrediction.at(steps, spec, shape,
                               f"predicted for {shape.describe()} from {spec.workload}'s "
                               f"profile ({how}; the launch shape held to the end)")  # fmt: skip


def predicted_records(spec: JobSpec, shapes: tuple[ClusterShape, ...]) -> tuple[ShapeRecord, ...]:
    """A policy's profiling runs (``Policy.prior_shapes``: Optimus's 20 configurations,
    FA-BF's exhaustive search) answered by the profile-based model instead of by running
    each shape — what the simulator does with its models (cluster/priors.py). Empty when
    the workload has no profile."""
    model = profiled_model(spec) if shapes else None
    if model is None:
        return ()
    speed = _speed(model, spec)
    records = ((shape, speed(shape)) for shape in shapes)
    return tuple(ShapeRecord(shape, steps) for shape, steps in records if steps)


def _speed(model: SimModel, spec: JobSpec) -> Callable[[ClusterShape], float | None]:
    """Worker steps per second of a shape (None: it cannot train), one performance model
    for all the shapes asked about (it caches per shape)."""
    if spec.strategy == Strategy.PS:
        job = JobModel(model, machine_cluster(spec.budget.resources))
        return lambda shape: (job.speed(shape) or None) if shape.ps and shape.workers else None
    return lambda shape: (min(n.resources.cpu_cores for n in shape.workers) / model.step_core_s
                          or None) if shape.workers else None  # fmt: skip
