"""``rightsize run`` writes its run into the store too, so history builds up without a service.

One store row per job in a state file: a rerun that resumes an interrupted job updates
the row its first run wrote (found by the state file and the job's start time), a
``--fresh`` rerun starts a new one.
"""

from __future__ import annotations

from typing import Any

from rightsize.core.spec import JobSpec
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
    return job_id


def _started_at(spec: JobSpec) -> float | None:
    from rightsize.runtime.state import read_job

    job = read_job(spec.state_path)
    return None if job is None else job["started_at"]
