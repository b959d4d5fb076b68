"""The PostgreSQL store's schema against a real server: created once, safely
when two nodes start at once, a no-op afterwards, refused when newer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agents_runtime.log.postgres.schema import (
    META_SCHEMA_VERSION,
    SCHEMA_LOCK_KEY,
    SCHEMA_VERSION,
    SchemaError,
    ensure_schema,
    schema_version,
)


@pytest.fixture
async def conn(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        yield connection
    finally:
        await connection.close()


async def tables(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch(
        "select tablename from pg_tables where schemaname = 'public' order by tablename"
    )
    return [row["tablename"] for row in rows]


async def test_an_empty_database_gets_the_schema(conn: asyncpg.Connection) -> None:
    assert await schema_version(conn) == 0
    result = await ensure_schema(conn)
    assert (result.found, result.version, result.changed) == (0, SCHEMA_VERSION, True)
    assert await tables(conn) == [
        "guard_agents",
        "guard_logs",
        "guard_meta",
        "guard_operators",
        "guard_policies",
        "guard_snapshots",
    ]
    assert await conn.fetchval(
        "select value from guard_meta where key = $1", META_SCHEMA_VERSION
    ) == str(SCHEMA_VERSION)
    await conn.execute("insert into guard_logs values ('a', 0, $1)", b"{}")
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute("insert into guard_logs values ('a', 0, $1)", b"{}")


async def test_two_nodes_starting_at_once(postgres_dsn: str, conn: asyncpg.Connection) -> None:
    # Both calls are made to wait on the lock first, so they truly contend for it.
    await conn.execute("select pg_advisory_lock($1)", SCHEMA_LOCK_KEY)
    nodes = [await asyncpg.connect(postgres_dsn) for _ in range(2)]
    try:
        calls = [asyncio.ensure_future(ensure_schema(node)) for node in nodes]
        await asyncio.sleep(0.3)
        assert not any(call.done() for call in calls)
        await conn.execute("select pg_advisory_unlock($1)", SCHEMA_LOCK_KEY)
        results = await asyncio.wait_for(asyncio.gather(*calls), timeout=30)
    finally:
        for node in nodes:
            await node.close()
    assert sorted(r.found for r in results) == [0, SCHEMA_VERSION]
    assert await tables(conn) == [
        "guard_agents",
        "guard_logs",
        "guard_meta",
        "guard_operators",
        "guard_policies",
        "guard_snapshots",
    ]


async def test_a_second_run_changes_nothing(conn: asyncpg.Connection) -> None:
    await ensure_schema(conn)
    await conn.execute("insert into guard_logs values ('a', 0, $1)", b"line")
    result = await ensure_schema(conn)
    assert (result.found, result.changed) == (SCHEMA_VERSION, False)
    assert await conn.fetchval("select line from guard_logs") == b"line"


async def test_a_newer_schema_is_refused(conn: asyncpg.Connection) -> None:
    await ensure_schema(conn)
    await conn.execute(
        "update guard_meta set value = $1 where key = $2",
        str(SCHEMA_VERSION + 1),
        META_SCHEMA_VERSION,
    )
    with pytest.raises(SchemaError, match="newer than this guardd"):
        await ensure_schema(conn)
    assert await schema_version(conn) == SCHEMA_VERSION + 1


def test_the_append_function_notifies_on_the_channel_nodes_listen_on() -> None:
    from agents_runtime.log.postgres.schema import MIGRATIONS, NOTIFY_CHANNEL

    assert f"'{NOTIFY_CHANNEL}'" in MIGRATIONS[2][0]


async def test_a_version_1_database_is_upgraded_keeping_its_rows(
    conn: asyncpg.Connection,
) -> None:
    from agents_runtime.log.postgres.schema import MIGRATIONS

    async with conn.transaction():
        for statement in MIGRATIONS[1]:
            await conn.execute(statement)
        await conn.execute("insert into guard_meta values ($1, '1')", META_SCHEMA_VERSION)
    await conn.execute("insert into guard_logs values ('a', 0, $1)", b"line")
    result = await ensure_schema(conn)
    assert (result.found, result.version) == (1, SCHEMA_VERSION)
    assert await conn.fetchval("select line from guard_logs") == b"line"
    refused = await conn.fetchval(
        "select guard_append($1, $2, $3, $4, 'n')",
        ["a", "b"],
        [0, 0],
        [1, 1],
        [b"again", b"first"],
    )
    assert refused == ["a"]  # seq 0 of a is taken; b's batch commits alone
    assert await conn.fetchval("select line from guard_logs where agent_id = 'b'") == b"first"


async def test_a_batch_refused_in_part_leaves_none_of_its_rows(conn: asyncpg.Connection) -> None:
    await ensure_schema(conn)
    await conn.execute("insert into guard_logs values ('a', 1, $1)", b"theirs")
    refused = await conn.fetchval(
        "select guard_append($1, $2, $3, $4, 'n')",
        ["a", "b"],
        [0, 0],
        [2, 2],
        [b"a0", b"a1", b"b0", b"b1"],
    )
    assert refused == ["a"]
    rows = await conn.fetch("select agent_id, seq, line from guard_logs order by agent_id, seq")
    assert [(r["agent_id"], r["seq"], bytes(r["line"])) for r in rows] == [
        ("a", 1, b"theirs"),
        ("b", 0, b"b0"),
        ("b", 1, b"b1"),
    ]


def test_the_append_after_function_notifies_on_the_channel_nodes_listen_on() -> None:
    from agents_runtime.log.postgres.schema import MIGRATIONS, NOTIFY_CHANNEL

    assert f"'{NOTIFY_CHANNEL}'" in MIGRATIONS[3][0]


async def test_a_version_2_database_is_upgraded_keeping_its_rows_and_guard_append(
    conn: asyncpg.Connection,
) -> None:
    from agents_runtime.log.postgres.schema import MIGRATIONS

    async with conn.transaction():
        for version in (1, 2):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
        await conn.execute("insert into guard_meta values ($1, '2')", META_SCHEMA_VERSION)
    await conn.execute("insert into guard_logs values ('a', 0, $1)", b"line")
    result = await ensure_schema(conn)
    assert (result.found, result.version) == (2, SCHEMA_VERSION)
    assert await conn.fetchval("select line from guard_logs") == b"line"
    row = await conn.fetchrow(
        "select moved, gone from guard_append_after($1, $2, $3, $4, 'n')",
        ["a", "b"],
        [1, 0],
        [1, 1],
        [b"a1", b"b0"],
    )
    assert (row["moved"], row["gone"]) == ([], [])
    # Nodes of version 2 still running while the fleet upgrades keep their function.
    refused = await conn.fetchval(
        "select guard_append($1, $2, $3, $4, 'n')", ["b"], [1], [1], [b"b1"]
    )
    assert refused == []


async def test_a_version_5_database_gets_the_operators_table_keeping_snapshots_and_policies(
    conn: asyncpg.Connection,
) -> None:
    from agents_runtime.log.postgres.schema import MIGRATIONS

    async with conn.transaction():
        for version in range(1, 6):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)
        await conn.execute("insert into guard_meta values ($1, '5')", META_SCHEMA_VERSION)
    await conn.execute("insert into guard_snapshots values ('a', 3, $1)", b"snap")
    await conn.execute("insert into guard_policies values ('p', 1, $1)", b"v1")
    result = await ensure_schema(conn)
    assert (result.found, result.version, SCHEMA_VERSION) == (5, 6, 6)
    assert await conn.fetchval("select data from guard_snapshots") == b"snap"
    assert await conn.fetchval("select line from guard_policies") == b"v1"
    assert await conn.fetchval("select count(*) from guard_operators") == 0


async def test_a_batch_after_a_row_that_is_gone_writes_none_of_its_rows(
    conn: asyncpg.Connection,
) -> None:
    await ensure_schema(conn)
    for seq in range(4):
        await conn.execute("insert into guard_logs values ('a', $1, $2)", seq, b"a%d" % seq)
    await conn.execute("insert into guard_logs values ('b', 0, $1)", b"b0")
    await conn.execute("delete from guard_logs where agent_id = 'a' and seq >= 2")  # a gap
    row = await conn.fetchrow(
        "select moved, gone from guard_append_after($1, $2, $3, $4, 'n')",
        ["a", "b"],
        [4, 1],
        [2, 1],
        [b"a4", b"a5", b"b1"],
    )
    assert (row["moved"], row["gone"]) == ([], ["a"])
    rows = await conn.fetch("select agent_id, seq from guard_logs order by agent_id, seq")
    assert [(r["agent_id"], r["seq"]) for r in rows] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


async def test_a_batch_whose_rows_are_taken_is_moved_not_gone(conn: asyncpg.Connection) -> None:
    await ensure_schema(conn)
    for seq in range(3):
        await conn.execute("insert into guard_logs values ('a', $1, $2)", seq, b"theirs")
    row = await conn.fetchrow(
        "select moved, gone from guard_append_after($1, $2, $3, $4, 'n')",
        ["a"],
        [2],
        [2],
        [b"a2", b"a3"],
    )
    assert (row["moved"], row["gone"]) == (["a"], [])
    assert await conn.fetchval("select count(*) from guard_logs") == 3
