"""PostgreSQL as a ``LogStore``: the lines of every agent's log as rows of
``guard_logs`` (schema.py), exactly the bytes the file store writes.

WORK IN PROGRESS (branch only): what is here appends, reads and creates
against a real server; the runtime's side (``HeadMoved`` handling, catch-up
on ``on_appended``, reads that are never stale, 503 on an unreachable
database) and guardd's ``--store`` are still to come.

- ``append`` inserts a batch in one transaction, one multi-row INSERT of
  ``unnest`` arrays (measured faster than one INSERT per line). The primary
  key ``(agent_id, seq)`` makes a batch that follows a head another node has
  moved on from fail whole: ``HeadMoved``. The same transaction notifies
  ``NOTIFY_CHANNEL`` with the agent's ID and its new last seq.
- Async calls (``append``, ``lines``, ``create``) use a pool on the loop
  that serves requests, made on first use; the seam's blocking calls run on
  a ``Portal`` (a loop on a thread) with a pool of its own.
- A worker process that verifies logs at startup gets a store of the same
  URL (``__reduce__``) and its own connections.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from agents_runtime.errors import AgentExists, LogReadError, LogWriteError
from agents_runtime.log.postgres.portal import Portal
from agents_runtime.log.postgres.schema import NOTIFY_CHANNEL
from agents_runtime.log.store import CommitObserver, Committed, HeadMoved, LogContents, Scan

_INSERT = (
    "insert into guard_logs (agent_id, seq, line)"
    " select $1, s, l from unnest($2::bigint[], $3::bytea[]) as t(s, l)"
)
_READ = "select line from guard_logs where agent_id = $1 and seq > $2 and seq <= $3 order by seq"


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: for banners and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = urllib.parse.quote(parts.username or "", safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _lines_of(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines.pop() != b"":
        raise ValueError("a batch is whole lines, each ending in a newline")
    return lines


class PgAgentLog:
    """One agent's rows, held by its actor."""

    def __init__(self, store: PgStore, agent_id: str, size: int, *, writable: bool) -> None:
        self._store = store
        self.agent_id = agent_id
        self.size = size
        self.writable = writable

    async def append(self, data: bytes, after: Committed) -> None:
        if not self.writable:
            raise LogWriteError("read-only")
        lines = _lines_of(data)
        first = after.head.seq + 1
        seqs = list(range(first, first + len(lines)))
        pool = await self._store.serving_pool()
        started = time.perf_counter()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(_INSERT, self.agent_id, seqs, lines)
                await conn.execute(
                    "select pg_notify($1, $2)", NOTIFY_CHANNEL, f"{self.agent_id} {seqs[-1]}"
                )
        except asyncpg.UniqueViolationError as exc:
            raise HeadMoved(f"log {self.agent_id} has moved past seq {after.head.seq}") from exc
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            # TODO: a commit whose outcome is unknown (the connection lost
            # during COMMIT) must be resolved by reading seq ``first`` back.
            raise LogWriteError(f"appending to {self.agent_id} failed: {exc}") from exc
        self.size += len(data)
        self._store.committed(len(lines), time.perf_counter() - started)

    async def lines(self, seqs: Sequence[int], upto: Committed) -> dict[int, bytes]:
        pool = await self._store.serving_pool()
        rows = await pool.fetch(
            "select seq, line from guard_logs"
            " where agent_id = $1 and seq = any($2::bigint[]) and seq <= $3",
            self.agent_id,
            list(seqs),
            upto.head.seq,
        )
        found = {row["seq"]: bytes(row["line"]) for row in rows}
        for seq in seqs:
            if seq not in found:
                raise LogReadError(f"log {self.agent_id} has no record at seq {seq}")
        return found

    def read(self, upto: Committed) -> LogContents:
        return LogContents.of_lines(self.read_after(-1, upto))

    def read_after(self, seq: int, upto: Committed) -> list[bytes]:
        return self._store.fetch_lines(self.agent_id, seq, upto.head.seq)

    def read_beyond(self, upto: Committed) -> bytes:
        lines = self._store.fetch_lines(self.agent_id, upto.head.seq, 2**62)
        return b"".join(line + b"\n" for line in lines)

    def close(self) -> None:
        pass


