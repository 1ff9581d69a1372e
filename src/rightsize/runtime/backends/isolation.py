"""How a backend confines its nodes (:class:`IsolationMode`), named as reports say it."""

from __future__ import annotations

from enum import StrEnum


class IsolationMode(StrEnum):
    """How a backend confines its nodes, as the report and the state file say it."""

    CGROUP_V1 = "cgroup-v1"  # a cgroup per node: CPU quota and memory limit
    CGROUP_V2 = "cgroup-v2"
    AFFINITY = "affinity"  # no cgroups: CPU affinity and thread limits only
    RAY = "ray"  # on Ray, before any node has landed on a host
    RAY_CGROUP_V1 = "ray+cgroup-v1"  # on Ray, each node confined by its host as above
    RAY_CGROUP_V2 = "ray+cgroup-v2"
    RAY_AFFINITY = "ray+affinity"

    @classmethod
    def of_cgroups(cls, version: int | None) -> IsolationMode:
        """A local backend's: cgroups of ``version``, or affinity where there are none."""
        return cls.AFFINITY if version is None else cls(f"cgroup-v{version}")

    @classmethod
    def on_ray(cls, host: IsolationMode | None) -> IsolationMode:
        """A Ray backend's, whose nodes' hosts confine them as ``host`` (None: none yet)."""
        return cls.RAY if host is None else cls(f"ray+{host}")
