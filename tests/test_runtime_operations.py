"""The job's operations (runtime/operations.py) with a fake clock and a fake node port:
launch, checkpoint, recovery, plans and the end, no processes (tests/fake_ports.py)."""

from __future__ import annotations

import pytest

from fake_ports import GI, TURN_S, FakeWorld
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import Strategy
from rightsize.runtime.jobstate import NodeFailedTooOften, Phase
from rightsize.runtime.nodes import Status
from rightsize.runtime.protocol import Reset
from rightsize.scaling.api import Action, Plan

PS = Resources(1, GI)
WORKER = Resources(2, GI)


def ps_shape(n_ps: int = 1, n_workers: int = 2, worker: Resources = WORKER) -> ClusterShape:
    return ClusterShape.from_counts(n_ps, n_workers, PS, worker)


@pytest.fixture
def world(tmp_path) -> FakeWorld:
    w = FakeWorld(tmp_path, ps_shape())
    w.launch()
    return w


def plan(shape: ClusterShape, action: Action = Action.ADD_WORKER) -> Plan:
    return Plan(shape, action, "the policy asked")


def test_a_launch_starts_the_servers_before_the_workers_and_opens_training(world):
    assert world.nodes.launched == ["ps-0", "worker-0", "worker-1"]
    assert world.job.phase == Phase.TRAINING and world.job.cluster_ready()
    assert set(world.job.placement.values()) == {"ps-0"}
    assert world.job.nodes.get("ps-0").config.names == ("b", "w1", "w2")


def test_a_checkpoint_commits_the_queues_as_they_were_when_it_began(world):
    lease = world.job.shards.lease("worker-0")  # leased before: in the snapshot as DOING
    version = world.ops.checkpoint()
    row = world.store.latest_checkpoint()
    assert version == row.version == 1 and set(row.files) == {"ps-0"}
    assert row.shards == world.job.shards.snapshot() and lease is not None
    assert not world.job.nodes.get("ps-0").acks  # the acknowledgement was consumed


def test_a_dead_worker_is_relaunched_and_its_restart_counted_once(world):
    world.waiter.die("worker-1")
    exits = world.job.take_failures()
    world.job.failure_reported(exits[0].name, "killed by SIGKILL")
    world.ops.recover()
    assert world.nodes.launched[-1] == "worker-1" and world.job.nodes.is_alive("worker-1")
    assert world.job.restarts == {"worker-1": 1}
    assert world.timeline() == [("relaunch_worker", True)]
    world.ops.recover()  # nothing dead: nothing happens, nothing counted
    assert world.job.restarts == {"worker-1": 1} and len(world.timeline()) == 1


def test_a_node_failing_past_max_restarts_fails_the_job(world):
    for _ in range(3):
        world.waiter.die("worker-0")
        world.job.failure_reported(world.job.take_failures()[0].name, "exit code 1")
        if world.job.restarts.get("worker-0", 0) == 2:
            with pytest.raises(NodeFailedTooOften, match="worker-0 failed 3 times"):
                world.ops.recover()
            return
        world.ops.recover()
    raise AssertionError("never failed")


def test_a_dead_server_brings_every_server_back_to_the_checkpoint(world):
    world.ops.checkpoint()
    generation = world.job.generation
    world.waiter.die("ps-0")
    world.job.failure_reported(world.job.take_failures()[0].name, "OOM-killed")
    world.ops.recover()
    assert world.job.generation == generation + 1 and world.job.phase == Phase.TRAINING
    assert world.job.nodes.get("ps-0").config.paths  # relaunched from the committed files
    assert world.timeline() == [("restore_ps", True)]
    assert "restored from checkpoint v1" in world.store.timeline()[-1]["reason"]
    assert world.store.job()["generation"] == world.job.generation


def test_a_plan_adds_a_worker_and_times_it_on_the_fake_clock(world):
    t0, turns = world.clock.now(), world.waiter.turns
    transition = world.ops.apply_plan(plan(ps_shape(n_workers=3)))
    assert transition.applied and world.job.shape == ps_shape(n_workers=3)
    assert transition.transition_s == pytest.approx(world.clock.now() - t0)
    assert transition.transition_s == pytest.approx((world.waiter.turns - turns) * TURN_S)
    assert transition.details["launch_s"] > 0 and "first_step_s" in transition.details
    assert world.timeline() == [("add_worker", True)]


def test_a_plan_the_lease_refuses_changes_nothing_and_is_recorded_once(world):
    world.lease.reserve = lambda total, nodes=None: "the service's capacity is taken"
    for _ in range(2):
        assert not world.ops.apply_plan(plan(ps_shape(n_workers=3))).applied
    assert world.job.shape == ps_shape() and world.nodes.launched[-1] == "worker-1"
    assert world.timeline() == [("add_worker", False)]


