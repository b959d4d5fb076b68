"""Startup verification in worker processes decides exactly what loading in
one process decides: the same states, quarantines, torn tails and files."""

from __future__ import annotations

import gc
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.store import FileStore
from agents_runtime.runtime import registry as registry_module
from agents_runtime.runtime.registry import LoadSummary, Registry
from tests.agents_runtime.support import (
    D,
    FakeClock,
    log_lines,
    policy,
    running_registry,
    snapshot,
)

GOOD = [f"good-{i}" for i in range(7)]
TAMPERED, TORN, NO_NEWLINE, BAD_APPLY = "tampered", "torn", "no-newline", "bad-apply"


async def _write_agents(root: Path) -> None:
    clock = FakeClock()
    async with running_registry(root, clock=clock) as registry:
        tools = {"read": {"cost": 1}, "mail": {"cost": 2, "requires_approval": True}}
        for agent_id in [*GOOD, TAMPERED, TORN, NO_NEWLINE, BAD_APPLY]:
            await registry.create(agent_id, policy(budget=1000, scar_limit=100, tools=tools))
            ref = registry.ref(agent_id)
            for k in range(12):
                clock.advance(1.5)
                decision = await ref.ask(c.RequestAction("read", {"k": k}, D("1.25")))
                if k % 3 == 0:
                    await ref.ask(c.ReportOutcome(decision["action_id"], "failure", c.AGENT))
            pending = await ref.ask(c.RequestAction("mail", {"to": "ops"}, None))
            await ref.ask(c.Approve(pending["action_id"], "alice", "fine"))
            await ref.ask(c.RequestAction("unlisted", None, None))


def _damage(root: Path) -> None:
    agents = DataDir(root).agents_dir
    tampered = agents / f"{TAMPERED}.jsonl"
    lines = tampered.read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b'"k":3' in line)
    lines[index] = lines[index].replace(b'"k":3', b'"k":4')
    tampered.write_bytes(b"".join(lines))
    with (agents / f"{TORN}.jsonl").open("ab") as fh:
        fh.write(b'{"seq":99,"kind":"act')
    no_newline = agents / f"{NO_NEWLINE}.jsonl"
    no_newline.write_bytes(no_newline.read_bytes()[:-1])
    # A record that verifies but cannot apply: an outcome for an action that never was.
    bad = agents / f"{BAD_APPLY}.jsonl"
    lines = bad.read_bytes().splitlines(keepends=True)
    from agents_runtime.log import canonical
    from agents_runtime.log.record import Head, seal
    from tests.agents_runtime.support import TEST_SIGNER

    last = canonical.loads(lines[-1])
    forged = seal(
        {"kind": "outcome", "action_id": "act-999", "outcome": "success", "by": "agent"},
        prev=Head(last["seq"], last["hash"]),
        ts=last["ts"],
        signer=TEST_SIGNER,
    )
    bad.write_bytes(b"".join(lines) + forged.line)


@pytest.fixture(scope="module")
def damaged_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    root = tmp_path_factory.mktemp("parallel-load") / "data"
    asyncio.run(_write_agents(root))
    _damage(root)
    return root


def _load(root: Path, workers: int) -> tuple[Registry, LoadSummary]:
    data_dir = DataDir(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare())
    return registry, registry.load(workers=workers)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(DataDir(root).agents_dir.iterdir())}


