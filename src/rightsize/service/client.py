"""A client of ``rightsize serve`` for the CLI: where the server is, who you are, and calls.

The server URL and the token come from the command's options, else
``$RIGHTSIZE_SERVER`` and ``$RIGHTSIZE_TOKEN``, else the config file
(``$XDG_CONFIG_HOME/rightsize/client.yaml``, ``~/.config/...``: ``server:`` and
``token:``), else the server defaults to http://127.0.0.1:8765 and the token is
required. Plain urllib: the client needs nothing the package does not already have.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rightsize.core.errors import RightsizeError

DEFAULT_SERVER = "http://127.0.0.1:8765"
ENV_SERVER, ENV_TOKEN = "RIGHTSIZE_SERVER", "RIGHTSIZE_TOKEN"
TIMEOUT_S = 30.0


class ServiceRefused(RightsizeError):
    """The server answered with an error (or could not be reached): one line saying why."""


def config_path() -> Path:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "rightsize" / "client.yaml"


@dataclass(frozen=True)
class Client:
    server: str
    token: str

    @classmethod
    def configured(cls, server: str | None, token: str | None) -> Client:
        """From options, else the environment, else the config file.

        Raises:
            ServiceRefused: no token anywhere, or a config file that is not a mapping.
        """
        path = config_path()
        saved: dict[str, Any] = {}
        if path.exists():
            saved = yaml.safe_load(path.read_text()) or {}
            if not isinstance(saved, dict):
                raise ServiceRefused(f"{path}: expected 'server:' and 'token:' fields")
        server = server or os.environ.get(ENV_SERVER) or saved.get("server") or DEFAULT_SERVER
        token = token or os.environ.get(ENV_TOKEN) or saved.get("token")
        if not token:
            raise ServiceRefused(f"--token: no token given (nor ${ENV_TOKEN}, nor {path}); make "
                                 "one with: rightsize serve token create NAME")  # fmt: skip
        return cls(server.rstrip("/"), str(token))

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method path`` with the token; the JSON answer, or ServiceRefused naming why."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )  # fmt: skip
        with self._answered("cannot reach"):
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return json.loads(answer.read() or b"null")

    def events(self, path: str) -> Iterator[tuple[str, Any]]:
        """A server-sent event stream at ``path``: each event's name and JSON, until the
        server closes it (comment lines, its heartbeats, are skipped)."""
        request = urllib.request.Request(self.server + path, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"})  # fmt: skip
        with self._answered("lost"):
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                name, data = "message", []
                for raw in answer:
                    line = raw.decode().rstrip("\r\n")
                    if not line:  # a blank line ends an event
                        if data:
                            yield name, json.loads("\n".join(data))
                        name, data = "message", []
                    elif line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())

    @contextmanager
    def _answered(self, failed: str) -> Iterator[None]:
        """The server's refusal (its status and detail) or an unreachable server, as
        ServiceRefused in one line; ``failed`` says what became of the server."""
        try:
            yield
        except urllib.error.HTTPError as exc:
            raise ServiceRefused(_why(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceRefused(f"--server: {failed} {self.server}: {reason}") from None

    def quoted(self, name: str) -> str:
        return urllib.parse.quote(name, safe="")


def _why(exc: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(exc.read()).get("detail")
    except (ValueError, AttributeError):
        detail = None
    if exc.code == 401:
        return (
            "the server refused the token (401); make one with: rightsize serve token create NAME"
        )
    if isinstance(detail, list):  # validation: each error's field and reason
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:]) or 'job'}: {d.get('msg')}"
                         for d in detail)  # fmt: skip
    return f"{detail or exc.reason} ({exc.code})"
