"""Recovery when failures overlap: a worker that meets a reset between tasks, and a
parameter-server restore interrupted by another node's death.

Both were found by a real hang of the PS-kill fault test (1 of 7 runs in a loop): the
master's restore queued a ``reset`` for each worker, a worker read it in a lease reply
outside its training loop and died of the uncaught ``Reset``, its death interrupted
the restore, and the next recovery relaunched the worker but never reopened the
leases — every node then waited for the others.
"""

from types import SimpleNamespace

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime import lifecycle
from rightsize.runtime.worker import Reset, Stop, Worker


def idle_worker(*replies: dict) -> Worker:
    """A worker between tasks whose master answers with ``replies`` in turn."""
    worker = object.__new__(Worker)  # no model, no sockets: only the command handling
    answers = iter(replies)
    worker.ctx = SimpleNamespace(call=lambda method, **_header: next(answers))
    worker.cluster = SimpleNamespace(generation=3)
    worker.paused = False
    return worker


def test_every_command_is_obeyed_before_a_reset_is_raised():
    worker = idle_worker()
    worker.paused = True
    with pytest.raises(Reset):
        worker.follow({"commands": [{"cmd": "reset"}, {"cmd": "resume"}]})
    assert worker.paused is False  # the resume after the reset was not lost
    with pytest.raises(Stop):  # nor a stop: commands are sent once
        worker.follow({"commands": [{"cmd": "reset"}, {"cmd": "stop"}]})


def test_a_reset_between_tasks_keeps_the_lease_that_came_with_it():
    lease = {"task": [0, 1, 0, 8], "next_batch": 0}
    worker = idle_worker({"commands": [{"cmd": "reset"}], "lease": lease})
    assert worker.ask_for_task()["lease"] == lease


def test_a_reset_while_paused_between_tasks_is_not_fatal():
    worker = idle_worker({"commands": [{"cmd": "reset"}]}, {"commands": [], "lease": None})
    worker.paused = True
    # hold() heartbeats, meets the reset, and the worker goes on to ask for a task
    assert worker.ask_for_task() == {"commands": [], "lease": None}


def fake_master(leasing: bool, dead: set[str]):
    node = Resources(cpu_cores=0.5, memory_bytes=2**30)
    shape = ClusterShape(
        (NodeSpec("ps-0", NodeRole.PS, node), NodeSpec("worker-0", NodeRole.WORKER, node))
    )
    alive = {name: SimpleNamespace(alive=name not in dead) for name in ("ps-0", "worker-0")}
    return SimpleNamespace(
        shape=shape, nodes=SimpleNamespace(get=alive.get), to_recover=set(dead), restarts={},
        spec=SimpleNamespace(runtime=SimpleNamespace(max_restarts=3)),
        strategy=Strategy.PS, leasing=leasing,
    )  # fmt: skip


@pytest.mark.parametrize(
    "leasing, dead, restored, relaunched",
    [
        (False, {"worker-0"}, True, ["worker-0"]),  # the hang: restore interrupted by a worker
        (False, set(), True, []),  # interrupted, and nothing else dead
        (True, {"worker-0"}, False, ["worker-0"]),  # a plain worker death
        (True, {"ps-0"}, True, []),
    ],
)
def test_recovery_redoes_an_interrupted_restore(monkeypatch, leasing, dead, restored, relaunched):
    calls = []
    monkeypatch.setattr(
        lifecycle, "restore_ps", lambda m, reason: calls.append(("restore", reason))
    )
    monkeypatch.setattr(
        lifecycle, "relaunch_workers",
        lambda m, workers, reason: calls.append(("relaunch", [w.name for w in workers])),
    )  # fmt: skip
    lifecycle.recover(fake_master(leasing, dead))
    assert any(kind == "restore" for kind, _ in calls) == restored
    assert [names for kind, names in calls if kind == "relaunch"] == [relaunched]
