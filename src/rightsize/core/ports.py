"""A free TCP port on the loopback interface, for process groups and local servers."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now; the caller binds it soon (another process could race)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
