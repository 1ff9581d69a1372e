"""The store of every run: tokens, jobs and what each job did (SQLAlchemy 2).

One :class:`Store` per process over one engine; every method is its own transaction, so
the service's threads and a ``rightsize run`` in another process can share a store.
Reads hand out :mod:`schemas` values, never ORM objects (they outlive their session).
"""

from __future__ import annotations

import hashlib
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from rightsize.core.errors import SpecError
from rightsize.core.spec import JobSpec
from rightsize.planning.local import samples_of
from rightsize.service import ingest
from rightsize.service.db import open_engine
from rightsize.service.models import (
    Job,
    JobPhase,
    SampleRow,
    ShapeRow,
    SimulationRow,
    Source,
    StudyRow,
    Token,
)
from rightsize.service.schemas import (
    JobView,
    QueueRow,
    RunSummary,
    SampleView,
    ShapeView,
    SimulationView,
    StudyView,
)

#: A token's visible prefix; the rest is 32 random bytes, stored only as its SHA-256.
TOKEN_PREFIX = "rs_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Store:
    """Reads and writes the store at ``database`` (default: :func:`db.default_url`).

    ``instance_type`` is this host's cloud instance type, where the user declared it: the
    jobs added here carry it, and ``plan`` reads their measured speed for that type.
    """

    def __init__(self, database: str | None = None, engine: Engine | None = None,
                 instance_type: str | None = None) -> None:  # fmt: skip
        self.engine = engine or open_engine(database)
        self.instance_type = instance_type

    def close(self) -> None:
        self.engine.dispose()

    @property
    def shown_url(self) -> str:
        """The store's URL as it may be printed (its password hidden)."""
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    # -- tokens ---------------------------------------------------------------------
    def create_token(self, name: str) -> str:
        """A new token for ``name``, shown once: only its digest is kept.

        Raises:
            SpecError: the name is empty or already has a token.
        """
        if not name or len(name) > 100:
            raise SpecError("token name: give 1-100 characters")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            with self.session() as session:
                session.add(Token(name=name, digest=digest(token), created_at=time.time()))
        except IntegrityError:
            raise SpecError(f"token name: {name!r} already has a token") from None
        return token

    def owner(self, token: str) -> int | None:
        """The id of the token's owner, or None if no such token."""
        with self.session() as session:
            return session.scalar(select(Token.id).where(Token.digest == digest(token)))

    def token_name(self, owner_id: int) -> str:
        with self.session() as session:
            return session.get_one(Token, owner_id).name

    # -- jobs -----------------------------------------------------------------------
    def add_job(self, spec: JobSpec, *, owner_id: int | None, source: Source, phase: JobPhase,
                state_path: Path, policy: str, parameters: int | None = None,
                started_at: float | None = None) -> JobView:  # fmt: skip
        """A new job row, named ``spec.name`` or, when taken, ``NAME-2``, ``NAME-3``, ..."""
        spec_json = spec.model_dump(mode="json", by_alias=True)
        for attempt in range(1, 1000):
            name = spec.name if attempt == 1 else f"{spec.name}-{attempt}"
            row = Job(name=name, owner_id=owner_id, source=str(source), host=socket.gethostname(),
                      instance_type=self.instance_type,
                      phase=str(phase), spec=spec_json, workload=workload_of(spec),
                      dataset=dataset_of(spec), batch_size=spec.batch_size or 0,
                      samples_total=samples_of(spec) or None,
                      parameters=parameters, policy=policy, state_path=str(state_path),
                      submitted_at=time.time(), started_at=started_at)  # fmt: skip
            try:
                with self.session() as session:
                    session.add(row)
                return self.job_by_id(row.id)
            except IntegrityError:
                continue
        raise SpecError(f"too many jobs named {spec.name!r}; give the job another name", field="name")

    def job_by_id(self, job_id: int) -> JobView:
        with self.session() as session:
            return JobView.of(session.get_one(Job, job_id))

    def job(self, name: str, owner_id: int | None = None) -> JobView | None:
        """The job called ``name`` — only the owner's when ``owner_id`` is given."""
        query = select(Job).where(Job.name == name)
        if owner_id is not None:
            query = query.where(Job.owner_id == owner_id)
        with self.session() as session:
            row = session.scalar(query)
            return JobView.of(row) if row else None

    def jobs(self, owner_id: int | None = None, phases: tuple[JobPhase, ...] = ()) -> list[JobView]:
        query = select(Job).order_by(Job.id)
        if owner_id is not None:
            query = query.where(Job.owner_id == owner_id)
        if phases:
            query = query.where(Job.phase.in_([str(p) for p in phases]))
        with self.session() as session:
            return [JobView.of(row) for row in session.scalars(query)]

    def spec_of(self, job_id: int) -> dict[str, Any]:
        with self.session() as session:
            return session.get_one(Job, job_id).spec

    def report(self, job_id: int) -> dict[str, Any] | None:
        with self.session() as session:
            return session.get_one(Job, job_id).report

    def update(self, job_id: int, **fields: Any) -> None:
        with self.session() as session:
            session.execute(update(Job).where(Job.id == job_id).values(**fields))

    def run_of(self, state_path: Path, started_at: float) -> int | None:
        """The job row a ``rightsize run`` of this state file's job already wrote, if any."""
        with self.session() as session:
            return session.scalar(select(Job.id).where(Job.state_path == str(state_path),
                                                       Job.started_at == started_at))  # fmt: skip

    # -- what a run did ---------------------------------------------------------------
    def ingest(self, job_id: int, state_path: Path) -> None:
        """Copy what the job's state file holds beyond what the store has (:mod:`ingest`)."""
        with self.session() as session:
            ingest.copy_new(session, job_id, state_path)

    def finish(self, job_id: int, phase: JobPhase, report: dict[str, Any] | None,
               error: str | None = None) -> None:  # fmt: skip
        """The job ended: its report, accounting and measured time and core-hours."""
        with self.session() as session:
            row = session.get_one(Job, job_id)
            row.phase, row.error, row.finished_at = str(phase), error, time.time()
            if report is not None:
                row.report, row.accounting = report, report.get("accounting")
                row.measured_time_s = report.get("wall_time_s")
            summary = ingest.summarize(session, job_id)
            row.measured_core_h = summary.core_h
            row.best_samples_per_s = summary.best_samples_per_s
            row.time_to_95_s = summary.time_to_95_s

    def shapes(self, job_id: int) -> list[ShapeView]:
        with self.session() as session:
            rows = session.scalars(select(ShapeRow).where(ShapeRow.job_id == job_id)
                                   .order_by(ShapeRow.seq))  # fmt: skip
            return [ShapeView.model_validate(r, from_attributes=True) for r in rows]

    def samples(self, job_id: int, after_seq: int = 0) -> list[SampleView]:
        query = (select(SampleRow).where(SampleRow.job_id == job_id, SampleRow.seq > after_seq)
                 .order_by(SampleRow.seq).options(selectinload(SampleRow.nodes)))  # fmt: skip
        with self.session() as session:
            return [SampleView.model_validate(r, from_attributes=True)
                    for r in session.scalars(query)]  # fmt: skip

    def queue(self, owner_id: int, phases: tuple[JobPhase, ...] = ()) -> list[QueueRow]:
        """The owner's jobs (in ``phases``, if given) with their newest samples, oldest first:
        the web queue's rows, polled or streamed."""
        views = self.jobs(owner_id, phases)
        latest = self.latest_samples([v.id for v in views])
        return [QueueRow(job=v, latest=latest.get(v.id)) for v in views]

    def latest_samples(self, job_ids: list[int]) -> dict[int, SampleView]:
        """Each job's newest sample (jobs without one are left out), in one query."""
        newest = (select(SampleRow.job_id, func.max(SampleRow.seq).label("seq"))
                  .where(SampleRow.job_id.in_(job_ids)).group_by(SampleRow.job_id).subquery())
        query = (select(SampleRow)
                 .join(newest, and_(SampleRow.job_id == newest.c.job_id,
                                    SampleRow.seq == newest.c.seq))
                 .options(selectinload(SampleRow.nodes)))  # fmt: skip
        with self.session() as session:
            return {row.job_id: SampleView.model_validate(row, from_attributes=True)
                    for row in session.scalars(query)}  # fmt: skip

    def finished_runs(self, workload: str, dataset: str) -> list[RunSummary]:
        """Finished runs of ``workload`` on ``dataset``, newest first, for the history."""
        query = (select(Job).where(Job.workload == workload, Job.dataset == dataset,
                                   Job.phase == str(JobPhase.FINISHED))
                 .order_by(Job.finished_at.desc()))  # fmt: skip
        with self.session() as session:
            return [RunSummary.of(row) for row in session.scalars(query)]

    # -- simulations ------------------------------------------------------------------
    def add_simulation(self, owner_id: int, trace: str, request: dict[str, Any],
                       directory: Path) -> SimulationView:  # fmt: skip
        with self.session() as session:
            row = SimulationRow(owner_id=owner_id, trace=trace, request=request,
                                phase="running", directory=str(directory),
                                created_at=time.time())  # fmt: skip
            session.add(row)
            session.flush()
            return SimulationView.model_validate(row, from_attributes=True)

    def simulations(self, owner_id: int | None = None,
                    phase: str | None = None) -> list[SimulationView]:  # fmt: skip
        query = select(SimulationRow).order_by(SimulationRow.id)
        if owner_id is not None:
            query = query.where(SimulationRow.owner_id == owner_id)
        if phase is not None:
            query = query.where(SimulationRow.phase == phase)
        with self.session() as session:
            return [SimulationView.model_validate(r, from_attributes=True)
                    for r in session.scalars(query)]  # fmt: skip

    def simulation(self, simulation_id: int, owner_id: int) -> SimulationView | None:
        with self.session() as session:
            row = session.get(SimulationRow, simulation_id)
            if row is None or row.owner_id != owner_id:
                return None
            return SimulationView.model_validate(row, from_attributes=True)

    def end_simulation(self, simulation_id: int, result: dict[str, Any] | None,
                       error: str | None) -> None:  # fmt: skip
        with self.session() as session:
            row = session.get_one(SimulationRow, simulation_id)
            row.phase = "failed" if error else "finished"
            row.result, row.error, row.finished_at = result, error, time.time()

    # -- studies ----------------------------------------------------------------------
    def add_study(self, owner_id: int | None, name: str, report: dict[str, Any]) -> StudyView:
        """Keep ``report`` as a study: ``owner_id``'s, or the host's when it is None."""
        with self.session() as session:
            row = StudyRow(owner_id=owner_id, name=name, workload=report["workload"],
                           dataset=report["dataset"], created_at=time.time(), report=report)  # fmt: skip
            session.add(row)
            session.flush()
            return _study(row, whole=False)

    def studies(self, owner_id: int) -> list[StudyView]:
        """The owner's studies and the host's, oldest first."""
        query = select(StudyRow).where(_seen_by(owner_id)).order_by(StudyRow.id)
        with self.session() as session:
            return [_study(row, whole=False) for row in session.scalars(query)]

    def study(self, study_id: int, owner_id: int) -> StudyView | None:
        query = select(StudyRow).where(StudyRow.id == study_id, _seen_by(owner_id))
        with self.session() as session:
            row = session.scalar(query)
            return _study(row, whole=True) if row else None

    def count_jobs(self) -> int:
        with self.session() as session:
            return session.scalar(select(func.count(Job.id))) or 0


def _seen_by(owner_id: int):
    """The studies ``owner_id`` sees: its own and the host's (no owner)."""
    return or_(StudyRow.owner_id == owner_id, StudyRow.owner_id.is_(None))


def _study(row: StudyRow, whole: bool) -> StudyView:
    return StudyView(id=row.id, name=row.name, workload=row.workload, dataset=row.dataset,
                     created_at=row.created_at, best=row.report.get("best", {}),
                     host=row.owner_id is None, report=row.report if whole else None)  # fmt: skip


def workload_of(spec: JobSpec) -> str:
    """The store's ``workload`` of a job: the zoo name or factory, or a script's label."""
    if spec.is_script:
        from rightsize.runtime.script_check import script_label

        return script_label(spec)
    return spec.workload


def dataset_of(spec: JobSpec) -> str:
    """The store's ``dataset``: the workload's, or a script's arguments."""
    if spec.is_script:
        from rightsize.runtime.script_check import args_label

        return args_label(spec)
    return spec.dataset or ""
