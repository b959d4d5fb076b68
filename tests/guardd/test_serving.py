"""guardd's listeners take little of a client's bytes before the app wants
them (guardd/serving.py): Hypercorn, as guardd starts it, on guardd's
listening socket and event loop, with an app that has not got to the
request yet, as in a flood. These fail when a Hypercorn release no longer
starts its listeners through the ``asyncio`` guardd hands it, or reads more.
"""

from __future__ import annotations

import asyncio
import select
import socket
from typing import Any

from guardd.__main__ import hypercorn_config, listen, run_event_loop
from guardd.jsonio import MAX_BODY
from guardd.serving import READ_LIMIT, RECEIVE_BUFFER, serve

KIB = 1024
CLIENT_SEND_BUFFER = 4 * KIB  # the kernel doubles it
# What the client can have sent while the app takes nothing: guardd's
# stream reader (under 2 x READ_LIMIT, plus one read), Hypercorn's queue to
# the app and the chunk waiting to go in (each at most what the reader
# held), and the two kernels' buffers (each about twice what was set), with
# room for their overheads: 136 KiB. Measured: 80 KiB; 208 KiB with the
# readers' default limit; all of the 1 MiB with the kernel's default buffer.
AT_MOST = 4 * (2 * READ_LIMIT + RECEIVE_BUFFER) + 2 * RECEIVE_BUFFER + 2 * CLIENT_SEND_BUFFER
HEAD = b"POST /v1/agents/a/actions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % MAX_BODY


class Stalls:
    """An ASGI app that takes no body until ``release`` is set, then answers
    and takes what was queued (as guardd.limits does), so the request ends."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.started.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        while (await receive())["type"] != "http.disconnect":
            pass


def send_until_stalled(port: int) -> tuple[socket.socket, int]:
    """Connect with a small send buffer and send a request announcing
    MAX_BODY until the socket takes nothing for a second. Returns the socket
    and how many bytes it took."""
    payload = memoryview(HEAD + b"x" * MAX_BODY)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SEND_BUFFER)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    sent = 0
    while sent < len(payload):
        _, writable, _ = select.select([], [sock], [], 1.0)
        if not writable:
            break
        try:
            sent += sock.send(payload[sent:])
        except BlockingIOError:
            continue
    return sock, sent


async def _serve_and_send() -> int:
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = Stalls()
    stop = asyncio.Event()
    server = asyncio.ensure_future(
        serve(app, hypercorn_config("127.0.0.1", port, sock), shutdown_trigger=stop.wait)
    )
    client = None
    try:
        client, sent = await asyncio.get_running_loop().run_in_executor(
            None, send_until_stalled, port
        )
        # The request reached the app, which has taken none of its body.
        await asyncio.wait_for(app.started.wait(), 30)
        return sent
    finally:
        app.release.set()
        if client is not None:
            client.close()
        stop.set()
        await asyncio.wait_for(server, 30)


def test_a_body_the_app_has_not_taken_is_left_in_the_client_not_read_into_guardd() -> None:
    sent: list[int] = []

    async def main() -> None:
        sent.append(await _serve_and_send())

    run_event_loop(main())  # guardd's own loop (uvloop)
    assert len(HEAD) < sent[0] <= AT_MOST, (sent[0], AT_MOST)


def test_the_listening_socket_asks_for_a_small_receive_buffer() -> None:
    sock = listen("127.0.0.1", 0)
    try:
        # Linux doubles what was asked, for its bookkeeping.
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) <= 2 * RECEIVE_BUFFER
    finally:
        sock.close()
