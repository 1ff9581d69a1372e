"""What the master asks of a backend, whichever runs the nodes: this machine or a Ray cluster.

The master speaks to one object with this shape (:class:`NodeBackend`): it launches
a node's process inside the node's resources, resizes it, hears of its exit, signals
and stops it, and reads its CPU and memory. This module is the contract alone, so
that the backends (:mod:`backends.local`, :mod:`backends.ray`) and the factory that
picks one (:mod:`backends.base`) import it without importing each other.
"""

from __future__ import annotations

import os
from typing import Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.runtime.backends.isolation import IsolationMode
from rightsize.runtime.backends.local import Exit

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
    mode: IsolationMode
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
