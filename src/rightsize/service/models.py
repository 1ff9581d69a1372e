"""The store's tables (SQLAlchemy 2): tokens, jobs, and what each run did.

A job row holds what was asked (the spec, the owner, the policy) and what came of it
(status, times, the exactly-once accounting, predicted against measured time and
cost). A run's shapes, metric samples (per node too) and node events are rows of
their own, copied from the job's state file as it runs (:mod:`ingest`): the state
file is the master's, written before the step it allows to resume; the store is the
history everyone else reads. The schema is made by Alembic's migrations
(``migrations/``), never by ``create_all``, so that a store written by an older
rightsize is upgraded in place.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from rightsize.core.status import JobStatus


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


#: Where a job is: the scheduler's queues (NEARCHUS §IV) and how it ended. The ``phase``
#: columns hold rightsize's one job-status vocabulary (core/status.py) verbatim, so the
#: store's phases are that enum under the name its callers know.
JobPhase = JobStatus


class Source(StrEnum):
    SERVICE = "service"  # submitted to ``rightsize serve``
    RUN = "run"  # ``rightsize run`` on this machine


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the token
    created_at: Mapped[float] = mapped_column(Float)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("tokens.id"), index=True)
    source: Mapped[str] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(200))
    instance_type: Mapped[str | None] = mapped_column(String(64))  # the host's, if declared
    phase: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    dataset: Mapped[str] = mapped_column(String(200))
    batch_size: Mapped[int] = mapped_column(Integer)
    samples_total: Mapped[float | None] = mapped_column(Float)  # what it trains, when known
    parameters: Mapped[int | None] = mapped_column(BigInteger)  # model size, for similarity
    policy: Mapped[str] = mapped_column(String(64))
    state_path: Mapped[str] = mapped_column(Text)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    launch_source: Mapped[str | None] = mapped_column(String(16))  # history | prediction | policy | job file
    launch_note: Mapped[str | None] = mapped_column(Text)
    predicted_time_s: Mapped[float | None] = mapped_column(Float)
    predicted_core_h: Mapped[float | None] = mapped_column(Float)
    predicted_note: Mapped[str | None] = mapped_column(Text)  # what the prediction rests on
    measured_time_s: Mapped[float | None] = mapped_column(Float)
    measured_core_h: Mapped[float | None] = mapped_column(Float)
    best_samples_per_s: Mapped[float | None] = mapped_column(Float)
    time_to_95_s: Mapped[float | None] = mapped_column(Float)  # to 95% of its best throughput
    accounting: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)

    shapes: Mapped[list[ShapeRow]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="ShapeRow.seq"
    )


class ShapeRow(Base):
    """One timeline row: a shape the job took (or was refused), its reason and transition."""

    __tablename__ = "shapes"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)  # the state file's timeline seq
    time_s: Mapped[float] = mapped_column(Float)
    action: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text)
    shape: Mapped[dict[str, Any]] = mapped_column(JSON)
    applied: Mapped[bool]
    transition_s: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)

    job: Mapped[Job] = relationship(back_populates="shapes")


class SampleRow(Base):
    """One metric interval of a job: its throughput and loss; per node in NodeSampleRow."""

    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    time_s: Mapped[float] = mapped_column(Float)
    steps_done: Mapped[int] = mapped_column(Integer)
    steps_per_s: Mapped[float] = mapped_column(Float)
    samples_per_s: Mapped[float] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float)
    e_job: Mapped[float | None] = mapped_column(Float)
    shape: Mapped[str] = mapped_column(Text)

    nodes: Mapped[list[NodeSampleRow]] = relationship(cascade="all, delete-orphan")


class NodeSampleRow(Base):
    __tablename__ = "node_samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    sample_id: Mapped[int] = mapped_column(ForeignKey("samples.id", ondelete="CASCADE"), index=True)
    node: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    cpu_used: Mapped[float] = mapped_column(Float)
    cpu_allocated: Mapped[float] = mapped_column(Float)
    memory_used: Mapped[int] = mapped_column(BigInteger)
    memory_allocated: Mapped[int] = mapped_column(BigInteger)
    net_in: Mapped[float] = mapped_column(Float)
    net_out: Mapped[float] = mapped_column(Float)
    steps_per_s: Mapped[float] = mapped_column(Float)


class EventRow(Base):
    """A node's failure or OOM kill."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    time_s: Mapped[float] = mapped_column(Float)
    node: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(Text)


class SimulationRow(Base):
    """A `rightsize simulate` run started from the web pages: what was asked, its results."""

    __tablename__ = "simulations"

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"), index=True)
    trace: Mapped[str] = mapped_column(String(200))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    phase: Mapped[str] = mapped_column(String(16))  # running, finished, failed
    directory: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)


class StudyRow(Base):
    """A `rightsize tune` search's report: written by the search itself, or uploaded.

    ``owner_id`` is None for a search run on the host without a token: the host's, seen by
    every token (as anyone who can write the store can read it).
    """

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("tokens.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    workload: Mapped[str] = mapped_column(String(200))
    dataset: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Float)
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
