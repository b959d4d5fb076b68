"""A state rebuilt to the committed head (after a lost race on a shared
store, or a refused write) starts from the agent's snapshot and folds only
the rows after it; without a usable snapshot it folds the whole log, with
the same result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.snapshot import SCHEMA
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import Signer, load_keys
from agents_runtime.log.snapshot import open_snapshot, seal_snapshot
from agents_runtime.log.store import LogStore
from agents_runtime.runtime.registry import Registry
from agents_runtime.runtime.replay import replay
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import AGENT, FakeClock, policy, write_test_keys

OPEN = Callable[[], LogStore]


@asynccontextmanager
async def _running(make_store: OPEN, root: Path) -> AsyncIterator[Registry]:
    write_test_keys(root)
    store = make_store()
    registry = Registry(
        store,
        load_keys(DataDir(root).keys_dir),
        clock=FakeClock(),
        snapshot_records=4,
        render=BY_COMMAND,
    )
    assert (await asyncio.to_thread(registry.load)).quarantined == {}
    await registry.start()
    try:
        yield registry
    finally:
        await registry.stop()
        close = getattr(store, "close", None)  # the PostgreSQL store's own thread
        if close is not None:
            await asyncio.to_thread(close)


@pytest.fixture(params=["files", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> OPEN:
    if request.param == "files":
        DataDir(tmp_path).prepare()
        return lambda: FileStore(DataDir(tmp_path))
    return _postgres(request.getfixturevalue("postgres_dsn"), tmp_path)


def _postgres(dsn: str, root: Path) -> OPEN:
    """A prepared database with this data dir's keys: how to open its store."""
    from agents_runtime.log.postgres.store import PgStore

    write_test_keys(root)
    store = PgStore(dsn, checkpoint_dir=root / "checkpoints")
    store.prepare()
    store.close()
    return lambda: PgStore(dsn, checkpoint_dir=root / "checkpoints")


async def _serve(registry: Registry, requests: int) -> None:
    ref = registry.ref(AGENT)
    for n in range(requests):
        await ref.ask(c.RequestAction(tool="read", input={"n": n}))


@pytest.mark.parametrize("forged", [False, True], ids=["snapshot", "forged-snapshot"])
async def test_a_rebuild_starts_from_the_snapshot_and_folds_the_rows_after_it(
    make_store: OPEN, tmp_path: Path, forged: bool
) -> None:
    async with _running(make_store, tmp_path) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        await _serve(registry, 3)
        await registry.save_checkpoints()
        await registry.save_snapshots()
        store = registry.store
        data = await asyncio.to_thread(store.read_snapshot, AGENT)
        assert data is not None
        snapshot = open_snapshot(data, registry.ring.public_key, AGENT)
        if forged:
            bad = seal_snapshot(AGENT, snapshot.head, SCHEMA, snapshot.state, Signer(b"\7" * 32))
            await asyncio.to_thread(store.write_snapshot, AGENT, snapshot.head.seq + 1, bad)
        await _serve(registry, 2)  # rows after the snapshot
        actor = registry.actors[AGENT]
        before = actor.state
        assert await actor.rebuild(actor.committed) is None
        assert actor.state is not before
        assert actor.rebuilt_from == (None if forged else snapshot.head.seq)
        whole = replay(AGENT, await asyncio.to_thread(store.read, AGENT), registry.ring.public_key)
        assert actor.state == whole.state
        assert actor.state.action_count == 5
        # It goes on serving from the rebuilt state.
        await _serve(registry, 1)
        assert actor.state.action_count == 6


async def test_a_lost_race_again_starts_from_the_state_the_last_rebuild_reached(
    make_store: OPEN, tmp_path: Path
) -> None:
    async with _running(make_store, tmp_path) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        await _serve(registry, 3)
        await registry.save_checkpoints()
        await registry.save_snapshots()
        await _serve(registry, 2)
        actor = registry.actors[AGENT]
        store = registry.store
        key = registry.ring.public_key
        assert await actor.rebuild(actor.committed) is None
        reached = actor.committed.head
        await _serve(registry, 2)
        assert await actor.rebuild(actor.committed) is None
        assert actor.rebuilt_from == reached.seq  # not the snapshot's, nor genesis
        assert actor.state == replay(AGENT, await asyncio.to_thread(store.read, AGENT), key).state
        # A rebuild with nothing new since starts from it as well.
        reached = actor.committed.head
        assert await actor.rebuild(actor.committed) is None
        assert actor.rebuilt_from == reached.seq
        await _serve(registry, 1)
        assert actor.state.action_count == 8


