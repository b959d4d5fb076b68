"""The connection to the real (upstream) MCP server: a child process over
stdio, or a streamable HTTP endpoint, driven by the SDK's ``ClientSession``."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import mcp_types as types
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import CONNECTION_CLOSED
from pydantic import BaseModel

from guard_mcp.config import Settings
from guard_mcp.errors import UpstreamGone

log = logging.getLogger("guard_mcp")

R = TypeVar("R", bound=BaseModel)

# Tokens stay with guard-mcp: the upstream server is what is being guarded
# and must not be able to ask guardd (or approve) itself, nor call guard-mcp's
# own listener as the agent.
_WITHHELD = ("GUARD_AGENT_TOKEN", "GUARD_ADMIN_TOKEN", "GUARD_MCP_LISTEN_TOKEN")

NotificationSink = Callable[[types.ServerNotification], Awaitable[None]]


def child_environment() -> dict[str, str]:
    """guard-mcp's environment for the upstream command, without the tokens."""
    return {k: v for k, v in os.environ.items() if k not in _WITHHELD}


class Upstream:
    """One initialised session with the upstream server.

    Every request goes through ``request``, which turns a closed connection
    into ``UpstreamGone`` and remembers it, so later calls fail at once,
    before anything is asked of guardd.
    """

    def __init__(self, session: ClientSession, init: types.InitializeResult, label: str) -> None:
        self.session = session
        self.init = init
        self.label = label
        self.gone: str | None = None

    @property
    def capabilities(self) -> types.ServerCapabilities:
        return self.init.capabilities

    def check(self) -> None:
        if self.gone is not None:
            raise UpstreamGone(self.gone)

    async def request(
        self,
        request: types.ClientRequest | types.Request[Any, Any],
        result_type: type[R],
        progress: ProgressFnT | None = None,
    ) -> R:
        self.check()
        try:
            return await self.session.send_request(request, result_type, progress_callback=progress)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise  # the upstream's own error answer: passed on as it is
            self.gone = f"the upstream server ({self.label}) closed the connection or exited"
            log.error("%s", self.gone)
            raise UpstreamGone(self.gone) from None


class _Relay:
    """The upstream session's message handler: its notifications go to ``sink``."""

    def __init__(self, sink: NotificationSink) -> None:
        self.sink = sink

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            log.warning("upstream stream error: %s", message)
        elif not isinstance(message, types.ProgressNotification):
            # Progress is relayed with the call it belongs to (Proxy.call_tool).
            await self.sink(message)


@asynccontextmanager
async def connect(settings: Settings, sink: NotificationSink) -> AsyncIterator[Upstream]:
    """Start (stdio) or reach (HTTP) the upstream server and initialise a session.

    On exit the session closes; a child process is stopped (stdin closed,
    then terminated, then killed: the SDK's stdio transport), so none is left.
    """
    async with AsyncExitStack() as stack:
        if settings.upstream_url is not None:
            read, write = await stack.enter_async_context(
                streamable_http_client(settings.upstream_url)
            )
        else:
            params = StdioServerParameters(
                command=settings.command[0],
                args=list(settings.command[1:]),
                env=child_environment(),
            )
            read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=_Relay(sink))
        )
        init = await session.initialize()
        yield Upstream(session, init, settings.upstream_label)
