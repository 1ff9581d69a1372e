"""The node port over a backend (:class:`ports.NodePort`): each node of the job a process.

A node is started as ``python -m rightsize.runtime.node`` by the backend, inside its
resources, told where the master's server listens and which role to run; the state
it starts in joins the job's nodes. An allreduce group or a script's ranks meet at a
key-value store served here, one per group (the previous one closes).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.runtime.backends.contract import NodeBackend
from rightsize.runtime.clock import Clock
from rightsize.runtime.curve import JobKeys
from rightsize.runtime.nodes import Nodes, NodeState, Status
from rightsize.runtime.ports import NodeConfig
from rightsize.runtime.protocol import Role


class NodeProcesses:
    """The job's nodes as the backend's processes.

    Args:
        address: the master's server, which every node reaches.
        role_of: the role a node of the shape runs (by its spec and the job's strategy).
        on_launch: told the name of every node launched (its metrics start anew).
    """

    def __init__(self, backend: NodeBackend, address: str, keys: JobKeys | None, nodes: Nodes,
                 clock: Clock, role_of: Callable[[NodeSpec], Role],
                 on_launch: Callable[[str], None] = lambda _name: None) -> None:  # fmt: skip
        self.backend, self.address, self.keys = backend, address, keys
        self.nodes, self.clock, self.role_of, self.on_launch = nodes, clock, role_of, on_launch
        self.rendezvous = None  # the current group's store (open_rendezvous)

    @property
    def host_cpus(self) -> int:
        return self.backend.host_cpus

    def launch(self, node: NodeSpec, config: NodeConfig = None,
               startup: Resources | None = None) -> NodeState:  # fmt: skip
        """Start ``node``'s process; ``config`` is what it gets on registering; ``startup``:
        the larger resources it starts with until it trains (:mod:`allowance`)."""
        argv = [sys.executable, "-m", "rightsize.runtime.node", "--master", self.address,
                "--name", node.name, "--role", str(self.role_of(node))]  # fmt: skip
        pid = self.backend.launch(node, argv, self.keys.to_env() if self.keys else {}, startup)
        state = NodeState(node, pid, self.clock.now(), config=config, startup=startup)
        self.nodes.add(state)
        self.on_launch(node.name)
        return state

    def stop(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None:
            node.mark_stopping()
        self.backend.stop(name)
        if node is not None:
            node.move_to(Status.DEAD)

    def signal(self, name: str, sig: int) -> None:
        self.backend.signal(name, sig)

    def resize(self, name: str, resources: Resources) -> int:
        return self.backend.resize(name, resources)

    def note(self, name: str, text: str) -> None:
        self.backend.note(name, text)

    def open_rendezvous(self, world: int) -> str:
        """A fresh rendezvous for a group of ``world`` ranks: a key-value store served by the
        master on the address every node reaches (rank 0's host is not known before it
        lands, on a cluster); the previous group's store closes."""
        import torch.distributed as dist  # only groups of ranks need it

        self.rendezvous = None
        self.rendezvous = dist.TCPStore(self.backend.bind_host, 0, world + 1, is_master=True,
                                        wait_for_workers=False)  # fmt: skip
        return f"tcp://{self.backend.bind_host}:{self.rendezvous.port}"

    def close(self) -> None:
        self.rendezvous = None
