"""What a job starts from, checked before anything is written or launched.

A new job starts from its launch plan: the job file's ``initial_shape``, or the
policy's launch plan for ``initial_shape: auto``. A rerun of a job whose state
file holds it unfinished — its master killed at any moment, interrupted by a
signal, or failed — resumes it instead, if its training settings are the same
(:func:`job_identity`). Either way the shape must fit the backend
(:mod:`capacity`) and the checkpoint directory must be writable: a user's
mistake fails here, in one line, before any node runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from rightsize.core.errors import ResourceError, SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec, ShapeSpec
from rightsize.runtime.capacity import Capacity, capacity_problem
from rightsize.runtime.checkpoint import check_reachable, check_writable
from rightsize.runtime.reshape import rejection
from rightsize.runtime.shards import DEFAULT_SHARD_BATCHES, ShardPlan
from rightsize.runtime.state import JobStatus, StateStore
from rightsize.scaling.api import LaunchRequest, Plan, Policy
from rightsize.scaling.launch import launch_plan as start_plan

_SPEC_IDENTITY = ("workload", "options", "dataset", "dataset_size", "batch_size", "epochs",
                  "steps", "strategy", "training")  # fmt: skip
#: A script's training is the script and its arguments (it decides the rest itself).
_SCRIPT_IDENTITY = ("script", "args", "module", "steps", "strategy")


def job_identity(spec: JobSpec) -> str:
    """A hash of what defines the training (not its resources or policy): a resumed job must match."""
    fields = _SCRIPT_IDENTITY if spec.is_script else _SPEC_IDENTITY
    data = spec.model_dump(mode="json", by_alias=True, include=set(fields))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def shard_plan(spec: JobSpec, dataset_size: int) -> ShardPlan:
    shard_size = spec.runtime.shard_size or spec.batch_size * DEFAULT_SHARD_BATCHES
    epochs = None if spec.steps is not None else (spec.epochs or 1)
    return ShardPlan(dataset_size, shard_size, spec.batch_size, epochs, spec.steps,
                     spec.training.seed, spec.training.shuffle)  # fmt: skip


@dataclass(frozen=True)
class Resume:
    """An unfinished job in the state file: its row, and the shape it last ran."""

    job: dict[str, Any]
    shape: ClusterShape

    @property
    def status(self) -> JobStatus:
        return JobStatus(self.job["status"])


def unfinished_job(spec: JobSpec) -> Resume | None:
    """The state file's job, if a rerun should resume it.

    Raises:
        SpecError: the state file is not one, or holds a job with other training settings.
    """
    if not spec.state_path.exists():
        return None
    store = StateStore(spec.state_path)
    try:
        job, shape = store.job(), store.current_shape()
    finally:
        store.close()
    if job is None or shape is None or not JobStatus(job["status"]).resumable:
        return None
    if job["identity"] != job_identity(spec):
        raise SpecError(
            f"{spec.state_path} holds an unfinished job with other training settings; "
            "rerun with --fresh to start over, or set runtime.state to another file"
        )
    return Resume(job, shape)


def launch_plan(spec: JobSpec, policy: Policy, machine: Resources) -> Plan:
    """The job file's initial shape, or the policy's launch plan for ``initial_shape: auto``
    (:func:`scaling.launch.launch_plan`, as the simulator starts its jobs; the master raises
    the policy's plan to the memory floors).

    No shapes are measured before launch here, so ``prior`` is empty.

    Raises:
        ResourceError: the policy cannot start the job within its budget.
        SpecError: the shape cannot run (no worker, servers under allreduce, over budget).
    """
    explicit = spec.initial_shape.to_shape() if isinstance(spec.initial_shape, ShapeSpec) else None
    request = LaunchRequest(spec.name, spec.budget.resources, machine, (), machine)
    plan = start_plan(policy, request, explicit)
    if plan is None:
        raise ResourceError(
            f"policy {policy.name} cannot start the job within budget "
            f"{spec.budget.resources} on this machine ({machine})"
        )
    why = rejection(plan.shape, spec.budget.resources, spec.strategy)
    if why:
        raise SpecError(f"initial shape {plan.shape.describe()} cannot run: {why}")
    return plan


def check_fits(spec: JobSpec, shape: ClusterShape, machine: Resources | Capacity,
               oversubscribe: bool) -> None:  # fmt: skip
    """Raises ResourceError if ``shape`` or the budget exceeds ``machine`` (unless allowed),
    SpecError if the checkpoint directory (or URL) cannot be written."""
    problem = None if oversubscribe else capacity_problem(shape, spec.budget.resources, machine)
    if problem:
        raise ResourceError(problem)
    check_writable(spec.checkpoint.dir)
    if spec.checkpoint.url:
        check_reachable(spec.checkpoint.url)
