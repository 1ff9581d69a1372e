"""The allocator's lease books: what a running job may grow into, under one capacity.

The integration tests (test_service_jobs.py) check the kernel's quotas on real jobs; these
check the rules: a reservation beyond what is free is refused with the reason, nothing is
free to grow into while a job waits, a reservation holds the larger of before and after
until the job settles, and a settle after a shrink gives the rest back.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import parse_job_spec
from rightsize.scaling.launch_advisor import LaunchSource
from rightsize.scaling.plan_check import plan_problems
from rightsize.service.allocator import Allocator, LaunchShare, QueuedJob
from rightsize.service.lease import PipeLease, serve_lease
from rightsize.service.models import JobPhase, Source
from rightsize.service.store import Store

GI = 2**30


@pytest.fixture
def allocator(tmp_path):
    store = Store(str(tmp_path / "s.db"))
    # the host read as empty: what other rightsize jobs hold is the last tests' subject
    allocator = Allocator(store, Resources(2.0, 8 * GI), tmp_path / "work",
                          beside=lambda own: Resources())  # fmt: skip
    yield allocator
    store.close()


class FakeProcess:
    """A runner that ends when the test says so (a cancel ends it as SIGTERM would)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.code, self.terminated, self.released = pid, None, False, False

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.terminated, self.code = True, 128 + 15

    def wait(self, timeout_s: float) -> None:
        self.code = -9 if self.code is None else self.code

    def report(self) -> dict | None:
        return {"trained": True} if self.code == 0 else None

    def last_lines(self) -> str:
        return "error: the node kept failing"

    def release(self) -> None:
        self.released = True


class FakeLauncher:
    """Starts no process: remembers what it was asked to launch, and with which books."""

    def __init__(self) -> None:
        self.launched, self.processes, self.books = [], {}, None

    def launch(self, spec, job_id, plan, books) -> FakeProcess:
        self.launched.append((spec, plan))
        self.books = books
        self.processes[spec.name] = FakeProcess(10_000 + len(self.launched))
        return self.processes[spec.name]


def running(allocator: Allocator, name: str, held: Resources) -> None:
    spec = parse_job_spec({"name": name, "workload": "mlp3", "batch_size": 8,
                           "budget": {"cpu": 2, "memory": "8Gi"}})  # fmt: skip
    job = QueuedJob(name, 0.0, 1.0, 0, spec)
    allocator.scheduler.submit(job)
    assert allocator.scheduler.admit(lambda _job, _free: held) == [job]


def test_growth_takes_only_what_is_free(allocator):
    running(allocator, "a", Resources(1.0, 2 * GI))
    running(allocator, "b", Resources(0.5, 2 * GI))
    assert allocator.books.free_beyond("a", Resources(1.0, 2 * GI)) == Resources(0.5, 4 * GI)
    why = allocator.books.reserve("a", Resources(1.6, 2 * GI))
    assert why and "capacity" in why
    assert allocator.books.held("a") == Resources(1.0, 2 * GI)  # a refusal takes nothing
    assert allocator.books.reserve("a", Resources(1.5, 2 * GI)) is None
    assert allocator.scheduler.allocated == Resources(2.0, 4 * GI)
    assert allocator.books.reserve("b", Resources(0.6, 2 * GI)) is not None  # nothing left


def test_a_reservation_holds_the_larger_until_the_job_settles(allocator):
    running(allocator, "a", Resources(1.0, 4 * GI))
    # a reshape to fewer cores but more memory: both old and new run during the change
    assert allocator.books.reserve("a", Resources(0.6, 6 * GI)) is None
    assert allocator.books.held("a") == Resources(1.0, 6 * GI)
    allocator.books.settle("a", Resources(0.6, 6 * GI))
    assert allocator.books.held("a") == Resources(0.6, 6 * GI)
    allocator.books.settle("a", Resources(0.9, 6 * GI))  # more than reserved: never by a settle
    assert allocator.books.held("a") == Resources(0.6, 6 * GI)


def test_no_cpu_to_grow_into_while_a_job_waits(allocator):
    running(allocator, "a", Resources(1.0, 2 * GI))
    waiting = parse_job_spec({"name": "w", "workload": "mlp3", "batch_size": 8,
                              "budget": {"cpu": 2, "memory": "1Gi"}})  # fmt: skip
    allocator.scheduler.submit(QueuedJob("w", 1.0, 1.0, 1, waiting))
    why = allocator.books.reserve("a", Resources(1.2, 2 * GI))
    assert why and "1 job(s) wait" in why
    assert allocator.books.reserve("a", Resources(1.0, 3 * GI)) is None  # memory still may grow


