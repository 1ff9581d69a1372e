"""The Ray backend: each node a process on a Ray cluster's node, held by an actor.

Where things run:

- **The master** stays in the process that runs ``rightsize run`` (or the service),
  a Ray driver. It holds the job's state file and decides; it is not a Ray actor so
  that losing any Ray node but the driver's never loses the job's bookkeeping, and
  a master that dies is resumed from its state file as on one machine. Its server
  binds this host's address (``bind_host``), which every Ray node reaches.
- **Each node** (PS, worker, rank) gets a placement group of one bundle — its CPUs
  and memory, ``STRICT_PACK`` on one Ray node — and an actor pinned to that Ray node
  (:class:`ray_host.NodeHost`, which reserves nothing itself) that starts the node's
  process in a cgroup of its host, as the local backend does here.

Resizing a node vertically first tries to keep it where it runs: the old
reservation is released and a new one of the new size asked for on the same Ray
node (pinned by its node-id label); if it is granted there, the cgroup is rewritten and the
process keeps running (*in place*). If it cannot (the host is full), the old
reservation is taken back and :class:`NotInPlace` tells the master to relaunch
the node at its new size elsewhere. Shrinking always stays in place.

A Ray node lost (its raylet killed, the machine gone) takes its actors and their
processes with it; their exits reach the master as failures, and it relaunches
them — new placement groups land on the nodes that remain.
"""

from __future__ import annotations

import signal as signals
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rightsize.core.errors import ResourceError
from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.core.spec import Isolation
from rightsize.runtime.backends.contract import NotInPlace
from rightsize.runtime.backends.isolation import IsolationMode
from rightsize.runtime.backends.local import Exit, append_note
from rightsize.runtime.backends.ray_host import NodeHost
from rightsize.runtime.capacity import Capacity

#: Seconds a new node's reservation may wait for room on the cluster.
PLACE_TIMEOUT_S = 60.0
#: Seconds a starting node waits for room to borrow idle CPU in before it starts at its size.
BORROW_TIMEOUT_S = 2.0
#: Seconds a resize waits to learn whether the node's host has room for its new size.
RESIZE_TIMEOUT_S = 10.0
#: Seconds a call to a node's actor may take (a stop waits up to its own grace first).
CALL_TIMEOUT_S = 30.0
#: The label every Ray node carries with its id: a reservation pinned to the node a process
#: runs on asks for it (it then waits for room there rather than landing elsewhere).
NODE_LABEL = "ray.io/node-id"
#: Ray's resource quantities have four decimal places.
_RESOLUTION = 1e-4


