"""Recovery when failures overlap, decided on a job state built by hand (no processes).

- A worker that meets a reset between tasks, and a parameter-server restore interrupted
  by another node's death: both were found by a real hang of the PS-kill fault test (1 of
  7 runs in a loop).
- A worker that registers while the servers restore: it used to be told "generation -1"
  while its context took the master's generation, so it trained against no server and
  the master accepted its progress (issue 16: 53-100% of sample-epochs silently lost).
  Now it has no cluster, asks for no lease and is granted none until it has one.
"""

from types import SimpleNamespace

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.clock import FakeClock
from rightsize.runtime.jobstate import IllegalTransition, JobState, NodeFailedTooOften, Phase
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.protocol import (
    Grant,
    Heartbeat,
    LeaseRequest,
    Load,
    Message,
    Progress,
    PSConfig,
    Register,
    Reply,
    Reset,
    Resume,
    Role,
    Sender,
    Stop,
)
from rightsize.runtime.rpc import NodeService
from rightsize.runtime.shards import ShardPlan, StragglerRule, Task
from rightsize.runtime.worker import ResetLease, StopWorker, Worker

NODE = Resources(cpu_cores=0.5, memory_bytes=2**30)


def idle_worker(*replies: Reply) -> Worker:
    """A worker between tasks whose master answers with ``replies`` in turn."""
    worker = object.__new__(Worker)  # no model, no sockets: only the command handling
    answers = iter(replies)
    worker.ctx = SimpleNamespace(call=lambda body: (next(answers), []))
    worker.cluster = SimpleNamespace(generation=3)
    worker.paused = False
    return worker


def test_every_command_is_obeyed_before_a_reset_is_raised():
    worker = idle_worker()
    worker.paused = True
    with pytest.raises(ResetLease):
        worker.follow(Reply(commands=(Reset(), Resume())))
    assert worker.paused is False  # the resume after the reset was not lost
    with pytest.raises(StopWorker):  # nor a stop: commands are sent once
        worker.follow(Reply(commands=(Reset(), Stop())))


def test_a_reset_between_tasks_keeps_the_lease_that_came_with_it():
    lease = Grant(Task(0, 1, 0, 8), 0)
    worker = idle_worker(Reply(commands=(Reset(),), lease=lease))
    assert worker.ask_for_task()[0].lease == lease


def test_a_reset_while_paused_between_tasks_is_not_fatal():
    worker = idle_worker(Reply(commands=(Reset(),)), Reply())
    worker.paused = True
    # hold() heartbeats, meets the reset, and the worker goes on to ask for a task
    assert worker.ask_for_task()[0] == Reply()


# -- a job state built by hand ----------------------------------------------------------------
def ps_job(phase: Phase = Phase.TRAINING, generation: int = 2) -> JobState:
    """One PS serving ``w`` and one worker slot; the job in ``phase`` at ``generation``."""
    job = JobState(ShardPlan(64, 16, 8, epochs=1), Strategy.PS, {"w": 16})
    job.shape = ClusterShape((NodeSpec("ps-0", NodeRole.PS, NODE),
                              NodeSpec("worker-0", NodeRole.WORKER, NODE)))  # fmt: skip
    job.generation, job.phase = generation, phase
    job.place_on(["ps-0"])
    ps = NodeState(job.shape.ps[0], pid=100, launched_s=0.0, status=Status.RUNNING,
                   address="tcp://127.0.0.1:1")  # fmt: skip
    ps.generation = generation - 1 if phase == Phase.RESTORING else generation
    job.nodes.add(ps)
    job.nodes.add(NodeState(job.shape.workers[0], pid=200, launched_s=0.0))
    return job


def service(job: JobState) -> NodeService:
    return NodeService(job, {"name": "t"}, lambda node: 1, StragglerRule(), FakeClock())


def from_worker(body, generation, pid=200) -> Message:
    return Message(Sender("worker-0", pid, generation), body)


def test_a_worker_registering_during_a_restore_gets_no_cluster_and_no_lease():
    job = ps_job(Phase.RESTORING)
    answers = service(job)
    reply, _ = answers.handle(from_worker(Register(Role.WORKER), None))
    assert reply.config is not None and reply.cluster is None  # no cluster exists yet
    reply, tensors = answers.handle(from_worker(LeaseRequest(), None))
    assert reply.lease is None and not tensors
    # the restore ends: the server serves generation 2 and leases open
    answers.handle(Message(Sender("ps-0", 100, 2), Heartbeat()))
    job.move_to(Phase.TRAINING)
    reply, _ = answers.handle(from_worker(Heartbeat(), None))
    assert reply.cluster is not None and reply.cluster.generation == 2
    assert reply.cluster.servers == {"ps-0": "tcp://127.0.0.1:1"}
    reply, _ = answers.handle(from_worker(LeaseRequest(), None))  # not switched yet: nothing
    assert reply.lease is None
    reply, tensors = answers.handle(from_worker(LeaseRequest(), 2))
    assert reply.lease is not None and len(tensors[0]) == 16