def seven_nodes_over_by_their_rounding() -> ClusterShape:
    """1 PS and 6 workers splitting 2 CPU, each rounded up: 2.006 CPU, within the rounding of
    seven nodes (``rounding_slack(7)``, 0.007) but above the flat 0.005 the allocator once had."""
    return ClusterShape.from_counts(1, 6, Resources(0.29, GI // 2), Resources(0.286, GI // 2))


def test_a_many_node_plan_the_runtime_accepts_is_granted_by_the_lease(allocator):
    shape = seven_nodes_over_by_their_rounding()
    running(allocator, "a", Resources(1.0, 2 * GI))
    running(allocator, "b", Resources(1.0, 2 * GI))
    allocator.books.settle("b", Resources())  # b ended its nodes: 1 CPU free beyond a's
    free = allocator.books.free_beyond("a", Resources(1.0, 2 * GI))
    assert shape.total().cpu_cores == pytest.approx(2.006)
    assert not plan_problems(shape, Resources(2.0, 8 * GI), held=Resources(1.0, 2 * GI), free=free)
    ours, theirs = socket.socketpair()
    serve_lease(ours, "a", allocator.books)
    lease = PipeLease(theirs)
    try:
        assert lease.reserve(shape.total()) is not None  # its node count unsaid: 5 nodes' slack
        assert lease.reserve(shape.total(), len(shape.nodes)) is None
        lease.settle(shape.total(), len(shape.nodes))
        assert allocator.books.held("a") == shape.total()
    finally:
        theirs.close()


def test_the_lease_answers_an_unknown_verb_with_an_error_and_acts_on_nothing(allocator):
    running(allocator, "a", Resources(1.0, GI))
    ours, theirs = socket.socketpair()
    serve_lease(ours, "a", allocator.books)
    with theirs, theirs.makefile("r") as replies:
        theirs.sendall(b'{"op": "grab", "cpu": 2, "memory": 1}\n')
        assert json.loads(replies.readline()) == {"error": "unknown op 'grab'"}
    assert allocator.books.held("a") == Resources(1.0, GI)


def test_a_job_not_running_here_has_no_lease(allocator):
    assert allocator.books.reserve("ghost", Resources(0.1, GI)) is not None
    assert allocator.books.held("ghost") == Resources()


def test_a_job_that_cannot_launch_fails_alone_and_the_queue_moves_on(allocator, capsys):
    # admitted behind the API's check (say, a store written by an older rightsize): its
    # policy cannot start it within its budget
    bad = parse_job_spec({"name": "bad", "workload": "mlp3", "batch_size": 8,
                          "budget": {"cpu": 1, "memory": "1Gi"}, "policy": {"name": "nearchus+"}})
    row = allocator.store.add_job(bad, owner_id=None, source=Source.SERVICE, phase=JobPhase.WAITING,
                              state_path=Path("x"), policy="nearchus+")  # fmt: skip
    allocator.scheduler.submit(QueuedJob("bad", 0.0, 1.0, row.id, bad))
    launcher = FakeLauncher()  # no runner: this checks the books, not the launch
    allocator.launcher = launcher
    good = parse_job_spec({"name": "good", "workload": "mlp3", "batch_size": 8,
                           "budget": {"cpu": 1, "memory": "1Gi"}})  # fmt: skip
    allocator.scheduler.submit(QueuedJob("good", 1.0, 1.0, 0, good))
    allocator.turn()
    view = allocator.store.job_by_id(row.id)
    assert view.phase == "failed" and "minimal shape" in view.error
    assert allocator.scheduler.waiting[0].name == "good"  # the bad one left the queue
    allocator.turn()
    assert [spec.name for spec, _plan in launcher.launched] == ["good"]


def test_a_failing_turn_is_printed_and_the_loop_goes_on(allocator, capsys, monkeypatch):
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("a bug in a turn")

    monkeypatch.setattr(allocator, "_turn", broken)
    allocator.turn()
    allocator.turn()
    assert len(calls) == 2 and "a bug in a turn" in capsys.readouterr().err


def test_what_other_rightsize_jobs_on_the_host_hold_is_not_the_services(tmp_path):
    store = Store(str(tmp_path / "s.db"))
    outside = {"now": Resources(1.5, 2 * GI)}
    allocator = Allocator(store, Resources(2.0, 8 * GI), tmp_path / "work",
                      beside=lambda own: outside["now"])  # fmt: skip
    allocator.turn()  # a turn reads the host
    assert allocator.scheduler.free() == Resources(0.5, 6 * GI)
    running(allocator, "a", Resources(0.5, GI))
    why = allocator.books.reserve("a", Resources(1.0, GI))  # 0.5 more, but a standalone run has 1.5
    assert why and "capacity" in why
    outside["now"] = Resources()  # it ended
    allocator.turn()
    assert allocator.books.reserve("a", Resources(1.0, GI)) is None
    store.close()


def test_the_host_is_read_from_the_kernel(tmp_path):
    """A process in a cgroup laid out as a master's node (rightsize/<pid>-<token>/<node>),
    with a quota and a limit: counted beside the service unless it is one of its own."""
    import subprocess
    import sys

    from rightsize.runtime.backends.cgroups import CgroupUnavailable, NodeCgroup, detect
    from rightsize.service.host import held_beside

    try:
        hierarchy = detect()
    except CgroupUnavailable:
        pytest.skip("no cgroups here")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    node = NodeCgroup(hierarchy, Path("rightsize") / f"{sleeper.pid}-test" / "worker-0")
    try:
        node.create()
        node.set_cpu(0.7)
        node.set_memory(GI)
        for procs in node.procs_files:
            procs.write_text(str(sleeper.pid))
        before = held_beside(set())
        assert before.cpu_cores >= 0.69 and before.memory_bytes >= GI
        mine = held_beside({sleeper.pid})  # a service's own runner is not "beside" it
        assert before.cpu_cores - mine.cpu_cores == pytest.approx(0.7, abs=0.01)
    finally:
        sleeper.kill()
        sleeper.wait()
        node.remove()
        node_parent = NodeCgroup(hierarchy, Path("rightsize") / f"{sleeper.pid}-test")
        node_parent.remove()


def ps_job(name: str, policy: str) -> QueuedJob:
    spec = parse_job_spec({"name": name, "workload": "wide-deep", "dataset": "synthetic-criteo",
                           "batch_size": 512, "strategy": "ps", "policy": {"name": policy},
                           "budget": {"cpu": 2, "memory": "4Gi"}})  # fmt: skip
    return QueuedJob(name, 0.0, 1.0, 0, spec)


@pytest.mark.parametrize("share", [LaunchShare.FAIR, LaunchShare.FREE])
def test_jobs_submitted_together_launch_side_by_side_within_a_fair_share(tmp_path, share):
    """Four DLRover jobs, each budgeted the whole 2-CPU service: under ``fair`` two start at
    once within 1 CPU each (DLRover's sampling PS and worker at 0.5); under ``free`` (NEARCHUS's
    allocator) the first takes both cores and the rest wait. NEARCHUS+, which cannot plan
    within 1 CPU, still launches from its own budget (R0)."""
    store = Store(str(tmp_path / "s.db"))
    allocator = Allocator(store, Resources(2.0, 16 * GI), tmp_path / "work",
                      beside=lambda own: Resources(), launch_share=share)  # fmt: skip
    for i in range(4):
        allocator.scheduler.submit(ps_job(f"d{i}", "dlrover"))
    started = allocator.scheduler.admit(allocator._admission)
    if share == LaunchShare.FAIR:
        assert [j.name for j in started] == ["d0", "d1"]
        for job in started:
            assert [n.resources.cpu_cores for n in job.plan.shape.nodes] == [0.5, 0.5]
            assert "fair share of 1 cpu (4 jobs" in job.plan.reason
    else:
        assert [j.name for j in started] == ["d0"]
        assert started[0].plan.shape.total().cpu_cores == 2.0
        assert "fair share" not in started[0].plan.reason
    for job in started:
        allocator.scheduler.finish(job)
    allocator.scheduler.waiting.clear()
    allocator.scheduler.submit(ps_job("n0", "nearchus+"))
    allocator.scheduler.submit(ps_job("n1", "nearchus+"))
    started = allocator.scheduler.admit(allocator._admission)
    assert [j.name for j in started] == ["n0", "n1"]
    assert all(j.plan.shape.total().cpu_cores < 1.0 for j in started)  # R0 of 2 CPU
    assert not any("fair share" in j.plan.reason for j in started)
    store.close()


def test_the_allocator_watches_the_runners_its_launcher_started(tmp_path):
    """An injected launcher: admitted jobs are launched with their plan and the lease books;
    a runner that ends frees what its job held, and says how the job ended."""
    store = Store(str(tmp_path / "s.db"))
    launcher = FakeLauncher()
    allocator = Allocator(store, Resources(2.0, 8 * GI), tmp_path / "work",
                          beside=lambda own: Resources(), launcher=launcher)  # fmt: skip
    views = {name: allocator.submit(parse_job_spec({
        "name": name, "workload": "mlp3", "batch_size": 8,
        "budget": {"cpu": 1, "memory": "2Gi"}}), owner_id=None) for name in ("a", "b", "c")}
    allocator.turn()
    launched = {spec.name: plan for spec, plan in launcher.launched}
    assert set(launched) == {"a", "b"} and launcher.books is allocator.books  # c waits
    for name in ("a", "b"):
        view = store.job_by_id(views[name].id)
        assert view.phase == "running"
        assert allocator.books.held(name) == launched[name].shape.total()
        assert LaunchSource(view.launch_source) in LaunchSource
    launcher.processes["a"].code = 0  # a trained
    allocator.cancel("b")
    assert launcher.processes["b"].terminated
    allocator.turn()
    a, b = (store.job_by_id(views[name].id) for name in ("a", "b"))
    assert a.phase == "finished" and b.phase == "cancelled" and b.error == "cancelled"
    assert launcher.processes["a"].released and not allocator.scheduler.holds("a")
    assert [spec.name for spec, _plan in launcher.launched][2:] == ["c"]  # freed: c starts
    launcher.processes["c"].code = 1
    allocator.turn()
    c = store.job_by_id(views["c"].id)
    assert c.phase == "failed" and c.error == "error: the node kept failing"
    assert allocator.scheduler.allocated == Resources()
    store.close()
