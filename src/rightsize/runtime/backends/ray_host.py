"""The actor that holds one node's process on a Ray node (the Ray backend's far end).

A Ray actor runs on the Ray node its placement group reserved resources on, and
does there what the local backend does on this machine: starts the node's
process in a cgroup of that host (CPU quota, memory limit), resizes the cgroup in
place, reads its CPU and memory, reports its exit and OOM kills, signals and
stops it. It is the local backend, for one node, on another host
(:class:`LocalBackend` is reused whole), so a node's metrics on Ray are the same
readings as on one machine.

The actor itself reserves nothing (``num_cpus=0``): the node's resources are its
placement group's, which the driver can replace while the process keeps running
(a vertical resize in place, :mod:`backends.ray`). The node dies with the actor
(its parent: Linux's parent-death signal), so a Ray node lost takes its nodes with
it and the master hears of them as exits.

This module does not import Ray: :mod:`backends.ray` wraps :class:`NodeHost` as an
actor class.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.core.spec import Isolation
from rightsize.runtime.backends.cgroups import QuotaSharing
from rightsize.runtime.backends.contract import BIND_HOST_ENV
from rightsize.runtime.backends.local import Exit, LocalBackend

#: How often the actor looks for its process's exit.
EXIT_POLL_S = 0.05


class NodeHost:
    """One node's process on this host, confined by the local backend."""

    def __init__(self, name: str, isolation: str, log_dir: str, host: str,
                 cpu_burst: bool = False) -> None:  # fmt: skip
        self.name, self.host = name, host
        self.warnings: list[str] = []
        self.local = LocalBackend(Isolation(isolation), Path(log_dir), self.warnings.append,
                                  QuotaSharing(burst=cpu_burst))  # fmt: skip
        self.ended: Exit | None = None
        self.lock = threading.Lock()  # the exit watcher and the driver's calls share the backend

    def start(self, node: NodeSpec, argv: list[str], env: dict[str, str]) -> dict:
        """Launch the node; its own server (a PS) binds this host's address. ``argv[0]`` is
        the driver's Python: this host's runs the node."""
        env = {**env, BIND_HOST_ENV: self.host}
        with self.lock:
            pid = self.local.launch(node, [sys.executable, *argv[1:]], env)
        return {"pid": pid, "host": self.host, "hostname": socket.gethostname(),
                "mode": str(self.local.mode), "warnings": list(self.warnings)}  # fmt: skip

    def wait(self) -> Exit:
        """Return when the process has ended (or was stopped): how it ended."""
        while True:
            with self.lock:
                if self.ended is None:
                    ended = self.local.exits()
                    if ended:
                        self.ended = ended[0]
                if self.ended is not None:
                    return self.ended
            time.sleep(EXIT_POLL_S)

    def reading(self) -> tuple[float, int] | None:
        """(CPU seconds used so far, memory bytes now); None once the process has ended."""
        with self.lock:
            if self.name not in self.local.procs:
                return None
            return self.local.reading(self.name)

    def resize(self, resources: Resources) -> int:
        with self.lock:
            return self.local.resize(self.name, resources)

    def signal(self, sig: int) -> None:
        with self.lock:
            self.local.signal(self.name, sig)

    def stop(self, timeout_s: float) -> int | None:
        """End the process (SIGTERM, then SIGKILL) and remove its cgroup."""
        with self.lock:
            code = self.local.stop(self.name, timeout_s)
            if self.ended is None:
                self.ended = Exit(self.name, code if code is not None else 0, False)
            self.local.close()
            return code