def test_progress_from_another_generation_is_not_accepted():
    job = ps_job()
    answers = service(job)
    answers.handle(from_worker(Register(Role.WORKER), None))
    lease = answers.handle(from_worker(LeaseRequest(), 2))[0].lease
    stale = answers.handle(from_worker(Progress(lease.task, 1), 1))[0]
    assert stale.accepted is False and job.shards.batches_done == 0
    fresh = answers.handle(from_worker(Progress(lease.task, 1), 2))[0]
    assert fresh.accepted is True and job.shards.batches_done == 1


def test_a_predecessor_process_is_told_to_stop():
    job = ps_job()
    reply, _ = service(job).handle(from_worker(Heartbeat(), 2, pid=999))
    assert reply.stop


def test_a_halted_job_pauses_workers_and_resumes_them_after():
    job = ps_job()
    answers = service(job)
    answers.handle(from_worker(Register(Role.WORKER), None))
    job.move_to(Phase.HALTED)
    reply, _ = answers.handle(from_worker(LeaseRequest(), 2))
    assert reply.lease is None and any(c.cmd == "pause" for c in reply.commands)
    job.move_to(Phase.TRAINING)
    reply, _ = answers.handle(from_worker(Heartbeat(paused=True), 2))
    assert [c.cmd for c in reply.commands] == ["resume"]


# -- phases and recovery decisions --------------------------------------------------------------
def test_transitions_outside_the_table_fail_loudly():
    job = ps_job()
    job.move_to(Phase.FINISHING)
    job.move_to(Phase.FINISHED)
    with pytest.raises(IllegalTransition):
        job.move_to(Phase.TRAINING)
    with pytest.raises(IllegalTransition):
        ps_job(Phase.RESTORING).move_to(Phase.HALTED)  # no repartition while restoring


@pytest.mark.parametrize(
    "phase, dead, restore, relaunch",
    [
        (Phase.RESTORING, {"worker-0"}, True, ["worker-0"]),  # a restore cut by a worker's death
        (Phase.RESTORING, set(), True, []),  # cut, and nothing else dead
        (Phase.TRAINING, {"worker-0"}, False, ["worker-0"]),  # a plain worker death
        (Phase.TRAINING, {"ps-0"}, True, []),
        (Phase.TRAINING, {"ps-0", "worker-0"}, True, ["worker-0"]),  # two deaths within seconds
    ],
)
def test_recovery_restores_and_relaunches(phase, dead, restore, relaunch):
    job = ps_job(phase)
    for name in dead:
        job.nodes.get(name).move_to(Status.DEAD)
    job.to_recover = set(dead)
    recovery = job.recovery(max_restarts=3)
    assert recovery.restore_ps == restore
    assert [w.name for w in recovery.workers] == relaunch
    assert job.restarts == dict.fromkeys(dead, 1)


def test_nothing_to_recover_and_too_many_failures():
    job = ps_job()
    assert job.recovery(max_restarts=3) is None
    job.nodes.get("worker-0").move_to(Status.DEAD)
    job.last_exit["worker-0"] = "OOM-killed at its memory limit of 96Mi"
    job.to_recover = {"worker-0"}
    assert job.recovery(max_restarts=1).workers  # the first failure is within the limit
    job.to_recover = {"worker-0"}
    with pytest.raises(NodeFailedTooOften, match="worker-0 failed 2 times.*OOM-killed"):
        job.recovery(max_restarts=1)


def test_a_restore_after_an_abandoned_repartition_places_on_the_shape():
    job = ps_job()
    job.placement = {"w": "ps-9"}  # a server of the plan that never finished
    assert job.place_on(["ps-0"]) == {"w": "ps-0"}


def test_a_command_for_a_server_still_starting_waits_for_its_first_heartbeat():
    # a restore sends Load to every live server; one that has not registered yet must get
    # it after its configuration, not inside the answer to Register (where it was dropped)
    job = ps_job(Phase.RESTORING)
    ps = NodeState(job.shape.ps[0], pid=100, launched_s=0.0)  # relaunched, not registered
    job.nodes.add(ps)
    ps.config = PSConfig(1, ("w",), ())
    ps.commands.append(Load(2, ("w",), ()))
    answers = service(job)
    reply, _ = answers.handle(Message(Sender("ps-0", 100, None), Register(Role.PS, "tcp://x")))
    assert reply.config.ps == PSConfig(1, ("w",), ()) and not reply.commands
    reply, _ = answers.handle(Message(Sender("ps-0", 100, 1), Heartbeat()))
    assert reply.commands == (Load(2, ("w",), ()),)


def test_a_worker_asked_to_stop_before_it_registers_stays_stopping():
    job = ps_job()
    job.nodes.get("worker-0").mark_stopping()  # a plan removed it while it was starting
    reply, _ = service(job).handle(from_worker(Register(Role.WORKER), None))
    assert reply.config is not None and job.nodes.get("worker-0").status == Status.STOPPING


def test_a_restart_is_counted_once_whoever_relaunches_the_node():
    job = ps_job()
    job.nodes.get("worker-0").move_to(Status.DEAD)
    job.to_recover = {"worker-0"}
    assert job.count_restart("worker-0") == 1  # a plan relaunched it bigger first
    assert job.recovery(max_restarts=3).workers  # still dead in the shape: relaunched...
    assert job.restarts == {"worker-0": 1}  # ...but not counted again
