"""What an agent keeps per action stays bounded: allowed times past what a
rate check can count leave memory at the fold, live and at a restart; an
old action (its key compacted, its lines far back in the log) still reads
back right on both stores: its view and receipt, its outcome, a repeat of
its Idempotency-Key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.checks import RATE_HISTORY_SECS, TRIM_EVERY
from agents_runtime.errors import InvalidState
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.lineindex import STRIDE
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import load_keys
from agents_runtime.runtime.registry import Registry
from guardd.app import BY_COMMAND
from tests.agents_runtime.runtime.conftest import OPEN
from tests.agents_runtime.support import AGENT, FakeClock, policy, write_test_keys

STEP = 2 * RATE_HISTORY_SECS / TRIM_EVERY  # TRIM_EVERY actions span two days


async def _registry(root: Path, clock: FakeClock) -> Registry:
    write_test_keys(root)
    data_dir = DataDir(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=clock, render=BY_COMMAND)
    assert (await asyncio.to_thread(registry.load)).quarantined == {}
    await registry.start()
    return registry


async def test_allowed_times_older_than_a_day_leave_memory_at_the_fold(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = await _registry(tmp_path, clock)
    try:
        await registry.create(AGENT, policy(budget=Decimal(10_000), tools={"read": {"cost": 0}}))
        ref = registry.ref(AGENT)
        for _ in range(TRIM_EVERY):
            await ref.ask(c.RequestAction(tool="read"))
            clock.advance(STEP)
        times = registry.actors[AGENT].state.allowed_times
        assert len(times) < TRIM_EVERY
        assert times[0] > clock() - STEP - RATE_HISTORY_SECS
        live = list(times)
    finally:
        await registry.stop()
    registry = await _registry(tmp_path, clock)  # folded again from genesis
    try:
        assert list(registry.actors[AGENT].state.allowed_times) == live
    finally:
        await registry.stop()


@asynccontextmanager
async def _running(make_store: OPEN, root: Path, snapshots: int) -> AsyncIterator[Registry]:
    write_test_keys(root)
    store = make_store()
    registry = Registry(
        store,
        load_keys(DataDir(root).keys_dir),
        clock=FakeClock(),
        recent_actions=2,
        snapshot_records=snapshots,
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


def _request(n: int) -> c.RequestAction:
    return c.RequestAction(tool="read", input={"n": n}, idempotency_key=f"key-{n}")


async def test_an_old_action_reads_back_right_its_outcome_view_receipt_and_key(
    make_store: OPEN, tmp_path: Path
) -> None:
    count = 2 * STRIDE + 10  # the first action's lines lie a few strides back
    async with _running(make_store, tmp_path, 10_000) as registry:
        await registry.create(AGENT, policy(budget=Decimal(10_000)))
        ref = registry.ref(AGENT)
        first = await ref.ask(_request(1))
        view = await ref.ask(c.GetAction("act-1"))
        assert view["status"] == "allowed"
        assert "receipt" in view
        for n in range(2, count + 1):
            await ref.ask(_request(n))
        assert "key-1" not in registry.actors[AGENT].state.idempotency  # compacted
        assert await ref.ask(c.GetAction("act-1")) == view
        assert await ref.ask(_request(1)) == first  # a repeat, read back from the log
        await ref.ask(c.ReportOutcome("act-1", "success", "agent"))
        with pytest.raises(InvalidState, match=r"^action act-1 already has outcome success$"):
            await ref.ask(c.ReportOutcome("act-1", "failure", "agent"))
        after = await ref.ask(c.GetAction("act-1"))
        assert after == dict(view, status="completed", outcome="success")
        await registry.save_checkpoints()
    # A restart folds it all again (from genesis twice, the second writing a
    # snapshot; then from that snapshot): the same answers.
    for snapshots in (10_000, 1, 1):
        async with _running(make_store, tmp_path, snapshots) as registry:
            ref = registry.ref(AGENT)
            assert await ref.ask(c.GetAction("act-1")) == after
            assert await ref.ask(_request(1)) == first
            await registry.save_snapshots()
