"""A job as it changes, streamed: server-sent events for the run page and ``job --follow``.

``GET /jobs/{name}/events`` answers ``text/event-stream``. Each event names what changed,
with the same JSON the other routes give for it:

    event: job       data: JobView      (first, then whenever a field of it changes)
    event: shape     data: ShapeView    (a new timeline row, or one whose timing filled in)
    event: sample    data: SampleView   (each metric sample after ``after``, in order)
    event: end       data: JobView      (the job is done; the stream closes)

and ``GET /queue/events`` one event, ``queue`` with ``GET /queue``'s list, whenever any of
the owner's jobs or their newest samples change (it never ends; the page closes it).

The store is the one source (the service copies each job's state file into it as the job
runs), so the stream reads it every ``poll_s`` and sends only what is new; a comment line
every ``heartbeat_s`` keeps proxies and the client's read timeout from closing a quiet
stream. Reads run in the thread pool, and the wait between them is an ``await``: a
following client holds no thread while nothing changes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from rightsize.service.models import JobPhase
from rightsize.service.schemas import JobView, SampleView, ShapeView
from rightsize.service.store import Store

#: How often the store is read for changes (the metric interval is 1-2 s).
POLL_S = 0.5
#: A comment line at least this often, so that a quiet stream is not taken for a dead one.
HEARTBEAT_S = 10.0


def event(name: str, payload: BaseModel) -> str:
    """One server-sent event: its name and its JSON on one ``data:`` line."""
    return f"event: {name}\ndata: {payload.model_dump_json()}\n\n"


@dataclass
class Seen:
    """What a stream has sent so far (each stream its own)."""

    job: JobView | None = None
    sample_seq: int = 0
    shapes: dict[int, ShapeView] | None = None


def changes(store: Store, job_id: int, seen: Seen) -> list[str]:
    """The events for what changed in the store since ``seen`` (updated in place)."""
    out = []
    job = store.job_by_id(job_id)
    if job is not None and job != seen.job:
        seen.job = job
        out.append(event("job", job))
    shapes = {s.seq: s for s in store.shapes(job_id)}
    for seq, shape in shapes.items():
        if (seen.shapes or {}).get(seq) != shape:
            out.append(event("shape", shape))
    seen.shapes = shapes
    samples: list[SampleView] = store.samples(job_id, seen.sample_seq)
    for sample in samples:
        out.append(event("sample", sample))
    if samples:
        seen.sample_seq = samples[-1].seq
    return out


async def polled(read: Callable[[], tuple[list[str], bool]], poll_s: float,
                 heartbeat_s: float) -> AsyncIterator[str]:  # fmt: skip
    """Every stream's loop: ``read()`` (in the thread pool) gives the events to send and
    whether the stream ends after them; a comment line when nothing was sent for
    ``heartbeat_s``; an ``await`` between reads."""
    quiet_since = time.monotonic()
    while True:
        found, ended = await run_in_threadpool(read)
        for text in found:
            yield text
        now = time.monotonic()
        if found:
            quiet_since = now
        elif now - quiet_since >= heartbeat_s:
            yield ": still here\n\n"
            quiet_since = now
        if ended:
            return
        await asyncio.sleep(poll_s)


def stream(store: Store, job_id: int, after: int = 0, poll_s: float = POLL_S,
           heartbeat_s: float = HEARTBEAT_S) -> AsyncIterator[str]:  # fmt: skip
    """The job's events until it is done (then ``end``)."""
    seen = Seen(sample_seq=after)

    def read() -> tuple[list[str], bool]:
        found = changes(store, job_id, seen)
        if seen.job is None or JobPhase(seen.job.phase).done:
            return found + ([event("end", seen.job)] if seen.job is not None else []), True
        return found, False

    return polled(read, poll_s, heartbeat_s)


def queue_stream(store: Store, owner_id: int, poll_s: float = POLL_S,
                 heartbeat_s: float = HEARTBEAT_S) -> AsyncIterator[str]:  # fmt: skip
    """The owner's queue each time it changes, until the client goes away."""
    sent: str | None = None  # the last rows sent, as JSON

    def read() -> tuple[list[str], bool]:
        nonlocal sent
        text = json.dumps([row.model_dump(mode="json") for row in store.queue(owner_id)])
        if text == sent:
            return [], False
        sent = text
        return [f"event: queue\ndata: {text}\n\n"], False

    return polled(read, poll_s, heartbeat_s)
