"""``rightsize run`` writes its run into the store too, so history builds up without a service.

One store row per job in a state file: a rerun that resumes an interrupted job updates
the row its first run wrote (found by the state file and the job's start time), a
``--fresh`` rerun starts a new one.
"""

from __future__ import annotations

from typing import Any

from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec
from rightsize.planning.local import predict_launch
from rightsize.service.models import JobPhase, Source
from rightsize.service.store import Store


def record_run(store: Store, spec: JobSpec, policy: str, phase: JobPhase,
               report: dict[str, Any] | None, error: str | None = None) -> int | None:  # fmt: skip
    """Copy the run in ``spec``'s state file into ``store``; its job id (None: nothing ran)."""
    started_at = _started_at(spec)
    if started_at is None:
        return None
    state_path = spec.state_path.resolve()
    job_id = store.run_of(state_path, started_at)
    if job_id is None:
        job_id = store.add_job(spec, owner_id=None, source=Source.RUN, phase=phase,
                               state_path=state_path, policy=policy,
                               started_at=started_at).id  # fmt: skip
    store.ingest(job_id, state_path)
    store.finish(job_id, phase, report, error)
    _predict(store, job_id, spec)
    return job_id


def _predict(store: Store, job_id: int, spec: JobSpec) -> None:
    """The profile-based prediction of the run's launch shape, once (a resumed rerun keeps
    the first run's): what the run would have taken had nothing resized it."""
    if store.job_by_id(job_id).predicted_time_s is not None:
        return
    launched = next((s for s in store.shapes(job_id) if s.applied), None)
    expected = launched and predict_launch(spec, ClusterShape.from_dict(launched.shape))
    if expected:
        store.update(job_id, predicted_time_s=expected.time_s, predicted_core_h=expected.core_h,
                     predicted_note=expected.source)  # fmt: skip


def _started_at(spec: JobSpec) -> float | None:
    from rightsize.runtime.state import read_job

    job = read_job(spec.state_path)
    return None if job is None else job["started_at"]
