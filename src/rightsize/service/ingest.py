"""Copying a run's state file into the store, and what the copied samples say.

The master writes its state file (runtime/state.py) before the step it allows to
resume; the store copies it through that module's read-only reader (this module knows
the store's tables, not the state file's) as the job runs and when it ends: samples
and events are appended past the highest ``seq`` the store holds (the state file's
sequence numbers never go back), the timeline is copied whole each time (a row's
transition time and reason are filled in after it is written, and a job has tens of
rows, not thousands).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from rightsize.runtime.records import NodeReading, ProgressStatus
from rightsize.runtime.state import StateReader, StateUnreadable
from rightsize.service.models import EventRow, NodeSampleRow, SampleRow, ShapeRow

#: The share of its best throughput a job must reach (issue 19: "95% of its best").
NEAR_BEST = 0.95
#: Samples in the running median that a job's throughput is read from (one spike is not a best).
SMOOTH_SAMPLES = 3


def copy_new(session: Session, job_id: int, state_path: Path) -> None:
    """Copy into ``session`` what ``state_path`` holds beyond the store's rows of ``job_id``."""
    if not state_path.exists():
        return
    try:
        with StateReader(state_path) as source:
            _copy_timeline(session, job_id, source)
            _copy_samples(session, job_id, source)
            _copy_events(session, job_id, source)
    except StateUnreadable:
        return  # a state file being created right now: the next copy gets it


def _copy_timeline(session: Session, job_id: int, source: StateReader) -> None:
    rows = source.numbered_timeline()
    session.execute(delete(ShapeRow).where(ShapeRow.job_id == job_id))
    session.add_all(
        ShapeRow(job_id=job_id, seq=seq, time_s=row["time_s"], action=row["action"],
                 reason=row["reason"], shape=row["shape"], applied=row["applied"],
                 transition_s=row["transition_s"], details=row["details"])
        for seq, row in rows
    )  # fmt: skip


def _copy_samples(session: Session, job_id: int, source: StateReader) -> None:
    last = session.scalar(select(func.max(SampleRow.seq)).where(SampleRow.job_id == job_id))
    for sample in source.samples_after(last or 0):
        status = ProgressStatus.from_json(sample.status)
        session.add(SampleRow(
            job_id=job_id, seq=sample.seq, time_s=sample.time_s,
            steps_done=status.steps_done, steps_per_s=status.steps_per_s,
            samples_per_s=status.samples_per_s, loss=status.loss, e_job=status.e_job,
            shape=status.shape, nodes=[_node_row(n) for n in status.nodes],
        ))  # fmt: skip


def _node_row(node: NodeReading) -> NodeSampleRow:
    # the store's columns are named as the state file's keys (no units), fixed by migration
    return NodeSampleRow(node=node.name, role=node.role, cpu_used=node.cpu_used_cores,
                         cpu_allocated=node.cpu_allocated_cores,
                         memory_used=node.memory_used_bytes,
                         memory_allocated=node.memory_allocated_bytes,
                         net_in=node.net_in_bytes_per_s, net_out=node.net_out_bytes_per_s,
                         steps_per_s=node.steps_per_s)  # fmt: skip


def _copy_events(session: Session, job_id: int, source: StateReader) -> None:
    last = session.scalar(select(func.max(EventRow.seq)).where(EventRow.job_id == job_id))
    for event in source.events_after(last or 0):
        session.add(EventRow(job_id=job_id, seq=event.seq, time_s=event.time_s, node=event.node,
                             kind=event.kind, detail=event.detail or ""))  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """What a run's samples say: core-hours it held, its best throughput and when it got near."""

    core_h: float | None
    best_samples_per_s: float | None
    time_to_95_s: float | None


def summarize(session: Session, job_id: int) -> Summary:
    rows = session.execute(
        select(SampleRow.id, SampleRow.time_s, SampleRow.samples_per_s)
        .where(SampleRow.job_id == job_id).order_by(SampleRow.seq)
    ).all()  # fmt: skip
    if not rows:
        return Summary(None, None, None)
    allocated = dict(session.execute(
        select(NodeSampleRow.sample_id, func.sum(NodeSampleRow.cpu_allocated))
        .where(NodeSampleRow.sample_id.in_([r.id for r in rows]))
        .group_by(NodeSampleRow.sample_id)
    ).all())  # fmt: skip
    core_s, previous = 0.0, 0.0
    for row in rows:
        core_s += allocated.get(row.id, 0.0) * (row.time_s - previous)
        previous = row.time_s
    times = [r.time_s for r in rows]
    best, reached = time_to_near_best([r.samples_per_s for r in rows], times)
    return Summary(core_s / 3600, best, reached)


def time_to_near_best(speeds: list[float], times: list[float]) -> tuple[float | None, float | None]:
    """The best running median of ``speeds`` and the first time it reached
    :data:`NEAR_BEST` of it."""
    if len(speeds) < SMOOTH_SAMPLES:
        return None, None
    smooth = [statistics.median(speeds[i - SMOOTH_SAMPLES + 1 : i + 1])
              for i in range(SMOOTH_SAMPLES - 1, len(speeds))]  # fmt: skip
    best = max(smooth)
    if best <= 0:
        return None, None
    first = next(i for i, s in enumerate(smooth) if s >= NEAR_BEST * best)
    return best, times[first + SMOOTH_SAMPLES - 1]
