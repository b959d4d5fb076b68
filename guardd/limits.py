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
  body is read, and the connection closed. Its body is not even taken from
  Hypercorn before the answer has gone (``_Unread``): Hypercorn then stops
  reading the connection, and the client's bytes wait in the kernel.

The count is taken when the request starts and given back when its answer
has been sent, so the body bytes held by requests in flight never exceed
``MAX_BODY_IN_FLIGHT``. How long a body may take to arrive is bounded by
``BODY_DEADLINE`` (Quart's ``BODY_TIMEOUT``, which ``read_json`` applies).

A request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
here with 400: the two disagree on where the body ends, and a proxy in front
that reads the other one would see another request than guardd does.

Hypercorn hands a body to the app through a queue of at most
``APP_QUEUE_CHUNKS`` chunks and reads no more from the connection while it
is full; with its default (10) a connection whose request was not yet
served held up to 640 KiB there. Each chunk is what the connection's stream
reader held when Hypercorn read it, and guardd.serving keeps that small
(16 KiB socket reads, a reader that pauses above 8 KiB): a connection
sending faster than guardd serves it costs at most about 100 KB of its body
until it is answered (docs/design.md, "Hostile clients").

The middleware costs a scan of the request's headers and two counters per
request it lets through: no task, no allocation (but the small ``_Unread``
for a request without a token that has a body). A refusal also runs a task
that takes the body's unread chunks while the answer goes (``_refuse``).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from guardd.errors import STATUS
from guardd.jsonio import JSON_TYPE, MAX_BODY, SECURITY_HEADERS, dumps

MAX_REQUESTS_IN_FLIGHT = 4096  # long-polls of a large fleet count too
MAX_BODY_IN_FLIGHT = 64 * 1024 * 1024  # bytes
BODY_DEADLINE = 10  # seconds for a whole request body to arrive
APP_QUEUE_CHUNKS = 2  # Hypercorn's max_app_queue_size: a body chunk and its end fit
# Free memory glibc may keep in its heaps before a collection hands it back
# (give_free_memory_back).
FREE_TO_KEEP = 32 * 1024 * 1024

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
                await _refuse(receive, send, _AMBIGUOUS_LENGTH)
                return
            length = MAX_BODY
        unread = None
        if not token:
            # Every route that reads a body needs a token: without one the
            # answer (401, or what a public GET says) goes before the body,
            # which is left unread.
            if length > 0:
                unread = _Unread(receive, send)
            length = 0
        elif length < 0:
            length = 0
        elif length > MAX_BODY:
            length = MAX_BODY  # answered 413 before the body is read
        if self.requests >= self.max_requests or self.body_bytes + length > self.max_body_bytes:
            await _refuse(receive, send, _BUSY)
            return
        if unread is not None:
            receive, send = unread.receive, unread.send
        self.requests += 1
        self.body_bytes += length
        try:
            await self.app(scope, receive, send)
        finally:
            self.requests -= 1
            self.body_bytes -= length
            if unread is not None:
                unread.app_returned()


class _Unread:
    """``receive`` and ``send`` for a request without a token that has a body.

    Until the app has sent the end of its answer, ``receive`` waits and takes
    nothing from Hypercorn: once Hypercorn's queue to the app is full, it
    reads no more from the connection. Then it takes the chunks and hands the
    app each one emptied, so that Hypercorn can end the request (it puts a
    disconnect message behind them) and the app learns whether the body had
    ended, never its bytes. Should the app return without an answer, the
    chunks are taken by a task of their own."""

    __slots__ = ("_answered", "_receive", "_send")

    def __init__(self, receive: Any, send: Any) -> None:
        self._receive = receive
        self._send = send
        self._answered = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self._answered.wait()
        message: dict[str, Any] = await self._receive()
        if message["type"] == "http.request":
            return {"type": "http.request", "body": b"", "more_body": message.get("more_body")}
        return message

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self._answered.set()
        await self._send(message)

    def app_returned(self) -> None:
        if not self._answered.is_set():
            _keep(asyncio.ensure_future(_drain(self._receive)))


_draining: set[asyncio.Future[None]] = set()


def _keep(task: asyncio.Future[None]) -> None:
    """Hold a reference to ``task`` until it is done (the loop holds only weak ones)."""
    _draining.add(task)
    task.add_done_callback(_draining.discard)


async def _refuse(receive: Any, send: Any, answer: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Send one of the answers above, the body unread.

    Once the answer has gone, Hypercorn puts a disconnect message behind the
    body's chunks in its queue to the app, and waits while the queue is full:
    with nobody taking the chunks, the connection would stay open for ever.
    So they are taken, and dropped, while the answer goes."""
    drain = asyncio.ensure_future(_drain(receive))
    start, body = answer
    try:
        await send(start)
        await send(body)
    except BaseException:
        drain.cancel()
        raise
    await drain


async def _drain(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


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


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def give_free_memory_back(keep: int = FREE_TO_KEEP) -> int:
    """Hand the free memory glibc holds in its heaps back to the system when
    there is more than ``keep`` bytes of it; return how much there was (0
    without glibc 2.33 or later).

    Buffers below the mapping threshold (128 KiB) come from the heaps: the
    socket reads and body chunks of many connections at once leave them full
    of free holes between live objects, which glibc keeps. 1,000 connections
    without a token sending 1 MiB bodies left about 150 MB so each time, and
    more after each round (docs/design.md, "Hostile clients"). ``malloc_trim``
    returns the free pages of every heap; it walks them, a few milliseconds
    after such an attack, so it runs only when there is much to return."""
    libc = _glibc()
    if libc is None:
        return 0
    free = int(libc.mallinfo2().fordblks)
    if free > keep:
        libc.malloc_trim(0)
    return free


@functools.cache
def _glibc() -> Any:
    """The C library when it is glibc with ``mallinfo2`` and ``malloc_trim``."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc
