"""What the master asks of a backend, whichever runs the nodes: this machine or a Ray cluster.

The master speaks to one object with this shape (:class:`NodeBackend`): it launches
a node's process inside the node's resources, resizes it, hears of its exit, signals
and stops it, and reads its CPU and memory. :func:`open_backend` picks the backend
a job file names (``runtime.backend``); :func:`capacity_of` is what the job may
span, read before anything is launched (the master checks a shape against it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.core.spec import Backend, JobSpec, RuntimeSpec
from rightsize.runtime.backends.cgroups import NO_SHARING, QuotaSharing
from rightsize.runtime.backends.local import Exit, LocalBackend, machine_resources
from rightsize.runtime.capacity import Capacity

#: The environment variable that tells a node which address its own server binds (a PS):
#: loopback on one machine (the default), its host's address on a cluster.
BIND_HOST_ENV = "RIGHTSIZE_BIND_HOST"


def node_bind_host() -> str:
    return os.environ.get(BIND_HOST_ENV, "127.0.0.1")


class NotInPlace(Exception):
    """The backend cannot give a running node these resources without relaunching it (its
    host has no room for them): the caller relaunches the node at the new size."""


class NodeBackend(Protocol):
    """The mechanism under the master (:class:`LocalBackend`, :class:`RayBackend`)."""

    #: how nodes are confined, for the report: ``cgroup-v1``, ``affinity``, ``ray+cgroup-v1``
    mode: str
    #: the address the master's own server binds, which every node can reach
    bind_host: str
    #: CPUs of the largest host a node can land on (torch threads follow a node's quota)
    host_cpus: int

    def launch(self, node: NodeSpec, argv: list[str], env: dict[str, str],
               startup: Resources | None = None) -> int: ...
    def note(self, name: str, text: str) -> None: ...
    def resize(self, name: str, resources: Resources) -> int: ...
    def exits(self) -> list[Exit]: ...
    def signal(self, name: str, sig: int) -> None: ...
    def stop(self, name: str, timeout_s: float = 10.0) -> int | None: ...
    def close(self) -> None: ...
    def reading(self, name: str) -> tuple[float, int]: ...
    def placements(self) -> list[dict]: ...


def open_backend(runtime: RuntimeSpec, log_dir: Path, warn: Callable[[str], None],
                 sharing: QuotaSharing = NO_SHARING) -> NodeBackend:  # fmt: skip
    """The backend ``runtime.backend`` names, ready to launch nodes (their CPU quotas
    lending unused time as ``sharing`` says). On Ray each node is confined by its own host
    actor, so only the burst applies there: a pool needs the job's nodes in one directory."""
    if runtime.backend == Backend.RAY:
        from rightsize.runtime.backends.ray import RayBackend  # Ray is an optional extra

        return RayBackend(runtime.ray_address, runtime.isolation, log_dir, warn, sharing.burst)
    return LocalBackend(runtime.isolation, log_dir, warn, sharing)


def quota_sharing(spec: JobSpec) -> QuotaSharing:
    """How the job's quotas lend unused time: as ``runtime.cpu_burst`` and ``cpu_pool`` say,
    and where they say nothing, both for a script's ranks (their communication threads and
    collective waits) and neither for a workload's nodes (whose CPU the policies read node
    by node)."""
    burst, pool = spec.runtime.cpu_burst, spec.runtime.cpu_pool
    return QuotaSharing(burst=spec.is_script if burst is None else burst,
                        pool=spec.is_script if pool is None else pool)  # fmt: skip


def capacity_of(runtime: RuntimeSpec) -> Capacity:
    """The CPUs and memory a job may span, and the most one node may have: this machine's,
    or the Ray cluster's and its largest node's.

    Raises:
        ResourceError: backend ray, and Ray is not installed or its cluster cannot be joined.
    """
    if runtime.backend == Backend.RAY:
        from rightsize.runtime.backends.ray import cluster_capacity

        return cluster_capacity(runtime.ray_address)
    return Capacity.of_machine(machine_resources())
