"""The lease protocol between the service and a job's runner process.

A job's master runs in a process of its own (:mod:`runner`) — its user code, its GIL
and its failures are its own — and asks the service before it takes more capacity
(runtime/lease.py says why and when). The two talk over a socket pair the service
makes when it starts the runner: one JSON object per line each way, a request and
its answer, so the protocol is four verbs and nothing else:

    {"op": "free", "cpu": C, "memory": M}     -> {"cpu": C', "memory": M'}
    {"op": "reserve", "cpu": C, "memory": M, "nodes": N}
                                              -> {"granted": true} | {"granted": false, "why": ...}
    {"op": "settle", "cpu": C, "memory": M, "nodes": N}   -> {"ok": true}
    {"op": "ceiling", "cpu": C, "memory": M}  -> {"cpu": C', "memory": M'}

where C, M are the job's whole shape (cores, bytes) and N, where the runner knows it, how
many nodes that shape has: each node's CPU is rounded to a millicore, and the books allow
the shape that rounding (``core.shape.rounding_slack``), as the runtime's own check of a
plan does. The service answers from its scheduler's books (:mod:`books`), under one lock
for every job.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.runtime.lease import LeaseClosed  # the protocol's: the runtime stops on it


class Books(Protocol):
    """The service's side: what one job may hold (``job`` is its name)."""

    def free_beyond(self, job: str, total: Resources) -> Resources: ...

    def reserve(self, job: str, total: Resources, nodes: int | None = None) -> str | None: ...

    def settle(self, job: str, total: Resources, nodes: int | None = None) -> None: ...

    def held(self, job: str) -> Resources: ...


class LeaseOp(StrEnum):
    """The protocol's verbs (an unknown one is answered with an error, not acted on)."""

    FREE = "free"
    RESERVE = "reserve"
    SETTLE = "settle"
    CEILING = "ceiling"


def _message(op: LeaseOp, amount: Resources, nodes: int | None = None) -> dict[str, Any]:
    message = {"op": str(op), "cpu": amount.cpu_cores, "memory": amount.memory_bytes}
    if nodes is not None:
        message["nodes"] = nodes
    return message


def _resources(message: dict[str, Any]) -> Resources:
    return Resources(float(message["cpu"]), int(message["memory"]))


class PipeLease:
    """The runner's side: a :class:`runtime.lease.CapacityLease` answered by the service."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("r", encoding="utf-8")

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
            line = self.reader.readline()
        except OSError as exc:
            raise LeaseClosed(f"the service's lease is gone: {exc}") from None
        if not line:
            raise LeaseClosed("the service's lease is gone")
        return json.loads(line)

    def free(self, shape: ClusterShape) -> Resources:
        return _resources(self._ask(_message(LeaseOp.FREE, shape.total())))

    def reserve(self, total: Resources, nodes: int | None = None) -> str | None:
        """Take ``total`` (a shape of ``nodes`` nodes, where known) if the books have room."""
        answer = self._ask(_message(LeaseOp.RESERVE, total, nodes))
        return None if answer["granted"] else answer["why"]

    def settle(self, total: Resources, nodes: int | None = None) -> None:
        self._ask(_message(LeaseOp.SETTLE, total, nodes))

    def ceiling(self, budget: Resources) -> Resources:
        held = _resources(self._ask(_message(LeaseOp.CEILING, budget)))
        return Resources(min(held.cpu_cores, budget.cpu_cores),
                         min(held.memory_bytes, budget.memory_bytes))  # fmt: skip


def serve_lease(sock: socket.socket, job: str, books: Books,
                on_close: Callable[[], None] = lambda: None) -> threading.Thread:  # fmt: skip
    """Answer ``job``'s runner on ``sock`` from ``books`` in a daemon thread until it closes."""

    def answer(message: dict[str, Any]) -> dict[str, Any]:
        amount, nodes = _resources(message), message.get("nodes")
        nodes = None if nodes is None else int(nodes)
        try:
            op = LeaseOp(message["op"])
        except ValueError:
            return {"error": f"unknown op {message['op']!r}"}
        if op == LeaseOp.FREE:
            free = books.free_beyond(job, amount)
            return {"cpu": free.cpu_cores, "memory": free.memory_bytes}
        if op == LeaseOp.RESERVE:
            why = books.reserve(job, amount, nodes)
            return {"granted": why is None, "why": why}
        if op == LeaseOp.SETTLE:
            books.settle(job, amount, nodes)
            return {"ok": True}
        held = books.held(job)  # LeaseOp.CEILING
        return {"cpu": held.cpu_cores, "memory": held.memory_bytes}

    def loop() -> None:
        with sock, sock.makefile("r", encoding="utf-8") as reader:
            for line in reader:
                try:
                    reply = answer(json.loads(line))
                except (ValueError, KeyError) as exc:
                    reply = {"error": str(exc)}
                try:
                    sock.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    break
        on_close()

    thread = threading.Thread(target=loop, name=f"lease-{job}", daemon=True)
    thread.start()
    return thread