def test_a_new_server_gets_its_share_through_a_repartition(world):
    world.ops.apply_plan(plan(ps_shape(n_ps=2), Action.ADD_PS))
    assert set(world.job.placement.values()) == {"ps-0", "ps-1"}
    assert world.job.phase == Phase.TRAINING and world.job.cluster_ready()
    assert world.store.latest_checkpoint().version == 1  # the export, committed
    assert world.timeline() == [("add_ps", True)]


def test_removing_a_worker_stops_it_and_returns_its_lease(world):
    world.job.shards.lease("worker-1")
    world.ops.apply_plan(plan(ps_shape(n_workers=1), Action.REMOVE_WORKER))
    assert world.job.nodes.get("worker-1").status == Status.DEAD
    assert "worker-1" not in world.job.shards.doing


def test_a_resize_in_place_waits_for_the_new_thread_count(world):
    grown = ps_shape(worker=Resources(4, GI))
    transition = world.ops.apply_plan(plan(grown, Action.SCALE_UP))
    assert transition.applied and world.job.nodes.get("worker-0").spec.resources == Resources(4, GI)
    assert [n for n, _ in world.nodes.resized] == ["worker-0", "worker-1"]
    assert transition.details["resized_in_place"] == ["worker-0", "worker-1"]


def test_a_node_with_no_room_on_its_host_is_relaunched_at_its_new_size(world):
    world.nodes.not_in_place = {"worker-1"}
    world.ops.apply_plan(plan(ps_shape(worker=Resources(4, GI)), Action.SCALE_UP))
    assert world.nodes.stopped == ["worker-1"] and world.nodes.launched[-1] == "worker-1"
    assert world.job.nodes.get("worker-1").spec.resources == Resources(4, GI)


def test_a_failure_during_a_plan_abandons_it(world):
    world.waiter.on_turn = lambda: world.waiter.die("worker-0") if world.job.nodes.is_alive(
        "worker-0") else None  # fmt: skip
    transition = world.ops.apply_plan(plan(ps_shape(n_workers=3)))
    assert not transition.applied
    assert world.timeline() == [("add_worker", False)]
    assert "interrupted by a node failure" in world.store.timeline()[-1]["reason"]


def test_the_end_stops_workers_then_checkpoints_then_stops_servers(world):
    world.ops.finish()
    assert world.job.phase == Phase.FINISHED
    assert not world.job.nodes.alive() and world.store.latest_checkpoint().version == 1


def test_the_workers_resume_after_a_restore(world):
    world.waiter.die("ps-0")
    world.job.failure_reported(world.job.take_failures()[0].name, "OOM-killed")
    sent = []
    world.waiter.on_turn = lambda: sent.extend(
        c for c in world.job.nodes.get("worker-0").commands if isinstance(c, Reset))
    world.ops.recover()
    assert sent  # the workers dropped their leases for the restored cluster


def test_an_allreduce_group_restarts_from_a_fresh_checkpoint(tmp_path):
    world = FakeWorld(tmp_path, ClusterShape.from_counts(0, 2, PS, WORKER), Strategy.ALLREDUCE)
    world.launch()
    transition = world.ops.apply_plan(plan(ClusterShape.from_counts(0, 3, PS, WORKER)))
    assert transition.applied and world.job.generation == 1
    assert world.timeline() == [("add_worker", True)]
    assert "restarted from checkpoint v1" in world.store.timeline()[-1]["reason"]
    assert sorted(n.name for n in world.job.nodes.alive()) == ["worker-0", "worker-1", "worker-2"]


def test_a_node_that_never_stops_is_killed_after_the_grace(world):
    world.waiter.answer = lambda node: node.status == Status.LAUNCHING and node.move_to(
        Status.RUNNING)  # fmt: skip  # nodes that ignore every command
    world.job.nodes.get("worker-0").mark_stopping()
    world.ops.wait_ended()
    assert world.nodes.stopped == ["worker-0"]


def test_a_failed_rank_restarts_a_scripts_group_as_torchrun_does(tmp_path):
    world = FakeWorld(tmp_path, ClusterShape.from_counts(0, 2, PS, WORKER), script=True)
    world.launch()
    script = world.job.script
    assert world.job.nodes.get("worker-1").config.store_port == 29500  # the group's store
    world.waiter.die("worker-1", returncode=1)
    world.job.failure_reported(world.job.take_failures()[0].name, "exit code 1")
    world.ops.recover()
    assert script.failed_restarts == 1 and len(script.starts) == 2 and world.job.generation == 1
    assert world.job.nodes.get("worker-0").config.restart_count == 1  # TORCHELASTIC_RESTART_COUNT
    assert world.timeline() == [("restart_group", True)]
    assert world.store.timeline()[-1]["details"]["world"] == 2
    assert world.ops.steps_done() == 0  # the fake ranks take no steps
