"""How the simulated mechanism behaves (``cluster/simulator.py``): intervals, restart
costs, noise, queue order, link sharing and the seed, with where each default comes from."""

from __future__ import annotations

from dataclasses import dataclass, field

from rightsize.cluster.links import LinkSharing, ObservedLink
from rightsize.cluster.scheduler import SchedulingOrder
from rightsize.cluster.simjob import Noise
from rightsize.core.errors import choose
from rightsize.core.shape import ClusterShape, NodeRole


@dataclass(frozen=True)
class SimConfig:
    """How the simulated mechanism behaves; defaults and where they come from.

    Attributes:
        metric_interval_s: how often metrics are sampled (60 s: NEARCHUS's five
            consecutive stability samples take "5 to 8 minutes", §IV).
        decision_interval_s: how often a running job's policy is asked (ours: 60 s).
        launch_s: pod launch delay per (re)start (DLRover §6.3: about 20 s).
        init_s: training (re)initialization per (re)start (DLRover §6.3: about 100 s).
        resize_s: what a plan that keeps every node (only their CPU or memory changes)
            costs, for a mechanism that resizes nodes in place as rightsize's runtime
            does (a cgroup write: 0.1-0.2 s measured); None (the default): every plan
            restarts the job, as NEARCHUS's and DLRover's pods do.
        noise: metric noise and warm-up.
        max_window_s: the longest window a policy is shown (ours: 10 minutes, twice
            NEARCHUS's stability period and Optimus's interval).
        oom_patience_s: an OOM-killed job whose policy does nothing for this long fails.
        order: queue order, ``fcfs`` or ``sjf``.
        link_sharing: who shares the servers' links (``cluster.links``): ``job`` (each
            job as if alone) or ``cluster`` (every training job's nodes).
        observed_link: the link capacity node metrics report (``cluster.links``): the
            ``server``'s whole link (NEARCHUS §IV) or the ``share`` the node trains at.
        seed: the seed every random draw derives from.
    """

    metric_interval_s: float = 60.0
    decision_interval_s: float = 60.0
    launch_s: float = 20.0
    init_s: float = 100.0
    resize_s: float | None = None
    noise: Noise = field(default_factory=Noise)
    max_window_s: float = 600.0
    oom_patience_s: float = 900.0
    order: SchedulingOrder = SchedulingOrder.FCFS
    link_sharing: LinkSharing = LinkSharing.JOB
    observed_link: ObservedLink = ObservedLink.SERVER
    seed: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", choose(SchedulingOrder, self.order, "queue order"))
        object.__setattr__(self, "link_sharing",
                           choose(LinkSharing, self.link_sharing, "link sharing"))
        object.__setattr__(self, "observed_link",
                           choose(ObservedLink, self.observed_link, "observed link"))  # fmt: skip

    @property
    def restart_s(self) -> float:
        return self.launch_s + self.init_s

    def transition_s(self, old: ClusterShape, new: ClusterShape) -> float:
        """What moving a job from ``old`` to ``new`` costs: ``resize_s`` if it is set and
        the plan keeps every node (by name and role), else a restart."""
        if self.resize_s is not None and _nodes(old) == _nodes(new):
            return self.resize_s
        return self.restart_s


def _nodes(shape: ClusterShape) -> tuple[tuple[str, NodeRole], ...]:
    return tuple(sorted((n.name, n.role) for n in shape.nodes))
