"""What one request may cost the service: a bounded body, and errors that do not echo it.

Without a limit, a 10 MB job name is read whole, validated, and its 422 repeats the input
in every error entry (50 MB back). The limit is checked on the declared length before the
body is read, and on the bytes as they arrive for a body sent in chunks; a refused
request is a 413 naming the limit. Validation errors keep their field (``loc``), reason
(``msg``) and type, without pydantic's copy of the input, and a reason that quotes a
huge value is cut short.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

#: The largest request body: a script or workload upload is at most 1 MB of text
#: (uploads.MAX_SOURCE_CHARS), a tune report with thousands of trials a few MB.
MAX_BODY_BYTES = 16 * 2**20
#: The longest reason an error gives back; longer ones quote the input they refuse.
MAX_MESSAGE_CHARS = 300


class BodyTooLarge(Exception):
    """The body grew past the limit while it was read."""


class BodyLimit:
    """ASGI middleware: 413 for a body over ``max_bytes``, declared or received."""

    def __init__(self, app: Any, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received, started = 0, False

        async def counted() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise BodyTooLarge
            return message

        async def watched(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"detail": f"the request body is larger than "
                                     f"{self.max_bytes // 2**20} MiB"}).encode()  # fmt: skip
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})


def short(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message``, cut to ``limit`` characters with how much was left out."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


def install(app: FastAPI) -> None:
    """The body limit and the compact validation errors, on ``app``."""
    app.add_middleware(BodyLimit)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(error.get("loc", ())), "msg": short(str(error.get("msg", ""))),
                   "type": error.get("type", "value_error")} for error in exc.errors()]  # fmt: skip
        return JSONResponse(status_code=422, content={"detail": detail})