async def test_a_record_changed_after_the_rebuilt_state_is_found_by_the_next_rebuild(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The copy vouches for the records up to its head only: one changed
    after it fails the chain from there, and the rebuild says so (a gap)
    as one from the snapshot or genesis would."""
    from tests.support.postgres import run_sql

    make_store = _postgres(postgres_dsn, tmp_path)
    async with _running(make_store, tmp_path) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        await _serve(registry, 2)
        actor = registry.actors[AGENT]
        assert await actor.rebuild(actor.committed) is None
        after = actor.committed.head.seq + 1
        await _serve(registry, 2)
        await asyncio.to_thread(
            run_sql,
            postgres_dsn,
            "update guard_logs set line = convert_to(replace(convert_from(line, 'UTF8'),"
            " '\"read\"', '\"READ\"'), 'UTF8') where agent_id = $1"
            " and seq = $2",
            AGENT,
            after,
        )
        failure = await actor.rebuild(actor.committed)
        assert failure is not None
        assert failure.seq == after
        assert failure.reason == "hash does not match content"


@pytest.mark.parametrize("snapshot", [False, True], ids=["from-genesis", "from-snapshot"])
async def test_a_rebuild_checks_the_hashes_of_records_this_node_verified_not_their_signatures(
    postgres_dsn: str, tmp_path: Path, snapshot: bool
) -> None:
    """The records up to the committed head were verified, signatures
    included, before this node folded or committed them: a rebuild (a lost
    race) holds them to the head's hash only. A signature replaced behind the
    node, the record's content and hash unchanged, is not read again."""
    from agents_runtime.log import canonical
    from tests.support.postgres import run_sql

    make_store = _postgres(postgres_dsn, tmp_path)
    async with _running(make_store, tmp_path) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        await _serve(registry, 3)
        if snapshot:
            await registry.save_checkpoints()
            await registry.save_snapshots()
        await _serve(registry, 2)
        actor = registry.actors[AGENT]
        last = actor.committed.head.seq
        line = (await actor.log.lines([last], actor.committed))[last]
        changed = line.replace(canonical.loads(line)["sig"].encode(), b"0" * 128)
        await asyncio.to_thread(
            run_sql,
            postgres_dsn,
            "update guard_logs set line = $1 where agent_id = $2 and seq = $3",
            changed,
            AGENT,
            last,
        )
        assert await actor.rebuild(actor.committed) is None
        assert (actor.rebuilt_from is not None) == snapshot
        assert actor.state.action_count == 5


async def test_a_rebuild_behind_another_nodes_snapshot_starts_from_it(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Another node wrote the agent's snapshot at a head this node has not
    read yet: a rebuild verifies the rows up to that head and takes the
    snapshot's state, instead of folding the whole log."""
    from agents_runtime.log.postgres.store import PgStore

    write_test_keys(tmp_path)
    first = PgStore(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")
    first.prepare()
    first.close()

    def store_of(node: str) -> LogStore:
        return PgStore(postgres_dsn, checkpoint_dir=tmp_path / node)

    async with _running(lambda: store_of("one"), tmp_path) as one:
        await one.create(AGENT, policy(budget=Decimal(100)))
        await _serve(one, 2)
        async with _running(lambda: store_of("two"), tmp_path) as two:
            await _serve(two, 3)  # loads it on first use, then appends
            await two.save_checkpoints()
            await two.save_snapshots()
            head = two.actors[AGENT].committed_head
        actor = one.actors[AGENT]
        assert actor.committed.head.seq < head.seq
        assert await actor.rebuild(actor.committed) is None
        assert (actor.rebuilt_from, actor.committed.head) == (head.seq, head)
        whole = replay(AGENT, await asyncio.to_thread(one.store.read, AGENT), one.ring.public_key)
        assert actor.state == whole.state
        assert actor.committed.size == whole.contents.valid_length
        await _serve(one, 1)
        assert actor.state.action_count == 6
