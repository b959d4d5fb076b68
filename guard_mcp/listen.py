"""``--listen``: the MCP server over streamable HTTP, behind a bearer token.

Whoever reaches the listener acts as the agent (its token stays inside
guard-mcp), so every request must carry ``Authorization: Bearer <token>``
with the token of ``GUARD_MCP_LISTEN_TOKEN``, on loopback too: another user
of the machine reaches loopback as well. Requests are not logged one by one.

A signal stops it in order: no new connection is accepted, every MCP session
is ended (a held call withdraws its action, as when its client cancels), and
only then does the HTTP server close what remains, within a bounded wait.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import uvicorn
from mcp.server import Server
from starlette.types import ASGIApp, Receive, Scope, Send

from guard_mcp.config import MCP_PATH
from guard_mcp.errors import ListenError

log = logging.getLogger("guard_mcp")

#: How long the HTTP server waits for its last requests once the MCP sessions
#: are ended (they end at once; this bounds a client that does not let go).
GRACE_SECONDS = 5

_UNAUTHORIZED = json.dumps(
    {
        "error": "missing or wrong bearer token: this guard-mcp listener needs "
        "'Authorization: Bearer <GUARD_MCP_LISTEN_TOKEN>'",
        "code": "unauthorized",
    }
).encode()


class BearerGate:
    """ASGI middleware: an HTTP request without the listener's bearer token is
    answered 401 and never reaches the MCP server."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        given = [v for k, v in scope["headers"] if k == b"authorization"]
        # One header, compared in constant time: no timing tells how much matched.
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)


class _Uvicorn(uvicorn.Server):
    """Uvicorn without its own signal handlers: guard-mcp's decide the order
    of the stop (uvicorn's would race them, and raise the signal again after)."""

    def __init__(self, config: uvicorn.Config, shown: str) -> None:
        super().__init__(config)
        self.shown = shown

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # else it could not listen, and said why
            log.info("serving MCP at %s (bearer token required)", self.shown)


async def serve_http(
    server: Server[Any], host: str, port: int, token: str, stop: anyio.Event
) -> None:
    """Serve until ``stop`` is set, then stop in the order the module says."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    config = uvicorn.Config(
        BearerGate(app, token),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        log_config=None,  # its lines go where guard-mcp's go, in the same form
        lifespan="off",  # the sessions' lifetime is run here, to end them first
        timeout_graceful_shutdown=GRACE_SECONDS,
    )
    shown = (
        f"http://[{host}]:{port}{MCP_PATH}" if ":" in host else f"http://{host}:{port}{MCP_PATH}"
    )
    http = _Uvicorn(config, shown)

    async def run() -> None:
        try:
            await http.serve()
        except SystemExit:  # uvicorn's way to fail at start; it logged why
            raise ListenError(f"cannot serve at {shown}") from None
        stop.set()

    async with anyio.create_task_group() as tasks:
        async with server.session_manager.run():
            tasks.start_soon(run)
            await stop.wait()
            # Ending the sessions also ends the streams a cancelled request's
            # last answer would go on; the SDK warns of each such answer it
            # gives up, which on a stop asked for says nothing anyone could act on.
            logging.getLogger("mcp.shared.jsonrpc_dispatcher").setLevel(logging.ERROR)
        # Every session is ended (each held call withdrew its action): now
        # the HTTP server closes what remains.
        http.should_exit = True
