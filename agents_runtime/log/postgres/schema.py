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
- ``guard_snapshots``: each agent's newest state snapshot, the bytes the
  file store keeps in ``snapshots/<agent_id>.snapshot``, and its seq: a
  node replaces it only by a newer one (version 4).
- ``guard_agents``: one row per agent, with the ``log_id`` of its genesis
  record; inserted in the transaction that appends the genesis and policy
  records, so creating one agent on two nodes at once gives one row.
- ``guard_append``: the batches of many agents' actors inserted in one
  statement, each agent's all or nothing (version 2; kept for nodes of that
  version while a fleet upgrades).
- ``guard_append_after``: the same, and a batch whose first record follows
  a row the table no longer holds (rows deleted under running nodes) is
  refused too, and named apart: nothing is written after a gap (version 3).
- ``guard_logs``: one row per record line, exactly the bytes the file store
  writes (without the line feed), keyed ``(agent_id, seq)``: a node whose
  batch conflicts on that key learns another node wrote first. No foreign
  key to ``guard_agents``: checking one would lock the agent's row at every
  append, and appends of one agent from several nodes would queue on it.
- ``guard_policies``: the named (fleet) policies, one row per version,
  keyed ``(name, version)``, the signed line as ``log/policies.py`` seals
  it (version 5): two nodes writing the same version of a name conflict on
  the key, and one of them is refused.
- ``guard_operators``: the operators log, one row per record line, keyed by
  seq (version 6); nodes read what others appended every half second.

Nodes tell each other of appends on ``NOTIFY_CHANNEL`` (payload: the
agent ID); a lost notification only delays, as nodes also poll.
"""

from __future__ import annotations

from typing import Final

import asyncpg
import attrs
from asyncpg.pool import PoolConnectionProxy

from agents_runtime.errors import GuardError

SCHEMA_VERSION: Final = 6
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
        # round trip), each agent's all or nothing: every row goes in unless
        # its key is taken; an agent any of whose rows was refused (another
        # node wrote first) has its rows of this batch deleted again, before
        # the commit, and is returned; the others are notified on
        # NOTIFY_CHANNEL (named literally: a test checks they agree). No
        # subtransaction per agent: more than 64 in one transaction slow
        # every other session's snapshots. The caller sorts the batches by
        # agent, so that two nodes wait on each other's rows in one order
        # and never deadlock.
        """
        create function guard_append(
            agents text[], firsts bigint[], counts int[], lines bytea[], node text
        ) returns text[] language plpgsql as $$
        declare
            ins_agents text[];
            ins_seqs bigint[];
            refused text[];
        begin
            with batch as (
                select b.agent_id, b.first, b.n, sum(b.n) over (order by b.i) - b.n as skip
                from unnest(agents, firsts, counts) with ordinality as b(agent_id, first, n, i)
            ), written as (
                insert into guard_logs (agent_id, seq, line)
                select b.agent_id, b.first + k - 1, lines[b.skip + k]
                from batch b cross join lateral generate_series(1, b.n) as k
                order by b.agent_id, k
                on conflict do nothing
                returning agent_id, seq
            )
            select array_agg(agent_id), array_agg(seq) into ins_agents, ins_seqs from written;
            select coalesce(array_agg(b.agent_id), '{}') into refused
            from unnest(agents, counts) as b(agent_id, n)
            where b.n > (
                select count(*) from unnest(coalesce(ins_agents, '{}')) as w(a)
                where w.a = b.agent_id
            );
            if cardinality(refused) > 0 then
                delete from guard_logs g
                using unnest(ins_agents, ins_seqs) as d(agent_id, seq)
                where g.agent_id = d.agent_id and g.seq = d.seq and d.agent_id = any(refused);
            end if;
            perform pg_notify(
                'guard_log_appended', b.agent_id || ' ' || (b.first + b.n - 1) || ' ' || node
            )
            from unnest(agents, firsts, counts) as b(agent_id, first, n)
            where not (b.agent_id = any(refused));
            return refused;
        end
        $$
        """,
    ),
    3: (
        # guard_append, and one more refusal: an agent whose batch follows a
        # row (seq first - 1) that is not in the table is in ``gone`` and
        # has none of its rows written. Its node committed or read that row,
        # so someone deleted it under the running nodes: writing on would
        # put records after a gap (found only by verification, later). The
        # check is one index lookup per agent, in the statement that
        # inserts, so no delete can slip between them unseen by both. Its
        # hash is checked by the read of newer rows that comes before every
        # batch (store.py, _NEWER). A new function rather than a changed
        # one: nodes of version 2 go on calling guard_append while a fleet
        # upgrades.
        """
        create function guard_append_after(
            agents text[], firsts bigint[], counts int[], lines bytea[], node text,
            out moved text[], out gone text[]
        ) language plpgsql as $$
        declare
            ins_agents text[];
            ins_seqs bigint[];
        begin
            select coalesce(array_agg(b.agent_id), '{}') into gone
            from unnest(agents, firsts) as b(agent_id, first)
            where b.first > 0 and not exists (
                select 1 from guard_logs g where g.agent_id = b.agent_id and g.seq = b.first - 1
            );
            with batch as (
                select b.agent_id, b.first, b.n, sum(b.n) over (order by b.i) - b.n as skip
                from unnest(agents, firsts, counts) with ordinality as b(agent_id, first, n, i)
            ), written as (
                insert into guard_logs (agent_id, seq, line)
                select b.agent_id, b.first + k - 1, lines[b.skip + k]
                from batch b cross join lateral generate_series(1, b.n) as k
                where not (b.agent_id = any(gone))
                order by b.agent_id, k
                on conflict do nothing
                returning agent_id, seq
            )
            select array_agg(agent_id), array_agg(seq) into ins_agents, ins_seqs from written;
            select coalesce(array_agg(b.agent_id), '{}') into moved
            from unnest(agents, counts) as b(agent_id, n)
            where not (b.agent_id = any(gone)) and b.n > (
                select count(*) from unnest(coalesce(ins_agents, '{}')) as w(a)
                where w.a = b.agent_id
            );
            if cardinality(moved) > 0 then
                delete from guard_logs g
                using unnest(ins_agents, ins_seqs) as d(agent_id, seq)
                where g.agent_id = d.agent_id and g.seq = d.seq and d.agent_id = any(moved);
            end if;
            perform pg_notify(
                'guard_log_appended', b.agent_id || ' ' || (b.first + b.n - 1) || ' ' || node
            )
            from unnest(agents, firsts, counts) as b(agent_id, first, n)
            where not (b.agent_id = any(moved)) and not (b.agent_id = any(gone));
        end
        $$
        """,
    ),
    4: (
        # State snapshots (agents_runtime/log/snapshot.py): written by any
        # node, only ever replaced by a newer one; verified when read.
        """
        create table guard_snapshots (
            agent_id text primary key,
            seq bigint not null check (seq >= 0),
            data bytea not null
        )
        """,
    ),
    5: (
        """
        create table guard_policies (
            name text not null,
            version int not null check (version >= 1),
            line bytea not null,
            primary key (name, version)
        )
        """,
    ),
    6: (
        # The operators log (agents_runtime/log/operators.py), one row per
        # record line: a node whose record takes a seq another node took
        # first learns of it by the key.
        """
        create table guard_operators (
            seq bigint primary key check (seq >= 0),
            line bytea not null
        )
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
