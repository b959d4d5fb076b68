"""The commit strategy of a log other nodes write too (log/postgres/batches.py),
run by a real registry on a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agents_runtime.core.commands import GetStatus, RequestAction
from agents_runtime.errors import Quarantined
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.postgres.store import PgAgentLog
from agents_runtime.log.store import GAP
from agents_runtime.log.stores import open_database
from agents_runtime.runtime.registry import Registry
from tests.agents_runtime.support import policy, write_test_keys


@pytest.fixture
async def registry(postgres_dsn: str, tmp_path: Path) -> AsyncIterator[Registry]:
    data_dir = DataDir(tmp_path / "node")
    write_test_keys(data_dir.root)
    ring = data_dir.prepare()
    store = open_database(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")
    await asyncio.to_thread(store.prepare)
    registry = Registry(store, ring)
    await asyncio.to_thread(registry.load)
    await registry.start()
    try:
        yield registry
    finally:
        await registry.stop()


async def test_a_rebuild_that_finds_the_committed_head_gone_quarantines_with_the_gap(
    registry: Registry, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A write that failed, or was refused after another node's, leaves the
    # state ahead of the store: the next batch rebuilds it from the rows,
    # and must still reach the head this node committed. Rows deleted
    # meanwhile are the same gap as when the read of newer rows finds them
    # gone, and say so.
    agent_id = "gap-after-rebuild"
    await registry.create(agent_id, policy())
    ref = registry.ref(agent_id)
    await ref.ask(RequestAction("read"))
    actor = registry.actors[agent_id]
    head = actor.committed_head.seq
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(
            "delete from guard_logs where agent_id = $1 and seq >= $2", agent_id, head
        )
    finally:
        await conn.close()
    log = actor.log
    assert isinstance(log, PgAgentLog)
    log._commit.stale = True  # as a failed write leaves it
    with pytest.raises(Quarantined) as caught:
        await ref.ask(GetStatus())
    assert f"(seq {head}): {GAP})" in str(caught.value)
    assert registry.quarantined[agent_id].reason == GAP
    # The log line does not blame another node's record for rows gone.
    [line] = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    where = f"line {head + 1} (seq {head})"
    assert line == f"agent {agent_id} quarantined: {where}: {GAP} (found while serving)"
