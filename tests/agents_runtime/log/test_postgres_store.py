"""The PostgreSQL store against a real server: the seam's calls, a batch
refused whole when another writer moved the head, creation once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agents_runtime.errors import AgentExists, LogReadError
from agents_runtime.log.postgres.schema import ensure_schema
from agents_runtime.log.postgres.store import PgStore, masked
from agents_runtime.log.record import Head, seal
from agents_runtime.log.store import Committed, HeadGone, HeadMoved, LogContents
from tests.agents_runtime.support import TEST_SIGNER


def _lines(count: int, start: Head | None = None) -> list[bytes]:
    head = start or Head.empty()
    lines = []
    for n in range(count):
        sealed = seal({"kind": "scar", "n": n}, prev=head, ts="t", signer=TEST_SIGNER)
        head = sealed.head
        lines.append(sealed.line)
    return lines


@pytest.fixture
async def store(postgres_dsn: str, tmp_path: Path) -> AsyncIterator[PgStore]:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await ensure_schema(conn)
    finally:
        await conn.close()
    pg = PgStore(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")
    yield pg
    await pg.aclose()
    await asyncio.to_thread(pg.close)


def test_the_password_never_shows() -> None:
    assert (
        masked("postgresql://guard:s3cret@db1:5433/guard")
        == "postgresql://guard:***@db1:5433/guard"
    )
    assert masked("postgresql://guard@db1/guard") == "postgresql://guard@db1/guard"


async def test_a_created_log_reads_back_byte_for_byte(store: PgStore) -> None:
    lines = _lines(3)
    log = await store.create("a", b"".join(lines))
    assert log.size == len(b"".join(lines))
    # The seam's blocking calls, from a worker thread as the runtime makes them.
    assert (await asyncio.to_thread(store.scan)).agent_ids == ["a"]
    contents = await asyncio.to_thread(store.read, "a")
    assert contents == LogContents.of_lines([line[:-1] for line in lines])
    sizes = await asyncio.to_thread(store.sizes, ["a", "none"])
    assert sizes == {"a": len(b"".join(lines)), "none": 0}


async def test_creating_an_agent_twice_is_agent_exists(store: PgStore) -> None:
    await store.create("a", b"".join(_lines(2)))
    with pytest.raises(AgentExists):
        await store.create("a", b"".join(_lines(2)))


async def test_a_batch_after_a_moved_head_is_refused_whole(store: PgStore) -> None:
    lines = _lines(5)
    two = Committed(Head(1, ""), 0)
    await store.create("a", b"".join(lines[:2]))
    contents = await asyncio.to_thread(store.read, "a")
    one = store.open("a", contents, writable=True)
    other = store.open("a", contents, writable=True)
    await one.append(b"".join(lines[2:4]), two)  # seqs 2, 3
    with pytest.raises(HeadMoved):
        await other.append(b"".join(lines[2:5]), two)  # seqs 2..4: 2 is taken
    upto = Committed(Head(3, ""), 0)
    after = await asyncio.to_thread(other.read_after, 1, upto)
    assert after == [line[:-1] for line in lines[2:4]]
    assert await other.lines([0, 3], upto) == {0: lines[0][:-1], 3: lines[3][:-1]}
    with pytest.raises(LogReadError):
        await other.lines([4], upto)
    assert len((await asyncio.to_thread(store.read, "a")).lines) == 4


async def test_read_after_with_a_limit_returns_one_page_and_paging_reads_every_line(
    store: PgStore,
) -> None:
    lines = _lines(10)
    await store.create("a", b"".join(lines))
    contents = await asyncio.to_thread(store.read, "a")
    log = store.open("a", contents, writable=False)
    upto = Committed(Head(8, ""), 0)  # seq 9 is in the store, not committed
    want = [line[:-1] for line in lines[:9]]
    assert await asyncio.to_thread(log.read_after, 2, upto, 4) == want[3:7]
    assert await asyncio.to_thread(log.read_after, 2, upto) == want[3:]
    got: list[bytes] = []
    while page := await asyncio.to_thread(log.read_after, len(got) - 1, upto, 4):
        assert len(page) <= 4
        got += page
    assert got == want


def test_a_worker_process_gets_a_store_of_the_same_url(store: PgStore) -> None:
    import pickle

    copy = pickle.loads(pickle.dumps(store))  # noqa: S301 (our own bytes, as a worker gets them)
    assert isinstance(copy, PgStore)
    assert copy.url == store.url
    assert copy.default_checkpoint_dir() == store.default_checkpoint_dir()
    copy.close()


async def test_a_batch_after_a_row_deleted_under_it_is_head_gone_and_not_written(
    store: PgStore, postgres_dsn: str
) -> None:
    lines = _lines(6)
    await store.create("a", b"".join(lines[:4]))
    log = store.open("a", await asyncio.to_thread(store.read, "a"), writable=True)
    head = Committed(Head(3, canonical_hash(lines[3])), 0)
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute("delete from guard_logs where agent_id = 'a' and seq >= 2")
    finally:
        await conn.close()
    with pytest.raises(HeadGone, match=r"^log a: the store no longer holds seq 3 "):
        await log.append(b"".join(lines[4:6]), head)
    with pytest.raises(HeadGone, match=r"^log a: the store no longer holds seq 3 "):
        await log.newer(head)
    assert len((await asyncio.to_thread(store.read, "a")).lines) == 2


async def test_a_read_from_a_head_whose_row_was_replaced_is_head_gone(
    store: PgStore, postgres_dsn: str
) -> None:
    lines = _lines(4)
    await store.create("a", b"".join(lines))
    log = store.open("a", await asyncio.to_thread(store.read, "a"), writable=True)
    head = Committed(Head(3, canonical_hash(lines[3])), 0)
    assert await log.newer(head) == []
    other = _lines(4, start=Head(2, canonical_hash(lines[2])))[0]  # another record at seq 3
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(
            "update guard_logs set line = $1 where agent_id = 'a' and seq = 3", other[:-1]
        )
    finally:
        await conn.close()
    with pytest.raises(HeadGone, match=r"seq 3 "):
        await log.newer(head)


def canonical_hash(line: bytes) -> str:
    from agents_runtime.log import canonical

    return str(canonical.loads(line[:-1])["hash"])


async def test_a_snapshot_is_replaced_by_a_newer_one_only(store: PgStore) -> None:
    assert await asyncio.to_thread(store.read_snapshot, "snap-a") is None
    await asyncio.to_thread(store.write_snapshot, "snap-a", 5, b"five\n")
    assert await asyncio.to_thread(store.read_snapshot, "snap-a") == b"five\n"
    await asyncio.to_thread(store.write_snapshot, "snap-a", 9, b"nine\n")
    # Another node's older one (it lost the race) leaves the newer in place.
    await asyncio.to_thread(store.write_snapshot, "snap-a", 7, b"seven\n")
    assert await asyncio.to_thread(store.read_snapshot, "snap-a") == b"nine\n"


async def test_the_store_s_connections_never_compile_a_statement(store: PgStore) -> None:
    # Its statements touch a few rows by key; on a large table the cost
    # estimate set off compiling (JIT), which took longer than the statement.
    pool = await store.serving_pool()
    assert await pool.fetchval("show jit") == "off"
