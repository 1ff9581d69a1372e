"""Who shares the servers' links: one job's own nodes, or every training job's.

NEARCHUS's clusters A and B are 9 servers each (Table I), and the jobs of its
multi-job experiment (§V-B) run side by side on them, so a server's link
carries the traffic of every pod placed there, whatever job it belongs to.
The job model (``cluster.jobmodel``) gives each node ``link · min(1, S / n)``
with ``n`` nodes spread over ``S`` servers; this module says what ``n`` is:

- ``job`` — the job's own nodes: every job behaves as if alone on the servers;
- ``cluster`` — the nodes of every job that is training now (a job launching
  or restarting holds its pods but moves no parameters; an OOM-killed one
  neither).

With ``cluster``, whenever the set of training nodes changes — a job becomes
ready, stops to restart, finishes — every training job's speed is evaluated
again at the new share, and the simulator moves the ones that changed to
their new speed from that instant (``SimJob.rerate``), so progress stays exact.

What a node's metrics give as its link capacity (``net_capacity_bytes_per_s``,
against which NEARCHUS's PSN check measures utilization) is ``observed``:

- ``server`` — the server's whole link, NEARCHUS §IV's literal "90% of the
  cluster network capacity" (1 Gbps on cluster A, §V);
- ``share`` — the share the node trains at, ``link · min(1, S / n)``: what a
  pod sharing its server's link can get. Cluster-wide it follows the share as
  it changes, from the instant it changes (samples up to then keep the old one).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from rightsize.cluster.jobmodel import Performance
from rightsize.cluster.simjob import SimJob, SimJobState
from rightsize.core.errors import choose


class LinkSharing(StrEnum):
    """Who shares the servers' links: each ``job`` alone, or the whole ``cluster``."""

    JOB = "job"
    CLUSTER = "cluster"


class ObservedLink(StrEnum):
    """The link capacity node metrics report: the ``server``'s, or the ``share`` its nodes
    train at."""

    SERVER = "server"
    SHARE = "share"


LINK_SHARING: tuple[str, ...] = tuple(LinkSharing)  # the command line's choices
OBSERVED_LINK: tuple[str, ...] = tuple(ObservedLink)


class LinkBook:
    """How many nodes are training on the cluster, and each job's speed at its link share."""

    def __init__(self, mode: LinkSharing, servers: int,
                 observed: ObservedLink = ObservedLink.SERVER) -> None:  # fmt: skip
        self.cluster_wide = choose(LinkSharing, mode, "link sharing") is LinkSharing.CLUSTER
        self.observe_share = choose(ObservedLink, observed, "observed link") is ObservedLink.SHARE
        self.servers = servers  # 0: a link per node, however many
        self.nodes = 0  # training nodes of every job
        self._last = 0  # ``nodes`` when the jobs' performances were last brought up to date

    def start(self, job: SimJob) -> None:
        """``job`` begins training at its shape: count its nodes and, cluster-wide, give it
        the performance at the new share (before it takes its rate from it); and the link
        capacity its metrics report."""
        job.link_nodes = len(job.shape.nodes)
        self.nodes += job.link_nodes
        if self.cluster_wide:
            job.perf = job.model.evaluate_shared(job.shape, self.nodes)
        job.observed_link_bytes_per_s = self.observed_link(job)

    def observed_link(self, job: SimJob) -> float:
        """The link capacity ``job``'s node metrics report: the server's link, or the share
        its nodes train at (``JobModel.node_link_bytes_per_s`` of the nodes sharing them)."""
        if not self.observe_share:
            return job.model.cluster.link_bytes_per_s
        sharing = max(self.nodes, job.link_nodes) if self.cluster_wide else job.link_nodes
        return job.model.node_link_bytes_per_s(sharing)

    def stop(self, job: SimJob) -> bool:
        """``job`` stops training (restart, completion); True if it was counted."""
        counted = job.link_nodes
        self.nodes -= counted
        job.link_nodes = 0
        return bool(counted)

    def changed(self, jobs: Iterable[SimJob]) -> list[tuple[SimJob, Performance, float]]:
        """The training jobs among ``jobs`` whose performance or observed link at the current
        share is not the one they run at or report, with both (none unless sharing is
        cluster-wide)."""
        if not self.cluster_wide:
            return []
        before, self._last = self._last, self.nodes
        if not self.servers or max(before, self.nodes) <= self.servers:
            return []  # every node had a link of its own, and still has
        out = []
        for job in jobs:
            if job.link_nodes and job.state == SimJobState.RUNNING:
                perf = job.model.evaluate_shared(job.shape, self.nodes)
                link = self.observed_link(job)
                if perf is not job.perf or link != job.observed_link_bytes_per_s:
                    out.append((job, perf, link))
        return out
