"""Readiness: can this node decide right now?

``/healthz`` is liveness (the process serves HTTP). ``/readyz`` says whether
a decision asked now could be made and written: every agent is loaded, or
is loaded before its first answer (--load-agents on-first-use, and a
PostgreSQL store), so that holds whenever guardd answers; it holds the
signing key, the data dir takes a write, and the store answers (a
PostgreSQL store shared by several nodes can be unreachable while the node
runs). A load balancer sends traffic
only to ready nodes; an orchestrator restarts only dead ones.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

PROBE_NAME = ".ready-probe"
# A probe touches the disk; under a probe every second from several load
# balancers, the answer is reused this long.
PROBE_EVERY = 1.0


class Readiness:
    def __init__(
        self,
        root: Path,
        *,
        read_only: bool,
        store: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.root = root
        self.read_only = read_only
        self.store = store  # the store's own probe (LogStore.unready)
        self.stopping = False
        self._checked_at = -PROBE_EVERY
        self._reason: str | None = None
        self._lock = asyncio.Lock()

    async def reason(self) -> str | None:
        """None when ready; otherwise why not, in one sentence."""
        if self.stopping:
            return "guardd is shutting down"
        if self.read_only:
            return "read-only: keys/audit.key is missing, so nothing can be written"
        async with self._lock:  # one probe at a time
            if time.monotonic() - self._checked_at >= PROBE_EVERY:
                self._reason = await asyncio.to_thread(_probe_write, self.root)
                if self._reason is None and self.store is not None:
                    self._reason = await self.store()
                self._checked_at = time.monotonic()
            return self._reason


def _probe_write(root: Path) -> str | None:
    """Write, fsync and remove a small file in the data dir."""
    path = root / PROBE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"ready\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        path.unlink()
    except OSError as exc:
        return f"the data dir {root} does not take writes: {exc.strerror or exc}"
    return None
