"""A node's status moves only through NodeState.move_to, checked against NODE_FLOWS."""

from __future__ import annotations

import itertools

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeRole, NodeSpec
from rightsize.runtime.nodes import NODE_FLOWS, IllegalNodeTransition, NodeState, Status

MI = 1 << 20


def node(status: Status = Status.LAUNCHING) -> NodeState:
    spec = NodeSpec("worker-0", NodeRole.WORKER, Resources(1.0, 256 * MI))
    return NodeState(spec, pid=1, launched_s=0.0, status=status)


@pytest.mark.parametrize("start, end", sorted(itertools.product(Status, Status)))
def test_every_move_is_allowed_exactly_when_the_table_lists_it(start, end):
    n = node(start)
    if (start, end) in NODE_FLOWS:
        n.move_to(end)
        assert n.status == end
    else:
        with pytest.raises(IllegalNodeTransition, match=f"from {start} to {end}"):
            n.move_to(end)
        assert n.status == start


def test_no_node_comes_back_from_stopping_or_dead():
    for end in (Status.LAUNCHING, Status.RUNNING):
        assert (Status.STOPPING, end) not in NODE_FLOWS
        assert (Status.DEAD, end) not in NODE_FLOWS


def test_the_status_cannot_be_assigned_around_the_table():
    n = node(Status.DEAD)
    with pytest.raises(AttributeError, match="move_to"):
        n.status = Status.RUNNING
    assert n.status == Status.DEAD


def test_asking_a_node_to_stop_leaves_a_dead_one_dead():
    live, dead = node(Status.RUNNING), node(Status.DEAD)
    live.mark_stopping()
    dead.mark_stopping()
    assert (live.status, dead.status) == (Status.STOPPING, Status.DEAD)
