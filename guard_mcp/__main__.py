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

from client_sdk import AsyncGuardClient, GuardError
from guard_mcp import config, upstream
from guard_mcp.config import Settings
from guard_mcp.errors import GuardMcpError
from guard_mcp.guard import Gate
from guard_mcp.listen import serve_http
from guard_mcp.proxy import Proxy
from guard_mcp.stdio import serve_stdio

log = logging.getLogger("guard_mcp")


async def _serve_stdio(server: Server[object], options: NotificationOptions) -> None:
    async with serve_stdio() as (read, write):
        # Returns when the client closes our stdin: it has gone away.
        await server.run(read, write, server.create_initialization_options(options))


async def _stop_on_signal(stop: anyio.Event, gate: Gate) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for received in signals:
            name = signal.Signals(received).name
            log.info("stopping on %s", name)
            gate.stopping = f"stopped on {name}"
            stop.set()
            return


async def serve(settings: Settings, client: AsyncGuardClient) -> None:
    gate = Gate(client, settings)
    proxy = Proxy(settings, gate)
    async with client, upstream.connect(settings, proxy.notify) as up:
        log.info("upstream %s connected; guard at %s", up.label, client.base_url)
        proxy.bind(up)
        server, options = proxy.server()
        stop = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_stop_on_signal, stop, gate)
            if settings.listen is None:
                async with anyio.create_task_group() as stdio:
                    stdio.start_soon(_cancel_on, stop, stdio.cancel_scope)
                    await _serve_stdio(server, options)
                    stdio.cancel_scope.cancel()
            else:
                assert settings.listen_token is not None  # config.parse sees to it
                await serve_http(server, *settings.listen, settings.listen_token, stop)
            tasks.cancel_scope.cancel()


async def _cancel_on(stop: anyio.Event, scope: anyio.CancelScope) -> None:
    # Over stdio a stop cancels the server at once: its reader is cancellable
    # (guard_mcp.stdio) and each held call withdraws its action as it unwinds.
    await stop.wait()
    scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = config.parse(sys.argv[1:] if argv is None else argv)
        client = AsyncGuardClient()
    except (GuardMcpError, GuardError) as exc:
        print(f"guard-mcp: {exc}", file=sys.stderr)
        return 2
    # Standard error only: over stdio, standard output is the MCP connection.
    # guard-mcp's own lines at INFO; the libraries' (httpx logs every request
    # at INFO) only from WARNING.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="guard-mcp: %(message)s")
    log.setLevel(logging.INFO)
    try:
        anyio.run(serve, settings, client)
    except KeyboardInterrupt:  # a second Ctrl-C while stopping, or one before serving
        return 130
    except Exception as exc:  # reported as one line, as the CLI promises
        cause = _first_leaf(exc)
        if isinstance(cause, GuardMcpError):
            print(f"guard-mcp: {cause}", file=sys.stderr)
            return 1
        # Past the command line, what fails is reaching the upstream: a
        # command that cannot run, an address that does not answer, a server
        # that exits before the handshake. The SDK's transports raise these
        # inside task groups, so the first leaf is the cause.
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
