"""What an agent keeps per action stays bounded: allowed times past what a
rate check can count leave memory at the fold, live and at a restart."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from agents_runtime.core import commands as c
from agents_runtime.core.checks import RATE_HISTORY_SECS, TRIM_EVERY
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime.registry import Registry
from guardd import views
from tests.agents_runtime.support import AGENT, FakeClock, policy, write_test_keys

STEP = 2 * RATE_HISTORY_SECS / TRIM_EVERY  # TRIM_EVERY actions span two days


async def _registry(root: Path, clock: FakeClock) -> Registry:
    write_test_keys(root)
    data_dir = DataDir(root)
    registry = Registry(
        FileStore(data_dir), data_dir.prepare(), clock=clock, render=views.BY_COMMAND
    )
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
