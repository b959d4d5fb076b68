"""PostgreSQL as a ``LogStore``: the lines of every agent's log as rows of
``guard_logs`` (schema.py), exactly the bytes the file store writes.

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
import functools
import hashlib
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import attrs

from agents_runtime.errors import AgentExists, KeyFileError, LogReadError, LogWriteError
from agents_runtime.log.postgres.portal import Portal
from agents_runtime.log.postgres.rounds import Rounds
from agents_runtime.log.postgres.schema import (
    META_AUDIT_PUBLIC_KEY,
    META_TOKEN_KEY_FINGERPRINT,
    NOTIFY_CHANNEL,
    ensure_schema,
)
from agents_runtime.log.store import CommitObserver, Committed, HeadMoved, LogContents, Scan

_INSERT = (
    "insert into guard_logs (agent_id, seq, line)"
    " select $1, s, l from unnest($2::bigint[], $3::bytea[]) as t(s, l)"
)
_READ = "select line from guard_logs where agent_id = $1 and seq > $2 and seq <= $3 order by seq"
_READ_REGISTERED = (
    "select line from guard_logs where agent_id = $1"
    " and exists (select 1 from guard_agents where agent_id = $1) order by seq"
)
# What other nodes appended to the logs of every agent of a round.
_NEWER = (
    "select h.agent_id, h.head, g.line"
    " from unnest($1::text[], $2::bigint[]) as h(agent_id, head)"
    " join guard_logs g on g.agent_id = h.agent_id and g.seq > h.head"
    " order by h.agent_id, h.head, g.seq"
)
_APPEND_ROUND = "select guard_append($1, $2, $3, $4, $5)"
# What a lost or refused connection, a restarting server or a timeout raise.
DB_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # e.g. a connection reset while released to its pool
    OSError,
    asyncio.TimeoutError,
)
LISTEN_RETRY = 1.0  # seconds between attempts to listen again
READY_TIMEOUT = 2.0  # seconds a /readyz probe of the database may take
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
COMMAND_TIMEOUT = 10.0  # seconds a statement may take before the caller is answered 503


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


async def _pool(url: str, size: int) -> asyncpg.Pool:
    # No floor of idle connections: asyncpg would keep trying to restore it
    # (logging a traceback each time) while the server is down.
    return await asyncpg.create_pool(
        url,
        min_size=0,
        max_size=size,
        timeout=CONNECT_TIMEOUT,
        command_timeout=COMMAND_TIMEOUT,
        reset=_keep_session,
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """No reset query when a connection goes back to its pool (a round trip
    per use otherwise): the store never changes a session's settings, holds
    no session lock and listens on a connection of its own; a transaction
    left open is rolled back by the pool all the same."""


def _lines_of(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines.pop() != b"":
        raise ValueError("a batch is whole lines, each ending in a newline")
    return lines


class PgAgentLog:
    """One agent's rows, held by its actor."""

    shared = True

    def __init__(self, store: PgStore, agent_id: str, size: int, *, writable: bool) -> None:
        self._store = store
        self.agent_id = agent_id
        self.size = size
        self.writable = writable

    async def append(self, data: bytes, after: Committed) -> None:
        if not self.writable:
            raise LogWriteError("read-only")
        lines = _lines_of(data)
        await self._store.writes().ask((self.agent_id, after.head.seq + 1, lines))
        self.size += len(data)

    async def newer(self, after: Committed) -> list[bytes]:
        return await self._store.reads().ask((self.agent_id, after.head.seq))

    async def lines(self, seqs: Sequence[int], upto: Committed) -> dict[int, bytes]:
        try:
            pool = await self._store.serving_pool()
            rows = await pool.fetch(
                "select seq, line from guard_logs"
                " where agent_id = $1 and seq = any($2::bigint[]) and seq <= $3",
                self.agent_id,
                list(seqs),
                upto.head.seq,
            )
        except DB_ERRORS as exc:
            raise LogReadError(f"reading the log of {self.agent_id} failed: {_why(exc)}") from exc
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


