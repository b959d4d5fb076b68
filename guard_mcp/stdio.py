"""The client's side of stdio: MCP messages read from standard input in a way
a signal can interrupt.

The SDK's ``stdio_server`` reads standard input in a worker thread, and a
thread blocked in ``read`` cannot be cancelled: while the client kept its end
open, SIGTERM withdrew the held action and stopped the upstream, then waited
for ever on that read. Here the event loop waits until the descriptor is
readable and only then reads, so cancelling the wait stops the reader at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

#: Bytes asked of one ``read``; a longer message takes several.
_CHUNK = 1 << 16


class StdinLines:
    """Standard input as text lines, each with its ``\\n``, as ``async for``
    over a text file yields them (what ``stdio_server`` iterates)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._eof = False
        # A regular file or /dev/null cannot be polled (epoll says EPERM),
        # but reading one never blocks: a worker thread reads it instead.
        self._pollable = True

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line.decode("utf-8", errors="replace")
            if self._eof:
                if not self._buffer:
                    raise StopAsyncIteration
                line = bytes(self._buffer)
                self._buffer.clear()
                return line.decode("utf-8", errors="replace")
            chunk = await self._read()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True

    async def _read(self) -> bytes:
        if self._pollable:
            try:
                await anyio.wait_readable(self.fd)
            except PermissionError:
                self._pollable = False
            else:
                # Readable: this read returns what is there without waiting.
                return os.read(self.fd, _CHUNK)
        return await anyio.to_thread.run_sync(os.read, self.fd, _CHUNK)


@asynccontextmanager
async def serve_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """``stdio_server``'s streams, reading standard input with ``StdinLines``."""
    async with stdio_server(stdin=StdinLines(sys.stdin.fileno())) as streams:  # type: ignore[arg-type]
        yield streams
