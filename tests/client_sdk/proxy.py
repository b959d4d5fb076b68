"""A loopback HTTP/1.1 forwarder that can lose answers or play an overloaded gateway.

It runs its own asyncio loop in a thread, so sync and async clients can both
use it. Requests are handled one at a time per connection and numbered across
connections; ``plan[n]`` says what happens to request ``n``:

- ``"forward"`` (also for every request beyond the plan): relay it and its answer;
- ``"drop"``: forward the request, read the service's whole answer, then close
  the client's connection without relaying it (the service acted, the client
  never hears);
- ``"unavailable"``: answer 503 itself without forwarding;
- ``"hold"``: forward the request, read the service's whole answer, set
  ``holding``, and keep the answer until the client gives up and closes the
  connection (the service acted; the client is still waiting).
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

import attrs


@attrs.frozen
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str]] | None:
    """One HTTP/1.1 message (head and Content-Length body) as bytes, with its headers."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if value:
            headers[name.strip().lower().decode()] = value.strip().decode()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return head + body, headers


UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: 51\r\nConnection: close\r\n\r\n"
    b'{"error":"gateway is overloaded","code":"overload"}'
)


class Proxy:
    def __init__(self, upstream_port: int, plan: list[str] | None = None) -> None:
        self.upstream_port = upstream_port
        self.plan = list(plan or [])
        self.requests: list[SeenRequest] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.holding = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._handlers:  # closed connections end their handlers promptly
            await asyncio.wait(self._handlers, timeout=5)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while (message := await _read_message(reader)) is not None:
                raw, headers = message
                method, path, _ = raw.split(b"\r\n", 1)[0].decode().split(" ", 2)
                step = (
                    self.plan[len(self.requests)]
                    if len(self.requests) < len(self.plan)
                    else "forward"
                )
                self.requests.append(
                    SeenRequest(method, path, headers, raw.split(b"\r\n\r\n", 1)[1])
                )
                if step == "unavailable":
                    writer.write(UNAVAILABLE)
                    await writer.drain()
                    break
                if upstream is None:
                    upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                upstream[1].write(raw)
                await upstream[1].drain()
                answer = await _read_message(upstream[0])
                if answer is None or step == "drop":
                    break
                if step == "hold":
                    self.holding.set()
                    await reader.read()  # until the client closes its end
                    break
                writer.write(answer[0])
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            if upstream is not None:
                upstream[1].close()
            writer.close()
            self._writers.discard(writer)
            self._handlers.discard(task)
