"""What clients may hold in flight in one guardd process.

Quart buffers every chunk of a request body the server hands it, whether or
not a handler reads it, and a client decides how fast its body arrives. Left
alone, many clients sending large bodies slowly hold the process's memory
for as long as they like. So an ASGI middleware in front of the app counts
the requests in flight and the body bytes they may buffer, and answers 503
``unavailable`` (``Connection: close``, body unread) to a request that would
go beyond either limit, before any of its body is read:

- a body announced by ``Content-Length`` counts that many bytes, at most
  ``MAX_BODY`` (a larger one is answered 413 at once, unread);
- a chunked body, whose size is only known once it has arrived, counts
  ``MAX_BODY``, the most Quart buffers before it refuses the body with 413;
- a request without an ``Authorization`` header counts no body bytes: every
  route that reads a body needs a token, so it is answered (401) before its
  body is read, and the connection closed.

The count is taken when the request starts and given back when its answer
has been sent, so the body bytes held by requests in flight never exceed
``MAX_BODY_IN_FLIGHT``. How long a body may take to arrive is bounded by
``BODY_DEADLINE`` (Quart's ``BODY_TIMEOUT``, which ``read_json`` applies).

A request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
here with 400: the two disagree on where the body ends, and a proxy in front
that reads the other one would see another request than guardd does.

The middleware costs a scan of the request's headers and two counters per
request: no task, no allocation beyond the answer it may give.
"""

from __future__ import annotations

import ctypes
from collections.abc import Awaitable, Callable
from typing import Any

from guardd.errors import STATUS
from guardd.jsonio import JSON_TYPE, MAX_BODY, SECURITY_HEADERS, dumps

MAX_REQUESTS_IN_FLIGHT = 4096  # long-polls of a large fleet count too
MAX_BODY_IN_FLIGHT = 64 * 1024 * 1024  # bytes
BODY_DEADLINE = 10  # seconds for a whole request body to arrive

# glibc's mallopt parameter, and the size above which an allocation gets a
# mapping of its own (glibc's default starting value).
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def _answer(
    code: str, message: str, *extra: tuple[bytes, bytes]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ASGI messages of an ``{error, code}`` answer that closes the connection."""
    body = dumps({"error": message, "code": code})
    headers = [
        *extra,
        (b"content-type", JSON_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *((name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()),
        # The body, if any, is not read: the connection cannot carry another request.
        (b"connection", b"close"),
    ]
    start = {"type": "http.response.start", "status": STATUS[code], "headers": headers}
    return start, {"type": "http.response.body", "body": body, "more_body": False}


_BUSY = _answer(
    "unavailable", "too many requests in flight; try again shortly", (b"retry-after", b"1")
)
_AMBIGUOUS_LENGTH = _answer(
    "bad_request", "a request may not have both Content-Length and Transfer-Encoding"
)


class Limits:
    """ASGI middleware enforcing the in-flight limits above (one per process)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_requests: int = MAX_REQUESTS_IN_FLIGHT,
        max_body_bytes: int = MAX_BODY_IN_FLIGHT,
    ) -> None:
        self.app = app
        self.max_requests = max_requests
        self.max_body_bytes = max_body_bytes
        self.requests = 0  # in flight now
        self.body_bytes = 0  # that the requests in flight may buffer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = -1  # no Content-Length
        chunked = token = False
        for name, value in scope["headers"]:
            # Names arrive lower-cased; the HTTP parser has checked that a
            # Content-Length is digits and a Transfer-Encoding is "chunked".
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"authorization":
                token = True
        if chunked:
            if length >= 0:
                await _send(send, _AMBIGUOUS_LENGTH)
                return
            length = MAX_BODY
        if not token or length < 0:
            # Every route that reads a body needs a token: without one the
            # answer (401, or what a public GET says) goes before the body.
            length = 0
        elif length > MAX_BODY:
            length = MAX_BODY  # answered 413 before the body is read
        if self.requests >= self.max_requests or self.body_bytes + length > self.max_body_bytes:
            await _send(send, _BUSY)
            return
        self.requests += 1
        self.body_bytes += length
        try:
            await self.app(scope, receive, send)
        finally:
            self.requests -= 1
            self.body_bytes -= length


async def _send(send: Any, answer: tuple[dict[str, Any], dict[str, Any]]) -> None:
    start, body = answer
    await send(start)
    await send(body)


def return_large_buffers_to_the_system() -> None:
    """Have glibc give every allocation above 128 KiB a mapping of its own,
    returned to the system when freed.

    glibc starts so, but raises the threshold to the size of the largest
    such block freed so far: after the first request body (up to 1 MiB) is
    freed, the next ones are carved out of the heap, which seldom shrinks.
    Measured with 200 clients stalling 1 MiB bodies, twice over: far more
    stayed above idle RSS after they had gone than with a fixed threshold
    (docs/design.md, "Hostile clients", has the figures). Where there is no
    glibc (no ``mallopt``) this does nothing."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
