"""A node process's link to its master: the context every role (:mod:`ps`, :mod:`worker`,
:mod:`allreduce`, :mod:`script_rank`) talks through, and what a node builds from the job.

It lives apart from :mod:`node` (the process's entry point, which picks the role) so
that the roles import it without importing each other through the entry point.
"""

from __future__ import annotations

import os
import time

import torch

from rightsize.core.spec import JobSpec
from rightsize.runtime.curve import JobContext, JobKeys
from rightsize.runtime.protocol import (
    NO_CLUSTER,
    Body,
    Message,
    NodeConfig,
    Register,
    Reply,
    Role,
    Sender,
    Stats,
    Threads,
)
from rightsize.runtime.transport import Client, Counters
from rightsize.workloads.registry import WorkloadRegistry
from rightsize.workloads.workload import Workload

#: How long a node waits for the master to answer before it gives up. The
#: master answers every request at once; only a dead or wedged master is slower.
MASTER_TIMEOUT_S = 120.0


class MasterLost(Exception):
    """The master did not answer."""


class NodeContext:
    """A node's link to the master, and the counters it reports.

    ``generation`` is the cluster generation the node works in, sent with every
    message: the role sets it (a server when it serves a generation, a worker when
    it switches to a cluster, a rank from its group's config); ``None`` until then.
    """

    def __init__(self, name: str, role: Role, master_address: str) -> None:
        self.name, self.role = name, role
        self.zmq = JobContext().secure(JobKeys.from_env())  # the job's keys, if it has any
        self.counters = Counters()
        self.master = Client(self.zmq, master_address, self.counters)
        self.steps = self.samples = self.updates = 0
        self.loss_sum, self.loss_n = 0.0, 0
        self.busy_s = 0.0
        self.counted_at: float | None = None  # monotonic: when the last counted step ended
        self.config: NodeConfig | None = None
        self.generation: int | None = NO_CLUSTER
        #: applies a ``threads`` command; torch's thread count is per OS thread under OpenMP,
        #: so a role that talks to the master from another thread defers it to its main one
        self.apply_threads = set_threads

    def stats(self) -> Stats:
        age = None if self.counted_at is None else max(0.0, time.monotonic() - self.counted_at)
        return Stats(self.counters.bytes_in, self.counters.bytes_out, self.steps, self.samples,
                     self.updates, self.loss_sum, self.loss_n, self.busy_s, age)  # fmt: skip

    def call(self, body: Body) -> tuple[Reply, list[torch.Tensor]]:
        """Send ``body`` to the master; apply a ``threads`` command; return the reply and
        any tensors it carried.

        Raises:
            MasterLost: no answer within :data:`MASTER_TIMEOUT_S`.
        """
        message = Message(Sender(self.name, os.getpid(), self.generation, self.stats()), body)
        try:
            header, tensors = self.master.call(message.to_header(), timeout_s=MASTER_TIMEOUT_S)
        except TimeoutError as exc:
            raise MasterLost(str(exc)) from None
        reply = Reply.from_header(header)
        for command in reply.commands:
            if isinstance(command, Threads):
                self.apply_threads(command.n)
        return reply, tensors

    def register(self, address: str | None = None) -> Reply:
        """Register; the reply carries this node's configuration (and a worker's cluster)."""
        reply, _ = self.call(Register(self.role, address))
        if reply.config is None:  # told to stop: the master no longer knows this process
            raise MasterLost("the master does not know this node")
        self.config = reply.config
        set_threads(self.config.threads)
        return reply

    @property
    def spec(self) -> JobSpec:
        return JobSpec.model_validate(self.config.spec)

    def workload(self) -> Workload:
        return build_workload(self.spec)

    def close(self) -> None:
        self.zmq.destroy(linger=0)


def build_workload(spec: JobSpec) -> Workload:
    """The job's workload, identical in every process (seeded by ``training.seed``)."""
    return WorkloadRegistry().get(
        spec.workload, spec.dataset, spec.options, spec.dataset_size, seed=spec.training.seed
    )


def set_threads(n: int) -> None:
    """Torch intra-op threads, which follow the node's CPU quota."""
    if n >= 1 and torch.get_num_threads() != n:
        torch.set_num_threads(n)
