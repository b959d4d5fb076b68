"""Idempotency-Keys are kept for a retention window: a key reused at most
that long after its request is a repeat; reused later, it is a new request.
Keys past the window leave memory. The same on both stores, and after a
restart (fold from genesis or from a snapshot)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import IdempotencyConflict
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import load_keys
from agents_runtime.runtime.registry import Registry
from audit.replay import replay_records
from guardd.app import BY_COMMAND
from tests.agents_runtime.runtime.conftest import OPEN
from tests.agents_runtime.support import AGENT, FakeClock, policy, write_test_keys

RETENTION = 60.0


def _request(key: str) -> c.RequestAction:
    return c.RequestAction(tool="read", input={"q": 1}, idempotency_key=key)


@asynccontextmanager
async def _running(
    make_store: OPEN, root: Path, clock: FakeClock, recent_actions: int = 1000
) -> AsyncIterator[Registry]:
    write_test_keys(root)
    store = make_store()
    registry = Registry(
        store,
        load_keys(DataDir(root).keys_dir),
        clock=clock,
        idempotency_retention=RETENTION,
        recent_actions=recent_actions,
        snapshot_records=1,
        render=BY_COMMAND,
    )
    summary = await asyncio.to_thread(registry.load)
    assert summary.quarantined == {}
    await registry.start()
    try:
        yield registry
    finally:
        await registry.stop()
        close = getattr(store, "close", None)  # the PostgreSQL store's own thread
        if close is not None:
            await asyncio.to_thread(close)


async def test_a_key_just_inside_its_retention_is_a_repeat_and_just_outside_a_new_request(
    make_store: OPEN, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with _running(make_store, tmp_path, clock) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        ref = registry.ref(AGENT)
        first = await ref.ask(_request("k"))
        assert first["action_id"] == "act-1"
        clock.advance(RETENTION)  # exactly the retention: still kept
        assert (await ref.ask(_request("k")))["action_id"] == "act-1"
        clock.advance(0.000001)  # one microsecond past it: a new request
        assert (await ref.ask(_request("k")))["action_id"] == "act-2"
        assert (await ref.ask(_request("k")))["action_id"] == "act-2"  # the new one's repeat
        assert await ref.ask(c.FindAction("k")) == "act-2"
        await registry.save_checkpoints()
        await registry.save_snapshots()
    # A restart (from the snapshot, then from genesis) keeps the key's time.
    for _ in range(2):
        async with _running(make_store, tmp_path, clock) as registry:
            ref = registry.ref(AGENT)
            assert (await ref.ask(_request("k")))["action_id"] == "act-2"
            state = registry.actors[AGENT].state
            assert list(state.idempotency) == ["k"]
        (tmp_path / "snapshots" / f"{AGENT}.snapshot").unlink(missing_ok=True)


async def test_keys_past_their_retention_leave_memory(make_store: OPEN, tmp_path: Path) -> None:
    clock = FakeClock()
    async with _running(make_store, tmp_path, clock) as registry:
        await registry.create(AGENT, policy(budget=Decimal(1000)))
        ref = registry.ref(AGENT)
        for n in range(20):
            await ref.ask(_request(f"key-{n}"))
            clock.advance(RETENTION / 4)
        state = registry.actors[AGENT].state
        # Those of the last window only: the request at 4.75 windows drops
        # every key more than one window older than it.
        assert list(state.idempotency) == [f"key-{n}" for n in range(15, 20)]
        assert state.action_count == 20


async def test_keys_past_the_recent_actions_are_kept_compactly_and_still_repeat(
    make_store: OPEN, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with _running(make_store, tmp_path, clock, recent_actions=2) as registry:
        await registry.create(AGENT, policy(budget=Decimal(1000)))
        ref = registry.ref(AGENT)
        firsts = []
        for n in range(10):
            firsts.append(await ref.ask(_request(f"key-{n}")))
            clock.advance(1)
        state = registry.actors[AGENT].state
        assert len(state.idempotency) <= 4
        assert sum(len(run) for run in state.old_keys) + len(state.idempotency) == 10
        # The oldest key, no longer in the dict: a repeat answers as the first time.
        assert "key-0" not in state.idempotency
        assert await ref.ask(_request("key-0")) == firsts[0]
        assert await ref.ask(c.FindAction("key-0")) == "act-1"
        other_body = c.RequestAction(tool="read", input={"q": 2}, idempotency_key="key-1")
        with pytest.raises(
            IdempotencyConflict, match=r"^Idempotency-Key was first used for act-2 "
        ):
            await ref.ask(other_body)
        assert await ref.ask(c.FindAction("never-used")) is None
        assert state.action_count == 10
        await registry.save_checkpoints()
        await registry.save_snapshots()
    # A restart (from the snapshot, then from genesis) finds the old keys again,
    # and keeps each one exactly its retention.
    for _ in range(2):
        async with _running(make_store, tmp_path, clock, recent_actions=2) as registry:
            ref = registry.ref(AGENT)
            # (asked first: a node on PostgreSQL loads an agent on first use)
            assert await ref.ask(_request("key-3")) == firsts[3]
            assert registry.actors[AGENT].state.old_keys
        (tmp_path / "snapshots" / f"{AGENT}.snapshot").unlink(missing_ok=True)
    async with _running(make_store, tmp_path, clock, recent_actions=2) as registry:
        ref = registry.ref(AGENT)
        clock.advance(RETENTION - 10 + 4)  # key-4 was asked 10 - 4 s before the loop ended
        assert await ref.ask(_request("key-4")) == firsts[4]  # exactly its retention: kept
        assert (await ref.ask(_request("key-2")))["action_id"] == "act-11"  # past it: new
        clock.advance(0.000001)
        assert (await ref.ask(_request("key-4")))["action_id"] == "act-12"  # just past: new


async def test_audit_replay_takes_the_retention_the_log_was_written_with(tmp_path: Path) -> None:
    DataDir(tmp_path).prepare()
    clock = FakeClock()
    async with _running(lambda: FileStore(DataDir(tmp_path)), tmp_path, clock) as registry:
        await registry.create(AGENT, policy(budget=Decimal(100)))
        await registry.ref(AGENT).ask(_request("k"))
        clock.advance(RETENTION + 1)
        await registry.ref(AGENT).ask(_request("k"))
    path = DataDir(tmp_path).log_path(AGENT)
    records = [canonical.loads(line) for line in path.read_bytes().splitlines()]
    assert replay_records(records, RETENTION).ok
    # Under the default day, the second use was a repeat that wrote nothing.
    problems = [str(p) for p in replay_records(records).problems]
    assert any("a repeated Idempotency-Key answers with the first decision" in p for p in problems)
