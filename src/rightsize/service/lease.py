"""The lease protocol between the service and a job's runner process.

A job's master runs in a process of its own (:mod:`runner`) — its user code, its GIL
and its failures are its own — and asks the service before it takes more capacity
(runtime/lease.py says why and when). The two talk over a socket pair the service
makes when it starts the runner: one JSON object per line each way, a request and
its answer, so the protocol is four verbs and nothing else:

    {"op": "free", "cpu": C, "memory": M}     -> {"cpu": C', "memory": M'}
    {"op": "reserve", "cpu": C, "memory": M}  -> {"granted": true} | {"granted": false, "why": ...}
    {"op": "settle", "cpu": C, "memory": M}   -> {"ok": true}
    {"op": "ceiling", "cpu": C, "memory": M}  -> {"cpu": C', "memory": M'}

where C, M are the job's whole shape (cores, bytes). The service answers from its
scheduler's books (:mod:`allocator`), under one lock for every job.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.runtime.lease import LeaseClosed  # the protocol's: the runtime stops on it


class Books(Protocol):
    """The service's side: what one job may hold (``job`` is its name)."""

    def free_beyond(self, job: str, total: Resources) -> Resources: ...

    def reserve(self, job: str, total: Resources) -> str | None: ...

    def settle(self, job: str, total: Resources) -> None: ...

    def held(self, job: str) -> Resources: ...


def _message(op: str, amount: Resources) -> dict[str, Any]:
    return {"op": op, "cpu": amount.cpu_cores, "memory": amount.memory_bytes}


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
        return _resources(self._ask(_message("free", shape.total())))

    def reserve(self, total: Resources) -> str | None:
        answer = self._ask(_message("reserve", total))
        return None if answer["granted"] else answer["why"]

    def settle(self, total: Resources) -> None:
        self._ask(_message("settle", total))

    def ceiling(self, budget: Resources) -> Resources:
        held = _resources(self._ask(_message("ceiling", budget)))
        return Resources(min(held.cpu_cores, budget.cpu_cores),
                         min(held.memory_bytes, budget.memory_bytes))  # fmt: skip


def serve_lease(sock: socket.socket, job: str, books: Books,
                on_close: Callable[[], None] = lambda: None) -> threading.Thread:  # fmt: skip
    """Answer ``job``'s runner on ``sock`` from ``books`` in a daemon thread until it closes."""

    def answer(message: dict[str, Any]) -> dict[str, Any]:
        amount = _resources(message)
        op = message["op"]
        if op == "free":
            free = books.free_beyond(job, amount)
            return {"cpu": free.cpu_cores, "memory": free.memory_bytes}
        if op == "reserve":
            why = books.reserve(job, amount)
            return {"granted": why is None, "why": why}
        if op == "settle":
            books.settle(job, amount)
            return {"ok": True}
        if op == "ceiling":
            held = books.held(job)
            return {"cpu": held.cpu_cores, "memory": held.memory_bytes}
        return {"error": f"unknown op {op!r}"}

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
