"""A resize in place waits for the node to take its new size — unless the node ends first.

The README's goodput example met this on a loaded host: the policy grew a rank in place in
the same second its script finished; the rank exited 0 without reading its new thread
count, and the job waited out the 180-s start-up timeout and failed. Here a stand-in master
runs ``elastic._resize`` and lets the node exit during the wait.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rightsize.core.shape import NodeRole, NodeSpec, Resources
from rightsize.core.spec import Strategy
from rightsize.runtime import elastic
from rightsize.runtime.errors import JobFailed
from rightsize.runtime.nodes import NodeState, Status


class StandInMaster:
    """What ``_resize`` reads of a master; its node does ``on_wait`` while it is waited for."""

    def __init__(self, node: NodeState, on_wait) -> None:
        self.job = SimpleNamespace(nodes=SimpleNamespace(get={node.name: node}.get),
                                   strategy=Strategy.ALLREDUCE)  # fmt: skip
        self.backend = SimpleNamespace(resize=lambda name, resources: 2)
        self.spec = SimpleNamespace(runtime=SimpleNamespace(startup_timeout_s=180.0))
        self.clock = SimpleNamespace(now=lambda: 0.0)
        self.on_wait = on_wait

    def wait_until(self, predicate, timeout_s: float, what: str) -> None:
        for _ in range(3):  # served a few times, as master.pump would
            if predicate():
                return
            self.on_wait()
        raise JobFailed(f"{what} did not happen within {timeout_s:g}s")


def rank(cpu: float) -> NodeSpec:
    return NodeSpec("worker-0", NodeRole.WORKER, Resources(cpu, 2 << 30))


def resize_while(on_wait) -> tuple[NodeState, dict]:
    node = NodeState(rank(0.5), pid=1, launched_s=0.0, status=Status.RUNNING)
    master = StandInMaster(node, lambda: on_wait(node))
    details: dict = {}
    elastic._resize(master, ((rank(0.5), rank(2.0)),), details)
    return node, details


def test_a_rank_that_reads_its_new_size_ends_the_wait():
    node, details = resize_while(lambda n: n.commands.clear())
    assert node.spec.resources.cpu_cores == 2.0 and details["resized_in_place"] == ["worker-0"]


def test_a_rank_whose_script_ends_during_the_resize_does_not_hold_the_job():
    def exits(n: NodeState) -> None:
        n.status = Status.DEAD  # the script exited 0; the command was never read

    node, details = resize_while(exits)
    assert node.commands and details["resized_in_place"] == ["worker-0"]


def test_a_live_rank_that_never_reads_its_new_size_still_times_out():
    with pytest.raises(JobFailed, match="taking its new size"):
        resize_while(lambda n: None)