T = TypeVar("T")


class KeyMismatch(KeyFileError):
    """This node's keys are not those the store's logs were written with."""


@attrs.frozen
class RecordedKeys:
    """What a store records of the keys its logs are written with."""

    public_key_hex: str | None
    token_fingerprint: str | None
    has_agents: bool


def token_fingerprint(token_key: bytes) -> str:
    """A fingerprint of ``token.key`` that says whether two nodes hold the
    same key without giving it away (SHA-256 of a random 32-byte key)."""
    return hashlib.sha256(b"guard token.key fingerprint\n" + token_key).hexdigest()


async def _recorded(pool: asyncpg.Pool) -> RecordedKeys:
    rows = await pool.fetch(
        "select key, value from guard_meta where key = any($1::text[])",
        [META_AUDIT_PUBLIC_KEY, META_TOKEN_KEY_FINGERPRINT],
    )
    meta = {row["key"]: row["value"] for row in rows}
    agents = await pool.fetchval("select exists (select 1 from guard_agents)")
    return RecordedKeys(
        meta.get(META_AUDIT_PUBLIC_KEY), meta.get(META_TOKEN_KEY_FINGERPRINT), bool(agents)
    )


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class PgStore:
    """The logs of every agent in one PostgreSQL database."""

    shared = True

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
        self._listener: asyncio.Task[None] | None = None
        self._node = secrets.token_hex(8)  # names this process in its notifications
        self._rounds_loop: asyncio.AbstractEventLoop | None = None
        self._reads: Rounds[tuple[str, int], list[bytes]] | None = None
        self._writes: Rounds[tuple[str, int, list[bytes]], None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # A worker process gets a store of the same URL, with its own connections.
        return (functools.partial(PgStore, checkpoint_dir=self._checkpoint_dir), (self.url,))

    # -- connections -----------------------------------------------------------

    def reads(self) -> Rounds[tuple[str, int], list[bytes]]:
        """The rounds of reads of what other nodes appended, on this loop."""
        self._bind_rounds()
        assert self._reads is not None
        return self._reads

    def writes(self) -> Rounds[tuple[str, int, list[bytes]], None]:
        """The rounds of appends, on this loop."""
        self._bind_rounds()
        assert self._writes is not None
        return self._writes

    def _bind_rounds(self) -> None:
        loop = asyncio.get_running_loop()
        if self._rounds_loop is not loop:
            self._rounds_loop = loop
            self._reads = Rounds(self._read_round)
            self._writes = Rounds(self._write_round)

    async def _read_round(self, asks: list[tuple[str, int]]) -> list[list[bytes] | BaseException]:
        unique = sorted(set(asks))
        try:
            pool = await self.serving_pool()
            rows = await pool.fetch(_NEWER, [a for a, _ in unique], [h for _, h in unique])
        except DB_ERRORS as exc:
            why = _why(exc)
            return [LogReadError(f"reading the log of {a} failed: {why}") for a, _ in asks]
        found: dict[tuple[str, int], list[bytes]] = {}
        for row in rows:
            found.setdefault((row["agent_id"], row["head"]), []).append(bytes(row["line"]))
        return [found.get(ask, []) for ask in asks]

    async def _write_round(
        self, batches: list[tuple[str, int, list[bytes]]]
    ) -> list[BaseException | None]:
        agents = [agent_id for agent_id, _, _ in batches]
        if len(set(agents)) != len(agents):
            # One writer per agent per node: never two batches of one log.
            twice = sorted({a for a in agents if agents.count(a) > 1})
            raise RuntimeError(f"two batches of one log in a round: {', '.join(twice)}")
        started = time.perf_counter()
        ordered = sorted(batches, key=lambda batch: batch[0])  # see guard_append
        try:
            pool = await self.serving_pool()
            refused = await pool.fetchval(
                _APPEND_ROUND,
                [agent_id for agent_id, _, _ in ordered],
                [first for _, first, _ in ordered],
                [len(lines) for _, _, lines in ordered],
                [line for _, _, lines in ordered for line in lines],
                self._node,
            )
        except DB_ERRORS as exc:
            # Perhaps committed (the connection lost during COMMIT): each
            # actor reads its rows back (newer) before it answers anyone.
            why = _why(exc)
            return [LogWriteError(f"appending to {a} failed: {why}") for a, _, _ in batches]
        moved = set(refused)
        answers: list[BaseException | None] = []
        records = 0
        for agent_id, first, lines in batches:
            if agent_id in moved:
                answers.append(HeadMoved(f"log {agent_id} has moved past seq {first - 1}"))
            else:
                answers.append(None)
                records += len(lines)
        self.committed(records, time.perf_counter() - started)
        return answers

    async def serving_pool(self) -> asyncpg.Pool:
        """The pool of the loop that serves requests, made on first use."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._pool_loop is loop:
            return self._pool
        if self._pool_lock is None or self._pool_loop is not loop:
            self._pool_lock, self._pool_loop, self._pool = asyncio.Lock(), loop, None
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await _pool(self.url, self._max)
        return self._pool

    def _call(self, fn: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        """Run ``fn(pool)`` on the portal's loop with its own pool (blocking)."""
        if self._portal is None:
            self._portal = Portal()

        async def run() -> T:
            if self._portal_pool is None:
                self._portal_pool = await _pool(self.url, 2)
            return await fn(self._portal_pool)

        try:
            return self._portal.call(run)
        except DB_ERRORS as exc:
            raise LogReadError(f"reading {masked(self.url)} failed: {_why(exc)}") from exc

    def _blocking(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async def fetch(pool: asyncpg.Pool) -> list[asyncpg.Record]:
            return list(await pool.fetch(query, *args))

        return self._call(fetch)

    # -- the database and its keys --------------------------------------------

    def prepare(self) -> RecordedKeys:
        """Create or upgrade the schema (blocking), and say which keys the
        store has recorded (none on a new database)."""

        async def run(pool: asyncpg.Pool) -> RecordedKeys:
            async with pool.acquire() as conn:
                await ensure_schema(conn)
            return await _recorded(pool)

        return self._call(run)

    def recorded_keys(self) -> RecordedKeys:
        """The keys the store records, without changing anything (blocking);
        LogReadError when it has no guard schema."""
        return self._call(_recorded)

    def adopt_keys(self, public_key_hex: str, token_fingerprint: str) -> None:
        """Record this node's keys when the store has none; KeyMismatch when
        it has others (nothing is written then)."""

        async def run(pool: asyncpg.Pool) -> RecordedKeys:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "insert into guard_meta (key, value) values ($1, $2), ($3, $4)"
                    " on conflict (key) do nothing",
                    META_AUDIT_PUBLIC_KEY,
                    public_key_hex,
                    META_TOKEN_KEY_FINGERPRINT,
                    token_fingerprint,
                )
            return await _recorded(pool)

        recorded = self._call(run)
        if recorded.public_key_hex != public_key_hex:
            raise KeyMismatch(
                f"this node's audit public key {public_key_hex} is not the store's"
                f" {recorded.public_key_hex}"
            )
        if recorded.token_fingerprint != token_fingerprint:
            raise KeyMismatch(
                f"this node's token.key (fingerprint {token_fingerprint}) is not the store's"
                f" (fingerprint {recorded.token_fingerprint})"
            )

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
        # Only a log whose agent is registered: guardd migrate registers an
        # agent once all its rows are copied, so no node serves half a log.
        rows = self._blocking(_READ_REGISTERED, agent_id)
        return LogContents.of_lines([bytes(row["line"]) for row in rows])

    def size(self, agent_id: str) -> int:
        rows = self._blocking(
            "select coalesce(sum(octet_length(line) + 1), 0) as size"
            " from guard_logs where agent_id = $1",
            agent_id,
        )
        return int(rows[0]["size"])

    def open(self, agent_id: str, contents: LogContents, *, writable: bool) -> PgAgentLog:
        return PgAgentLog(self, agent_id, contents.valid_length, writable=writable)

    async def register(self, agent_id: str) -> None:
        """Register an agent whose rows are all in place (guardd migrate):
        from then on nodes serve it."""
        try:
            pool = await self.serving_pool()
            await pool.execute(
                "insert into guard_agents (agent_id, log_id) values ($1, $1)"
                " on conflict (agent_id) do nothing",
                agent_id,
            )
        except DB_ERRORS as exc:
            raise LogWriteError(f"registering {agent_id} failed: {_why(exc)}") from exc

    async def create(self, agent_id: str, data: bytes) -> PgAgentLog:
        lines = _lines_of(data)
        try:
            pool = await self.serving_pool()
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "insert into guard_agents (agent_id, log_id) values ($1, $1)", agent_id
                )
                await conn.execute(_INSERT, agent_id, list(range(len(lines))), lines)
                await conn.execute(
                    "select pg_notify($1, $2)",
                    NOTIFY_CHANNEL,
                    self.notice(agent_id, len(lines) - 1),
                )
        except asyncpg.UniqueViolationError as exc:
            raise AgentExists(f"agent {agent_id} already exists") from exc
        except DB_ERRORS as exc:
            raise LogWriteError(f"creating the log of {agent_id} failed: {_why(exc)}") from exc
        return PgAgentLog(self, agent_id, len(data), writable=True)

    def make_durable(self, agent_ids: Iterable[str]) -> None:
        pass  # a committed transaction is durable (synchronous_commit = on)

    def observe_commits(self, observer: CommitObserver) -> None:
        self._observers.append(observer)

    def committed(self, records: int, seconds: float) -> None:
        for observer in self._observers:
            observer(records, seconds, 0.0)

    def on_appended(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(agent_id, seq)`` for each batch another node commits
        (not this one's), heard on ``NOTIFY_CHANNEL``; from the running loop."""
        self._appended.append(callback)
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="store-listen"
            )

    async def _listen(self) -> None:
        """LISTEN on a connection of its own, connected again after a loss.
        A notification lost meanwhile only delays a long-poll: those poll."""
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.url, timeout=CONNECT_TIMEOUT)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _, lost=lost: lost.set())
                await conn.add_listener(NOTIFY_CHANNEL, self._notified)
                await lost.wait()
            except DB_ERRORS:
                pass
            finally:
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(LISTEN_RETRY)

    def notice(self, agent_id: str, seq: int) -> str:
        """The payload of an append's notification: whose log, up to which
        seq, and which node wrote it (a node ignores its own)."""
        return f"{agent_id} {seq} {self._node}"

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        parts = str(payload).rsplit(" ", 2)
        if len(parts) != 3 or not parts[1].isdigit() or parts[2] == self._node:
            return
        agent_id, seq = parts[0], parts[1]
        for callback in self._appended:
            callback(agent_id, int(seq))

    async def unready(self) -> str | None:
        try:
            pool = await self.serving_pool()
            await pool.fetchval("select 1", timeout=READY_TIMEOUT)
        except DB_ERRORS as exc:
            return f"the store {masked(self.url)} cannot be reached: {_why(exc)}"
        return None

    async def aclose(self) -> None:
        """Close the serving pool, from the loop that made it."""
        if self._listener is not None:
            listener, self._listener = self._listener, None
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def close(self) -> None:
        for rounds in (self._reads, self._writes):
            if rounds is not None:
                rounds.cancel()
        if self._listener is not None:
            self._listener.cancel()  # called on its loop (the registry's stop)
            self._listener = None
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