@pytest.fixture
def small_tasks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Verify in workers even this little, a few logs per task. Returns the
    start method of each worker pool made."""
    monkeypatch.setattr(registry_module, "PARALLEL_LOAD_BYTES", 0)
    monkeypatch.setattr(registry_module, "LOAD_TASK_BYTES", 8 * 1024)
    pools: list[str] = []

    class Pool(ProcessPoolExecutor):
        def __init__(self, workers: int, *, mp_context: BaseContext) -> None:
            pools.append(mp_context.get_start_method())
            super().__init__(workers, mp_context=mp_context)

    monkeypatch.setattr(registry_module, "ProcessPoolExecutor", Pool)
    return pools


@pytest.fixture
def a_second_thread() -> Iterator[None]:
    """Another thread is running, so workers are spawned rather than forked."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _assert_parallel_matches(damaged_dir: Path, tmp_path: Path) -> None:
    alone, parallel = tmp_path / "alone", tmp_path / "parallel"
    shutil.copytree(damaged_dir, alone)
    shutil.copytree(damaged_dir, parallel)

    one, one_summary = _load(alone, workers=1)
    many, many_summary = _load(parallel, workers=2)

    assert one_summary.loaded == len(GOOD) + 2
    assert set(one_summary.quarantined) == {TAMPERED, BAD_APPLY}
    assert one_summary.quarantined[TAMPERED].reason == "hash does not match content"
    assert one_summary.quarantined[BAD_APPLY].reason.startswith("record does not apply")
    assert one_summary.torn == [TORN]
    assert many_summary == one_summary
    assert many.quarantined == one.quarantined
    assert set(many.actors) == set(one.actors)
    for agent_id, actor in one.actors.items():
        lines = log_lines(one.store.path(agent_id))
        assert snapshot(many.actors[agent_id].state, lines) == snapshot(actor.state, lines)
        assert many.actors[agent_id].committed.size == actor.committed.size
    assert _files(parallel) == _files(alone)
    for registry in (one, many):
        for actor in registry.actors.values():
            actor.log.close()


def test_loading_in_forked_workers_decides_as_loading_alone(
    damaged_dir: Path, tmp_path: Path, small_tasks: list[str]
) -> None:
    _assert_parallel_matches(damaged_dir, tmp_path)
    assert small_tasks == ["fork"]


@pytest.mark.usefixtures("a_second_thread")
def test_loading_in_spawned_workers_decides_as_loading_alone(
    damaged_dir: Path, tmp_path: Path, small_tasks: list[str]
) -> None:
    _assert_parallel_matches(damaged_dir, tmp_path)
    assert small_tasks == ["spawn"]


def test_no_collection_runs_while_the_workers_states_are_adopted(
    damaged_dir: Path, tmp_path: Path, small_tasks: list[str]
) -> None:
    """Every state adopted lives on: a full collection walking them all again
    is wasted work, and the collector is on again once they are in."""
    shutil.copytree(damaged_dir, tmp_path / "data")
    collections: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.collect()  # nothing pending from earlier tests
    gc.callbacks.append(count)
    try:
        registry, summary = _load(tmp_path / "data", workers=2)
    finally:
        gc.callbacks.remove(count)
    assert small_tasks == ["fork"]
    assert summary.loaded == len(GOOD) + 2
    assert collections == []
    assert gc.isenabled()
    for actor in registry.actors.values():
        actor.log.close()


def test_few_logs_are_loaded_without_workers(damaged_dir: Path, tmp_path: Path) -> None:
    pools: list[object] = []
    shutil.copytree(damaged_dir, tmp_path / "data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry_module, "ProcessPoolExecutor", lambda *a, **k: pools.append(a))
        registry, summary = _load(tmp_path / "data", workers=2)
    assert pools == []
    assert summary.loaded == len(GOOD) + 2
    for actor in registry.actors.values():
        actor.log.close()


def _die(*args: object) -> None:
    import os

    os._exit(3)


def test_workers_dying_leaves_the_loading_to_this_process(
    damaged_dir: Path, tmp_path: Path, small_tasks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "_load_task", _die)  # forked workers see it
    shutil.copytree(damaged_dir, tmp_path / "data")
    registry, summary = _load(tmp_path / "data", workers=2)
    assert small_tasks == ["fork"]
    assert summary.loaded == len(GOOD) + 2
    assert set(summary.quarantined) == {TAMPERED, BAD_APPLY}
    assert summary.torn == [TORN]
    for actor in registry.actors.values():
        actor.log.close()
