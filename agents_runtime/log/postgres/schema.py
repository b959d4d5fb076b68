"""The PostgreSQL store's schema: versioned, created and upgraded by guardd.

Used by the store beside it (store.py).

Every node runs ``ensure_schema`` at start. It works in one transaction under
a transaction-scoped advisory lock, so two nodes starting at once on an empty
database serialise: the first creates the tables, the second waits for its
commit, finds the version current and does nothing. An upgrade that fails
leaves the database as it was.

Tables:

- ``guard_meta``: one value per key: the schema version, the audit public
  key (hex) and the fingerprint of ``token.key`` recorded at the first start
  (never a secret), which every later node must match.
- ``guard_agents``: one row per agent, with the ``log_id`` of its genesis
  record; inserted in the transaction that appends the genesis and policy
  records, so creating one agent on two nodes at once gives one row.
- ``guard_append``: the batches of many agents' actors inserted in one
  statement, each agent's all or nothing (version 2).
- ``guard_logs``: one row per record line, exactly the bytes the file store
  writes (without the line feed), keyed ``(agent_id, seq)``: a node whose
  batch conflicts on that key learns another node wrote first. No foreign
  key to ``guard_agents``: checking one would lock the agent's row at every
  append, and appends of one agent from several nodes would queue on it.

Nodes tell each other of appends on ``NOTIFY_CHANNEL`` (payload: the
agent ID); a lost notification only delays, as nodes also poll.
"""

from __future__ import annotations

from typing import Final

import asyncpg
import attrs
from asyncpg.pool import PoolConnectionProxy

from agents_runtime.errors import GuardError

SCHEMA_VERSION: Final = 2
NOTIFY_CHANNEL: Final = "guard_log_appended"

# Any fixed 64-bit number; it only has to differ from the other advisory
# locks taken in the same database ("guardsch" in ASCII).
SCHEMA_LOCK_KEY: Final = 0x6775617264_736368

META_SCHEMA_VERSION: Final = "schema_version"
META_AUDIT_PUBLIC_KEY: Final = "audit_public_key"
META_TOKEN_KEY_FINGERPRINT: Final = "token_key_fingerprint"  # noqa: S105 (a key name, no secret)

# version -> the statements that bring the schema from the version before to it.
MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        """
        create table guard_meta (
            key text primary key,
            value text not null
        )
        """,
        """
        create table guard_agents (
            agent_id text primary key,
            log_id text not null,
            created_at timestamptz not null default now()
        )
        """,
        """
        create table guard_logs (
            agent_id text not null,
            seq bigint not null check (seq >= 0),
            line bytea not null,
            primary key (agent_id, seq)
        )
        """,
    ),
    2: (
        # The batches of many agents in one statement (one transaction, one
        # round trip), each agent's all or nothing: a batch whose seqs
        # another node took is rolled back alone (its own subtransaction)
        # and its agent returned; the others commit and are notified on
        # NOTIFY_CHANNEL (named literally: a test checks they agree).
        """
        create function guard_append(
            agents text[], firsts bigint[], counts int[], lines bytea[], node text
        ) returns text[] language plpgsql as $$
        declare
            refused text[] := '{}';
            pos int := 1;
        begin
            for i in 1 .. coalesce(array_length(agents, 1), 0) loop
                begin
                    insert into guard_logs (agent_id, seq, line)
                    select agents[i], firsts[i] + k - 1, lines[pos + k - 1]
                    from generate_series(1, counts[i]) as k;
                    perform pg_notify(
                        'guard_log_appended',
                        agents[i] || ' ' || (firsts[i] + counts[i] - 1) || ' ' || node
                    );
                exception when unique_violation then
                    refused := refused || agents[i];
                end;
                pos := pos + counts[i];
            end loop;
            return refused;
        end
        $$
        """,
    ),
}


Conn = asyncpg.Connection | PoolConnectionProxy  # a connection, or one lent by a pool


class SchemaError(GuardError):
    """The database's schema cannot be used by this guardd."""

    code = "store_schema"


@attrs.frozen
class SchemaResult:
    """What ``ensure_schema`` found and left."""

    found: int  # 0 for a database without our tables
    version: int

    @property
    def changed(self) -> bool:
        return self.found != self.version


async def schema_version(conn: Conn) -> int:
    """The schema version the database holds; 0 when it has none of our tables."""
    if await conn.fetchval("select to_regclass('guard_meta') is null"):
        return 0
    value = await conn.fetchval("select value from guard_meta where key = $1", META_SCHEMA_VERSION)
    if value is None or not str(value).isdigit():
        raise SchemaError(f"guard_meta holds no valid {META_SCHEMA_VERSION} (found {value!r})")
    return int(value)


async def ensure_schema(conn: Conn) -> SchemaResult:
    """Create or upgrade the schema to ``SCHEMA_VERSION`` in one transaction;
    a no-op when it is current. Refuses a schema newer than this code's."""
    async with conn.transaction():
        await conn.execute("select pg_advisory_xact_lock($1)", SCHEMA_LOCK_KEY)
        found = await schema_version(conn)
        if found > SCHEMA_VERSION:
            raise SchemaError(
                f"the database's schema is version {found}, newer than this guardd's"
                f" ({SCHEMA_VERSION}): upgrade guardd"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
        if found != SCHEMA_VERSION:
            await conn.execute(
                "insert into guard_meta (key, value) values ($1, $2)"
                " on conflict (key) do update set value = excluded.value",
                META_SCHEMA_VERSION,
                str(SCHEMA_VERSION),
            )
    return SchemaResult(found, SCHEMA_VERSION)
