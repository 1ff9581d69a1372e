"""A resize in place waits for the node to take its new size — unless the node ends first.

The README's goodput example met this on a loaded host: the policy grew a rank in place in
the same second its script finished; the rank exited 0 without reading its new thread
count, and the job waited out the 180-s start-up timeout and failed. Here the job's
operations run over fake ports (tests/fake_ports.py) and the node exits during the wait.
"""

from __future__ import annotations

import pytest

from fake_ports import GI, FakeWorld
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.errors import JobFailed
from rightsize.runtime.nodes import NodeState, Status
from rightsize.scaling.api import Action, Plan


def rank_world(tmp_path, on_turn) -> tuple[FakeWorld, NodeState]:
    shape = ClusterShape((NodeSpec("worker-0", NodeRole.WORKER, Resources(0.5, 2 * GI)),))
    world = FakeWorld(tmp_path, shape, Strategy.ALLREDUCE)
    world.launch()
    node = world.job.nodes.get("worker-0")
    world.waiter.answer = lambda n: None  # the rank reads nothing...
    world.waiter.on_turn = lambda: on_turn(node)  # ...but what the test makes it do
    return world, node


def grow(world: FakeWorld) -> dict:
    grown = ClusterShape((NodeSpec("worker-0", NodeRole.WORKER, Resources(2.0, 2 * GI)),))
    return world.ops.apply_plan(Plan(grown, Action.SCALE_UP, "grow")).details


def test_a_rank_that_reads_its_new_size_ends_the_wait(tmp_path):
    world, node = rank_world(tmp_path, lambda n: n.commands.clear())
    details = grow(world)
    assert node.spec.resources.cpu_cores == 2.0 and details["resized_in_place"] == ["worker-0"]


def test_a_rank_whose_script_ends_during_the_resize_does_not_hold_the_job(tmp_path):
    # the script exited 0; the command was never read
    world, node = rank_world(tmp_path, lambda n: n.alive and n.move_to(Status.DEAD))
    details = grow(world)
    assert node.commands and details["resized_in_place"] == ["worker-0"]


def test_a_live_rank_that_never_reads_its_new_size_still_times_out(tmp_path):
    world, _ = rank_world(tmp_path, lambda n: None)
    with pytest.raises(JobFailed, match="taking its new size"):
        grow(world)
