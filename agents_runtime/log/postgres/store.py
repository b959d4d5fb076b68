"""PostgreSQL as a ``LogStore``: the lines of every agent's log as rows of
``guard_logs`` (schema.py), exactly the bytes the file store writes.

- ``append`` inserts a batch in rounds (rounds.py): the batches of every
  actor waiting at one moment in one statement, ``guard_append_after``
  (schema.py). The primary key ``(agent_id, seq)`` makes a batch that
  follows a head another node has moved on from fail whole: ``HeadMoved``;
  a batch that follows a row no longer there fails whole too: ``HeadGone``.
  The same transaction notifies ``NOTIFY_CHANNEL`` with the agent's ID and
  its new last seq.
- ``run_batch`` commits an actor's batch by the strategy of a log other
  nodes write too (batches.py); ``newer`` reads what they appended, and
  checks that the head it reads from is still there as it was.
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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import attrs

from agents_runtime.errors import AgentExists, KeyFileError, LogReadError, LogWriteError
from agents_runtime.log.postgres.batches import SharedCommit
from agents_runtime.log.postgres.policies import PgPolicies
from agents_runtime.log.postgres.portal import Portal
from agents_runtime.log.postgres.rounds import Rounds
from agents_runtime.log.postgres.schema import (
    META_AUDIT_PUBLIC_KEY,
    META_TOKEN_KEY_FINGERPRINT,
    NOTIFY_CHANNEL,
    ensure_schema,
)

# masked is named here too: the banner's and the tests' way to the store's URL.
from agents_runtime.log.postgres.url import masked as masked
from agents_runtime.log.store import (
    Batch,
    BatchHost,
    CommitObserver,
    Committed,
    HeadGone,
    HeadMoved,
    LogContents,
    Scan,
)

_INSERT = (
    "insert into guard_logs (agent_id, seq, line)"
    " select $1, s, l from unnest($2::bigint[], $3::bytea[]) as t(s, l)"
)
# What other nodes appended to the logs of every agent of a round, and
# whether the head row each read starts from is there as this node knows it
# (``fits``): present, and holding that record's hash. A byte search for the
# member ``"hash":"<hex>"`` of the canonical line (``_head_member``): the
# read before every batch stays one index range scan, with no JSON parsed.
# Each agent's rows from its head on, read by a range of the primary key
# (the lateral join): as a plain join the planner, which guesses a third of
# an agent's rows lie past any head, scanned the whole table at every read
# once it held a million rows (about 250 ms a batch).
_NEWER = (
    "select h.agent_id, h.head, g.seq,"
    " case when g.seq > h.head then g.line end as line,"
    " g.seq > h.head or position(h.member in g.line) > 0 as fits"
    " from unnest($1::text[], $2::bigint[], $3::bytea[]) as h(agent_id, head, member)"
    " cross join lateral ("
    "select seq, line from guard_logs"
    " where agent_id = h.agent_id and seq >= h.head order by seq) as g"
    " order by h.agent_id, h.head, g.seq"
)
# LIMIT NULL is no limit.
# Replace an agent's snapshot unless the table holds a newer one.
_WRITE_SNAPSHOT = (
    "insert into guard_snapshots (agent_id, seq, data) values ($1, $2, $3)"
    " on conflict (agent_id) do update set seq = excluded.seq, data = excluded.data"
    " where guard_snapshots.seq < excluded.seq"
)
_READ = (
    "select line from guard_logs where agent_id = $1 and seq > $2 and seq <= $3"
    " order by seq limit $4"
)
_READ_REGISTERED = (
    "select line from guard_logs where agent_id = $1"
    " and exists (select 1 from guard_agents where agent_id = $1) order by seq"
)
_APPEND_ROUND = "select moved, gone from guard_append_after($1, $2, $3, $4, $5)"
# What a lost or refused connection, a restarting server or a timeout raise.
DB_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # e.g. a connection reset while released to its pool
    OSError,
    asyncio.TimeoutError,
)
LISTEN_RETRY = 1.0  # seconds between attempts to listen again
# Seconds between reads of the store while a long-poll waits: a notice
# (LISTEN/NOTIFY) lost only delays the answer this long.
POLL_INTERVAL = 1.0
CLOSE_TIMEOUT = 2.0  # seconds the store's own tasks and pool get to end at shutdown
READY_TIMEOUT = 2.0  # seconds a /readyz probe of the database may take
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
COMMAND_TIMEOUT = 10.0  # seconds a statement may take before the caller is answered 503


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
        # Every statement reads or writes a few rows by key: compiling one
        # (which a large table's cost estimate can set off) costs more than
        # running it, and did, about 6 ms a read of newer rows.
        server_settings={"jit": "off"},
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """No reset query when a connection goes back to its pool (a round trip
    per use otherwise): the store never changes a session's settings, holds
    no session lock and listens on a connection of its own; a transaction
    left open is rolled back by the pool all the same."""


def _head_member(hash_hex: str) -> bytes:
    """The bytes by which a record's line names its hash (RFC 8785: no space)."""
    return b'"hash":"' + hash_hex.encode("ascii") + b'"'


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
        self._commit = SharedCommit(self, store.conflict)

    async def run_batch(self, host: BatchHost, batch: Batch) -> bool:
        return await self._commit.run(host, batch)

    async def finish(self, host: BatchHost, data: bytes) -> None:
        await self._commit.finish(host, data)

    async def append(self, data: bytes, after: Committed) -> None:
        """Make ``data`` (whole lines, the records after ``after``) durable:
        HeadMoved when another writer appended after ``after``, HeadGone
        when the row of ``after`` is gone, LogWriteError when the outcome is
        unknown (the connection was lost); nothing is half-written."""
        if not self.writable:
            raise LogWriteError("read-only")
        lines = _lines_of(data)
        await self._store.writes().ask((self.agent_id, after.head.seq + 1, lines))
        self.size += len(data)

    async def newer(self, after: Committed) -> list[bytes]:
        """The lines other writers committed after ``after``. HeadGone when
        the row of ``after`` itself is gone or holds another record, or when
        they end below a seq another node announced before this read began
        (its notice comes only after its commit, so the rows were there)."""
        head = after.head
        announced = self._store.announced.get(self.agent_id, -1)
        lines = await self._store.reads().ask((self.agent_id, head.seq, head.hash))
        last = head.seq + len(lines)
        if last < announced:
            raise HeadGone(self.agent_id, last + 1)
        return lines

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

    def read_after(self, seq: int, upto: Committed, limit: int | None = None) -> list[bytes]:
        return self._store.fetch_lines(self.agent_id, seq, upto.head.seq, limit)

    def read_beyond(self, upto: Committed) -> bytes:
        lines = self._store.fetch_lines(self.agent_id, upto.head.seq, 2**62)
        return b"".join(line + b"\n" for line in lines)

    def close(self) -> None:
        pass


# -- the operators log ----------------------------------------------------------
# Rows of guard_operators (schema version 6), one per record line, keyed by
# seq. Every node writes to it; a record whose seq another node took first
# fails on the key and nothing of the append is written (HeadMoved): the
# writer reads what it missed and tries again. Nodes learn of the others'
# records by reading the rows after their head (newer), every half second.

_OPERATORS_READ = "select line from guard_operators where seq > $1 order by seq"
_OPERATORS_INSERT = (
    "insert into guard_operators (seq, line) select * from unnest($1::bigint[], $2::bytea[])"
)


class PgOperatorsLog:
    def __init__(self, store: PgStore) -> None:
        self._store = store

    def read(self) -> list[bytes]:
        return [bytes(row["line"]) for row in self._store.blocking(_OPERATORS_READ, -1)]

    async def append(self, lines: Sequence[bytes], after_seq: int) -> None:
        seqs = list(range(after_seq + 1, after_seq + 1 + len(lines)))
        try:
            pool = await self._store.serving_pool()
            await pool.execute(_OPERATORS_INSERT, seqs, list(lines))
        except asyncpg.UniqueViolationError:
            raise HeadMoved("the operators log: another node appended first") from None
        except DB_ERRORS as exc:
            raise LogWriteError(f"writing the operators log failed: {_why(exc)}") from exc

    async def newer(self, after_seq: int) -> list[bytes]:
        try:
            pool = await self._store.serving_pool()
            rows = await pool.fetch(_OPERATORS_READ, after_seq)
        except DB_ERRORS as exc:
            raise LogReadError(f"reading the operators log failed: {_why(exc)}") from exc
        return [bytes(row["line"]) for row in rows]


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

    poll_interval = POLL_INTERVAL
    others_create_agents = True  # any node may create an agent

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
        self._node = secrets.token_hex(8)  # names this process in its notifications
        # The last seq other nodes announced of each agent's log (follow):
        # a read that ends below it finds rows deleted after their commit.
        self.announced: dict[str, int] = {}
        self._rounds_loop: asyncio.AbstractEventLoop | None = None
        self._reads: Rounds[tuple[str, int, str], list[bytes]] | None = None
        self._writes: Rounds[tuple[str, int, list[bytes]], None] | None = None
        self.conflicts = 0  # batches decided again after another node's write

    def conflict(self) -> None:
        self.conflicts += 1

    @property
    def policies(self) -> PgPolicies:
        """The named policies, in ``guard_policies``."""
        return PgPolicies(self.serving_pool, self.blocking, DB_ERRORS)

    def __reduce__(self) -> tuple[Any, ...]:
        # A worker process gets a store of the same URL, with its own connections.
        return (functools.partial(PgStore, checkpoint_dir=self._checkpoint_dir), (self.url,))

    # -- connections -----------------------------------------------------------

    def reads(self) -> Rounds[tuple[str, int, str], list[bytes]]:
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

    async def _read_round(
        self, asks: list[tuple[str, int, str]]
    ) -> list[list[bytes] | BaseException]:
        unique = sorted(set(asks))
        try:
            pool = await self.serving_pool()
            rows = await pool.fetch(
                _NEWER,
                [a for a, _, _ in unique],
                [seq for _, seq, _ in unique],
                [_head_member(h) for _, _, h in unique],
            )
        except DB_ERRORS as exc:
            why = _why(exc)
            return [LogReadError(f"reading the log of {a} failed: {why}") for a, _, _ in asks]
        found: dict[tuple[str, int], list[bytes]] = {}
        whole: set[tuple[str, int]] = set()  # the head row is there as it was
        for row in rows:
            key = (row["agent_id"], row["head"])
            if row["seq"] > key[1]:
                found.setdefault(key, []).append(bytes(row["line"]))
            elif row["fits"]:
                whole.add(key)
        answers: list[list[bytes] | BaseException] = []
        for agent_id, seq, _ in asks:
            key = (agent_id, seq)
            if seq >= 0 and key not in whole:
                answers.append(HeadGone(agent_id, seq))
            else:
                answers.append(found.get(key, []))
        return answers

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
            refused = await pool.fetchrow(
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
        assert refused is not None  # a function with out parameters returns one row
        moved, gone = set(refused["moved"]), set(refused["gone"])
        answers: list[BaseException | None] = []
        records = 0
        for agent_id, first, lines in batches:
            if agent_id in moved:
                answers.append(HeadMoved(f"log {agent_id} has moved past seq {first - 1}"))
            elif agent_id in gone:
                answers.append(HeadGone(agent_id, first - 1))
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

    def blocking(self, query: str, *args: Any) -> list[asyncpg.Record]:
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

    def fetch_lines(
        self, agent_id: str, after: int, upto: int, limit: int | None = None
    ) -> list[bytes]:
        rows = self.blocking(_READ, agent_id, after, upto, limit)
        return [bytes(row["line"]) for row in rows]

    # -- LogStore ------------------------------------------------------------

    def describe(self) -> str:
        return f"PostgreSQL at {masked(self.url)}"

    def default_checkpoint_dir(self) -> Path:
        return self._checkpoint_dir

    def scan(self) -> Scan:
        rows = self.blocking("select agent_id from guard_agents order by agent_id")
        return Scan([row["agent_id"] for row in rows], [])

    def remove_unfinished(self) -> int:
        return 0  # a log is created in one transaction: never half

    def read(self, agent_id: str) -> LogContents:
        # Only a log whose agent is registered: guardd migrate registers an
        # agent once all its rows are copied, so no node serves half a log.
        rows = self.blocking(_READ_REGISTERED, agent_id)
        return LogContents.of_lines([bytes(row["line"]) for row in rows])

    def read_snapshot(self, agent_id: str) -> bytes | None:
        rows = self.blocking("select data from guard_snapshots where agent_id = $1", agent_id)
        return bytes(rows[0]["data"]) if rows else None

    def write_snapshot(self, agent_id: str, seq: int, data: bytes) -> None:
        """One statement (atomic); a snapshot at an older seq than the one
        the table holds (another node's, newer) leaves it as it is."""

        async def run(pool: asyncpg.Pool) -> None:
            await pool.execute(_WRITE_SNAPSHOT, agent_id, seq, data)

        try:
            self._call(run)
        except LogReadError as exc:
            raise LogWriteError(str(exc).replace("reading", "writing", 1)) from None

    def sizes(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """One query for them all: a node's start asks it of every agent."""
        rows = self.blocking(
            "select agent_id, sum(octet_length(line) + 1) as size from guard_logs"
            " where agent_id = any($1::text[]) group by agent_id",
            list(agent_ids),
        )
        found = {row["agent_id"]: int(row["size"]) for row in rows}
        return {agent_id: found.get(agent_id, 0) for agent_id in agent_ids}

    def open(self, agent_id: str, contents: LogContents, *, writable: bool) -> PgAgentLog:
        return PgAgentLog(self, agent_id, contents.valid_length, writable=writable)

    async def analyze(self) -> None:
        """Have the database count the log rows afresh (guardd migrate, after
        moving many in): until it does, its plans guess at the table."""
        try:
            pool = await self.serving_pool()
            await pool.execute("analyze guard_logs")
        except DB_ERRORS as exc:
            raise LogWriteError(f"analyzing the log table failed: {_why(exc)}") from exc

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

    def operators_log(self) -> PgOperatorsLog:
        return PgOperatorsLog(self)

    def committed(self, records: int, seconds: float) -> None:
        for observer in self._observers:
            observer(records, seconds, 0.0)

    async def follow(self, appended: Callable[[str, int], None]) -> None:
        """Call ``appended(agent_id, seq)`` for each batch another node
        commits (not this one's), heard on ``NOTIFY_CHANNEL``, until
        cancelled: LISTEN on a connection of its own, connected again after
        a loss. A notification lost meanwhile only delays a long-poll: those
        poll (``poll_interval``)."""

        announced = self.announced

        def notified(conn: object, pid: int, channel: str, payload: object) -> None:
            parts = str(payload).rsplit(" ", 2)
            if len(parts) != 3 or not parts[1].isdigit() or parts[2] == self._node:
                return
            agent_id, seq = parts[0], int(parts[1])
            if seq > announced.get(agent_id, -1):
                announced[agent_id] = seq
            appended(agent_id, seq)

        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.url, timeout=CONNECT_TIMEOUT)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _, lost=lost: lost.set())
                await conn.add_listener(NOTIFY_CHANNEL, notified)
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

    async def unready(self) -> str | None:
        try:
            pool = await self.serving_pool()
            await pool.fetchval("select 1", timeout=READY_TIMEOUT)
        except DB_ERRORS as exc:
            return f"the store {masked(self.url)} cannot be reached: {_why(exc)}"
        return None

    async def aclose(self) -> None:
        """Release what the store holds, from the loop that served: the
        rounds end by cancellation and the serving pool closes, each waited
        for ``CLOSE_TIMEOUT`` seconds at most; then the blocking calls' loop."""
        loop = asyncio.get_running_loop()
        if self._rounds_loop is loop:
            for rounds in (self._reads, self._writes):
                if rounds is not None:
                    await rounds.aclose(within=CLOSE_TIMEOUT)
        if self._pool is not None and self._pool_loop is loop:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT)
            except TimeoutError:
                pool.terminate()  # a server that does not answer: drop the connections
        await asyncio.to_thread(self._close_portal)

    def close(self) -> None:
        """Release what is left, without a loop (the audit tool, a failed
        start): rounds cancelled, the serving pool's connections dropped,
        the blocking calls' loop and pool closed."""
        for rounds in (self._reads, self._writes):
            if rounds is not None:
                rounds.cancel()
        if self._pool is not None:
            loop = self._pool_loop
            if loop is not None and not loop.is_closed():
                self._pool.terminate()  # every actor has stopped: nothing is in flight
            self._pool = None
        self._close_portal()

    def _close_portal(self) -> None:
        portal, pool = self._portal, self._portal_pool
        self._portal = self._portal_pool = None
        if portal is not None:

            async def close_pool() -> None:
                if pool is not None:
                    await pool.close()

            portal.close(close_pool)
