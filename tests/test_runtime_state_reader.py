"""The state file's one reader (runtime/state.py's StateReader) on files its writer wrote."""

from __future__ import annotations

import sqlite3

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.status import JobStatus
from rightsize.runtime.state import (
    CheckpointRow,
    LaunchRow,
    StateReader,
    StateStore,
    StateUnreadable,
    StoredEvent,
)

GI = 2**30


def status(step: int) -> dict:
    return {"steps_done": step, "steps_per_s": 1.0, "samples_per_s": 32.0, "nodes": []}


def written(path) -> StateStore:
    """A state file as a master leaves it mid-run: launch, a refused plan, samples, events,
    checkpoints; the writer still holds it open (WAL), as while a job runs."""
    store = StateStore(path)
    shape = ClusterShape.from_counts(1, 1, Resources(1, GI), Resources(1, GI))
    seq = store.start_job("j", {"a": 1}, "abc", 100.0, LaunchRow(shape, "launch", "why", {"n": 1}))
    store.set_transition(seq, 1.5, {"x": 1}, "why (done)")
    store.record_shape(5.0, "add_ps", "no room", ClusterShape(), applied=False)
    for step in (1, 2, 3):
        store.record_sample(float(step), status(step))
    store.record_event(2.5, "worker-0", "oom", "killed")
    store.record_event(2.7, "ps-0", "exit")
    for v in (1, 2):
        store.commit_checkpoint(CheckpointRow(v, float(v), {"epoch": v}, {"ps-0": f"v{v}"}, {}, v))
    return store


def test_the_reader_reads_what_the_writer_wrote_while_the_writer_holds_the_file(tmp_path):
    path = tmp_path / "job.sqlite"
    store = written(path)
    with StateReader(path) as reader:
        assert reader.job() == store.job() and reader.job()["status"] is JobStatus.RUNNING
        assert reader.timeline() == store.timeline()
        numbered = reader.numbered_timeline()
        assert [seq for seq, _ in numbered] == [1, 2] and numbered[1][1]["applied"] is False
        assert reader.current_shape() == store.current_shape()
        assert reader.latest_checkpoint() == store.latest_checkpoint()
        assert reader.latest_checkpoint().files == {"ps-0": "v2"}
        assert reader.samples() == store.samples() and reader.last_sample() == status(3)
        assert [s.seq for s in reader.samples_after(1)] == [2, 3]
        assert reader.samples_after(1)[0].time_s == 2.0
        assert reader.events_after(1) == [StoredEvent(2, 2.7, "ps-0", "exit", "")]
        assert reader.events() == store.events()
    store.record_sample(4.0, status(4))  # the master goes on; a new reader sees it
    with StateReader(path) as reader:
        assert reader.last_sample() == status(4)
    store.close()


def test_the_reader_never_writes(tmp_path):
    path = tmp_path / "job.sqlite"
    written(path).close()
    before = path.read_bytes()
    with StateReader(path) as reader:
        reader.timeline()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.db.execute("DELETE FROM samples")
    assert path.read_bytes() == before


def test_a_file_not_there_yet_is_unreadable_and_is_not_created(tmp_path):
    path = tmp_path / "job.sqlite"
    with pytest.raises(StateUnreadable):
        StateReader(path, timeout_s=0.1).job()
    assert not path.exists()


def test_a_file_being_created_is_unreadable(tmp_path):
    path = tmp_path / "job.sqlite"
    sqlite3.connect(path).close()  # an empty file: the writer has not made its tables yet
    with StateReader(path, timeout_s=0.1) as reader, pytest.raises(StateUnreadable):
        reader.last_sample()
    with StateReader(path) as reader:  # a fresh state file, no job yet
        StateStore(path).close()
        assert reader.job() is None and reader.last_sample() is None
