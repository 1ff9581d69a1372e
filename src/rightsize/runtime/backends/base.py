"""Which backend runs a job's nodes, and what it may span.

:func:`open_backend` picks the backend a job file names (``runtime.backend``) and
returns it as the contract the master speaks to (:class:`contract.NodeBackend`);
:func:`capacity_of` is what the job may span, read before anything is launched (the
master checks a shape against it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rightsize.core.spec import Backend, JobSpec, RuntimeSpec
from rightsize.runtime.backends.cgroups import NO_SHARING, QuotaSharing
from rightsize.runtime.backends.contract import NodeBackend
from rightsize.runtime.backends.local import LocalBackend, machine_resources
from rightsize.runtime.capacity import Capacity


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
