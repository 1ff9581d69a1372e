"""A job as it changes, streamed (service/live.py): what the run page and `job --follow` read."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from rightsize.core.resources import Resources  # noqa: E402
from rightsize.core.shape import ClusterShape  # noqa: E402
from rightsize.runtime.state import LaunchRow, StateStore  # noqa: E402
from rightsize.service import live  # noqa: E402
from rightsize.service.allocator import Allocator  # noqa: E402
from rightsize.service.app import create_app  # noqa: E402
from rightsize.service.models import JobPhase, Source  # noqa: E402
from rightsize.service.store import Store  # noqa: E402
from test_service_store import _status, spec  # noqa: E402

GI = 2**30


def running_job(store: Store, tmp_path, samples: int, owner_id=None):
    state = StateStore(tmp_path / "job.sqlite")
    shape = ClusterShape.from_counts(1, 1, Resources(0.5, GI), Resources(0.5, GI))
    seq = state.start_job("job", {}, "id", 100.0, LaunchRow(shape, "launch", "first", {}))
    for step in range(1, samples + 1):
        state.record_sample(float(step), _status(step, 1.0))
    job = store.add_job(spec(), owner_id=owner_id, source=Source.RUN, phase=JobPhase.RUNNING,
                        state_path=tmp_path / "job.sqlite", policy="static")  # fmt: skip
    store.ingest(job.id, tmp_path / "job.sqlite")
    return job, state, seq


def parse(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = [ln for ln in block.splitlines() if not ln.startswith(":")]
        if lines:
            name = lines[0].removeprefix("event: ")
            events.append((name, json.loads(lines[1].removeprefix("data: "))))
    return events


def test_the_stream_sends_what_changes_as_it_changes_and_ends_with_the_job(tmp_path):
    store = Store(str(tmp_path / "store.db"))
    job, state, seq = running_job(store, tmp_path, samples=2)
    state.close()

    def later():  # the runner goes on: its launch timing, two more samples, then the end
        time.sleep(0.3)
        state = StateStore(tmp_path / "job.sqlite")  # SQLite: this thread's own connection
        state.set_transition(seq, 4.5, {}, "first, launched")
        for step in (3, 4):
            state.record_sample(float(step), _status(step, 2.0))
        state.close()
        store.ingest(job.id, tmp_path / "job.sqlite")
        time.sleep(0.3)
        store.finish(job.id, JobPhase.FINISHED, {"wall_time_s": 4.0})

    async def collect():
        texts = []

        async def read():
            async for text in live.stream(store, job.id, poll_s=0.05, heartbeat_s=0.1):
                texts.append(text)

        await asyncio.wait_for(read(), 30)  # a stream that never ends fails, not hangs
        return texts

    writer = threading.Thread(target=later)
    writer.start()
    texts = asyncio.run(collect())
    writer.join()
    events = parse("".join(texts))
    names = [name for name, _ in events]
    assert names[0] == "job" and names[-1] == "end" and events[-1][1]["phase"] == "finished"
    assert [d["seq"] for n, d in events if n == "sample"] == [1, 2, 3, 4]  # each once, in order
    shapes = [d for n, d in events if n == "shape"]
    assert [s["transition_s"] for s in shapes] == [None, 4.5]  # sent again once it filled in
    assert any(t.startswith(": still here") for t in texts)  # quiet spells keep the line alive
    store.close()


def test_the_events_route_is_the_owners_and_starts_after_a_sample(tmp_path):
    store = Store(str(tmp_path / "store.db"))
    allocator = Allocator(store, Resources(1.5, 8 * GI), tmp_path / "work")
    client = TestClient(create_app(store, allocator))
    alice, bob = store.create_token("alice"), store.create_token("bob")
    job, state, _ = running_job(store, tmp_path, samples=3, owner_id=store.owner(alice))
    store.finish(job.id, JobPhase.FINISHED, {"wall_time_s": 3.0})
    answer = client.get("/jobs/job/events?after=1", headers={"Authorization": f"Bearer {alice}"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = parse(answer.text)
    assert [d["seq"] for n, d in events if n == "sample"] == [2, 3]
    assert events[-1][0] == "end"
    assert client.get("/jobs/job/events", headers={"Authorization": f"Bearer {bob}"}).status_code == 404
    assert client.get("/jobs/job/events").status_code == 401
    state.close()
    store.close()


def test_the_queue_stream_sends_the_rows_again_when_they_change(tmp_path):
    store = Store(str(tmp_path / "store.db"))
    owner = store.owner(store.create_token("alice"))
    job, state, _ = running_job(store, tmp_path, samples=2, owner_id=owner)
    state.close()

    async def first_two():
        events = []
        stream = live.queue_stream(store, owner, poll_s=0.05, heartbeat_s=0.1)
        async for text in stream:
            if text.startswith("event: queue"):
                events.append(json.loads(text.split("data: ", 1)[1]))
                if len(events) == 1:  # the job ends: the rows change, and are sent again
                    await asyncio.to_thread(store.finish, job.id, JobPhase.FINISHED,
                                            {"wall_time_s": 2.0})  # fmt: skip
                if len(events) == 2:
                    await stream.aclose()
                    return events
        return events

    events = asyncio.run(asyncio.wait_for(first_two(), 30))
    assert [[r["job"]["phase"] for r in rows] for rows in events] == [["running"], ["finished"]]
    assert events[0][0]["latest"]["seq"] == 2
    store.close()
