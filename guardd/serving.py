"""How much of a client's bytes guardd takes from a socket before it needs them.

A request is answered from its headers when it can be (401, 403, 404, 413,
503: guardd/limits.py): the body of such a request is never read. But below
the app, the layers that read the connection take its bytes as they come,
whether anyone asks for them: with their defaults, a client sending a body
faster than guardd answers it had up to about 0.6 MB taken into guardd per
connection, and 1,000 of them at once took guardd's RSS 140 to 450 MB above
idle (docs/design.md, "Hostile clients"). Two settings bound it:

- ``RECEIVE_BUFFER``: the kernel's receive buffer of every accepted socket
  (``SO_RCVBUF``, set on the listening socket, which accepted sockets
  inherit). The event loop reads what the socket holds, up to 256 KiB a
  read; with a small buffer each read is small. It also caps the TCP window
  guardd offers, so a body arrives at most about 16 KiB per round trip: one
  round trip for the few KB of a usual request, about 64 for a 1 MiB body.
- ``READ_LIMIT``: the limit of each connection's asyncio stream reader,
  which stops reading the socket once it holds more than twice that much.
  Hypercorn starts its listeners with ``asyncio.start_server`` and no
  ``limit`` (default 64 KiB: up to 128 KiB held) and has no setting for it,
  so ``serve`` hands Hypercorn's run module an ``asyncio`` whose
  ``start_server`` passes one. This reaches into Hypercorn: its module-level
  name ``asyncio``, looked up when its listeners start.
  ``tests/guardd/test_serving.py`` fails when a Hypercorn release no longer
  reads through it (or no longer stops reading once its queue to the app is
  full), so an upgrade that loses the bound is noticed.

Above the reader, Hypercorn hands a body to the app in chunks of what the
reader held, through a queue of two (``limits.APP_QUEUE_CHUNKS``) plus one
waiting to go in: a connection whose body the app has not taken holds at
most about 24 KiB in its reader and three chunks of at most that, about
100 KB; the rest waits in the client. Neither setting adds work per
request: a usual request (head and body within 8 KiB) is still taken in one
read. A large body takes more reads (64 for 1 MiB instead of 16) and, from
a distant client, more round trips (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import hypercorn.asyncio.run as hypercorn_run
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config

RECEIVE_BUFFER = 16 * 1024  # bytes: SO_RCVBUF of accepted sockets (the kernel doubles it)
READ_LIMIT = 4 * 1024  # bytes: a stream reader pauses its socket above twice this


def receive_little(sock: socket.socket) -> None:
    """Give ``sock``, a socket about to listen, the small receive buffer its
    accepted sockets inherit. Before ``listen``: the window scale a
    connection agrees on is chosen from it at the handshake."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)


class _AsyncioForHypercorn:
    """``asyncio`` as Hypercorn's run module sees it: ``start_server`` gives
    each connection's stream reader ``READ_LIMIT``; all else is asyncio's."""

    start_server = staticmethod(functools.partial(asyncio.start_server, limit=READ_LIMIT))

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


async def serve(
    app: Any, config: Config, *, shutdown_trigger: Callable[[], Awaitable[object]]
) -> None:
    """Hypercorn's ``serve``, its connections' stream readers limited to ``READ_LIMIT``."""
    names = vars(hypercorn_run)  # its globals: "asyncio" is looked up there (see above)
    if not isinstance(names["asyncio"], _AsyncioForHypercorn):
        names["asyncio"] = _AsyncioForHypercorn()
    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)
