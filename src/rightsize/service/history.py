"""History feeds plans: a new job starts from what similar finished jobs measured.

DLRover §4.3: the Brain gives a new job its initial resource plan from similar jobs
that ran before; FC2 §4 reads "empirical performance data obtained from past
executions". A finished run of the same workload, dataset, model options and
strategy, at a batch within a factor of :data:`BATCH_RATIO`, is similar. Each applied
shape of its timeline becomes a :class:`ShapeRecord` at the median speed its samples
measured there (the first :data:`SETTLE_SAMPLES` after a change are the new shape
warming up, not its speed). A new job starts at the fastest record's shape brought
within its budget (DLRover's ``fit_into``) if that fits what is free now; the
records also reach the policy (``LaunchRequest.prior``), which DLRover's launch
reads itself.
"""

from __future__ import annotations

import statistics

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec
from rightsize.planning.local import LaunchPrediction
from rightsize.planning.measured import MeasuredSpeed
from rightsize.scaling.api import Plan, ShapeRecord
from rightsize.scaling.launch_advisor import PastRun, fastest_measured
from rightsize.service.schemas import RunSummary
from rightsize.service.store import Store, dataset_of, workload_of

#: Batches within this factor of each other are similar.
BATCH_RATIO = 2.0
#: Samples after a shape change that are not counted as its speed.
SETTLE_SAMPLES = 2
#: At most this many similar runs are read (the newest).
MAX_RUNS = 5


def similar(spec: JobSpec, runs: list[RunSummary]) -> list[RunSummary]:
    """The finished runs (newest first) that ran ``spec``'s model the way ``spec`` will (a
    script's: the same script text and arguments, which the store's rows already match)."""

    def alike(run: RunSummary) -> bool:
        theirs = run.spec
        if spec.is_script:
            return theirs.get("strategy") == str(spec.strategy)
        if not run.batch_size:
            return False
        ratio = max(run.batch_size, spec.batch_size) / min(run.batch_size, spec.batch_size)
        return (theirs.get("options", {}) == spec.options
                and theirs.get("strategy") == str(spec.strategy) and ratio <= BATCH_RATIO)  # fmt: skip

    return [run for run in runs if alike(run)][:MAX_RUNS]


def found(store: Store, spec: JobSpec) -> list[tuple[RunSummary, ShapeRecord]]:
    """Every shape the similar finished runs applied, with the speed each measured there (a
    script's in samples/s: its batch is its own)."""
    runs = similar(spec, store.finished_runs(workload_of(spec), dataset_of(spec)))
    return [(run, record) for run in runs
            for record in records(store, run, spec.batch_size or 1)]  # fmt: skip


def records(store: Store, run: RunSummary, batch_size: int) -> list[ShapeRecord]:
    """``run``'s applied shapes at the speed measured on each, in steps/s of ``batch_size``
    (the same samples/s, so runs at other batches compare)."""
    samples = store.samples(run.id)
    applied = [s for s in store.shapes(run.id) if s.applied]
    found = []
    for i, shape in enumerate(applied):
        end = applied[i + 1].time_s if i + 1 < len(applied) else float("inf")
        during = [s.samples_per_s for s in samples if shape.time_s < s.time_s <= end]
        during = during[SETTLE_SAMPLES:]
        if during:
            speed = statistics.median(during) / batch_size
            found.append(ShapeRecord(ClusterShape.from_dict(shape.shape), speed))
    return found


def measured_speeds(store: Store, workload: str, dataset: str, options: dict,
                    strategy: str) -> list[MeasuredSpeed]:  # fmt: skip
    """The fastest shape of each similar finished run whose host declared its instance type:
    what ``plan`` puts in place of its prediction for that type (planning/measured.py)."""
    found = []
    for run in store.finished_runs(workload, dataset):
        if (run.instance_type is None or run.spec.get("options", {}) != options
                or run.spec.get("strategy") != strategy):  # fmt: skip
            continue
        shapes = records(store, run, run.batch_size)
        if shapes:
            best = max(shapes, key=lambda r: r.steps_per_s)
            found.append(MeasuredSpeed(run.name, run.instance_type,
                                       best.shape.n_workers * run.batch_size,
                                       best.steps_per_s * run.batch_size,
                                       best.shape.total().cpu_cores))  # fmt: skip
    return found[:MAX_RUNS]


def script_speeds(store: Store, spec: JobSpec) -> list[MeasuredSpeed]:
    """The fastest shape of each finished run of ``spec``'s script (the same text and
    arguments) whose host declared its instance type, in samples/s: what ``plan --script``
    plans from (planning/measured_script.py)."""
    found = []
    for run in similar(spec, store.finished_runs(workload_of(spec), dataset_of(spec))):
        shapes = records(store, run, 1)  # a script's batch is its own: samples/s
        if run.instance_type is None or not shapes:
            continue
        best = max(shapes, key=lambda r: r.steps_per_s)
        found.append(MeasuredSpeed(run.name, run.instance_type, 1, best.steps_per_s,
                                   best.shape.total().cpu_cores))  # fmt: skip
    return found


def past_runs(found: list[tuple[RunSummary, ShapeRecord]]) -> tuple[PastRun, ...]:
    """``found`` as the launch advisor reads history (``scaling.launch_advisor``): a script's
    speeds in samples/s, its batch being its own."""
    return tuple(PastRun(run.name, record, "steps/s" if run.batch_size else "samples/s")
                 for run, record in found)  # fmt: skip


def launch_plan(found: list[tuple[RunSummary, ShapeRecord]], budget: Resources,
                free: Resources) -> Plan | None:  # fmt: skip
    """Start at the fastest shape measured, within ``budget``; None if it does not fit ``free``."""
    return fastest_measured(past_runs(found), budget, free)


def predicted(plan: Plan, spec: JobSpec) -> LaunchPrediction | None:
    """What ``spec`` takes at a history plan's measured speed on its shape (None: not a
    history plan, or no known length)."""
    speed = plan.details.get("steps_per_s")
    if not isinstance(speed, float):
        return None
    return LaunchPrediction.at(speed, spec, plan.shape, f"measured by "
                               f"{plan.details.get('from_run')} on {plan.shape.describe()}")  # fmt: skip