def _ray():
    try:
        import ray
    except ImportError:
        raise ResourceError("runtime.backend ray needs Ray: pip install 'rightsize[ray]'") from None
    return ray


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` unless this process already has. A process stays
    joined until it exits, as any Ray driver does (the service runs job after job)."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address != "auto":  # Ray itself retries an unreachable head for minutes
        _reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False,
                 namespace="rightsize")  # fmt: skip
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ResourceError(f"runtime.ray_address {address}: cannot join the Ray cluster "
                            f"({str(exc).splitlines()[0]})") from None  # fmt: skip


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise ResourceError(f"runtime.ray_address {address}: no Ray head answers there "
                            f"({exc})") from None  # fmt: skip


def cluster_capacity(address: str) -> Capacity:
    """The CPUs and memory of the cluster's live nodes that can run a node (what a job may
    span), and of each of them (what one node may have)."""
    connect(address)
    hosts = tuple(_hosts(_ray()))
    total = Resources(sum(h.cpu_cores for h in hosts), sum(h.memory_bytes for h in hosts))
    return Capacity(total, hosts, "the Ray cluster")


def _hosts(ray) -> list[Resources]:
    """Each live Ray node's CPUs and memory (whether used or not); nodes without CPUs (a
    head kept for drivers) hold no job node."""
    hosts = [Resources(float(n["Resources"].get("CPU", 0.0)), int(n["Resources"].get("memory", 0)))
             for n in ray.nodes() if n.get("Alive")]  # fmt: skip
    return [h for h in hosts if h.cpu_cores > 0]


def _bundle(resources: Resources) -> dict[str, float]:
    cpu = max(_RESOLUTION, round(resources.cpu_cores, 4))
    return {"CPU": cpu, "memory": float(resources.memory_bytes)}


def _within(resources: Resources, reserved: Resources) -> bool:
    return (resources.cpu_cores <= reserved.cpu_cores + _RESOLUTION
            and resources.memory_bytes <= reserved.memory_bytes)  # fmt: skip


@dataclass
class _Placed:
    """A node on the cluster: its actor, its reservation and where both are."""

    actor: Any
    group: Any  # the placement group holding its reservation
    reserved: Resources
    ray_node: str
    host: str
    exit_ref: Any  # the actor's wait(): ready when the process ends


class RayBackend:
    """Launches, resizes, measures and stops node processes on a Ray cluster."""

    def __init__(self, address: str, isolation: Isolation, log_dir: Path,
                 warn: Callable[[str], None], cpu_burst: bool = False) -> None:  # fmt: skip
        self.ray = _ray()
        connect(address)
        self.isolation, self.log_dir, self.warn = isolation, log_dir, warn
        self.cpu_burst = cpu_burst
        self.token = uuid.uuid4().hex[:8]
        self.nodes: dict[str, _Placed] = {}
        self._placements: list[dict] = []
        self._host_mode: IsolationMode | None = None  # how the hosts confine nodes
        self.bind_host = self.ray.util.get_node_ip_address()
        self.host_cpus = max(1, int(max((h.cpu_cores for h in _hosts(self.ray)), default=1)))
        self.host_class = self.ray.remote(NodeHost)

    @property
    def mode(self) -> IsolationMode:
        return IsolationMode.on_ray(self._host_mode)

    def placements(self) -> list[dict]:
        """Every launch: the node, the Ray node and host it landed on."""
        return list(self._placements)

    # -- lifecycle ----------------------------------------------------------------------
    def launch(self, node: NodeSpec, argv: list[str], env: dict[str, str],
               startup: Resources | None = None) -> int:  # fmt: skip
        """Reserve ``node``'s resources on one Ray node, start its actor there and the node's
        process under it; returns the process's pid (on its host). With ``startup`` (the
        larger resources a starting node borrows, :mod:`allowance`) it reserves those if a
        Ray node has them free now, else the node's own; the master shrinks it in place
        once it trains.

        Raises:
            ResourceError: no Ray node had room within :data:`PLACE_TIMEOUT_S`.
        """
        if not any(_within(node.resources, host) for host in _hosts(self.ray)):
            raise ResourceError(f"{node.name} needs {node.resources}, more than any live Ray "
                                f"node has")  # fmt: skip
        group = None
        if startup is not None:
            group = self._reserve(node.name, startup, None, BORROW_TIMEOUT_S)
            node = NodeSpec(node.name, node.role, startup) if group is not None else node
        group = group or self._reserve(node.name, node.resources, None, PLACE_TIMEOUT_S)
        if group is None:
            raise ResourceError(f"{node.name} needs {node.resources}: no Ray node had it free "
                                f"within {PLACE_TIMEOUT_S:g}s")  # fmt: skip
        ray_node = self._node_of(group)
        host = self._address_of(ray_node)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(ray_node, soft=False)
        actor = self.host_class.options(
            num_cpus=0, max_concurrency=8, scheduling_strategy=strategy, max_restarts=0,
        ).remote(node.name, str(self.isolation), str(self.log_dir), host,
                  self.cpu_burst)  # fmt: skip
        try:
            info = self.ray.get(actor.start.remote(node, argv, env), timeout=CALL_TIMEOUT_S)
        except Exception:
            self.ray.util.remove_placement_group(group)
            self.ray.kill(actor)
            raise
        for warning in info["warnings"]:
            self.warn(f"{node.name} on {host}: {warning}")
        self._host_mode = IsolationMode(info["mode"])
        placed = _Placed(actor, group, node.resources, ray_node, host, actor.wait.remote())
        self.nodes[node.name] = placed
        self._placements.append({"node": node.name, "ray_node": ray_node[:12], "host": host,
                                 "hostname": info["hostname"], "pid": info["pid"]})  # fmt: skip
        self.note(node.name, f"launched on Ray node {ray_node[:12]} ({host}), pid {info['pid']}, "
                             f"{node.resources} reserved ({info['mode']})")  # fmt: skip
        return info["pid"]

    def note(self, name: str, text: str) -> None:
        append_note(self.log_dir, name, text)  # the logs stay on the master's host

    def resize(self, name: str, resources: Resources) -> int:
        """Give the running node new limits in place, moving its reservation on its Ray node;
        returns its new thread count.

        Raises:
            NotInPlace: its Ray node has no room for the new size (relaunch it elsewhere).
        """
        placed = self.nodes[name]
        if _bundle(resources) != _bundle(placed.reserved):
            self.ray.util.remove_placement_group(placed.group)
            group = self._reserve(name, resources, placed.ray_node, RESIZE_TIMEOUT_S)
            if group is None:
                # take the old reservation back (it was free a moment ago); a node that
                # shrinks keeps it and runs smaller inside it
                placed.group = self._reserve(name, placed.reserved, placed.ray_node,
                                             PLACE_TIMEOUT_S)  # fmt: skip
                if placed.group is None or not _within(resources, placed.reserved):
                    raise NotInPlace(f"Ray node {placed.ray_node[:12]} has no room for {name} "
                                     f"at {resources}")  # fmt: skip
            else:
                placed.group, placed.reserved = group, resources
        return self.ray.get(placed.actor.resize.remote(resources), timeout=CALL_TIMEOUT_S)

    def exits(self) -> list[Exit]:
        """Nodes that ended since the last call; a node whose actor died (its Ray node was
        lost) ended killed."""
        if not self.nodes:
            return []
        refs = {p.exit_ref: name for name, p in self.nodes.items()}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
        ended = []
        for ref in ready:
            name = refs[ref]
            try:
                exit_ = self.ray.get(ref)
            except self.ray.exceptions.RayActorError:
                placed = self.nodes[name]
                self.note(name, f"{name} lost with Ray node {placed.ray_node[:12]} ({placed.host})")
                exit_ = Exit(name, -signals.SIGKILL, False)
            self._release(name)
            ended.append(exit_)
        return ended

    def signal(self, name: str, sig: int) -> None:
        placed = self.nodes.get(name)
        if placed is not None:
            try:
                self.ray.get(placed.actor.signal.remote(sig), timeout=CALL_TIMEOUT_S)
            except self.ray.exceptions.RayActorError:
                pass  # its Ray node is gone: the exit says so

    def stop(self, name: str, timeout_s: float = 10.0) -> int | None:
        """End a node (SIGTERM, then SIGKILL after ``timeout_s``), its actor and reservation."""
        placed = self.nodes.get(name)
        if placed is None:
            return None
        try:
            code = self.ray.get(placed.actor.stop.remote(timeout_s),
                                timeout=timeout_s + CALL_TIMEOUT_S)  # fmt: skip
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            code = -signals.SIGKILL
        self._release(name)
        return code

    def close(self) -> None:
        """Stop every node and remove every reservation."""
        for name in list(self.nodes):
            self.stop(name, timeout_s=5.0)

    # -- measurement ----------------------------------------------------------------------
    def reading(self, name: str) -> tuple[float, int]:
        """(CPU seconds used so far, memory bytes now), read by the node's actor on its host.

        Raises:
            KeyError: the node has ended (its exit is handled next).
        """
        placed = self.nodes[name]
        try:
            value = self.ray.get(placed.actor.reading.remote(), timeout=CALL_TIMEOUT_S)
        except self.ray.exceptions.RayActorError:
            value = None
        if value is None:
            raise KeyError(name)
        return value

    # -- internals ------------------------------------------------------------------------
    def _reserve(self, name: str, resources: Resources, ray_node: str | None,
                 timeout_s: float):  # fmt: skip
        """A placement group of ``resources`` on one Ray node — on ``ray_node`` and no other,
        if given (a process already runs there) — or None if there was no room within
        ``timeout_s``."""
        util = self.ray.util
        pinned = [{NODE_LABEL: ray_node}] if ray_node else None
        group = util.placement_group([_bundle(resources)], strategy="STRICT_PACK",
                                     name=f"rightsize-{self.token}-{name}-{uuid.uuid4().hex[:4]}",
                                     bundle_label_selector=pinned)  # fmt: skip
        try:
            self.ray.get(group.ready(), timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            util.remove_placement_group(group)
            return None
        return group

    def _node_of(self, group) -> str:
        return self.ray.util.placement_group_table(group)["bundles_to_node_id"][0]

    def _address_of(self, ray_node: str) -> str:
        for node in self.ray.nodes():
            if node["NodeID"] == ray_node:
                return node["NodeManagerAddress"]
        return self.bind_host

    def _release(self, name: str) -> None:
        placed = self.nodes.pop(name)
        for remove in (lambda: self.ray.util.remove_placement_group(placed.group),
                       lambda: self.ray.kill(placed.actor)):  # fmt: skip
            try:
                remove()
            except Exception:  # noqa: BLE001 (already gone with its Ray node)
                pass
