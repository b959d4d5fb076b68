"""``guard-mcp``: start the upstream, then serve MCP over stdio or HTTP until
the client goes away (stdio) or a signal arrives; the upstream child process
is stopped on the way out, whatever the way."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

import anyio
from mcp.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from client_sdk import AsyncGuardClient, GuardError
from guard_mcp import config, upstream
from guard_mcp.config import MCP_PATH, Settings
from guard_mcp.errors import GuardMcpError
from guard_mcp.guard import Gate
from guard_mcp.proxy import Proxy

log = logging.getLogger("guard_mcp")


async def _serve_stdio(server: Server[object], options: NotificationOptions) -> None:
    async with stdio_server() as (read, write):
        # Returns when the client closes our stdin: it has gone away.
        await server.run(read, write, server.create_initialization_options(options))


async def _serve_http(
    server: Server[object], options: NotificationOptions, host: str, port: int
) -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    http = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    log.info("serving MCP at http://%s:%d%s", host, port, MCP_PATH)
    await http.serve()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for received in signals:
            log.info("stopping on %s", signal.Signals(received).name)
            scope.cancel()
            return


async def serve(settings: Settings, client: AsyncGuardClient) -> None:
    gate = Gate(client, settings)
    proxy = Proxy(settings, gate)
    async with client, upstream.connect(settings, proxy.notify) as up:
        log.info("upstream %s connected; guard at %s", up.label, client.base_url)
        proxy.bind(up)
        server, options = proxy.server()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_stop_on_signal, tasks.cancel_scope)
            if settings.listen is None:
                await _serve_stdio(server, options)
            else:
                await _serve_http(server, options, *settings.listen)
            tasks.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = config.parse(sys.argv[1:] if argv is None else argv)
        client = AsyncGuardClient()
    except (GuardMcpError, GuardError) as exc:
        print(f"guard-mcp: {exc}", file=sys.stderr)
        return 2
    # Standard error only: over stdio, standard output is the MCP connection.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="guard-mcp: %(message)s")
    try:
        anyio.run(serve, settings, client)
    except Exception as exc:  # reported as one line, as the CLI promises
        # Past the command line, what fails is reaching the upstream: a
        # command that cannot run, an address that does not answer, a server
        # that exits before the handshake. The SDK's transports raise these
        # inside task groups, so the first leaf is the cause.
        cause = _first_leaf(exc)
        what = str(cause) or type(cause).__name__
        print(f"guard-mcp: upstream {settings.upstream_label}: {what}", file=sys.stderr)
        return 1
    return 0


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    sys.exit(main())
