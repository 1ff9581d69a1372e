"""From the shape a job runs with to the shape a policy asks for: what to resize, add and remove.

Node names are stable (``core.shape``), so two shapes diff by name: a node in
both with other resources is resized in place, a node only in the target is
launched, a node only in the current shape is removed. The diff also says
whether the parameter-server set changes (a repartition, DLRover §5.3). A plan
is checked before anything is touched: within the budget, at least one worker,
parameter servers exactly when the strategy has them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy


@dataclass(frozen=True)
class ShapeDiff:
    """What changes between two shapes; ``resize`` pairs are (current, target)."""

    resize: tuple[tuple[NodeSpec, NodeSpec], ...] = ()
    add: tuple[NodeSpec, ...] = ()
    remove: tuple[NodeSpec, ...] = ()

    @property
    def ps_changed(self) -> bool:
        return any(n.role == NodeRole.PS for n in self.add + self.remove)

    @property
    def workers_changed(self) -> bool:
        return any(n.role == NodeRole.WORKER for n in self.add + self.remove)

    @property
    def empty(self) -> bool:
        return not (self.resize or self.add or self.remove)


def diff(current: ClusterShape, target: ClusterShape) -> ShapeDiff:
    """The changes that turn ``current`` into ``target``; shrinking resizes come first, so
    resources are released before they are handed to others."""
    now = {n.name: n for n in current.nodes}
    then = {n.name: n for n in target.nodes}
    resize, add, remove = [], [], []
    for name, node in then.items():
        old = now.get(name)
        if old is None or old.role != node.role:
            add.append(node)
            if old is not None:
                remove.append(old)
        elif old.resources != node.resources:
            resize.append((old, node))
    remove += [node for name, node in now.items() if name not in then]
    resize.sort(key=lambda pair: not _shrinks(pair[0].resources, pair[1].resources))
    return ShapeDiff(tuple(resize), tuple(add), tuple(remove))


def _shrinks(old: Resources, new: Resources) -> bool:
    return new.cpu_cores < old.cpu_cores or new.memory_bytes < old.memory_bytes


def rejection(target: ClusterShape, budget: Resources, strategy: Strategy) -> str | None:
    """Why the runtime cannot run ``target``, or None if it can."""
    if not target.total().fits_within(budget):
        return f"the shape needs {target.total()} but the budget is {budget}"
    if target.n_workers < 1:
        return "a shape needs at least one worker"
    if strategy == Strategy.PS and target.n_ps < 1:
        return "strategy ps needs at least one parameter server"
    if strategy == Strategy.ALLREDUCE and target.n_ps:
        return "strategy allreduce has no parameter servers"
    if any(n.resources.cpu_cores <= 0 or n.resources.memory_bytes <= 0 for n in target.nodes):
        return "every node needs some cpu and memory"
    return None
