"""The master's answers to its nodes: register, heartbeat, lease, progress, done.

Every message carries the sender's name, pid, cluster generation and counters;
every answer may carry commands. A message from a process the master does not
know (a predecessor of a relaunched node) is told to stop. Workers are steered
by state rather than by one-off commands where they can miss nothing: while
the master halts for a repartition every answer says ``pause``; a paused
worker is answered ``resume`` once the halt is over; a worker on an old
generation gets the current cluster (parameter-server addresses and tensor
placement) with its answer once every server has loaded that generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rightsize.core.shape import NodeRole
from rightsize.core.spec import Strategy
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.shards import Task

if TYPE_CHECKING:
    from rightsize.runtime.master import Master

_STOP = {"commands": [{"cmd": "stop"}]}


def handle(master: Master, header: dict[str, Any], tensors: list) -> tuple[dict, list]:
    """The answer to one message (and the tensors it carries)."""
    node = master.nodes.get(header.get("name", ""))
    if node is None or node.status == Status.DEAD or header.get("pid") != node.pid:
        return dict(_STOP), []
    node.stats = header.get("stats", node.stats)
    if node.first_step_s is None and node.stats.get("steps", 0) > 0:
        node.first_step_s = master.clock.now()
    op = header["op"]
    if op == "register":
        return register(master, node, header), []
    if op == "heartbeat":
        return heartbeat(master, node, header), []
    if op == "lease":
        return lease(master, node, header)
    if op in ("progress", "done"):
        return progress(master, node, header), []
    raise ValueError(f"unknown message {op!r} from {node.name}")


def register(master: Master, node: NodeState, header: dict[str, Any]) -> dict[str, Any]:
    node.status = Status.RUNNING
    node.registered_s = master.clock.now()
    node.address = header.get("address")
    config = {
        "spec": master.spec.model_dump(mode="json", by_alias=True),
        "threads": master.threads(node.spec),
        "generation": master.generation,
        **node.config,
    }
    if node.role == NodeRole.WORKER and master.strategy == Strategy.PS:
        ready = master.cluster_ready()
        config["cluster"] = master.cluster_info() if ready else _no_cluster()
    return {"config": config}


def _no_cluster() -> dict[str, Any]:
    return {"generation": -1, "ps": {}, "placement": {}}


def heartbeat(master: Master, node: NodeState, header: dict[str, Any]) -> dict[str, Any]:
    for ack in header.get("acks", []):
        if ack["cmd"] in ("ready", "loaded"):
            node.generation = ack["generation"]
        node.acks.append(ack)
    if node.role == NodeRole.PS:
        return {"commands": node.take_commands()}
    return worker_reply(master, node, header)


def worker_reply(master: Master, node: NodeState, header: dict[str, Any], **extra) -> dict:
    """Commands for a worker, with the pause/resume state and the cluster it should use."""
    node.paused = bool(header.get("paused", False))
    commands = node.take_commands()
    if master.halt:
        commands.append({"cmd": "pause"})
    elif node.paused:
        commands.append({"cmd": "resume"})
    reply = {"commands": commands, **extra}
    stale = header.get("generation") != master.generation
    if master.strategy == Strategy.PS and stale and master.cluster_ready():
        reply["cluster"] = master.cluster_info()
    return reply


def lease(master: Master, node: NodeState, header: dict[str, Any]) -> tuple[dict, list]:
    can_lease = (
        master.leasing
        and not master.halt
        and header.get("generation") == master.generation
        and master.cluster_ready()
    )
    granted = None
    if can_lease:
        peers = [master.speeds[n.name] for n in master.nodes.running(NodeRole.WORKER)
                 if n.name in master.speeds]  # fmt: skip
        fraction = master.straggler.fraction(master.speeds.get(node.name), peers)
        granted = master.manager.lease(node.name, fraction)
    if granted is None:
        return worker_reply(master, node, header), []
    task = granted.task
    indices = torch.from_numpy(master.plan.indices(task.epoch, task.shard))
    body = {"lease": {"task": task.to_list(), "next_batch": granted.next_batch}}
    return worker_reply(master, node, header, **body), [indices]


def progress(master: Master, node: NodeState, header: dict[str, Any]) -> dict[str, Any]:
    ok = False
    if header.get("generation") == master.generation:
        task = Task.from_list(header["task"])
        if header["op"] == "done":
            ok = master.manager.finish(node.name, task)
        else:
            ok = master.manager.progress(node.name, task, int(header["next_batch"]))
    return worker_reply(master, node, header, ok=ok)
