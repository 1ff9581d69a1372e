"""From the shape a job runs with to the shape a policy asks for: what to resize, add and remove.

Node names are stable (``core.shape``), so two shapes diff by name: a node in
both with other resources is resized in place, a node only in the target is
launched, a node only in the current shape is removed. The diff also says
whether the parameter-server set changes (a repartition, DLRover §5.3). A plan
is checked before anything is touched, by the rules the simulator checks it by too
(``scaling/plan_check.py``): within the budget, at least one worker, parameter
servers exactly when the strategy has them, something for every node.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.scaling.plan_check import plan_problems


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
    def shrinking(self) -> tuple[tuple[NodeSpec, NodeSpec], ...]:
        """Resizes that give back CPU or memory (done first: they free what others take)."""
        return tuple(pair for pair in self.resize if _shrinks(*(n.resources for n in pair)))

    @property
    def growing(self) -> tuple[tuple[NodeSpec, NodeSpec], ...]:
        """Resizes that only take more (done once new nodes have started)."""
        return tuple(pair for pair in self.resize if not _shrinks(*(n.resources for n in pair)))

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
    """Why the runtime cannot run ``target``, or None if it can: the rules every mechanism
    checks a plan against (:func:`~rightsize.scaling.plan_check.plan_problems`), as one
    line for the job's timeline."""
    problems = plan_problems(target, budget, strategy)
    return "; ".join(problems) if problems else None
