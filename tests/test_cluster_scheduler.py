"""The scheduler's queues and books: FCFS and SJF order, strict admission, freed capacity."""

from dataclasses import dataclass

import pytest

from rightsize.cluster.scheduler import Scheduler
from rightsize.core.errors import UnknownNameError
from rightsize.core.resources import Resources


@dataclass
class Job:
    name: str
    arrival_s: float
    work_core_s: float
    needs: float = 10.0


def launch(job, free):
    """A job starts when its whole need is free."""
    return Resources(job.needs) if job.needs <= free.cpu_cores else None


def test_fcfs_admits_in_arrival_order_and_a_blocked_head_blocks_the_queue():
    s = Scheduler(Resources(25))
    s.submit(Job("b", 2, 1, needs=10))
    s.submit(Job("a", 1, 5, needs=10))
    s.submit(Job("c", 3, 1, needs=10))
    started = s.admit(launch)
    assert [j.name for j in started] == ["a", "b"]  # c needs 10, only 5 left
    assert [j.name for j in s.waiting] == ["c"] and s.free() == Resources(5)
    big = Job("big", 4, 1, needs=20)
    s.submit(big)
    s.finish(started[0])
    assert [j.name for j in s.admit(launch)] == ["c"]  # then big waits for 20
    assert s.waiting == [big]


def test_sjf_admits_the_least_work_first():
    s = Scheduler(Resources(10), order="sjf")
    for job in (Job("long", 1, 100), Job("short", 2, 1), Job("mid", 3, 10)):
        s.submit(job)
    assert [j.name for j in s.waiting] == ["short", "mid", "long"]
    with pytest.raises(UnknownNameError, match="scheduling order"):
        Scheduler(Resources(10), order="lifo")


def test_running_jobs_get_no_cpu_while_anyone_waits():
    s = Scheduler(Resources(30, 100))
    first = Job("first", 0, 1, needs=20)
    s.submit(first)
    s.admit(launch)
    assert s.free_for_running() == Resources(10, 100)
    s.submit(Job("second", 1, 1, needs=20))
    s.admit(launch)
    assert s.free_for_running() == Resources(0, 100)  # memory only, the queue gets the cpu
    s.finish(first)
    assert [j.name for j in s.admit(launch)] == ["second"]


def test_allocations_are_checked_against_what_is_free():
    s = Scheduler(Resources(30))
    job = Job("a", 0, 1)
    s.submit(job)
    s.admit(launch)
    s.allocate(job, Resources(30))
    assert s.free() == Resources(0) and s.allocated == Resources(30)
    with pytest.raises(RuntimeError, match="exceeds the cluster"):
        s.allocate(job, Resources(31))
    s.allocate(job, Resources(30.002), slack_cores=0.003)  # millicore rounding is tolerated
    s.finish(job)
    assert s.allocated.cpu_cores == pytest.approx(0) and s.finished == [job]


def test_a_fair_share_splits_the_capacity_among_every_job_that_wants_to_run():
    s = Scheduler(Resources(8))
    assert s.fair_share_cores() == 8  # no one else: all of it
    for i in range(3):
        s.submit(Job(f"w{i}", i, 1, needs=2))
    assert s.fair_share_cores() == pytest.approx(8 / 3)
    s.admit(launch)  # all three run: they still want their share
    s.submit(Job("late", 9, 1, needs=2))
    assert s.fair_share_cores() == 2
    for i in range(4):
        s.submit(Job(f"x{i}", 10 + i, 1))
    assert s.fair_share_cores(floor_cores=1.5) == 1.5  # 8 / 8 is below the floor
