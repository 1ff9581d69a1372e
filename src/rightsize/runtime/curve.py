"""ZeroMQ CURVE on a job's sockets: keys made per job, handed to its nodes by the master.

On one machine every server of a job listens on loopback, which only this
machine's processes reach. A job that spans hosts (the Ray backend) binds each
server to its host's address, and then anyone on the network could register as a
node, pull the model or push gradients. So such a job's sockets use CURVE: the
master makes two key pairs per job — one every server of the job holds (the
master's own and each parameter server's), one every node connects with — and
hands them to the nodes it launches in their environment (:data:`KEYS_ENV`). A
server's ZAP handler admits only the job's client key: a process without it
cannot complete the handshake, so it cannot join, pull or push; and every byte
between the job's processes is encrypted. The keys never touch disk.

Whoever can read a node's environment (root on its host, or Ray's control channel,
which carries the launch; see docs/runtime.md) can read the keys: the boundary is
the job's hosts, not the network between them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.auth.thread

#: The environment variable that carries a job's keys to its nodes.
KEYS_ENV = "RIGHTSIZE_JOB_KEYS"
_KEY_CHARS = 40  # a CURVE key in Z85


@dataclass(frozen=True)
class JobKeys:
    """The job's two CURVE key pairs (Z85 text, 40 characters each)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def generate(cls) -> JobKeys:
        return cls(*zmq.curve_keypair(), *zmq.curve_keypair())

    def to_env(self) -> dict[str, str]:
        # four keys of fixed width, end to end: Z85 text has no separator of its own to spare
        return {KEYS_ENV: b"".join((self.server_public, self.server_secret, self.client_public,
                                     self.client_secret)).decode()}  # fmt: skip

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> JobKeys | None:
        """The keys the master handed this process, or None (a job without CURVE).

        Raises:
            ValueError: the variable is set but is not four Z85 keys.
        """
        text = environ.get(KEYS_ENV)
        if not text:
            return None
        raw = text.encode()
        parts = [raw[i : i + _KEY_CHARS] for i in range(0, len(raw), _KEY_CHARS)]
        if len(raw) != 4 * _KEY_CHARS:
            raise ValueError(f"{KEYS_ENV} is not four CURVE keys")
        return cls(*parts)


class _AdmitJobNodes:
    """ZAP credentials check: only the job's client key may connect."""

    def __init__(self, client_public: bytes) -> None:
        self.client_public = client_public

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.client_public


class JobContext(zmq.Context):
    """A ZeroMQ context whose servers and clients use the job's keys (or none: plain TCP).

    Servers call :meth:`serve` on their socket before binding, clients :meth:`dial` before
    connecting; with keys the context runs a ZAP handler that admits only the job's nodes.
    """

    keys: JobKeys | None = None
    _gate: zmq.auth.thread.ThreadAuthenticator | None = None

    def secure(self, keys: JobKeys | None) -> JobContext:
        self.keys = keys
        if keys is not None:
            self._gate = zmq.auth.thread.ThreadAuthenticator(self)
            self._gate.start()
            self._gate.configure_curve_callback(domain="*",
                                                credentials_provider=_AdmitJobNodes(keys.client_public))  # fmt: skip
        return self

    def serve(self, socket: zmq.Socket) -> None:
        if self.keys is not None:
            socket.curve_secretkey = self.keys.server_secret
            socket.curve_publickey = self.keys.server_public
            socket.curve_server = True

    def dial(self, socket: zmq.Socket) -> None:
        if self.keys is not None:
            socket.curve_serverkey = self.keys.server_public
            socket.curve_publickey = self.keys.client_public
            socket.curve_secretkey = self.keys.client_secret

    def destroy(self, linger: int | None = None) -> None:
        if self._gate is not None:
            self._gate.stop()
            self._gate = None
        super().destroy(linger=linger)


def serve(context: zmq.Context, socket: zmq.Socket) -> None:
    """Apply the job's server keys, if ``context`` carries them."""
    if isinstance(context, JobContext):
        context.serve(socket)


def dial(context: zmq.Context, socket: zmq.Socket) -> None:
    """Apply the job's client keys, if ``context`` carries them."""
    if isinstance(context, JobContext):
        context.dial(socket)