class PgStore:
    """The logs of every agent in one PostgreSQL database."""

    def __init__(self, url: str, *, checkpoint_dir: Path, max_connections: int = 8) -> None:
        self.url = url
        self._checkpoint_dir = checkpoint_dir
        self._max = max_connections
        self._pool: asyncpg.Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_lock: asyncio.Lock | None = None
        self._portal: Portal | None = None
        self._portal_pool: asyncpg.Pool | None = None
        self._observers: list[CommitObserver] = []
        self._appended: list[Callable[[str, int], None]] = []

    def __reduce__(self) -> tuple[Any, ...]:
        return (PgStore, (self.url,), {"_checkpoint_dir": self._checkpoint_dir})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(self.url, checkpoint_dir=state["_checkpoint_dir"])  # type: ignore[misc]

    # -- connections -----------------------------------------------------------

    async def serving_pool(self) -> asyncpg.Pool:
        """The pool of the loop that serves requests, made on first use."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._pool_loop is loop:
            return self._pool
        if self._pool_lock is None or self._pool_loop is not loop:
            self._pool_lock, self._pool_loop, self._pool = asyncio.Lock(), loop, None
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self._max)
        return self._pool

    def _blocking(self, query: str, *args: Any) -> list[asyncpg.Record]:
        if self._portal is None:
            self._portal = Portal()

        async def fetch() -> list[asyncpg.Record]:
            if self._portal_pool is None:
                self._portal_pool = await asyncpg.create_pool(self.url, min_size=1, max_size=2)
            return list(await self._portal_pool.fetch(query, *args))

        return self._portal.call(fetch)

    def fetch_lines(self, agent_id: str, after: int, upto: int) -> list[bytes]:
        return [bytes(row["line"]) for row in self._blocking(_READ, agent_id, after, upto)]

    # -- LogStore ------------------------------------------------------------

    def describe(self) -> str:
        return f"PostgreSQL at {masked(self.url)}"

    def default_checkpoint_dir(self) -> Path:
        return self._checkpoint_dir

    def scan(self) -> Scan:
        rows = self._blocking("select agent_id from guard_agents order by agent_id")
        return Scan([row["agent_id"] for row in rows], [])

    def remove_unfinished(self) -> int:
        return 0  # a log is created in one transaction: never half

    def read(self, agent_id: str) -> LogContents:
        return LogContents.of_lines(self.fetch_lines(agent_id, -1, 2**62))

    def size(self, agent_id: str) -> int:
        rows = self._blocking(
            "select coalesce(sum(octet_length(line) + 1), 0) as size"
            " from guard_logs where agent_id = $1",
            agent_id,
        )
        return int(rows[0]["size"])

    def open(self, agent_id: str, contents: LogContents, *, writable: bool) -> PgAgentLog:
        return PgAgentLog(self, agent_id, contents.valid_length, writable=writable)

    async def create(self, agent_id: str, data: bytes) -> PgAgentLog:
        lines = _lines_of(data)
        pool = await self.serving_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "insert into guard_agents (agent_id, log_id) values ($1, $1)", agent_id
                )
                await conn.execute(_INSERT, agent_id, list(range(len(lines))), lines)
                await conn.execute(
                    "select pg_notify($1, $2)", NOTIFY_CHANNEL, f"{agent_id} {len(lines) - 1}"
                )
        except asyncpg.UniqueViolationError as exc:
            raise AgentExists(f"agent {agent_id} already exists") from exc
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise LogWriteError(f"creating the log of {agent_id} failed: {exc}") from exc
        return PgAgentLog(self, agent_id, len(data), writable=True)

    def make_durable(self, agent_ids: Iterable[str]) -> None:
        pass  # a committed transaction is durable (synchronous_commit = on)

    def observe_commits(self, observer: CommitObserver) -> None:
        self._observers.append(observer)

    def committed(self, records: int, seconds: float) -> None:
        for observer in self._observers:
            observer(records, seconds, 0.0)

    def on_appended(self, callback: Callable[[str, int], None]) -> None:
        # TODO: LISTEN on NOTIFY_CHANNEL (a connection of the serving loop),
        # with a bounded poll as the fallback for a lost notification.
        self._appended.append(callback)

    async def aclose(self) -> None:
        """Close the serving pool, from the loop that made it."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def close(self) -> None:
        if self._pool is not None:
            loop = self._pool_loop
            if loop is not None and not loop.is_closed():
                self._pool.terminate()  # every actor has stopped: nothing is in flight
            self._pool = None
        portal, pool = self._portal, self._portal_pool
        self._portal = self._portal_pool = None
        if portal is not None:

            async def close_pool() -> None:
                if pool is not None:
                    await pool.close()

            portal.close(close_pool)
