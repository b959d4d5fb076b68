"""One event loop on a thread of its own, for the seam's blocking calls.

asyncpg is asynchronous only, and a pool belongs to the loop that made it.
The seam's reads are blocking calls, made on worker threads (routes,
webhooks) or in worker processes (startup): they run here, on a loop that
no request waits on, with a pool of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class Portal:
    def __init__(self, name: str = "guard-store") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``fn()`` on the portal's loop and wait for its result."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking store call from the store's own loop")

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def close(self, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
        if cleanup is not None and self._thread.is_alive():
            # Closing: a cleanup that fails leaves nothing more to do.
            with contextlib.suppress(Exception):
                self.call(cleanup, timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
