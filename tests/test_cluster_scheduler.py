"""The scheduler's queues and books: FCFS and SJF order, strict admission, freed capacity."""

from dataclasses import dataclass

import pytest

from rightsize.cluster.scheduler import Scheduler, SchedulingOrder
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
    assert s.order is SchedulingOrder.SJF  # a name is read as the mode
    with pytest.raises(UnknownNameError, match="scheduling order 'lifo'; choose one of: fcfs, sjf"):
        Scheduler(Resources(10), order="lifo")
    with pytest.raises(UnknownNameError, match="order 'sfj'; did you mean 'sjf'"):
        Scheduler(Resources(10), order="sfj")


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
    s.allocate("a", Resources(30))
    assert s.free() == Resources(0) and s.allocated == Resources(30)
    assert s.holds("a") and s.held("a") == Resources(30) and not s.holds("b")
    with pytest.raises(RuntimeError, match="exceeds the cluster"):
        s.allocate("a", Resources(31))
    s.allocate("a", Resources(30.002), slack_cores=0.003)  # millicore rounding is tolerated
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


def test_a_job_leaves_by_the_schedulers_own_verbs():
    """fail: from either queue, what it held freed; cancel: a waiting job by name, into no
    other queue; neither during an admission (the callback only answers)."""
    s = Scheduler(Resources(10))
    running, waiting, behind = Job("r", 0, 1, needs=6), Job("w", 1, 1, needs=6), Job("b", 2, 1)
    for job in (running, waiting, behind):
        s.submit(job)
    s.admit(launch)
    s.fail(running)
    assert s.running == [] and s.allocated == Resources() and s.finished == [running]
    assert s.cancel("nobody") is None
    assert s.cancel("w") is waiting and s.waiting == [behind] and s.finished == [running]
    s.fail(behind)  # a waiting job that cannot run at all
    assert s.waiting == [] and s.finished == [running, behind]
